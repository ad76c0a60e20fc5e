"""The gather core of per-example indexing (indexing.py's ``x[...]``,
select, narrow and gather_scatter.py's gather, index_select, ...).

``take`` gathers along one dim of a batch with an index of per-example
positions: an index is checked only where it is real and in an active lane
(``_in_range``: padding and dormant lanes may hold anything and are
clamped), and the result is masked with ``where`` where it is not real, so
gradients arriving there never reach real inputs.  A negative index or
slice bound on a dynamic dim counts from each example's own end.  The
bounds an index is checked against are kept on the mask (``derived``).
"""
import torch

from .. import _lanes
from ..core import derived, uncut
from ._registry import (canon_mask, fail_if, fail_outside, lengths_presence, new, real_mask,
                        with_lanes)
from .shape import gather_line, lanes_present

T = torch.Tensor


def _in_range(index, length, present, real, op, dim, shown=None):
    """``index`` (long, ``(B, ...)``) with its entries out of range of
    ``length`` (each example's size, broadcastable to ``index``) set to 0,
    and the entries to keep (None: all): real (``real``, a bool Tensor
    broadcastable to ``index`` or None), in a lane that is present
    (``present``: ``(B,)`` or None) and in range.  Raises IndexError for
    the first kept entry out of range (the check runs on the device, see
    ``fail_if``); the message shows ``shown`` (the index as written, before
    negative indices were wrapped)."""
    B = index.size(0)
    bad = (index < 0) | (index >= length)
    check = real
    if present is not None:
        lanes = present.view([B] + [1] * (index.dim() - 1))
        check = lanes if check is None else lanes & check
    shown = index if shown is None else shown
    fail_if(bad if check is None else bad & check, lambda k: IndexError(
        f"{op}: index {int(shown[k])} is out of range for dimension {dim} of example {k[0]}, "
        f"which has size {int(length.reshape(-1)[k[0]])}"),
        f"{op}: an index is out of range for dimension {dim}")
    # every checked entry is in range (or raised); on CPU, eagerly, it raised
    # already, so with every entry checked the index needs no clamping
    if check is None and index.device.type == "cpu" and not torch.compiler.is_compiling():
        return index, None
    return index.masked_fill(bad, 0), check


def take(x, p, index, shape, op, idx_mask=None, idx_dims=None, negative=True):
    """Per example b, the entries ``index[b, :]`` along dim ``p`` of ``x``;
    dim ``p`` is replaced by dims of sizes ``shape`` (``()`` drops it).

    ``index`` is a long ``(B, K)`` with ``K = prod(shape)``; ``idx_mask``
    a bool mask broadcastable to ``(B,) + shape`` marking real index
    entries (None: all real); ``idx_dims`` the dynamic flags of ``shape``.

    Only the real index entries of active lanes are checked.  The others
    gather some entry of their own example, and the result is 0 there (as
    in examples that hold no value), so they take no gradient.  The bounds
    are kept on ``x``'s mask (``_limits``): indexing the same batch again
    costs a clamp, a check and the gather.
    """
    B = x._data.size(0)
    im = None if idx_mask is None else idx_mask.expand((B,) + tuple(shape)).reshape(B, index.size(1))
    index, zero, whole = _checked(x, p, index, op, im, negative)
    data = gather_line(uncut(x), p, index, zero)
    data = data.reshape(data.shape[:p] + tuple(shape) + data.shape[p + 1:])
    dims = x.dims[:p - 1] + tuple(idx_dims or (False,) * len(shape)) + x.dims[p:]
    mask = _taken_mask(x, p, whole)
    if mask is not None:
        mask = mask.reshape(mask.shape[:p] + (1,) * len(shape) + mask.shape[p + 1:])
    if idx_mask is not None:
        im = idx_mask.reshape((B,) + (1,) * (p - 1) + tuple(idx_mask.shape[1:])
                              + (1,) * (x._data.dim() - p - 1))
        mask = im if mask is None else mask & im
    return new(data, canon_mask(mask, data.shape, dims), dims)


_INTS = (torch.long, torch.int, torch.int16, torch.int8)


def _take_one(x, i, op, real=None):
    """``x[:, i]`` with one int per example (``i``: ``(B,)``; ``real``: the
    bool ``(B,)`` of the examples that hold an index, or None: all), as
    ``take`` gives it with its Python overhead cut: ``(B, 1, ...)``."""
    B = i.size(0)
    im = None if real is None else real.view(B, 1)
    index, zero, whole = _checked(x, 1, i.view(B, 1), op, im)
    data = gather_line(uncut(x), 1, index, zero)
    mask, dims = _taken_mask(x, 1, whole), (False,) + x.dims[1:]
    if im is not None:
        im = im.view((B, 1) + (1,) * (data.dim() - 2))
        mask = canon_mask(im if mask is None else mask & im, data.shape, dims)
    return new(data, mask, dims)


def _taken_mask(x, p, whole):
    """The mask of ``x`` indexed along ``p`` (size 1 there): along a dynamic
    ``p``, the examples (and entries of other dims) that have an entry;
    None when every example does (``whole``) and the mask has no other dim."""
    mask = x._mask
    if mask is None or not x.dims[p - 1]:
        return mask
    if whole and x._present is None and mask.shape[1:].numel() == mask.size(p):
        return None
    return mask.any(p, keepdim=True)


def _checked(x, p, index, op, im=None, negative=True):
    """``index`` (long ``(B, K)``) into dim ``p`` of ``x``, checked and
    wrapped: raises IndexError for an entry out of range that is real
    (``im``: a bool ``(B, K)``, or None: all) in an active lane of an
    example that holds a value; negative entries count from each example's
    end (with ``negative``); the unchecked ones land somewhere in their
    example.  Returns the index, the bool ``(B, 1)`` or ``(B, K)`` of the
    unchecked entries (None: none), whose results must be 0, and whether
    every example holds a value."""
    lo, hi, size, absent = _limits(x, p, negative)
    fail_outside(index, lo, hi, lambda k: IndexError(
        f"{op}: index {int(index[k])} is out of range for dimension {p} of example {k[0]}, "
        f"which has size {int(x._lengths(p)[k[0]])}"),
        f"{op}: an index is out of range for dimension {p}", lambda: with_lanes(im, 2))
    zero = absent
    lanes = _lanes.active_lanes()
    if lanes is not None:
        dormant = derived(lanes, ("dormant column",), _dormant)
        zero = dormant if zero is None else zero | dormant
    if im is not None:
        zero = ~im if zero is None else zero | ~im
    return index.remainder(size), zero, absent is None


_LONG = torch.iinfo(torch.long)


def _limits(x, p, negative):
    """``(lo, hi, size, absent)`` for indexing ``x`` along ``p``: the range
    a (checked) index must lie in, each example's size to wrap indices by
    (at least 1), and the examples that hold no value (``(B, 1)``, or None:
    every example holds one), whose indices are never out of range.
    ``(B, 1)`` Tensors, or ints when ``x`` has no mask; kept on the mask
    while it is unchanged (masks are shared by the values of a batch)."""
    n = x._data.size(p)
    if x._present is not None or x._sizes is not None:  # some example is empty: not kept
        present = lanes_present(x, False)
        return _bounds(x._lengths(p)[:, None], None if present is None else present[:, None],
                       negative)
    if x._mask is None:
        return -n if negative else 0, n - 1, max(n, 1), None
    return derived(x._mask, ("limits", p, n, negative), _mask_limits, p, n, negative)


def _mask_limits(mask, p, n, negative):
    B, m = mask.size(0), mask.size(p)
    if m == 1:  # a static dim: n entries where the example holds a value
        return _bounds(mask.reshape(B, mask.shape[1:].numel()).any(1, keepdim=True).long() * n, None, negative)
    # entries along p: (B, m), a view where the mask has no other dims
    rows = mask.reshape(B, m) if mask.shape[1:].numel() == m else \
        mask.movedim(p, 1).reshape(B, m, mask.numel() // max(B * m, 1)).any(2)
    return _bounds(rows.sum(1, keepdim=True), None, negative)


def _bounds(length, present, negative):
    """The limits of ``_limits`` from each example's ``length`` ``(B, 1)``
    and which examples hold a value (``present``; None: those with an
    entry).  When all do (read on the host, on CPU eagerly), the bounds
    are each example's own and no example is absent."""
    eager = length.is_cpu and not torch.compiler.is_compiling()
    rows = length > 0 if present is None else present
    if eager and bool(rows.all()):
        lo = -length if negative else torch.zeros_like(length)
        return lo, length - 1, length if present is None else length.clamp(min=1), None
    lo = torch.where(rows, -length if negative else 0, _LONG.min)  # any index is fine there
    hi = torch.where(rows, length - 1, _LONG.max)
    return lo, hi, length.clamp(min=1), ~rows


def _dormant(lanes):
    return ~lanes.view(-1, 1)


def _per_example_index(x, p, idx, op, negative=True):
    """``x`` indexed along ``p`` by a MaskedBatch of per-example ints
    (advanced indexing: the index's per-example shape replaces dim ``p``)."""
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise IndexError(f"{op}: a MaskedBatch index must hold integers, got {idx.dtype}")
    data = idx.padded_data.long()
    shape = (1,) + tuple(data.shape[1:])
    m = idx._mask
    im = None if m is None else m.unsqueeze(1)
    return take(x, p, data.reshape(data.size(0), data.shape[1:].numel()), shape, op, im,
                (False,) + idx.dims, negative)


def _shared_index(x, p, t, op, negative=True):
    """``x`` indexed along ``p`` by one integer Tensor shared by every example."""
    if t.dtype == torch.bool:
        raise NotImplementedError(
            f"{op}: a boolean mask beside other indices is not supported; index with the mask "
            f"alone, x[mask], or use torch.where(mask, x, fill) to keep the shape")
    if not x.dims[p - 1] or x._mask is None:
        idx = (slice(None),) * p + (t,)
        mask = x._mask
        if mask is not None:
            mask = mask.reshape(mask.shape[:p] + (1,) * t.dim() + mask.shape[p + 1:])
        return new(x.padded_data[idx], mask, x.dims[:p - 1] + (False,) * t.dim() + x.dims[p:])
    flat = t.reshape(1, -1).expand(x.padded_data.size(0), -1)
    return take(x, p, flat, tuple(t.shape), op, negative=negative)


def _int_index(x, p, i, op):
    if x.dims[p - 1] and x._mask is not None:
        if 0 <= i < x.padded_data.size(p):
            return _select_real(x, p, i, op)
        index = torch.full((x.padded_data.size(0), 1), i, dtype=torch.long, device=x.padded_data.device)
        return take(x, p, index, (), op)
    mask = x._mask
    if mask is not None:
        mask = derived(mask, ("select", p, 0), T.select, p, 0)
    return new(x.padded_data.select(p, i), mask, x.dims[:p - 1] + x.dims[p:])


def _selected(mask, p, i):
    """``mask`` at entry ``i`` of dim ``p``; None where every entry there is
    real (read on the host, on CPU eagerly), so the result pays for no mask."""
    m = mask.select(p, i)
    if m.is_cpu and not torch.compiler.is_compiling() and bool(m.all()):
        return None
    return m


def _holds(mask, p, i):
    """Whether every example of prefix ``mask`` that has entry 0 along
    dim ``p`` has entry ``i`` (reads the answer on the host)."""
    return torch.equal(mask.select(p, 0), mask.select(p, i))


def _select_real(x, p, i, op):
    """``x[..., i]`` along dynamic dim ``p`` for ``i >= 0``: entry ``i`` of
    every example sits at padded position ``i``, so a select does it (no
    gather), and the mask there is the result's; a present example shorter
    than ``i + 1`` raises."""
    mask = x._mask
    m = derived(mask, ("select", p, i), _selected, p, i)
    out = new(x.padded_data.select(p, i), m, x.dims[:p - 1] + x.dims[p:])
    if m is None:  # every example has entry i
        return out
    if x._present is None and m.is_cpu and not torch.compiler.is_compiling():
        # the masks are prefixes: every example (in the active lanes) that
        # has entry 0 has entry i unless their masks differ (checked once per mask)
        real = real_mask(x)
        if derived(real, ("holds", p, i), _holds, p, i):
            return out
    present = lanes_present(x)
    real = m if m.numel() == m.size(0) else m.reshape(m.size(0), -1).any(1)
    real = real.reshape(-1)
    bad = ~real if present is None else present & ~real
    fail_if(bad, lambda k: IndexError(
        f"{op}: index {i} is out of range for dimension {p} of example {k[0]}, which has size "
        f"{int(x._lengths(p)[k[0]])}"), f"{op}: an index is out of range for dimension {p}")
    return out


def _bound(v, default, length):
    if v is None:
        return default
    v = torch.as_tensor(int(v), device=length.device)
    return torch.where(v < 0, (length + v).clamp(min=0), torch.minimum(v, length))


def _slice(x, p, s, op):
    step = 1 if s.step is None else int(s.step)
    if step <= 0:
        raise ValueError(f"{op}: slice step must be positive (as in PyTorch); use x.flip(d) to reverse")
    if not x.dims[p - 1] or x._mask is None:
        return new(x.padded_data[(slice(None),) * p + (s,)], x._mask, x.dims)
    length = x._lengths(p)
    start = _bound(s.start, torch.zeros_like(length), length)
    stop = _bound(s.stop, length, length)
    count = ((stop - start + step - 1) // step).clamp(min=0)
    if s.start is None or int(s.start) >= 0:  # the same start for every example
        data = x.padded_data[(slice(None),) * p + (slice(s.start, None, step),)]
    else:
        K = int(count.max())
        pos = start[:, None] + torch.arange(K, device=length.device) * step
        valid = torch.arange(K, device=length.device) < count[:, None]
        data = gather_line(x.padded_data, p, torch.where(valid, pos, torch.zeros_like(pos)))
        view = [length.size(0)] + [1] * (p - 1) + [K] + [1] * (x.padded_data.dim() - p - 1)
        data = torch.where(valid.view(view), data, torch.zeros((), dtype=data.dtype, device=data.device))
    K = data.size(p)
    prefix = torch.arange(K, device=length.device) < count[:, None]
    prefix = prefix.view([length.size(0)] + [1] * (p - 1) + [K] + [1] * (x.padded_data.dim() - p - 1))
    mask = prefix & x._mask.any(p, keepdim=True)
    present = sizes = None
    if x._present is not None or s.start not in (None, 0) or s.stop is not None and int(s.stop) <= 0:
        # an example left with no entries (x[:, 1:] of a length-1 one) is present
        lengths = {i: count if i == p else x._lengths(i)
                   for i in range(1, data.dim()) if x.dims[i - 1]}
        present, sizes = lengths_presence(lengths, x)
    return new(data, canon_mask(mask, data.shape, x.dims), x.dims, present=present, sizes=sizes)
