"""Write docs/benchmarks.md (and the README's short table) from bench/results/.

    python -m bench report            # after adding a run to bench/results/runs/

Its input, kept in the repository:

- ``bench/results/runs/<name>.jsonl``: one benchmark run each, the
  ``results.jsonl`` that ``python -m bench`` writes (one record per task,
  size, batch size and variant), named so that names sort by date
  (``2026-11-26-epyc.jsonl``); beside it, optionally, ``<name>.md``: what
  the run was (date, commit, commands, notes), printed above its table;
- ``bench/results/history.md``: what exists only as text (earlier tables,
  profiles, the per-op overhead runs), printed after the runs.

The tables have a column for every variant the records hold (the kinds of
``harness.KINDS`` in their order, then any other, e.g. another library's),
each variant's time over the hand-written code's, and the per-example
loop's over matchbox's.  The README's table between its ``bench-taste``
markers is the newest run's, one row per task (the largest size).
"""
import argparse
import json
import os
import re

from .harness import KINDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
README = os.path.join(ROOT, "README.md")
TASTE = re.compile(r"(<!-- bench-taste -->\n).*?(<!-- /bench-taste -->)", re.S)


def load_runs(results=RESULTS):
    """``[(name, about, records)]``, newest first."""
    folder = os.path.join(results, "runs")
    runs = []
    for file in sorted(os.listdir(folder), reverse=True):
        if not file.endswith(".jsonl"):
            continue
        name = file[:-len(".jsonl")]
        with open(os.path.join(folder, file)) as f:
            records = [json.loads(line) for line in f if line.strip()]
        about = os.path.join(folder, name + ".md")
        text = open(about).read().strip() if os.path.exists(about) else ""
        runs.append((name, text, records))
    return runs


def variants(records):
    """The variants the records hold: ``KINDS`` in order, then the others."""
    seen = list(dict.fromkeys(r["variant"] for r in records))
    return [k for k in KINDS if k in seen] + [k for k in seen if k not in KINDS]


def _ratio(a, b):
    return f"{a / b:.2f}" if a and b else "–"


def _rows(records):
    """``{(task, size, batch): {variant: seconds}}`` in the records' order."""
    rows = {}
    for r in records:
        rows.setdefault((r["task"], r["size"], r["batch_size"]), {})[r["variant"]] = r["seconds"]
    return rows


def table(records):
    """Seconds per batch of every variant, each over hand, per-example over matchbox."""
    kinds = variants(records)
    over_hand = [k for k in kinds if k not in ("hand", "per_example")] if "hand" in kinds else []
    compiled = {}   # (task, size, batch) -> ["variant seconds", ...] of compile time
    for r in records:
        if "compile_seconds" in r:
            compiled.setdefault((r["task"], r["size"], r["batch_size"]), []).append(
                f"{r['variant']} {r['compile_seconds']:.0f}")
    head = ["task", "size", "batch"] + [f"{k} (s)" for k in kinds] \
        + [f"{k} / hand" for k in over_hand] + ["per_example / matchbox"] \
        + (["compile (s)"] if compiled else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, t in _rows(records).items():
        cells = [key[0], key[1], str(key[2])] + [f"{t[k]:.4f}" if k in t else "–" for k in kinds]
        cells += [_ratio(t.get(k), t.get("hand")) for k in over_hand]
        cells.append(_ratio(t.get("per_example"), t.get("matchbox")))
        if compiled:
            cells.append(", ".join(compiled.get(key, [])) or "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machines(records):
    return ", ".join(sorted({f"{r.get('machine', '?')}, torch {r.get('torch', '?')}, "
                             f"{r.get('device', 'cpu')}" for r in records}))


def taste(runs):
    """The README's table: the newest run's main batch size, every task and
    size, in sentences (examples) per second; DyNet's autobatch beside them
    where the run has it."""
    name, _, records = runs[0]
    batch = max((r["batch_size"] for r in records),
                key=lambda b: sum(r["batch_size"] == b for r in records))
    kinds = ["per_example", "hand", "matchbox"] + (
        ["dynet_auto"] if any(r["variant"] == "dynet_auto" for r in records) else [])
    head = ["task", "size"] + [f"{k} (sent/s)" for k in kinds] + ["matchbox time / hand"] + (
        ["matchbox speed / dynet_auto"] if "dynet_auto" in kinds else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (task, size, bs), t in _rows(records).items():
        if bs != batch:
            continue
        cells = [task, size] + [f"{bs / t[k]:.1f}" if k in t else "–" for k in kinds]
        cells.append(_ratio(t.get("matchbox"), t.get("hand")))
        if "dynet_auto" in kinds:
            cells.append(_ratio(t.get("dynet_auto"), t.get("matchbox")))
        lines.append("| " + " | ".join(cells) + " |")
    return (f"Run {name} ({machines(records)}), batch {batch} (all runs: "
            f"[docs/benchmarks.md](docs/benchmarks.md)):\n\n" + "\n".join(lines) + "\n")


def document(runs, history):
    out = ["# Benchmarks", "",
           "<!-- Written by `python -m bench report` from bench/results/: edit those. -->", "",
           "`python -m bench` times, in one process and interleaved, each task's variants, "
           "after checking that they all compute the same loss and gradients (or decode "
           "the same); `--size paper` uses the autobatching paper's model sizes, `--sweep` "
           "adds batch sizes 1..256, `--device cuda` a GPU, `--kinds` picks variants; "
           "`python -m bench ops` times single ops. A run's `bench/results/results.jsonl` "
           "becomes a section here once copied to `bench/results/runs/<date>-<machine>.jsonl` "
           "(with a `.md` beside it saying what was run) and `python -m bench report` is run.",
           "", "Variants:", ""]
    kinds = variants([r for _, _, records in runs for r in records])
    out += [f"- `{k}`: {KINDS.get(k, 'see the run notes')}" for k in kinds]
    for name, about, records in runs:
        out += ["", f"## Run {name}", ""]
        if about:
            out += [about, ""]
        out += [f"Machine: {machines(records)}. Seconds per batch.", "", table(records)]
    if history:
        out += ["", history.strip()]
    return "\n".join(out) + "\n"


def write(results=RESULTS, doc=DOC, readme=README):
    """Write the document and the README's table; return the document."""
    runs = load_runs(results)
    path = os.path.join(results, "history.md")
    history = open(path).read() if os.path.exists(path) else ""
    text = document(runs, history)
    with open(doc, "w") as f:
        f.write(text)
    if readme and os.path.exists(readme):
        old = open(readme).read()
        new = TASTE.sub(lambda m: m.group(1) + taste(runs) + m.group(2), old)
        if new != old:
            with open(readme, "w") as f:
                f.write(new)
    return text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--doc", default=DOC)
    args = p.parse_args(argv)
    write(args.results, args.doc)
    print(f"wrote {args.doc}")


if __name__ == "__main__":
    main()
