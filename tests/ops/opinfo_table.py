"""Run matchbox's rules over PyTorch's own op database (issue 20 item 8).

``torch.testing._internal.common_methods_invocations.op_db`` lists, for
every torch op, sample inputs that PyTorch's own tests use.  functorch
tests ``vmap`` over it: each sample's input becomes one example, and a
batch of them must give what a loop over them gives.  This module does the
same for matchbox:

- an op with a rule (``matchbox.core.RULES``) runs on B examples made from
  each of a few samples, on static dims and, where the op's other arguments
  allow, with one dim varying in size between the examples (a dynamic dim);
  ``mb_test`` compares values and gradients with the per-example loop;
- an op without a rule must raise ``NotImplementedError`` naming it.

Two ways to make examples from a sample (both the per-example loop and the
batch see exactly the same examples, so either is a fair check):

- ``vmap`` (the default): each example is the sample's input itself, with
  its values permuted (so examples differ but stay in the op's domain), and
  no batch-of-one dimension (``batch_dim=None``, the ``torch.func.vmap``
  convention); tensor arguments are per-example too (or, if the op refuses
  that, shared);
- ``rows``: for ops that have no rule for values without a batch-of-one
  dimension yet (convolutions, ``mm``...), each example is one row
  ``x[i:i+1]`` of the sample's input (matchbox's default layout); tensor
  arguments with as many rows are split the same way, others are shared.

``python -m tests.ops.opinfo_table > docs/opinfo.md`` runs every case and
writes the coverage page; ``tests/ops/test_opinfo.py`` runs the same cases
as tests.
"""
import functools
import os
import re
import sys
import traceback
import warnings

import torch
from torch.utils import _pytree as pytree

import matchbox
from matchbox.core import RULES, MaskedBatch
from matchbox.ops.fallback import recording
from matchbox.test_utils import mb_test

B = 3                # examples per batch
MAX_SAMPLES = 2      # samples tried per op
MAX_NUMEL = 400      # larger samples are passed over
MAX_VARIED = 3       # dims varied per sample (the last ones)
MATCHBOX_DIR = os.path.dirname(os.path.abspath(matchbox.__file__))

# --------------------------------------------------------------------- tables
# OpInfo entries run per sample, but a sample is not per-example meaningful
# for these; each is skipped with the reason given.
SKIP = {
    "nn.functional.batch_norm": "training-mode batch norm normalizes over the whole batch "
                                "(SPEC section 3) and updates running stats in place: it has "
                                "no per-example meaning to compare with",
    "nn.functional.batch_norm.without_cudnn": "as nn.functional.batch_norm",
    "nn.functional.instance_norm": "its running-stat kwargs are updated in place, once per "
                                   "call: a per-example loop updates them B times",
    "empty_like": "its values are uninitialised",
    "new_empty": "its values are uninitialised",
    "bmm.triton_optimized": "a CUDA-only variant of bmm",
    "addmm.decomposed": "the same callable as addmm",
    "nn.functional.silu.complex": "complex inputs only",
    "jiterator_unary": "CUDA only", "jiterator_binary": "CUDA only",
    "jiterator_4inputs_with_extra_args": "CUDA only",
    "jiterator_binary_return_by_ref": "CUDA only", "jiterator_2inputs_2outputs": "CUDA only",
    # random: a batch draws other numbers than a loop over examples
    "rand_like": "random values", "randn_like": "random values",
    "randint_like": "random values", "nn.functional.dropout": "random values",
    "nn.functional.alpha_dropout": "random values",
    "nn.functional.rrelu": "random values (its samples train)",
    "multinomial": "random values", "bernoulli": "random values",
    **dict.fromkeys(("cauchy", "exponential", "geometric", "log_normal", "normal",
                     "normal.in_place", "uniform", "pca_lowrank", "svd_lowrank",
                     "nn.functional.fractional_max_pool2d",
                     "nn.functional.fractional_max_pool3d"), "random values"),
    "new_empty_strided": "its values are uninitialised",
    **dict.fromkeys(("native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update"),
                    "training-mode batch norm: as nn.functional.batch_norm"),
}

# Known rule bugs this test found and that are not fixed yet: case id ->
# the bug.  A listed case is expected to fail; one that passes is reported.
XFAIL = {
    "nn.functional.cross_entropy": "probability (soft) targets, (C,) per example, crash "
                                   "inside the rule (ops/loss.py): RuntimeError from torch",
    "norm.nuc": "nuclear norm with dim=None on examples with no batch-of-one dim crashes "
                "(ops/reduction.py)",
    "nn.functional.embedding": "F.embedding(ids, weight) with a MaskedBatch weight: "
                               "AttributeError '_bdim' instead of a clear error",
}


def load_op_db():
    """PyTorch's op database (imports torch's testing package, ~3 s)."""
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def entry_name(opinfo):
    return opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")


def ruled_callable(opinfo):
    """The torch callable of ``opinfo`` that has a matchbox rule, or None."""
    for f in (opinfo.op, opinfo.method_variant):
        try:
            if f is not None and f in RULES:
                return f
        except TypeError:  # unhashable
            continue
    return None


def as_called(f):
    """How user code calls ``f``: a method of ``torch.Tensor`` is called on
    the value (``x.view(...)``), since ``torch.Tensor.view(batch, ...)``
    is a C descriptor that takes Tensors only."""
    name = getattr(f, "__name__", None)
    if name and getattr(torch.Tensor, name, None) is f:
        def method(x, *args, **kwargs):
            return getattr(x, name)(*args, **kwargs)
        method.__name__ = name
        return method
    return f


def unruled_callable(opinfo):
    """The callable to try for an op with no rule: the op, or its method
    when the op is a wrapper PyTorch's test suite wrote."""
    def ours(f):
        return (getattr(f, "__module__", "") or "").startswith("torch.testing")

    if ours(opinfo.op):
        for f in (opinfo.method_variant, opinfo.inplace_variant,
                  getattr(torch.Tensor, opinfo.name, None)):
            if f is not None and not callable(f):  # a property: x.T, x.mH
                return _attribute(opinfo.name)
            if f is not None and not ours(f):
                return f
    return opinfo.op


def _attribute(name):
    def read(x):
        return getattr(x, name)
    read.__name__ = name
    return read


def _dtype(opinfo):
    for dt in (torch.float64, torch.float32, torch.int64, torch.bool):
        if opinfo.supports_dtype(dt, "cpu"):
            return dt
    return None


def _leaves(sample):
    return [t for t in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
            if isinstance(t, torch.Tensor)]


def samples(opinfo, n=MAX_SAMPLES):
    """Up to ``n`` small samples of ``opinfo``: non-empty tensors, at most
    MAX_NUMEL elements each, preferring inputs with at least one dim."""
    dtype = _dtype(opinfo)
    if dtype is None:
        return []
    picked, scalars = [], []
    grad = opinfo.supports_autograd and dtype.is_floating_point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = opinfo.sample_inputs("cpu", dtype, requires_grad=grad)
        for i, s in enumerate(gen):
            if i >= 40 or len(picked) >= n:
                break
            leaves = _leaves(s)
            inp = s.input if isinstance(s.input, torch.Tensor) else None
            if isinstance(s.input, (list, tuple)):
                if not s.input or not all(isinstance(t, torch.Tensor) for t in s.input):
                    continue
            elif inp is None:
                continue
            if any(t.numel() == 0 or t.numel() > MAX_NUMEL or t.is_complex() or t.layout != torch.strided
                   for t in leaves):
                continue
            (scalars if inp is not None and inp.dim() == 0 else picked).append(s)
    return (picked + scalars)[:n]


# ------------------------------------------------------------ making examples
def _detach(t):
    return t.detach().clone() if isinstance(t, torch.Tensor) else t


def _permuted(t, b, gen):
    """Example ``b``'s copy of ``t``: its values permuted (b > 0), so the
    examples differ and stay in the op's domain; integer and bool tensors
    (indices, masks) are kept as they are."""
    t = t.detach()
    if b == 0 or not t.is_floating_point() or t.numel() < 2:
        return t.clone()
    return t.reshape(-1)[torch.randperm(t.numel(), generator=gen)].reshape(t.shape).clone()


def _scaled(t, b, gen):
    """As ``_permuted``, for ops whose domain permuted values leave (a
    positive-definite matrix for cholesky): example ``b`` scales the values
    by ``1 + b / 4``."""
    t = t.detach()
    return t * (1 + b / 4) if t.is_floating_point() else t.clone()


def _lengths(size):
    return [size, 1, max(1, size - 1)][:B]


class Case:
    """One way to run a sample: ``slots`` are the tensor leaves of (input,
    args), each ``("batch", [per-example tensors], dims, batch_dim)`` or
    ``("shared", tensor)``; ``rebuild(values)`` puts values back in place."""

    def __init__(self, fn, sample, slots, spec):
        self.fn, self.sample, self.slots, self.spec = fn, sample, slots, spec
        leaves, self.treespec = pytree.tree_flatten((sample.input, sample.args))
        self.positions = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]
        self.leaves = leaves
        self.kwargs = {k: _detach(v) for k, v in sample.kwargs.items()}

    def call(self, *values):
        leaves = list(self.leaves)
        for i, v in zip(self.positions, values):
            leaves[i] = v
        inp, args = pytree.tree_unflatten(leaves, self.treespec)
        out = self.fn(inp, *args, **self.kwargs)
        batches = [v for v in values if isinstance(v, MaskedBatch)]
        if batches and isinstance(out, torch.Tensor) and not isinstance(out, MaskedBatch):
            # a plain Tensor made from a batch is shared by every example
            # (SPEC section 3: x.new_zeros(2, 3)): each example gets it
            out = MaskedBatch.fromlist([out] * batches[0].batch_size, (False,) * out.dim(), None)
        return out

    def per_example_ok(self, grad=False):
        """Whether the op accepts every example alone (a varied size may be
        one its other arguments do not allow); ``grad``: and differentiates
        its outputs with respect to every floating-point argument, as
        ``mb_test`` does (an op may refuse that, e.g. for a target)."""
        try:
            with torch.set_grad_enabled(grad), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for j in range(B):
                    vals = [s[1][j] if s[0] == "batch" else s[1] for s in self.slots]
                    if grad:
                        vals = [v.detach().requires_grad_(v.is_floating_point()) for v in vals]
                    outs = [o for o in pytree.tree_leaves(self.call(*vals))
                            if isinstance(o, torch.Tensor) and o.requires_grad]
                    if outs:
                        torch.autograd.backward([o.sum() for o in outs])
            return True
        except Exception:
            return False

    def specs(self):
        return [MaskedBatch.fromlist(s[1], s[2], s[3]) if s[0] == "batch" else s[1]
                for s in self.slots]


def _tensor_leaves(sample):
    leaves = pytree.tree_leaves((sample.input, sample.args))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _input_leaves(sample):
    return list(sample.input) if isinstance(sample.input, (list, tuple)) else [sample.input]


def vmap_cases(fn, sample, gen, dynamic, vary=_permuted):
    """Examples that are permuted (``vary``) copies of the whole sample,
    with no batch-of-one dimension.  Yields one Case per way to vary
    (static: one; dynamic: one per input dim that can vary); args
    per-example first, then shared."""
    tensors = _tensor_leaves(sample)
    inputs = {id(t) for t in _input_leaves(sample)}
    ref = _input_leaves(sample)[0]
    for per_example_args in (True, False):
        batched = [id(t) in inputs or per_example_args for t in tensors]
        if not per_example_args and all(batched):
            continue  # no tensor args: the first variant was the only one
        if not dynamic:
            slots = []
            for t, bt in zip(tensors, batched):
                if bt:
                    slots.append(("batch", [vary(t, b, gen) for b in range(B)],
                                  (False,) * t.dim(), None))
                else:
                    slots.append(("shared", _detach(t)))
            yield Case(fn, sample, slots, f"vmap, {'per-example' if per_example_args else 'shared'} args")
            continue
        for d in range(ref.dim())[-MAX_VARIED:]:
            size = ref.size(d)
            if size < 2:
                continue
            lengths = _lengths(size)
            slots, varied = [], False
            for t, bt in zip(tensors, batched):
                if not bt:
                    slots.append(("shared", _detach(t)))
                    continue
                k = d - (ref.dim() - t.dim())  # the dim of t aligned with d
                cut = 0 <= k < t.dim() and t.size(k) == size
                exs = [vary(t, b, gen) for b in range(B)]
                if cut:
                    exs = [e.narrow(k, 0, n).clone() for e, n in zip(exs, lengths)]
                    varied = varied or id(t) in inputs
                dims = tuple(cut and i == k for i in range(t.dim()))
                slots.append(("batch", exs, dims, None))
            if varied:
                yield Case(fn, sample, slots,
                           f"vmap, {'per-example' if per_example_args else 'shared'} args, "
                           f"dim {d} varies")


def rows_cases(fn, sample, gen, dynamic):
    """Examples that are the rows ``x[i:i+1]`` of the sample's input (the
    batch-of-one dimension at 0); tensor args with as many rows are split
    too (or, second, shared)."""
    inputs = _input_leaves(sample)
    ref = inputs[0]
    if ref.dim() == 0:
        return
    n = ref.size(0)
    tensors = _tensor_leaves(sample)
    inp_ids = {id(t) for t in inputs}

    def rows(t, b):
        return _permuted(t, b, gen) if n == 1 else t.detach()[b % n:b % n + 1].clone()

    nb = B if n == 1 else min(n, B)
    for split_args in (True, False):
        batched = [id(t) in inp_ids or (split_args and t.dim() > 0 and t.size(0) == n)
                   for t in tensors]
        if not split_args and batched == [id(t) in inp_ids or (t.dim() > 0 and t.size(0) == n)
                                          for t in tensors]:
            continue
        dims_to_vary = [None] if not dynamic else \
            [d for d in range(1, ref.dim()) if ref.size(d) >= 2][-MAX_VARIED:]
        for d in dims_to_vary:
            slots, varied = [], False
            lengths = _lengths(ref.size(d)) if d is not None else None
            for t, bt in zip(tensors, batched):
                if not bt:
                    slots.append(("shared", _detach(t)))
                    continue
                exs = [rows(t, b) for b in range(nb)]
                k = None if d is None else d - (ref.dim() - t.dim())
                vary = k is not None and 1 <= k < t.dim() and t.size(k) == ref.size(d)
                if vary:
                    exs = [e.narrow(k, 0, lengths[b % len(lengths)]).clone()
                           for b, e in enumerate(exs)]
                    varied = varied or id(t) in inp_ids
                dims = tuple(vary and i == k for i in range(1, t.dim()))
                slots.append(("batch", exs, dims, 0))
            if d is None or varied:
                yield Case(fn, sample, slots,
                           f"rows, {'split' if split_args else 'shared'} args"
                           + (f", dim {d} varies" if d is not None else ""))


# ------------------------------------------------------------------ running
# errors of Python's or torch's argument checking: a rule that calls
# something wrongly, not a refusal that explains itself
_SIGNATURE = re.compile(r"unexpected keyword argument|positional argument|required "
                        r"(positional|keyword)|object has no attribute|argument '\w+' "
                        r"\(position \d+\) must be")
UNPLACED = "has no rule yet for values whose batch-of-one dimension"


def _from_matchbox(exc):
    """Whether ``exc`` was raised by matchbox's own code (a deliberate,
    explained refusal) rather than inside torch."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and last.startswith(MATCHBOX_DIR) \
        and not last.endswith("test_utils.py")


def _first_line(exc):
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"


def run_case(case, grad):
    """``("pass", None)``, ``("refused", message)`` (a clear matchbox
    error), ``("wrong", message)`` (values or gradients differ) or
    ``("crash", message)`` (an error raised inside torch)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mb_test(case.call, *case.specs(), grad=grad, seed=0)
        return "pass", None
    except AssertionError as e:
        if str(e).startswith("mb_test"):
            return "wrong", _first_line(e) + " " + " ".join(str(e).splitlines()[1:2]).strip()
        return "crash", _first_line(e)
    except Exception as e:
        if _from_matchbox(e) and not _SIGNATURE.search(str(e)):
            return "refused", _first_line(e)
        return "crash", _first_line(e) + " @ " + _where(e)


def _where(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        if fr.filename.startswith(MATCHBOX_DIR):
            return f"{os.path.relpath(fr.filename, os.path.dirname(MATCHBOX_DIR))}:{fr.lineno}"
    return frames[-1].filename.rsplit("/", 1)[-1] + f":{frames[-1].lineno}" if frames else "?"


def _grad(opinfo, sample):
    return bool(opinfo.supports_autograd) and any(
        t.is_floating_point() for t in _tensor_leaves(sample))


def check(opinfo, seed=0):
    """Run one OpInfo entry on batches.  Returns a dict: ``kind`` ("rule":
    its op has one; "fallback": it ran through the general fallback,
    matchbox/ops/fallback.py; "composite": through ops that have rules);
    ``static`` and ``dynamic``, each ("pass" | "refused" | "wrong" |
    "crash" | "n/a", detail); ``how``: the ways of making examples that
    passed; ``paths``: per mode, the fallback's ways ("vmap",
    "per-example") in the passing runs."""
    name = entry_name(opinfo)
    if name in SKIP:
        return {"name": name, "skip": SKIP[name]}
    torch.manual_seed(seed)
    ruled = ruled_callable(opinfo)
    fn = as_called(ruled or unruled_callable(opinfo))
    smp = samples(opinfo)
    if not smp:
        return {"name": name, "skip": "no small, non-empty, real-valued sample on CPU"}
    gen = torch.Generator().manual_seed(seed)
    result = {"name": name, "static": None, "dynamic": None, "how": set(),
              "paths": {"static": set(), "dynamic": set()}}
    ran = False
    for mode in ("static", "dynamic"):
        outcomes = []
        for s in smp:
            outcome, paths = _run_sample(fn, s, gen, mode == "dynamic", _grad(opinfo, s))
            outcomes.append(outcome)
            ran = ran or bool(paths["any"])
            if outcome[0] == "pass":
                result["paths"][mode] |= paths["pass"]
        result[mode] = _combine(outcomes)
        for o in outcomes:
            if o[0] == "pass":
                result["how"].add(o[2].split(",")[0])
    ran = ran or refused_by_fallback(result) or refused_by_fallback(result, "dynamic")
    result["kind"] = "rule" if ruled is not None else "fallback" if ran else "composite"
    return result


def _run_sample(fn, sample, gen, dynamic, grad):
    """The outcome of one sample: the first way of making examples that
    passes, else the worst outcome seen; returns ((status, detail, spec),
    paths): the fallback's ways in ``paths["pass"]`` (passing runs) and
    ``paths["any"]`` (every run)."""
    seen, paths = [], {"pass": set(), "any": set()}
    makers = (vmap_cases, rows_cases, functools.partial(vmap_cases, vary=_scaled))
    for maker in makers:
        if maker is makers[-1] and seen:
            break  # scaled copies only where no permuted example is accepted
        for case in maker(fn, sample, gen, dynamic):
            if not case.per_example_ok():
                continue
            with recording() as log:
                status, detail = run_case(case, grad and case.per_example_ok(grad=True))
            ways = {how for _, how in log}
            paths["any"] |= ways
            if status in ("wrong", "crash"):
                return (status, detail, case.spec), paths
            if status == "pass":
                paths["pass"] |= ways
                seen.append((status, detail, case.spec))
                if not dynamic:
                    break
                continue  # dynamic: every dim that can vary must not be wrong
            seen.append((status, detail, case.spec))
            if maker is vmap_cases and UNPLACED in detail:
                break  # try rows
        if any(s[0] == "pass" for s in seen):
            break
    passed = [s for s in seen if s[0] == "pass"]
    if passed:
        return passed[0], paths
    if seen:  # the rows way's refusal, if it ran, says more than vmap's
        return seen[-1], paths
    return ("n/a", "no example the op accepts alone" if not dynamic else
            "no dim the op's other arguments let vary", ""), paths


_ORDER = {"wrong": 0, "crash": 1, "pass": 2, "refused": 3, "n/a": 4}


def _combine(outcomes):
    """One sample wrong or crashing is the op's outcome; else a pass on any
    sample is a pass."""
    return min(outcomes, key=lambda o: _ORDER[o[0]])[:2]


def refused_by_fallback(result, mode="static"):
    """Whether the general fallback refused the entry (MissingRule)."""
    r = result.get(mode)
    return bool(r) and r[0] == "refused" and (r[1] or "").startswith("MissingRule")


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
        "Generated by `python -m tests.ops.opinfo_table > docs/opinfo.md` from the cases "
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
                      f"(`python -m tests.ops.opinfo_table --vmap`)."]
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
    sys.stdout.write(table(run_all(op_db, log=sys.stderr if "-v" in sys.argv else None), vmap_count))


if __name__ == "__main__":
    main()
