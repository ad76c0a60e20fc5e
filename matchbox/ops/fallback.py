"""The general fallback: an op with no rule of its own still runs on
MaskedBatch operands, per example by construction.

- **vmap.**  Where every MaskedBatch operand has static dims only (or a
  dynamic dim along which every example has the same size), the storage's
  batch dimension is a ``torch.func.vmap`` dimension: the op runs once,
  under vmap over the examples, each seeing its own value in the shape the
  per-example code sees (its batch-of-one dimension where ``batch_dim``
  says, or none).  Values and gradients are per example by construction.
- **Per example.**  Otherwise (a dynamic dim whose sizes differ, or an op
  vmap cannot batch: a result whose size depends on the values, such as
  ``unique_consecutive``, or an ``.item()`` inside), each example's real
  slice runs alone and the results are padded back into a batch, with a
  dynamic dim where their sizes differ.  Correct, but a Python loop over
  the examples: it warns once per op with ``PerExampleFallbackWarning``
  (silence it with ``warnings.filterwarnings("ignore",
  category=matchbox.PerExampleFallbackWarning)``), and the cure is a rule.

Examples that hold no value, and lanes dormant under ``@batch``, are not
run: a result holds no value where an operand holds none, and is 0 in a
dormant lane (whose value the masked update of ``@batch`` discards).

Randomness: a random op draws each example's numbers on its own (vmap's
``randomness="different"``), as matchbox's dropout does: per example the
distribution of a loop over the examples, not its numbers.  Given
``generator=g`` it runs per example, in example order, so that one call
draws exactly the numbers a loop over the examples draws from ``g``.

Refused with an error naming the op: an op whose result is a Python value
rather than a Tensor per example (``equal``, ``data_ptr``,
``is_contiguous`` ...), one that changes shared state in place (an
argument its schema writes; batch norm's running statistics) or acts on
autograd or memory rather than on values (``register_hook``,
``as_strided``, ``set_`` ...), and one whose results are not per-example
tensors of one structure (sparse, or a different number of them per
example).  An in-place method (``x.renorm_(...)``) runs as its
out-of-place op written into ``x`` (matchbox/ops/inplace.py).

``recording()`` lists the ops the fallback runs (the test suite asserts
that no benchmark task's hot path goes through it).
"""
import contextlib
import functools
import re
import warnings

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from .._lanes import _Slot, active_lanes
from ..core import MaskedBatch, storage_to_example
from ._registry import MissingRule, func_name, is_mb, new, presence, unwrap

__all__ = ["PerExampleFallbackWarning", "fallback", "method", "plan", "recording", "REFUSED"]


class PerExampleFallbackWarning(UserWarning):
    """An op with no rule ran once per example (correct, slower)."""


# what is refused, and why (the name of the op, or of a prefix of it)
_PYTHON_VALUE = "gives a Python value, not a Tensor, per example"
_STATE = "acts on autograd or memory state, not on each example's values"
REFUSED = {
    **dict.fromkeys(("equal", "allclose", "data_ptr", "const_data_ptr",
                     "dense_dim", "sparse_dim", "dim_order", "ndimension", "storage",
                     "untyped_storage", "storage_offset", "storage_type", "stride",
                     "qscheme", "q_scale", "q_zero_point", "q_per_channel_axis",
                     "q_per_channel_scales", "q_per_channel_zero_points"), _PYTHON_VALUE),
    **dict.fromkeys(("apply_", "map_", "map2_", "record_stream", "register_hook",
                     "register_post_accumulate_grad_hook", "retain_grad", "share_memory_",
                     "reinforce", "module_load", "as_subclass", "set_", "grad", "backward"),
                    _STATE),
    **dict.fromkeys(("__setitem__", "__delitem__"), "changes its operand in place"),
    **dict.fromkeys(("batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                     "_batch_norm_with_update", "instance_norm"),
                    "normalizes over the whole batch or updates running statistics in place; "
                    "call torch.nn.functional.batch_norm / instance_norm, which have rules "
                    "(matchbox/ops/norm.py)"),
}
_PREFIXES = {"is_": _PYTHON_VALUE, "resize": _STATE, "as_strided": _STATE, "sparse_resize": _STATE}
# queries whose answer is the dtype's, the same for every example: answered
# on the storage
_DTYPE_QUERIES = {"is_floating_point", "is_complex", "is_signed"}
# ops to run per example even on static dims: torch.func.vmap batches them
# with a wrong gradient (torch 2.x; found by tests/ops/test_opinfo.py), or
# cannot batch them (a Python wrapper of ops whose result size depends on
# the values)
_PER_EXAMPLE = {"select_scatter", "linear_cross_entropy", "unique"}

# the ops the fallback runs in this thread, when recording (see ``recording``)
_LOG = _Slot()


@contextlib.contextmanager
def recording():
    """Within the block, list the ops the fallback runs: yields a list that
    fills with ``(op name, "vmap" | "per-example")``."""
    log = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def _record(func, how):
    log = _LOG.get()
    if log is not None:
        log.append((func_name(func), how))


def _short(func):
    return getattr(func, "__name__", "") or ""


def _refusal(name):
    """Why the op named ``name`` is refused, or None."""
    why = REFUSED.get(name)
    return why if why is not None else \
        next((w for p, w in _PREFIXES.items() if name.startswith(p)), None)


#: torch.Tag.out marks the out= overloads (torch 2.11 and newer; older
#: releases name them only by their ``out`` suffix)
_OUT_TAG = getattr(torch.Tag, "out", None)


@functools.lru_cache(maxsize=None)
def _aten(name):
    """``(writes, dynamic)`` from the aten schemas of the op named ``name``:
    does it write one of its (non-``out``) arguments in place, and may its
    result's size depend on the values (no vmap batching rule can exist)."""
    packet = getattr(torch.ops.aten, name, None) if name and not name.startswith("__") else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False, False
    writes = dynamic = False
    for overload in packet.overloads():
        op = getattr(packet, overload)
        if _OUT_TAG in op.tags or overload.endswith("out"):
            continue
        writes = writes or any(a.alias_info is not None and a.alias_info.is_write
                               and not a.kwarg_only and isinstance(a.type, torch.TensorType)
                               for a in op._schema.arguments)
        dynamic = dynamic or torch.Tag.dynamic_output_shape in op.tags
    return writes, dynamic


def plan(func):
    """``(way, why)``: how the fallback runs torch callable ``func``: "vmap"
    (on static dims; per example on dynamic ones), "per-example" (always:
    vmap cannot batch it), "in place" (its out-of-place op, written into
    the batch), "dtype" (a query of the dtype: one answer for all), or
    "refused" (``why`` says why)."""
    name = _short(func)
    if name in _DTYPE_QUERIES:
        return "dtype", None
    if _in_place_form(name):
        why = _refusal(name) or (None if _twin(name) is not None else
                                 "changes its operand in place, and has no out-of-place form")
        return ("in place", None) if why is None else ("refused", why)
    why = _refusal(name) or (_WRITES if _aten(name)[0] else None)
    if why is not None:
        return "refused", why
    return ("per-example" if _aten(name)[1] or name in _PER_EXAMPLE else "vmap"), None


_WRITES = ("changes one of its arguments in place (a Tensor every example shares would change "
           "once per example)")


def _refuse(func, why):
    return MissingRule(
        f"{func_name(func)} has no rule on a MaskedBatch, and matchbox's general fallback "
        f"(matchbox/ops/fallback.py) does not run it: it {why}. Leave matchbox first with "
        f".examples() or .to_padded() and handle the padding yourself")


# ------------------------------------------------------------------ the entry points
def fallback(func, args, kwargs, unplaced=None):
    """Run torch callable ``func``, which has no rule, on ``args`` and
    ``kwargs`` holding MaskedBatch operands: what each example's own call
    gives, as batches.  ``unplaced``: the error of a rule that does not
    serve these operands' batch-of-one dimensions, raised where the
    fallback does not run the op either."""
    if kwargs.get("out") is not None:
        raise NotImplementedError(
            f"{func_name(func)}(..., out=...) is not supported with MaskedBatch operands: a "
            f"per-example result cannot be written into a given Tensor; bind the result instead")
    way, why = plan(func)
    if way == "dtype":
        return func(*(unwrap(a) for a in args), **kwargs)
    if unplaced is not None and way in ("refused", "in place"):
        raise unplaced
    if way == "refused":
        raise _refuse(func, why)
    if way == "in place":
        return _in_place(func, args, kwargs)
    leaves, spec = pytree.tree_flatten((_plain(args), _plain(kwargs)), is_leaf=is_mb)
    at = [i for i, v in enumerate(leaves) if is_mb(v)]
    if not at:
        raise _refuse(func, "gets its MaskedBatch operands inside objects the fallback does not "
                            "look into (only tuples, lists and dicts)")
    B = leaves[at[0]].padded_data.size(0)
    for i in at:
        if leaves[i].padded_data.size(0) != B:
            raise ValueError(f"{func_name(func)}: operands hold different numbers of examples "
                             f"({B} and {leaves[i].padded_data.size(0)})")
    present, run = _live([leaves[i] for i in at], B)
    sizes = _common_sizes(leaves, at, run) if way == "vmap" else None
    if sizes is not None and kwargs.get("generator") is None:
        try:
            out = _vmapped(func, leaves, spec, at, sizes, present, run, B)
        except Exception as e:  # noqa: BLE001 (vmap cannot batch it: run each example)
            if _IN_PLACE.search(str(e)):
                raise _refuse(func, "changes a Tensor that every example shares in place") from e
        else:
            _record(func, "vmap")
            return out
    return _per_example(func, leaves, spec, at, present, run, B)


# how vmap says an op wrote per-example values into a Tensor every example shares
_IN_PLACE = re.compile(r"in-?place|in place", re.IGNORECASE)


def method(x, name):
    """``x.<name>`` for a Tensor method (or value attribute such as ``x.H``)
    with no rule: the fallback bound to ``x``.  A MissingRule (also an
    AttributeError, so ``hasattr`` answers False) for what it refuses."""
    func = getattr(torch.Tensor, name)
    if name in ("H", "mH", "real", "imag"):
        return fallback(_attribute(name), (x,), {})
    if not callable(func):
        raise _refuse(_attribute(name), "is an attribute, not a value of the example")
    if plan(func)[0] == "refused":
        raise _refuse(func, plan(func)[1])

    def call(*args, **kwargs):
        return fallback(func, (x,) + args, kwargs)
    call.__name__ = call.__qualname__ = name
    return call


@functools.lru_cache(maxsize=None)
def _attribute(name):
    def read(t):
        return getattr(t, name)
    read.__name__ = read.__qualname__ = f"Tensor.{name}"
    return read


def _plain(obj):
    """``obj`` with tuple subclasses that are not named tuples (the steps of
    ``x.unbind(d)``) as tuples, so that the MaskedBatches in them are found."""
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_plain(o) for o in obj)
    if type(obj) is list:
        return [_plain(o) for o in obj]
    if type(obj) is dict:
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _in_place_form(name):
    """Whether ``name`` is an in-place op: ``add_``, or ``__iadd__`` (``x += y``)."""
    if name.startswith("__"):
        return name.startswith("__i") and hasattr(torch.Tensor, "__" + name[3:])
    return name.endswith("_")


def _twin(name):
    """The out-of-place op of in-place op ``name`` (``add`` of ``add_``,
    ``__add__`` of ``__iadd__``), or None."""
    short = "__" + name[3:] if name.startswith("__") else name[:-1]
    return getattr(torch.Tensor, short, None) or getattr(torch, short, None) or \
        getattr(F, short, None)


def _in_place(func, args, kwargs):
    """``x.<op>_(...)`` (or ``x <op>= y``): the out-of-place op's value
    written into ``x``."""
    from .inplace import write_in_place
    twin = _twin(_short(func))
    if not args or not is_mb(args[0]):
        raise _refuse(func, "changes a Tensor every example shares in place")

    def compute(src, *rest, **kw):
        return fallback(twin, (src,) + rest, kw)
    return write_in_place(args[0], compute, args[1:], kwargs, _short(func))


# ------------------------------------------------------------------ which examples run
def _live(batches, B):
    """``(present, run)``: bool ``(B,)`` of the examples that hold a value in
    every operand, and of those that run (present and active under
    ``@batch``); None for all."""
    present = None
    for x in batches:
        p = presence(x)
        if p is not None:
            present = p if present is None else present & p
    run = present
    lanes = active_lanes()
    if lanes is not None and lanes.size(0) == B:
        run = lanes if run is None else run & lanes
    return present, run


def _common_sizes(leaves, at, run):
    """``{leaf index: {data dim: size}}``: the size to cut each dynamic dim
    to, when every running example has the same size there (then vmap can
    run on the cut storage); None when some differ."""
    lens, where = [], []
    for i in at:
        x = leaves[i]
        if x._mask is None:
            continue
        for d in (d + 1 for d, dyn in enumerate(x.dims) if dyn):
            lens.append(x._lengths(d))
            where.append((i, d))
    sizes = {i: {} for i in at}
    if not lens:
        return sizes
    L = torch.stack(lens)
    if run is not None:
        L = L[:, run]
    if L.size(1) == 0:
        return None
    same, *first = torch.cat([(L == L[:, :1]).all().view(1), L[:, 0]]).tolist()
    if not same:
        return None
    for (i, d), n in zip(where, first):
        sizes[i][d] = n
    return sizes


# ------------------------------------------------------------------ the two ways to run
def _vmapped(func, leaves, spec, at, sizes, present, run, B):
    """The op under ``torch.func.vmap`` over the storage's batch dimension,
    on the examples that run (the others' results are 0)."""
    rows = None if run is None else run.nonzero().squeeze(1)
    if rows is not None and rows.numel() == B:
        rows = None
    datas, places = [], [leaves[i]._bdim for i in at]
    for i in at:  # each example's storage slice, cut to the common sizes
        data = leaves[i].padded_data
        for d, n in sizes[i].items():
            data = data.narrow(d, 0, n)
        datas.append(data if rows is None else data.index_select(0, rows))

    def one(*values):
        vals = list(leaves)
        for i, v, p in zip(at, values, places):
            vals[i] = v if p is None else v.unsqueeze(p)
        args, kwargs = pytree.tree_unflatten(vals, spec)
        return func(*args, **kwargs)

    out = torch.func.vmap(one, randomness="different")(*datas)
    place = _place([leaves[i] for i in at])

    def batched(y):
        if rows is not None:
            y = y.new_zeros((B,) + y.shape[1:]).index_copy(0, rows, y)
        q = place if place is not None and y.dim() > place + 1 and y.size(place + 1) == 1 else None
        if q is not None:
            y = y.squeeze(q + 1)
        mask = None if present is None else present.view((B,) + (1,) * (y.dim() - 1))
        return new(y, mask, (False,) * (y.dim() - 1), bdim=q)
    return pytree.tree_map(batched, out)


def _place(batches):
    """Where the results may hold their batch-of-one dimension: where every
    operand that is more than one number per example holds it (a result
    with size 1 there), else nowhere."""
    ps = {x._bdim for x in batches if x.dim() > 0}
    return ps.pop() if len(ps) == 1 else None


def _per_example(func, leaves, spec, at, present, run, B):
    """Each example's own call on its real slice; the results padded back."""
    lengths = {i: _host_lengths(leaves[i]) for i in at}
    todo = range(B) if run is None else run.nonzero().squeeze(1).tolist()
    outs = {}
    for b in todo:
        vals = list(leaves)
        for i in at:
            vals[i] = _example(leaves[i], b, lengths[i])
        args, kwargs = pytree.tree_unflatten(vals, spec)
        outs[b] = pytree.tree_flatten(func(*args, **kwargs))
    if not outs:
        raise NotImplementedError(
            f"{func_name(func)} has no rule on a MaskedBatch, and no example of this batch holds "
            f"a value to run it on per example (the shape of its result is unknown)")
    (first, structure), *rest = outs.values()
    for ys, s in rest:
        if s != structure:
            raise _refuse(func, "gives the examples results of different structures (e.g. "
                                "different numbers of Tensors), which no batch can hold")
    for y in first:
        if not isinstance(y, torch.Tensor) or y.layout != torch.strided:
            raise _refuse(func, _PYTHON_VALUE if not isinstance(y, torch.Tensor) else
                          f"gives {y.layout} Tensors, which a MaskedBatch does not hold")
    warnings.warn(
        f"{func_name(func)} has no rule on a MaskedBatch, and torch.func.vmap cannot batch it "
        f"here (a dynamic dimension, or a result whose size depends on the values), so "
        f"matchbox runs it once per example (correct, slower). Silence this with "
        f"warnings.filterwarnings('ignore', category=matchbox.PerExampleFallbackWarning)",
        PerExampleFallbackWarning, stacklevel=2)
    _record(func, "per-example")
    place = _place([leaves[i] for i in at])
    results = [_padded([outs[b][0][k] if b in outs else None for b in range(B)], present, place)
               for k in range(len(first))]
    return pytree.tree_unflatten(results, structure)


def _host_lengths(x):
    """``[(data dim, [size per example])]`` of ``x``'s dynamic dims."""
    dyn = [d + 1 for d, dynamic in enumerate(x.dims) if dynamic]
    if x._mask is None or not dyn:
        return []
    return list(zip(dyn, torch.stack([x._lengths(d) for d in dyn]).tolist()))


def _example(x, b, lengths):
    """Example ``b`` of ``x``: its real slice, as the per-example code holds it."""
    t = x.padded_data[b:b + 1]
    for d, ns in lengths:
        t = t.narrow(d, 0, ns[b])
    return storage_to_example(t, x._bdim)


def _padded(ys, present, place):
    """One batch of the per-example results ``ys`` (None: an example that
    did not run, which gets zeros; it holds no value where ``present`` says)."""
    like = next(y for y in ys if y is not None)
    q = place if place is not None and all(
        y is None or y.dim() > place and y.size(place) == 1 for y in ys) else None
    ys = [torch.zeros_like(like) if y is None else y for y in ys]
    out = MaskedBatch.fromlist(ys, None, q)
    if present is None or bool(present.all()):
        return out
    mask = out.mask & present.view((-1,) + (1,) * (out.padded_data.dim() - 1))
    kept = present if out._present is None else out._present & present
    return new(out.padded_data, mask, out.dims, bdim=q,
               present=kept if any(out.dims) else None, sizes=out._sizes)
