"""The OpInfo coverage page, docs/opinfo.md, from the cases of
``opinfo_table.py``, and ``torch.func.vmap``'s own count on the same
examples (issue 30 measured matchbox against it).

``python -m tests.ops.opinfo_page > docs/opinfo.md`` runs every case and
writes the page (``--vmap``: only vmap's count); ``tests/ops/test_opinfo.py``
checks the page is current.
"""
import sys
import warnings

import torch
from torch.utils import _pytree as pytree

try:
    from opinfo_table import (B, MAX_SAMPLES, SKIP, XFAIL, _grad, as_called, check, entry_name,
                              load_op_db, refused_by_fallback, ruled_callable, samples,
                              unruled_callable, vmap_cases)
except ImportError:  # python -m tests.ops.opinfo_page
    from tests.ops.opinfo_table import (B, MAX_SAMPLES, SKIP, XFAIL, _grad, as_called, check,
                                        entry_name, load_op_db, refused_by_fallback,
                                        ruled_callable, samples, unruled_callable, vmap_cases)


# ------------------------------------------------------------ vmap's own count
def vmap_reference(opinfo, seed=0):
    """Whether ``torch.func.vmap`` itself batches the entry: on the static
    cases of ``vmap_cases`` (the same examples matchbox gets), its values
    and gradients agree with the loop over the examples (with mb_test's
    tolerances) for every sample.  None when no sample is tried."""
    name = entry_name(opinfo)
    if name in SKIP:
        return None
    torch.manual_seed(seed)
    fn = as_called(ruled_callable(opinfo) or unruled_callable(opinfo))
    smp = samples(opinfo)
    if not smp:
        return None
    gen = torch.Generator().manual_seed(seed)
    return all(any(_vmap_agrees(case, _grad(opinfo, s)) for case in vmap_cases(fn, s, gen, False)
                   if case.per_example_ok()) for s in smp)


def _vmap_agrees(case, grad):
    batched = [sl[0] == "batch" for sl in case.slots]
    ins = [torch.stack(sl[1]) if b else sl[1] for sl, b in zip(case.slots, batched)]
    ins = [t.detach().requires_grad_(grad and t.is_floating_point()) for t in ins]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = pytree.tree_leaves(torch.func.vmap(case.call, in_dims=tuple(
                0 if b else None for b in batched), randomness="different")(*ins))
            loop = [pytree.tree_leaves(case.call(*(t[j] if b else t for t, b in zip(ins, batched))))
                    for j in range(B)]
    except Exception:
        return False
    pairs = [(o[j], ref[k]) for j, ref in enumerate(loop) for k, o in enumerate(out)]
    if any(len(ref) != len(out) for ref in loop) or not all(
            isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(
                a.double(), b.double(), rtol=1e-7, atol=1e-9, equal_nan=True) for a, b in pairs):
        return False
    wrt = [t for t in ins if t.requires_grad]
    ys = [(a, b) for a, b in pairs if a.requires_grad and b.requires_grad]
    if not wrt or not ys:
        return True
    ws = [torch.randn(a.shape, dtype=a.dtype, generator=torch.Generator().manual_seed(i))
          for i, (a, _) in enumerate(ys)]
    try:
        ga = torch.autograd.grad([a for a, _ in ys], wrt, ws, retain_graph=True, allow_unused=True)
        gb = torch.autograd.grad([b for _, b in ys], wrt, ws, allow_unused=True)
    except Exception:
        return False
    return all((a is None) == (b is None) and (a is None or torch.allclose(
        a, b, rtol=1e-7, atol=1e-9, equal_nan=True)) for a, b in zip(ga, gb))


# -------------------------------------------------------------------- table
def run_all(op_db=None, log=None):
    op_db = load_op_db() if op_db is None else op_db
    results = []
    for o in op_db:
        results.append(check(o))
        if log:
            print(results[-1]["name"], file=log)
    return results


def path(r, mode):
    """How a passing entry ran in ``mode``: "rule", "fallback: vmap",
    "fallback: per example" or "composite"."""
    ways = r["paths"][mode]
    if "per-example" in ways:
        return "fallback: per example"
    if "vmap" in ways:
        return "fallback: vmap"
    return "rule" if r["kind"] == "rule" else "composite"


def figures(results):
    """``{name: count}`` of the page's figures (also read by the targets test)."""
    run = [r for r in results if "skip" not in r]
    f = {"entries": len(results), "skipped": len(results) - len(run)}
    for mode in ("static", "dynamic"):
        passed = [r for r in run if r[mode][0] == "pass"]
        f[f"{mode} pass"] = len(passed)
        for how in ("rule", "fallback: vmap", "fallback: per example", "composite"):
            f[f"{mode} pass, {how}"] = sum(path(r, mode) == how for r in passed)
        for st in ("refused", "n/a", "wrong", "crash"):
            f[f"{mode} {st}"] = sum(r[mode][0] == st for r in run)
        f[f"{mode} MissingRule"] = sum(refused_by_fallback(r, mode) for r in run)
    return f


def table(results, vmap_count=None):
    """The coverage page (markdown) from run_all's results; ``vmap_count``:
    how many entries torch.func.vmap itself passes (``vmap_reference``)."""
    f = figures(results)
    run = sorted((r for r in results if "skip" not in r), key=lambda r: r["name"])

    def counts(mode):
        return [f"  - {mode}: {f[mode + ' pass']} pass ({f[mode + ' pass, rule']} by a rule, "
                f"{f[mode + ' pass, fallback: vmap']} through the general fallback's vmap, "
                f"{f[mode + ' pass, fallback: per example']} through its per-example loop, "
                f"{f[mode + ' pass, composite']} through ops that have rules); "
                f"{f[mode + ' refused']} refused with an error that says why "
                f"({f[mode + ' MissingRule']} of them by the general fallback, MissingRule); "
                f"{f[mode + ' n/a']} not tried; "
                f"{f[mode + ' wrong'] + f[mode + ' crash']} wrong or crashing (known bugs, xfail "
                f"in the test)"]
    lines = [
        "# PyTorch's op database on MaskedBatch",
        "",
        "Generated by `python -m tests.ops.opinfo_page > docs/opinfo.md` from the cases "
        "`tests/ops/test_opinfo.py` runs; do not edit by hand. Every entry of PyTorch's "
        "OpInfo database (`torch.testing._internal.common_methods_invocations.op_db`, "
        f"{f['entries']} entries in torch {torch.__version__.split('+')[0]}) runs on "
        f"{B} examples made from each of up to {MAX_SAMPLES} of its samples (float64 where "
        "the op takes it), on static dims and with one dim varying in size between the "
        "examples; `mb_test` compares values and gradients with the per-example loop. "
        "*vmap*: each example is the sample's input with its values permuted and no "
        "batch-of-one dimension (`batch_dim=None`); *rows*: each example is a row "
        "`x[i:i+1]` of the input (`batch_dim=0`); where no permuted example is in the op's "
        "domain (cholesky), example `b` is the input scaled by `1 + b/4`.",
        "",
        "An op with a rule runs its rule (*rule*). An op without one runs through the "
        "general fallback (`matchbox/ops/fallback.py`): `torch.func.vmap` over the examples "
        "where their dims are static or equal in size (*fallback: vmap*), else once per "
        "example (*fallback: per example*, with a `PerExampleFallbackWarning`); a "
        "composite runs through ops that have rules (*composite*).",
        "",
        "## Figures",
        "",
        f"- OpInfo entries: {f['entries']}, of which {f['skipped']} skipped (listed at the end)",
        *counts("static"),
        *counts("dynamic"),
    ]
    if vmap_count is not None:
        lines += ["", f"For comparison, `torch.func.vmap` itself, on the static examples above "
                      f"(values and gradients against the loop), passes {vmap_count} entries "
                      f"(`python -m tests.ops.opinfo_page --vmap`)."]
    lines += ["", "## Entries", "", "| op | static | dynamic | path | examples | note |",
              "|---|---|---|---|---|---|"]
    for r in run:
        ways = sorted({path(r, m) for m in ("static", "dynamic") if r[m][0] == "pass"})
        note = "; ".join(sorted({_cell(r[m][1]) for m in ("static", "dynamic")
                                 if r[m][0] != "pass" and r[m][1]}))
        if r["name"] in XFAIL:
            note = f"known bug: {_cell(XFAIL[r['name']])}"
        lines.append(f"| `{r['name']}` | {r['static'][0]} | {r['dynamic'][0]} | "
                     f"{', '.join(ways)} | {', '.join(sorted(r['how']))} | {note} |")
    missing = [r["name"] for r in run if refused_by_fallback(r)]
    lines += ["", f"**Refused by the general fallback (MissingRule)** ({len(missing)}): "
              + ", ".join(f"`{n}`" for n in missing), ""]
    skipped = sorted((r for r in results if "skip" in r), key=lambda r: r["name"])
    lines.append(f"**Skipped** ({len(skipped)}):\n")
    lines += [f"- `{r['name']}`: {_cell(r['skip'])}" for r in skipped]
    return "\n".join(lines) + "\n"


def skeleton(page):
    """The page without its free text (error messages, notes): the op
    names, statuses and figures, which is what the page check compares, so
    rewording an error does not make the page stale."""
    out = []
    for line in page.splitlines():
        if line.startswith("| `"):
            line = "|".join(line.split("|")[:5])
        elif line.startswith("- `"):
            name, _, rest = line.partition(": ")
            line = name + (": " + rest.split(";")[0] if rest[:4] in ("pass", "refu", "wron",
                                                                     "cras", "n/a,") else "")
        elif not line.startswith(("- OpInfo", "  - ", "**")):
            continue
        out.append(line)
    return "\n".join(out)


def _cell(s):
    s = (s or "").replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= 160 else s[:157] + "..."


def main():
    torch.set_num_threads(1)  # small ops: one thread is much faster
    op_db = load_op_db()
    vmap_count = sum(bool(vmap_reference(o)) for o in op_db)
    if "--vmap" in sys.argv:
        print(f"torch.func.vmap passes {vmap_count} of {len(op_db)} entries")
        return
    results = run_all(op_db, log=sys.stderr if "-v" in sys.argv else None)
    sys.stdout.write(table(results, vmap_count))


if __name__ == "__main__":
    main()
