"""Indexing: ``x[...]``, ``x[...] = v``, select, narrow, and the gather core
they share with gather_scatter.py (gather, index_select, take_along_dim,
scatter, index_add, nonzero).  (A boolean mask, ``x[x > 0]``: boolean_index.py.)

Every index means what it means for one example:

- ``x[:, i]`` with an int: on a static dim a plain select; on a dynamic dim a
  negative ``i`` counts from each example's own end (``len_b + i``);
- slices on a dynamic dim use each example's own length for negative or
  missing bounds (``x[:, :-1]``, ``x[:, 1:]``, ``x[:, -3:]``); a negative
  start shifts each example differently, so it is a gather.  A step must be
  positive (as in PyTorch; use ``flip`` to reverse);
- a MaskedBatch of per-example ints ``idx`` (each example a Tensor with its
  leading 1, e.g. shape ``(1,)``) is PyTorch advanced indexing per example:
  ``x[:, idx]`` has per-example shape ``(1, 1, ...)`` (the index's shape
  replaces the indexed dim);
- ``None`` and ``...`` as usual.  Dimension 0 (each example's leading 1) can
  only be kept (``:``) or follow a ``None``.

Out-of-range indices raise ``IndexError`` only for entries that are real and
in active lanes (``real_mask``); padding and dormant lanes may hold anything
and are clamped.  Results of a gather are masked with ``where`` at entries
that are not real, so gradients arriving there never reach real inputs.

``x[...] = v`` replaces ``x.padded_data`` out of place (``x.padded_data`` becomes a new
Tensor; earlier views of it do not see the write) and writes only the real
entries of active lanes.
"""
import torch

from ..core import MaskedBatch, squeezed
from ._registry import (align, canon_mask, fail_if, is_mb, new, norm_dim, real_mask,
                        register_distinct, with_lanes)
from .index_core import (_checked, _in_range, _INTS, _int_index, _per_example_index,
                         _shared_index, _slice, _take_one, take)
from .shape import _unsqueeze, lanes_present

T = torch.Tensor


# ------------------------------------------------------------------ x[...]
def _items(index, n):
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for it in index:
        if isinstance(it, bool) or (isinstance(it, torch.Tensor) and it.dtype == torch.bool):
            raise NotImplementedError(
                "a boolean mask beside other indices (x[:, mask]) is not supported; index with "
                "the mask alone, x[mask] (each example's entries under True), or use "
                "torch.where(mask, x, fill) to keep the shape")
        if isinstance(it, torch.Tensor) and it.dim() == 0 and not it.is_floating_point():
            it = int(it)
        elif isinstance(it, (list, range)):
            it = torch.as_tensor(list(it), dtype=torch.long)
        items.append(it)
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if used > n:
        raise IndexError(f"too many indices ({used}) for examples with {n} dims")
    ell = [k for k, it in enumerate(items) if it is Ellipsis]
    if len(ell) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ell:
        k = ell[0]
        items[k:k + 1] = [slice(None)] * (n - used)
    advanced = [it for it in items if isinstance(it, torch.Tensor) or is_mb(it)]
    # one int per example at each of several dims (R[i, j] in a DP table)
    # selects as ints do, one dim at a time
    if len(advanced) > 1 and not all(is_mb(it) and _one_int(it) for it in advanced):
        raise NotImplementedError(
            "indexing a MaskedBatch with more than one Tensor/MaskedBatch index is not supported; "
            "index one dimension at a time (x[:, i][:, j])")
    return items


def _one_int(i):
    return not i.dims and i._bdim is None and i.dtype in _INTS


@register_distinct(T.__getitem__)
def getitem(x, index):
    if not is_mb(x):
        return _index_shared_tensor(x, index)
    op = "x[...]"
    if type(index) is tuple and len(index) == 2 and index[0] == slice(None) and x._data.dim() > 1:
        i = index[1]  # the common x[:, i]: an int, or one int per example
        if type(i) is int:
            return _int_index(x, 1, i, op)
        if type(i) is MaskedBatch and not i.dims and i._present is None and i.dtype in _INTS \
                and (i._mask is None or i._mask.dim() == 1):
            j = i._data if i._data.dtype == torch.long else i._data.long()
            y = _take_one(x, j, op, i._mask)
            return y if i._bdim == 0 else squeezed(y, 1)  # (an int per example drops the dim)
    items = _items(index, x._data.dim())
    p = 0
    for it in items:
        if p == 0:
            if it is None:
                x = _unsqueeze(x, 1)
            elif not (isinstance(it, slice) and len(range(*it.indices(1))) == 1):
                raise ValueError(
                    f"{op}: index {it!r} on dimension 0 would change each example's leading 1 "
                    f"(the batch dimension); keep it with ':' and index per-example dims, "
                    f"e.g. x[:, i]")
            p = 1
        elif it is None:
            x = _unsqueeze(x, p)
            p += 1
        elif isinstance(it, int):
            x = _int_index(x, p, it, op)
        elif isinstance(it, slice):
            x = _slice(x, p, it, op)
            p += 1
        elif is_mb(it):
            x = _per_example_index(x, p, it, op)
            if it._bdim is None:  # no leading 1: one int per example (x[:, n - 1]), or (k,)
                x = squeezed(x, p)
                p += len(it.dims)
            else:
                p += it.padded_data.dim()
        elif isinstance(it, torch.Tensor):
            if it.is_floating_point():
                raise IndexError(f"{op}: tensors used as indices must be integer, got {it.dtype}")
            x = _shared_index(x, p, it.to(x.padded_data.device), op)
            p += it.dim()
        else:
            raise TypeError(f"{op}: unsupported index {it!r}")
    return x


def _index_shared_tensor(t, index):
    """A plain Tensor (shared by every example) indexed by a per-example
    MaskedBatch in front: ``table[idx]`` or ``table[idx, ...]``."""
    items = index if isinstance(index, tuple) else (index,)
    idx, rest = items[0], items[1:]
    if not is_mb(idx) or any(is_mb(i) or isinstance(i, torch.Tensor) for i in rest):
        out = _points_of_shared_tensor(t, items)
        if out is not None:
            return out
        raise NotImplementedError(
            "indexing a plain Tensor with a MaskedBatch is supported as table[idx] or "
            "table[idx, ...] (the per-example index first, basic indices after), and with one "
            "int per example at any positions (transitions[tags[i + 1], tags[i]])")
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise IndexError(f"a MaskedBatch index must hold integers, got {idx.dtype}")
    n = t.size(0)
    raw = idx.padded_data.long()
    i = torch.where(raw < 0, raw + n, raw)
    m = real_mask(idx)
    sizes = torch.full((i.size(0),) + (1,) * (i.dim() - 1), n, device=i.device)
    i, _ = _in_range(i, sizes, None, m, "indexing a shared Tensor", 0, shown=raw)
    data = t[(i,) + tuple(rest)]
    if m is not None:
        keep = m.expand(i.shape).reshape(i.shape + (1,) * (data.dim() - i.dim()))
        data = torch.where(keep, data, torch.zeros((), dtype=data.dtype, device=data.device))
    dims = idx.dims + (False,) * (data.dim() - i.dim())
    mask = idx._mask
    if mask is not None:
        mask = mask.reshape(mask.shape + (1,) * (data.dim() - i.dim()))
    # per example the index's dims come first: its batch-of-one dim (or none,
    # for one int per example: table[tok.item()] is (d,)) stays where it was
    return new(data, mask, dims, bdim=idx._bdim)


def _points_of_shared_tensor(t, items):
    """``t[k0, k1, ...]`` of a plain Tensor where each per-example index is
    one int per example (``transitions[tags[i + 1], tags[i]]``) and the
    others are ints, slices, None or ``...``: one advanced index of ``(B,)``
    rows per indexed dim (ints too, so torch puts the examples' dim in one
    place), moved to the front.  None where it does not apply."""
    points = [it for it in items if is_mb(it)]
    if not points or not all(not p.dims and p._bdim is None and p.dtype in _INTS for p in points) \
            or any(isinstance(it, torch.Tensor) and not is_mb(it) for it in items):
        return None
    B = points[0].padded_data.size(0)
    if any(p.padded_data.size(0) != B for p in points):
        return None
    ell = [k for k, it in enumerate(items) if it is Ellipsis]
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if len(ell) > 1 or used > t.dim():
        return None
    if ell:
        items = items[:ell[0]] + (slice(None),) * (t.dim() - used) + items[ell[0] + 1:]
    real = None   # (B,): the examples whose every index is real
    for p in points:
        if p._mask is not None:
            real = p._mask.reshape(B) if real is None else real & p._mask.reshape(B)
    index, dim, first, present = [], 0, None, None
    for it in items:
        if is_mb(it) or type(it) is int:
            n = t.size(dim)
            raw = it.padded_data.long() if is_mb(it) else torch.full((B,), it, device=t.device)
            i, _ = _in_range(torch.where(raw < 0, raw + n, raw), torch.full((B,), n, device=t.device),
                             it._present if is_mb(it) else None, real,
                             "indexing a shared Tensor", dim, shown=raw)
            if first is None:
                first = len([x for x in index if not isinstance(x, torch.Tensor)])
            elif not isinstance(index[-1], torch.Tensor):
                first = 0   # advanced indices apart: torch puts their dim first
            if is_mb(it) and it._present is not None:
                present = it._present if present is None else present & it._present
            index.append(i.to(t.device))
            dim += 1
        else:
            index.append(it)
            dim += it is not None
    data = t[tuple(index)].movedim(first, 0)
    mask = None
    if real is not None:
        mask = real.reshape((B,) + (1,) * (data.dim() - 1))
        data = torch.where(mask, data, torch.zeros((), dtype=data.dtype, device=data.device))
    out = new(data, mask, (False,) * (data.dim() - 1), bdim=None)
    if present is not None:
        out._present = present
    return out


# ------------------------------------------------------------------ x[...] = v
@register_distinct(T.__setitem__)
def setitem(x, index, value):
    """``x[index] = value`` per example, out of place on ``x.padded_data``; only
    real entries of active lanes are written."""
    if not is_mb(x):
        raise NotImplementedError(
            "assigning per-example values (a MaskedBatch) into a plain Tensor would write every "
            "example into the same shared Tensor; make the target a MaskedBatch, e.g. "
            "out = x.batch_zeros(...), then out[:, i] = v")
    data = _put_at(x, index, value)
    x.padded_data = put(x, index, value, "x[...] = v") if data is None else data


def _put_at(x, index, value):
    """``x[:, i] = value`` with one int ``i`` per example along dim 1 and a
    number or a batch whose dims are static (``stack[:, sp] = bp``): one
    ``scatter`` of the checked index; the lanes that do not write (dormant,
    or holding no value or no real ``value``) scatter their old entry.  None
    where it does not apply (``put`` then does it)."""
    i = index[1] if type(index) is tuple and len(index) == 2 and index[0] == slice(None) else None
    if not (is_mb(i) and not i.dims and i._mask is None and i._bdim == 0 and i._present is None
            and not i.dtype.is_floating_point and i.dtype != torch.bool) \
            or x._present is not None or x._sizes is not None or x._data.dim() < 2 \
            or x._mask is not None and x._mask.shape[2:].numel() != 1:
        return None
    d = x.padded_data
    B, rest = d.size(0), d.shape[2:]
    shape = (B, 1) + tuple(rest)
    if is_mb(value):
        if value._bdim != 0 or value._present is not None or any(value.dims) \
                or value.dim() > len(shape):
            return None
        v = value.padded_data
        v = v.reshape((B,) + (1,) * (len(shape) - value.dim()) + v.shape[1:])
        if any(a != 1 and a != b for a, b in zip(v.shape, shape)):  # does not broadcast to it
            return None
        v = v.to(d.dtype).expand(shape)
    elif type(value) in (bool, int, float):
        v = value
    else:
        return None
    wrapped, zero, _ = _checked(x, 1, i._data.long().view(B, 1), "x[...] = v")
    if is_mb(value) and value._mask is not None:
        unreal = ~value._mask.view(B, 1)
        zero = unreal if zero is None else zero | unreal
    wrapped = wrapped.view((B, 1) + (1,) * len(rest)).expand(shape)
    if zero is not None:  # these lanes write their old entry back
        v = torch.where(zero.view((B, 1) + (1,) * len(rest)), d.gather(1, wrapped), v)
    return d.scatter(1, wrapped, v)


def put(x, index, value, op, accumulate=False, place=None):
    """``x.padded_data`` with ``value`` put (or, with ``accumulate``, added)
    at ``x[index]``, per example; only real entries of active lanes are
    written.  The entries are found by indexing their flat positions.
    ``place(sel, value)``: ``value`` lined up with the selected entries
    ``sel`` (placement.SetItem's, for operands not batch-first)."""
    d = x.padded_data
    pos = torch.arange(d.numel(), device=d.device).view(d.shape)
    sel = getitem(new(pos, x._mask, x.dims), index)
    if place is not None:
        value = place(sel, value)
    if not isinstance(value, torch.Tensor) and not is_mb(value):
        value = torch.as_tensor(value, dtype=d.dtype, device=d.device)
    (spos, v), mask, _ = align((sel, value), op)
    shape = torch.broadcast_shapes(spos.shape, v.shape)
    if tuple(shape) != tuple(spos.shape):
        raise ValueError(f"{op}: a value of padded shape {tuple(v.shape)} does not fit "
                         f"the indexed entries' padded shape {tuple(spos.shape)}")
    v = v.to(d.dtype).expand(shape)
    mask = with_lanes(mask, len(shape))
    if mask is None:
        where, vals = spos.reshape(-1), v.reshape(-1)
    else:
        mask = mask.expand(shape)
        where, vals = spos[mask], v[mask]
    return d.reshape(-1).index_put((where,), vals, accumulate=accumulate).view(d.shape)


# ------------------------------------------------------------------ select / narrow
@register_distinct(torch.select, T.select)
def select(x, dim, index):
    return getitem(x, (slice(None),) * norm_dim(x, dim, "select") + (int(index),))


@register_distinct(torch.narrow, T.narrow)
def narrow(x, dim, start, length):
    """Per-example narrow; on a dynamic dim every (real, active) example must
    hold ``start + length`` entries, and the result dim is static."""
    d = norm_dim(x, dim, "narrow")
    start, length = int(start), int(length)
    dims = x.dims[:d - 1] + (False,) + x.dims[d:]
    if not x.dims[d - 1] or x._mask is None:
        return new(x.padded_data.narrow(d, start, length), x._mask, dims)
    stop = start + length
    y = _slice(x, d, slice(start, stop if stop != 0 or start >= 0 else None), "narrow")
    got = y._lengths(d)
    check = lanes_present(x)
    bad = got != length if check is None else (got != length) & check
    fail_if(bad, lambda b: IndexError(f"narrow({dim}, {start}, {length}): example {b[0]} has "
                                      f"only {int(x._lengths(d)[b])} entries along dimension {d}"),
            f"narrow({dim}, {start}, {length}): an example has too few entries along dimension {d}")
    data = y.padded_data.narrow(d, 0, length) if y.padded_data.size(d) >= length else y.padded_data
    mask = y._mask.narrow(d, 0, min(length, y._mask.size(d))).all(d, keepdim=True)
    return new(data, canon_mask(mask, data.shape, dims), dims)


__all__ = ["getitem", "setitem", "take", "select", "narrow"]
