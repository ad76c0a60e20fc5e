"""Side-by-side benchmarks: per-example loop vs hand-written batching vs matchbox.

    python -m bench                       # every task, CPU sizes, batch 64
    python -m bench --tasks bilstm --size paper --device cuda
    python -m bench --sweep               # + throughput vs batch size (1..256) plot
    python -m bench --tasks bilstm char_tagger treelstm parser --size small paper \
        --kinds per_example hand matchbox dynet_noauto dynet_auto

For each task and batch size the variants (see ``harness.KINDS``) are built
from the same data and weights, checked to compute the same numbers, then
timed interleaved in this one process.  With DyNet installed
(``pip install -e ".[dynet]"``), the autobatching paper's four tasks also
run in DyNet, autobatching off and on (``bench/dynet_tasks``), in this same
process and interleaving.  Results go to ``--out`` (default
``bench/results``): ``results.jsonl`` (one line per variant), ``table.md``
(seconds per batch and the ratios, then examples per second) and, with
``--sweep``, ``throughput.png``.
"""
import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
import time

import torch

from examples.common import progress

from . import harness

TASKS = ["bilstm", "char_tagger", "transformer", "decode", "treelstm", "parser", "n_expansions"]
SWEEP_TASKS = ["bilstm", "treelstm"]
SWEEP_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def machine(device):
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {torch.get_num_threads()} torch threads"


def with_dynet(mod, kinds, device):
    """Whether ``run_one`` adds the task's DyNet variants: where the task has
    them and they are asked for, by name or by asking for every kind (then
    only where DyNet is installed and the device is the CPU; asked for by
    name, they must be)."""
    asked = [k for k in kinds or () if k.startswith("dynet")]
    if not hasattr(mod, "build_dynet") or not (asked or kinds is None):
        return False
    if importlib.util.find_spec("dynet") is None or str(device) != "cpu":
        if asked:
            raise SystemExit(f"--kinds {' '.join(asked)} needs DyNet (pip install -e '.[dynet]') "
                             f"and --device cpu")
        return False
    return True


def run_one(task, batch_size, size, device, repeats, seed=0, kinds=None):
    """Build, check and time one task at one batch size: a list of records."""
    mod = importlib.import_module(f"bench.tasks.{task}")
    variants = mod.build(batch_size=batch_size, device=device, size=size, seed=seed)
    if with_dynet(mod, kinds, device):
        variants.update(mod.build_dynet(batch_size=batch_size, size=size, seed=seed))
    if kinds:
        variants = {k: v for k, v in variants.items() if k in kinds}
    first = harness.check(variants, mod.TRAINS)
    seconds = harness.time_interleaved(variants, mod.TRAINS, device, repeats=repeats,
                                       budget=20.0)
    # compile_seconds: a compiled variant's first step (it compiles) less a step
    return [dict(task=task, size=size, batch_size=batch_size, variant=k, seconds=s,
                 examples_per_second=batch_size / s,
                 device=str(device), trains=mod.TRAINS, note=variants[k].note,
                 first_step_seconds=first[k],
                 **({"compile_seconds": first[k] - s} if k.endswith("compiled") else {}))
            for k, s in seconds.items()]


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "–"


def python_state_ratios(t):
    """The variants whose state is in Python objects or lists against the
    tensor-state matchbox variant, and their own per-example loop against them."""
    kind = next((k for k in ("objects", "list") if f"matchbox_{k}" in t), None)
    if kind is None:
        return ["–", "–"]
    mb = t[f"matchbox_{kind}"]
    return [ratio(mb, t.get("matchbox")), ratio(t.get(f"per_example_{kind}"), mb)]


def table(records):
    """Markdown: seconds per batch per variant, and the two ratios."""
    kinds = [k for k in harness.KINDS if any(r["variant"] == k for r in records)]
    rows, compile_s = {}, {}
    for r in records:
        key = (r["task"], r["size"], r["batch_size"])
        rows.setdefault(key, {})[r["variant"]] = r["seconds"]
        if "compile_seconds" in r:
            compile_s.setdefault(key, {})[r["variant"]] = r["compile_seconds"]
    head = ["task", "size", "batch"] + [f"{k} (s)" for k in kinds] + [
        "matchbox / hand", "whole / hand", "compact / hand", "merged / hand", "compiled mb / hand",
        "compiled mb / compiled", "per-example / matchbox", "compile hand, mb (s)",
        "py-state mb / matchbox", "its per-example / py-state mb"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (task, size, bs), t in rows.items():
        cells = [task, size, str(bs)] + [f"{t[k]:.4f}" if k in t else "–" for k in kinds]
        cells += [ratio(t.get(k), t.get("hand"))
                  for k in ("matchbox", "matchbox_whole", "matchbox_compact", "matchbox_merged",
                            "matchbox_compiled")]
        cells.append(ratio(t.get("matchbox_compiled"), t.get("compiled")))
        cells.append(ratio(t.get("per_example"), t.get("matchbox")))
        c = compile_s.get((task, size, bs), {})
        cells.append(", ".join(f"{c[k]:.0f}" if k in c else "–"
                               for k in ("compiled", "matchbox_compiled")) if c else "–")
        cells += python_state_ratios(t)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def throughput(records):
    """Markdown: examples (sentences, trees) per second per variant, and
    matchbox's against DyNet's autobatching."""
    kinds = [k for k in harness.KINDS if any(r["variant"] == k for r in records)]
    rows = {}
    for r in records:
        rows.setdefault((r["task"], r["size"], r["batch_size"]), {})[r["variant"]] = r["examples_per_second"]
    head = ["task", "size", "batch"] + kinds + ["matchbox / dynet_auto"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (task, size, bs), t in rows.items():
        cells = [task, size, str(bs)] + [
            ("–" if k not in t else f"{t[k]:.0f}" if t[k] >= 100 else f"{t[k]:.3g}") for k in kinds]
        cells.append(ratio(t.get("matchbox"), t.get("dynet_auto")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(records, path):
    """Throughput (examples per second) vs batch size, one panel per task and size."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
        return None
    panels = sorted({(r["task"], r["size"]) for r in records})
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (task, size) in zip(axes[0], panels):
        for kind in harness.KINDS:
            pts = sorted((r["batch_size"], r["examples_per_second"]) for r in records
                         if (r["task"], r["size"], r["variant"]) == (task, size, kind))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=harness.KINDS[kind])
        ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="examples / second",
               title=f"{task} ({size})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS)
    p.add_argument("--size", nargs="+", default=["small"], choices=["small", "paper"],
                   help="model and data sizes: small (CPU) and/or the autobatching paper's")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--kinds", nargs="+", choices=list(harness.KINDS), default=None)
    p.add_argument("--sweep", action="store_true",
                   help=f"also time {SWEEP_TASKS} at batch sizes {SWEEP_SIZES} and plot")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the ops are small, and every variant gets the same)")
    p.add_argument("--out", default=os.path.join("bench", "results"))
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    jobs = [(t, args.batch_size, size) for size in args.size for t in args.tasks]
    if args.sweep:
        jobs += [(t, b, size) for size in args.size for t in SWEEP_TASKS if t in args.tasks
                 for b in SWEEP_SIZES if b != args.batch_size]
    records, start = [], time.perf_counter()
    bar = progress(jobs, "bench")
    for task, bs, size in bar:
        bar.note(f"{task} {size} batch {bs}")
        records += run_one(task, bs, size, args.device, args.repeats, kinds=args.kinds)

    where = machine(args.device)
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(dict(r, machine=where, torch=torch.__version__)) + "\n")
    main_rows = [r for r in records if r["batch_size"] == args.batch_size]
    md = (f"Machine: {where}; torch {torch.__version__}; device {args.device}; "
          f"size {', '.join(args.size)}; seconds per batch (median of {args.repeats}, "
          f"interleaved); training tasks time forward + backward + SGD step.\n\n"
          + table(main_rows) + "\n\nExamples (sentences, trees) per second:\n\n"
          + throughput(main_rows) + "\n")
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md)
    print(md)
    if args.sweep:
        path = plot([r for r in records if r["task"] in SWEEP_TASKS],
                    os.path.join(args.out, "throughput.png"))
        if path:
            print(f"plot: {path}")
    print(f"done in {time.perf_counter() - start:.0f} s; results in {args.out}/")
    return records


if __name__ == "__main__":
    main()
