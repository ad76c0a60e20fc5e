"""Run matchbox over PyTorch's own op database (issue 20 item 8, issue 30).

``torch.testing._internal.common_methods_invocations.op_db`` lists, for
every torch op, sample inputs that PyTorch's own tests use.  functorch
tests ``vmap`` over it: each sample's input becomes one example, and a
batch of them must give what a loop over them gives.  This module does the
same for matchbox:

every entry runs on B examples made from each of a few samples, on static
dims and, where the op's other arguments allow, with one dim varying in
size between the examples (a dynamic dim); ``mb_test`` compares values and
gradients with the per-example loop.  An op with a rule
(``matchbox.core.RULES``) runs its rule; one without runs through the
general fallback (matchbox/ops/fallback.py; ``recording`` says which of its
ways ran) or the ops with rules it is made of.

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

Where no permuted example is in the op's domain (cholesky needs a
positive-definite matrix), examples are scaled copies of the input.

``tests/ops/test_opinfo.py`` runs the cases as tests; ``opinfo_page.py``
writes the coverage page they produce, docs/opinfo.md.
"""
import functools
import os
import re
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
    "nn.functional.multi_head_attention_forward": "random values (its first sample trains "
                                                  "with dropout 0.5)",
    **dict.fromkeys(("cauchy", "exponential", "geometric", "log_normal", "normal",
                     "normal.in_place", "uniform", "pca_lowrank", "svd_lowrank",
                     "nn.functional.fractional_max_pool2d",
                     "nn.functional.fractional_max_pool3d"), "random values"),
    "new_empty_strided": "its values are uninitialised",
    **dict.fromkeys(("native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update"),
                    "training-mode batch norm: as nn.functional.batch_norm"),
}

# Entries whose examples must not vary in size: a sample argument indexes
# the input and torch does not check it against the input's length, so an
# example shorter than the sample reads memory outside itself and its
# per-example result is undefined.  Their dynamic mode is "n/a".
UNCHECKED_INDICES = {
    "_segment_reduce.offsets": "its offsets end at the sample's length and torch does not check "
                               "them (a shorter example read garbage per example: 1e+219 on "
                               "torch 2.14.1, Python 3.13)",
}

# Known rule bugs this test found and that are not fixed yet: case id ->
# the bug.  A listed case is expected to fail; one that passes is reported.
XFAIL = {
    "nn.functional.kl_div": "a shared target of the padded size meeting a dynamic dim is read "
                            "as each example's prefix (the x + pe[:x.maxsize(1)] idiom), so an "
                            "example of length 1 does not broadcast against it as it does alone",
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
        if mode == "dynamic" and name in UNCHECKED_INDICES:
            result[mode] = ("n/a", UNCHECKED_INDICES[name])
            continue
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
