"""The rule table that MaskedBatch dispatch reads, and the helpers rules share.

A rule is a plain function with the signature of the torch callable it
serves; it receives the original arguments (MaskedBatch, Tensor, numbers)
and returns MaskedBatch results that state data, mask and dims explicitly.
Register one with::

    @register(torch.tanh, torch.Tensor.tanh)
    def tanh(x): ...

Registering a ``torch.Tensor`` method also installs it as a method of
MaskedBatch, so ``x.tanh()`` calls the rule directly.  The table is filled
once at import time and never mutated afterwards.
"""
import math

import torch

from .. import _lanes
from .._lanes import batch_size_hint
from ..core import (RULES, MaskedBatch, batch_advice, dispatch, empty_present, empty_sizes,
                    real_mask, uncut, with_lanes)

__all__ = [
    "RULES", "register", "MissingRule", "is_mb", "unwrap", "new",
    "norm_dim", "real_mask", "neutralize", "align", "prefix_mask", "check_same_lengths",
    "tensor_methods", "register_distinct", "canon_mask", "keep", "on_real_rows", "gathers_rows",
    "scatter_rows", "true_rows", "uncut", "fail_if", "with_lanes", "presence", "keep_presence",
    "lengths_presence", "fill_value",
]

_INSTALLED = set()
_TENSOR_NAMES = None


def tensor_methods(func):
    """Names under which ``func`` is an attribute of ``torch.Tensor``."""
    global _TENSOR_NAMES
    if _TENSOR_NAMES is None:
        names = {}
        for name in dir(torch.Tensor):
            try:
                obj = getattr(torch.Tensor, name)
            except Exception:  # some descriptors raise on class access
                continue
            names.setdefault(id(obj), []).append(name)
        _TENSOR_NAMES = names
    return _TENSOR_NAMES.get(id(func), [])


def _install(name, func, rule):
    if name in MaskedBatch.__dict__ and name not in _INSTALLED:
        return  # the class defines it itself (size, to, float, ...)

    def method(self, *args, **kwargs):
        return dispatch(func, rule, (self,) + args, kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = rule.__doc__
    setattr(MaskedBatch, name, method)
    _INSTALLED.add(name)


def register(*funcs):
    """Register the decorated rule for each torch callable in ``funcs``."""
    def deco(rule):
        for f in funcs:
            if f in RULES:
                raise RuntimeError(f"two matchbox rules registered for {func_name(f)}")
            RULES[f] = rule
            for name in tensor_methods(f):
                _install(name, f, rule)
        return rule
    return deco


def register_distinct(*funcs):
    """``register`` over the distinct callables among ``funcs`` that have no
    rule yet: torch exposes many aliases (``Tensor.__neg__`` is
    ``Tensor.neg``, ``torch.concat`` is ``torch.cat`` ...)."""
    seen = []
    for f in funcs:
        if f is not None and f not in seen and f not in RULES:
            seen.append(f)
    return register(*seen)


def func_name(func):
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    if "<locals>" in name:  # torch's boolean_dispatch wrappers (torch.unique, F.max_pool1d)
        name = getattr(func, "__name__", name)
    mod = getattr(func, "__module__", None) or ""
    if name.startswith("_VariableFunctionsClass."):  # torch.addmm and friends
        name = name.split(".", 1)[1]
    if name.startswith("TensorBase.") or name.startswith("_TensorBase."):
        name = "Tensor." + name.split(".", 1)[1]
    if mod.startswith("torch.nn.functional") or mod == "torch._C._nn":
        return f"torch.nn.functional.{name}"
    family = mod[len("torch._C._"):] if mod.startswith("torch._C._") else ""
    if family in ("linalg", "fft", "special") and name.startswith(family + "_"):
        return f"torch.{family}.{name[len(family) + 1:]}"  # torch.linalg.norm
    if name.startswith("Tensor."):
        return f"torch.{name}"
    return f"torch.{name}" if "." not in name else name


class MissingRule(NotImplementedError, AttributeError):
    """A torch op with no rule on a MaskedBatch that the general fallback
    (ops/fallback.py) refuses.  Also an AttributeError, so ``hasattr(x,
    name)`` and ``getattr(x, name, default)`` answer instead of raising."""


# ---------------------------------------------------------------- helpers
def is_mb(x):
    return isinstance(x, MaskedBatch)


def unwrap(x):
    return x.padded_data if isinstance(x, MaskedBatch) else x


new = MaskedBatch._new


def norm_dim(x, dim, op="this op", allow_batch=False):
    """Normalise a (possibly negative) per-example dim of MaskedBatch ``x``.
    Dim 0 (each example's leading 1, the batch dimension of the MaskedBatch)
    is refused unless ``allow_batch``."""
    n = x._data.dim()
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension {dim} out of range for examples with {n} dims")
    dim = dim + n if dim < 0 else dim
    if dim == 0 and not allow_batch:
        raise ValueError(
            f"{op} over dimension 0 is not supported: dimension 0 is each example's leading 1 "
            f"(the batch dimension of the MaskedBatch). Use a per-example dimension >= 1.")
    return dim


# below this many entries, finding the False rows costs more than ``where`` saves
_ROWS_PAY = 1 << 14


def keep(m, data, fill=0):
    """``torch.where(m, data, fill)`` for a bool mask ``m`` that broadcasts
    against ``data`` and a number ``fill``: entries under False become
    ``fill`` and get exactly zero gradient, even when they held NaN.

    On CPU torch.where costs several ns per entry; when ``m`` marks whole
    rows (its trailing dims are 1s, as padding masks over static feature
    dims are), index_fill over the False rows is 2-3x faster, forward and
    backward (not under torch.compile: finding the rows breaks the graph)."""
    if data.numel() >= _ROWS_PAY and data.is_cpu and data.is_floating_point() \
            and m.dim() == data.dim() and not torch.compiler.is_compiling():
        k = m.dim()
        while k and m.size(k - 1) == 1:
            k -= 1
        lead = data.shape[:k]
        if 0 < 4 * lead.numel() <= data.numel() and all(a in (1, b) for a, b in zip(m.shape, lead)):
            false_rows = true_rows(~m, lead + m.shape[k:])
            out = data.reshape(lead.numel(), -1).index_fill(0, false_rows, fill)
            return out.view(data.shape)
    return torch.where(m, data, fill_value(fill, data))


# ready 0-dim fills for floating data: eagerly, torch.where takes a CPU scalar
# Tensor beside data on any device, and making one per call costs as much as
# the where (under torch.compile the fill is a constant of the graph anyway)
_FILLS = {v: torch.tensor(v) for v in (0.0, 1.0, -math.inf, math.inf)}


def fill_value(fill, data):
    """The number ``fill`` as a 0-dim Tensor for ``torch.where`` beside ``data``."""
    if type(fill) in (int, float) and data.is_floating_point() \
            and not torch.compiler.is_compiling():
        t = _FILLS.get(fill)
        if t is not None:
            return t
    return torch.as_tensor(fill, dtype=data.dtype, device=data.device)


def fail_if(bad, error, summary):
    """Raise ``error(first)`` when the bool Tensor ``bad`` holds anywhere
    (``first``: the index tuple of its first True entry, for the message).

    On CPU, eagerly, the check happens now.  Under torch.compile and on GPU
    it is queued with the work instead (``torch._assert_async``): no graph
    break and no host-device sync, as torch's own kernels check indices.
    A failure then raises a RuntimeError with the static ``summary`` when
    the device reaches it; running eagerly on CPU names the example."""
    if bad.device.type == "cpu" and not torch.compiler.is_compiling():
        if bool(bad.any()):
            raise error(tuple(int(j) for j in bad.nonzero()[0]))
        return
    torch._assert_async(~bad.any(), f"{summary} (matchbox checks this on the device; run "
                                    f"eagerly on CPU to see which example)")


def fail_outside(index, lo, hi, error, summary, check=None):
    """``fail_if`` for an integer ``index`` with an entry outside ``[lo,
    hi]`` (numbers or Tensors that broadcast) where ``check`` (bool, None:
    everywhere, or a function giving one when needed) holds.  On CPU,
    eagerly, a clamp and one ``torch.equal`` (the entry is looked up only
    when it fails)."""
    inside = index.clamp(lo, hi)
    eager = index.is_cpu and not torch.compiler.is_compiling()
    if eager and torch.equal(inside, index):  # (then where check holds, too)
        return
    if callable(check):
        check = check()
    if check is not None:
        inside = torch.where(check, inside, index)
    if not (eager and torch.equal(inside, index)):
        fail_if(inside != index, error, summary)


def gathers_rows(t, small=True):
    """Whether row-wise rules (linear, layer norm, embedding, RNN cells)
    compute only the real rows of ``t`` (gather, run, scatter back: on CPU,
    it skips the work on padding and needs no masking) or every row with
    masking (elsewhere: finding the rows would make the host wait for the
    device).  Under torch.compile, gathers trace into the graph only when
    dynamo captures data-dependent shapes
    (``torch._dynamo.config.capture_dynamic_output_shape_ops``); otherwise
    ``nonzero`` would break the graph, and every row is masked.
    ``small=False``: nor when ``t`` has fewer than ``_ROWS_PAY`` entries,
    where the gather and scatter cost more than the work on padding they
    save (rules whose gathers save more, as RNN cells' do, keep them)."""
    return t.device.type == "cpu" and (small or t.numel() >= _ROWS_PAY) and (
        not torch.compiler.is_compiling() or torch._dynamo.config.capture_dynamic_output_shape_ops)


def true_rows(m, shape=None):
    """The flat indices of the True entries of bool ``m`` broadcast to
    ``shape`` (its own by default): the rows that gathers take.  Found with
    ``nonzero``, which waits for the device (see ``gathers_rows``)."""
    return (m if shape is None else m.expand(shape)).reshape(-1).nonzero().squeeze(1)


def scatter_rows(y, rows, n):
    """``y`` (one row per entry of ``rows``) put at those rows of ``n`` rows
    of zeros."""
    return y.new_zeros((n,) + y.shape[1:]).index_copy_(0, rows, y)


def on_real_rows(x, m, fn, k=1):
    """``fn`` (a function of rows: ``(n, *row) -> (n, *out_row)``) applied to
    the rows of ``x.padded_data`` (its last ``k`` dims) that ``m`` marks real,
    giving ``x.padded_data.shape[:-k] + out_row`` with 0 in every other row.
    Padding rows are never read, so they need no masking and get exactly
    zero gradient; and no work is spent on them.  ``m`` must be 1 along the
    last ``k`` dims and False in dormant lanes, as ``real_mask`` is (so the
    data is ``uncut``).  The rows are found with ``nonzero``, which waits for
    the device (see ``gathers_rows``).  The gathered rows are kept on ``x``,
    so ops that share an input (attention's q, k and v) gather it once; not
    for a leaf that requires grad, which outlives a backward pass that
    frees the gather's graph; nor under torch.compile, where comparing the
    cached tensors would break the graph."""
    data = uncut(x)
    compiling = torch.compiler.is_compiling()
    lead = data.shape[:data.dim() - k]
    # x[i] = v replaces x.padded_data, in-place ops bump its version; no_grad gathers have no graph
    key = (data._version, k, torch.is_grad_enabled())
    hit = None if compiling else x._rows
    if hit is not None and hit[0] is m and hit[1] is data and hit[2] == key:
        rows, real = hit[3], hit[4]
    else:
        rows = true_rows(m, lead + m.shape[len(lead):])
        real = data.reshape((lead.numel(),) + data.shape[len(lead):]).index_select(0, rows)
        if not (compiling or data.requires_grad and data.is_leaf):
            x._rows = (m, data, key, rows, real)
    y = fn(real)
    return scatter_rows(y, rows, lead.numel()).view(lead + y.shape[1:])


def neutralize(x, fill, m=None):
    """``x.padded_data`` with every non-real entry (padding, dormant lanes) set to
    ``fill`` (see ``keep``: gradients there are exactly zero).  Free when
    the padding is known to be 0 already and every lane is active.  ``m``:
    ``real_mask(x)``, where the caller has it."""
    if m is None:
        m = real_mask(x)
    if m is None or (m is x._mask and x._zero and fill == 0):
        return x.padded_data
    return keep(m, uncut(x), fill)


def prefix_mask(x, d):
    """The ``(B, n_d)`` bool mask of real positions along data dim ``d``."""
    m = x._mask
    if m is None or not x.dims[d - 1]:
        return None
    other = [i for i in range(1, m.dim()) if i != d]
    return m.any(dim=other) if other else m


def _describe(x, d):
    return f"dimension {d} of a MaskedBatch with dims {x.dims} (padded shape {tuple(x.padded_data.shape)})"


def check_same_lengths(a, da, b, db, op):
    """Raise ValueError unless dynamic dim ``da`` of ``a`` and ``db`` of ``b``
    have the same per-example lengths.  Skipped when both share one mask,
    or equal masks that alone say the lengths."""
    ma, mb_ = a._mask, b._mask
    if da == db and (ma is mb_ or ma is not None and mb_ is not None and a._sizes is None
                     and b._sizes is None and _same_mask(ma, mb_)):
        return
    na, nb = a.padded_data.size(da), b.padded_data.size(db)
    ma, mb_ = prefix_mask(a, da), prefix_mask(b, db)
    if ma is None and mb_ is None and na == nb:
        return
    la, lb = a._lengths(da), b._lengths(db)
    bad, lanes = la != lb, _lanes.active_lanes()
    if lanes is not None and lanes.shape == bad.shape:   # (a dormant lane's value is dropped)
        bad = bad & lanes
    fail_if(bad, lambda _: ValueError(
        f"{op}: per-example lengths differ between {_describe(a, da)} and "
        f"{_describe(b, db)}: {la.tolist()} vs {lb.tolist()}"),
        f"{op}: per-example lengths differ between operands")


def _pad_dim(data, d, n):
    if data.size(d) >= n:
        return data
    shape = list(data.shape)
    shape[d] = n - data.size(d)
    return torch.cat([data, data.new_zeros(shape)], d)


def align(args, op="op"):
    """Broadcast the operands of a pointwise op.

    ``args`` mixes MaskedBatch, Tensor and Python numbers.  MaskedBatch
    operands line up on the batch dimension and broadcast their per-example
    dims right-aligned; plain Tensors broadcast against the full data as in
    PyTorch.  Returns ``(datas, mask, dims)``: the data to feed the torch op,
    the combined mask (None if all real) and the result dims.
    """
    first = _one_layout(args)
    if first is not None:  # nothing to line up: one mask, dims and shape
        return [a.padded_data if type(a) is MaskedBatch else a for a in args], first._mask, first.dims
    # (each operand's padded data read once: it is a property)
    padded = [a.padded_data if isinstance(a, MaskedBatch) else None for a in args]
    batches = [(a, d) for a, d in zip(args, padded) if d is not None]
    ref = batches[0][1]
    B = ref.size(0)
    n = max(d.dim() for _, d in batches) - 1
    dims = [False] * n
    owner = [None] * n  # the first batch with a dynamic dim at each position, and its data
    for b, data in batches:
        if data.size(0) != B:
            raise ValueError(
                f"{op}: batch sizes differ ({B} vs {data.size(0)}); both operands must "
                f"hold the same examples" + batch_size_hint())
        if data.device != ref.device:
            raise ValueError(f"{op}: operands are on {ref.device} and {data.device}")
        off = n + 1 - data.dim()
        for i, dyn in enumerate(b.dims):
            if dyn and owner[off + i] is None:
                dims[off + i] = True
                owner[off + i] = (b, i + 1, data)
    datas, masks = [], []
    for a, data in zip(args, padded):
        if data is not None:
            mask = a._mask
            off = n + 1 - data.dim()
            for i in range(off, n):
                if not dims[i]:
                    continue
                d = i - off + 1
                first, fd, fdata = owner[i]
                if a.dims[d - 1]:
                    if a is not first:
                        check_same_lengths(first, fd, a, d, op)
                    if data.size(d) != fdata.size(fd):
                        # to the first's padded size: the lengths are the same (a longer
                        # padding holds no real entry: x[i, i + 1:j] + x[i + 1:j, j])
                        size = fdata.size(fd)
                        mask = a.mask if mask is None else mask
                        data, mask = (_pad_dim(data, d, size), _pad_dim(mask, d, size)) \
                            if data.size(d) < size else (data.narrow(d, 0, size),
                                                         mask.narrow(d, 0, size))
                elif data.size(d) != 1:
                    # a static dim of size s meets a dynamic one: every example
                    # of the dynamic side must have exactly s entries there
                    lens, s = first._lengths(fd), data.size(d)
                    fail_if(lens != s, lambda _: ValueError(
                        f"{op}: static size {s} of one operand meets "
                        f"{_describe(first, fd)} whose examples have sizes {lens.tolist()}"),
                        f"{op}: a static size {s} meets a dynamic dimension of other sizes")
            if off:
                data = data.reshape((B,) + (1,) * off + tuple(data.shape[1:]))
                if mask is not None:
                    mask = mask.reshape((B,) + (1,) * off + tuple(mask.shape[1:]))
            datas.append(data)
            if mask is not None:
                masks.append(mask)
        elif isinstance(a, torch.Tensor):
            if a.dim() > n + 1:
                raise ValueError(
                    f"{op}: a plain Tensor of shape {tuple(a.shape)} has more dimensions than "
                    f"the examples ({n + 1} with the leading 1); per example the result would "
                    f"not keep its leading batch dimension")
            if a.dim() == n + 1 and a.size(0) != 1:
                # a plain Tensor is shared by every example, never one row per
                # example, whatever its leading size
                raise ValueError(
                    f"{op}: a plain Tensor of shape {tuple(a.shape)} is shared by every "
                    f"example, and its leading size {a.size(0)} would replace the examples' "
                    f"leading dimension of size 1 in the result; give it a leading 1 "
                    f"(t.unsqueeze(0)), or make it per-example data with "
                    f"MaskedBatch.fromlist")
            datas.append(a)
        else:
            datas.append(a)
    mask = None
    for m in masks:
        mask = m if mask is None else mask if _same_mask(mask, m) else mask & m
    if mask is not None:
        mask = canon_mask(mask, _broadcast_shape(datas), dims)
    return datas, mask, tuple(dims)


def _same_mask(a, b):
    """Whether bool masks ``a`` and ``b`` are one, or equal (compared on the
    host: CPU, eagerly).  Equal masks made apart (``words`` and ``heads``
    of a batch, each from its own ``fromlist``) then combine into one of
    them, not a new Tensor, and the caches rules keep on a mask hit."""
    return a is b or (a.shape == b.shape and a.is_cpu and b.is_cpu
                      and not torch.compiler.is_compiling() and torch.equal(a, b))


def _one_layout(args):
    """The first MaskedBatch among ``args`` when every MaskedBatch operand
    has its data shape, device, dims and mask (the same object) and the
    others are numbers or None; else None."""
    first = None
    for a in args:
        t = type(a)
        if t is MaskedBatch:
            if first is None:
                first = a
            elif a._mask is not first._mask or a.dims != first.dims or \
                    a._data.shape != first._data.shape or a._data.device != first._data.device:
                return None
        elif not (t is float or t is int or t is bool or a is None):
            return None
    return first


def _broadcast_shape(datas):
    shapes = [d.shape for d in datas if isinstance(d, torch.Tensor)]
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    if torch.compiler.is_compiling():
        return torch.broadcast_shapes(*shapes)
    # torch.broadcast_shapes is slow pure Python (its checks cost ~40 us a call)
    out = [1] * max(len(s) for s in shapes)
    for s in shapes:
        for i, k in enumerate(s, len(out) - len(s)):
            if k != 1:
                if out[i] != 1 and out[i] != k:
                    return torch.broadcast_shapes(*shapes)  # (raises its own error)
                out[i] = k
    return torch.Size(out)


def canon_mask(mask, shape, dims):
    """Bring a mask that broadcasts against data of ``shape`` to the
    canonical layout: static dims size 1 (a lane is real if any entry is),
    dynamic dims full size."""
    if mask is None:
        return None
    want = [shape[0]] + [s if d else 1 for s, d in zip(shape[1:], dims)]
    if list(mask.shape) == want:
        return mask  # the same object: rules compare masks by identity
    for i in range(1, len(want)):
        if want[i] == 1 and mask.size(i) != 1:
            mask = mask.any(i, keepdim=True)
    return mask.expand(want)


# ---------------------------------------------------------------- presence
# Which examples hold a value (``MaskedBatch._present``; see
# core.absent_examples).  It matters only where some example is empty
# (length 0 along a dynamic dim: no real entry, yet a real example), and
# only then is it set; dispatch calls ``keep_presence`` for the results of
# an op with such an operand, so no rule pays for it otherwise.
def _lanes_real(x):
    """Bool ``(B,)``: lanes of ``x`` with a real entry; None for all."""
    m = x._mask
    if m is None:
        return None
    return m.reshape(m.size(0), m.shape[1:].numel()).any(1)


def presence(x):
    """Bool ``(B,)``: the examples of ``x`` that hold a value (one of length
    0 included); None when every example does."""
    p = x._present
    return _lanes_real(x) if p is None else p


def _and(a, b):
    return b if a is None else a if b is None else a & b


def _or(a, b):
    return b if a is None else a if b is None else a | b


def _operands(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if type(a) is MaskedBatch:
            yield a
        elif type(a) is list or type(a) is tuple:
            for b in a:
                if type(b) is MaskedBatch:
                    yield b


def _results(out):
    if type(out) is MaskedBatch:
        yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _results(o)


def keep_presence(out, args, kwargs, func):
    """``out``, the results of ``func`` on ``args``, saying which examples
    hold a value where an operand has an empty example: a result is present
    where all its operands are.  A rule that knows better sets ``_present``
    itself (unbind: a step an example lacks; reductions over the empty
    dim: a real value).  Otherwise, per result:

    - with only static dims, an example whose entries are not real holds no
      value (a rule that gives an empty example a value, as a sum gives 0,
      says so itself);
    - with dynamic dims, an example empty in an operand stays empty.  When
      another operand is not empty there (``q @ k.mT`` with no keys), the
      result's other sizes are unknown; with several dynamic dims that
      raises rather than guess."""
    ops = [a for a in _operands(args, kwargs)]
    if not any(a._present is not None for a in ops):
        return out
    _no_value_lost(args, kwargs, func)
    B = ops[0]._data.size(0)
    p = empty = full = None
    for a in ops:
        if a._data.size(0) != B:
            return out
        real = _lanes_real(a)
        p = _and(p, presence(a))
        if a._present is not None:
            empty = _or(empty, a._present if real is None else a._present & ~real)
        if any(a.dims):
            full = _or(full, real)
            if a._sizes is not None:
                full = _or(full, torch.stack([n > 0 for n in a._sizes.values()]).any(0))
    ids = {id(a) for a in ops}
    for r in _results(out):
        if id(r) in ids or r._present is not None or r._data.size(0) != B:
            continue
        real = _lanes_real(r)
        if not any(r.dims):
            r._present = _and(p, real)
            continue
        r._present = _and(p, _or(real, empty))
        src = next((a for a in ops if a._sizes is not None and a._mask is r._mask
                    and a.dims == r.dims), None)
        if src is not None:
            r._sizes = src._sizes
        elif sum(r.dims) > 1 and empty is not None and full is not None:
            lost = empty & full if real is None else empty & full & ~real
            fail_if(lost, lambda k: NotImplementedError(
                f"{func_name(func)}: example {k[0]} is empty (length 0) along a dynamic "
                f"dimension of one operand but not along another dynamic dimension, and matchbox "
                f"cannot tell the sizes of its result, which has several dynamic dimensions. "
                f"Guard the empty examples with a per-example `if`"
                + batch_advice(" under @matchbox.batch", "") + ", or leave them out of the batch"),
                f"{func_name(func)}: an empty example's result sizes are unknown")
    return out


def _no_value_lost(args, kwargs, func):
    """Raise where an op joins a value that some examples hold with one
    that holds none for them (a step of ``x.unbind(d)`` they do not have):
    per example the value would exist (the example's own loop or sum ends
    at its own last step), batched it would hold none, and the error would
    come only at a loss or ``examples()``, far from here.  Items of a
    sequence (``stack``, ``cat``) are joined per example: not checked."""
    ops = [a for a in list(args) + list(kwargs.values()) if type(a) is MaskedBatch]
    if len(ops) < 2:
        return
    B = ops[0]._data.size(0)
    held = lacked = None
    for a in ops:
        if a._data.size(0) != B:
            return
        p = presence(a)
        if p is not None:
            held, lacked = _or(held, p), _or(lacked, ~p)
        else:
            held = torch.ones(B, dtype=torch.bool, device=a._data.device)
    if held is None or lacked is None:
        return
    lost = held & lacked
    lanes = _lanes.active_lanes()
    if lanes is not None:
        lost = lost & lanes
    name = func_name(func)
    fail_if(lost, lambda k: ValueError(
        f"{name}: one operand holds no value for example {k[0]} (a step of x.unbind(d) that "
        f"example does not have, or a value made from one) where another holds one, so the "
        f"result would hold none for it, though per example it has one. A Python loop, sum(), "
        f"functools.reduce or a generator over the steps runs to the longest example's end: "
        f"put the code under @matchbox.batch (where a for loop over x.unbind(d), len(), sum() "
        f"and steps[i] are each example's own), or read each example's own steps with "
        f"x[:, -1] or x.sum(d)"),
        f"{name}: an operand holds no value for some example where another holds one")


def lengths_presence(lengths, x=None):
    """``(present, sizes)`` (``_present``, ``_sizes``) for a result of ``x``
    whose mask a rule makes from per-example ``lengths`` (data dim ->
    ``(B,)``; see core.mask_from_lengths): None unless an example has
    length 0 (``x[:, 1:]`` of a length-1 example, ``diff``), which is
    present where ``x`` is."""
    present = empty_present(lengths)
    if present is not None and x is not None:
        present = _and(present, presence(x))
    return present, empty_sizes(lengths, present)
