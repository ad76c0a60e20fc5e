"""Indexing: ``x[...]``, ``x[...] = v``, select, narrow, gather, index_select,
take_along_dim, scatter/scatter_add/scatter_reduce, index_add, nonzero.
(A boolean mask, ``x[x > 0]``: boolean_index.py.)

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

from .. import _lanes
from ..core import MaskedBatch, derived, mask_from_lengths, squeezed, storage_dim, uncut
from ._registry import (_pad_dim, align, canon_mask, check_same_lengths, fail_if, fail_outside,
                        is_mb, lengths_presence, new, norm_dim, real_mask, register_distinct,
                        with_lanes)
from .shape import _as_batch, _unsqueeze, gather_line, lanes_present

T = torch.Tensor


# ------------------------------------------------------------------ the gather core
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
    data = gather_line(uncut(x), p, index)
    if zero is not None:
        data = data.masked_fill(zero.expand_as(index).reshape(
            [B] + [1] * (p - 1) + [index.size(1)] + [1] * (data.dim() - p - 1)), 0)
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


def _take_one(x, i, op):
    """``x[:, i]`` with one int per example (``i``: ``(B,)``), as ``take``
    gives it with its Python overhead cut: ``(B, 1, ...)``."""
    B = i.size(0)
    index, zero, whole = _checked(x, 1, i.view(B, 1), op)
    data = gather_line(uncut(x), 1, index)
    if zero is not None:
        data = data.masked_fill(zero.view((B, 1) + (1,) * (data.dim() - 2)), 0)
    return new(data, _taken_mask(x, 1, whole), (False,) + x.dims[1:])


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
        f"{op}: an index is out of range for dimension {p}", with_lanes(im, 2))
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
    if len(advanced) > 1:
        raise NotImplementedError(
            "indexing a MaskedBatch with more than one Tensor/MaskedBatch index is not supported; "
            "index one dimension at a time (x[:, i][:, j])")
    return items


@register_distinct(T.__getitem__)
def getitem(x, index):
    if not is_mb(x):
        return _index_shared_tensor(x, index)
    op = "x[...]"
    if type(index) is tuple and len(index) == 2 and index[0] == slice(None) and x._data.dim() > 1:
        i = index[1]  # the common x[:, i]: an int, or one int per example
        if type(i) is int:
            return _int_index(x, 1, i, op)
        if type(i) is MaskedBatch and not i.dims and i._mask is None and i._bdim == 0 \
                and i._present is None and i.dtype in _INTS:
            return _take_one(x, i._data.long(), op)
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
        raise NotImplementedError(
            "indexing a plain Tensor with a MaskedBatch is supported only as table[idx] or "
            "table[idx, ...] (the per-example index first, basic indices after)")
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


# ------------------------------------------------------------------ gather / index_select
@register_distinct(torch.gather, T.gather)
def gather(input, dim, index, *, sparse_grad=False):
    """``torch.gather`` per example; the result has the index's per-example
    shape and mask."""
    ref = index if is_mb(index) else input
    x = _as_batch(input, ref, "gather")
    d = norm_dim(x, dim, "gather")
    if is_mb(index):
        ix, im, dims = index.padded_data.long(), real_mask(index), index.dims
        idx_b = index
    else:
        ix = _as_batch(index, x, "gather").padded_data.long()
        im, dims, idx_b = None, (False,) * (ix.dim() - 1), None
    if ix.dim() != x.padded_data.dim():
        raise ValueError(f"gather: index examples have {ix.dim()} dims, input examples {x.padded_data.dim()}")
    B = x.padded_data.size(0)
    present = lanes_present(x)
    for j in range(1, ix.dim()):
        if j != d:
            li = idx_b._lengths(j) if idx_b is not None else torch.full_like(x._lengths(j), ix.size(j))
            lx = x._lengths(j)
            over = li > lx if present is None else (li > lx) & present
            fail_if(over, lambda _: ValueError(f"gather: index is larger than input along "
                                               f"dimension {j} ({li.tolist()} vs {lx.tolist()})"),
                    f"gather: index is larger than input along dimension {j}")
    length = x._lengths(d).view([B] + [1] * (ix.dim() - 1))
    ix, keep = _in_range(ix, length, present, im, "gather", d)
    data = x.padded_data
    grow = [max(0, ix.size(j) - data.size(j)) for j in range(ix.dim())]
    if any(g for j, g in enumerate(grow) if j != d):
        from ._registry import _pad_dim
        for j in range(1, ix.dim()):
            if j != d and grow[j]:
                data = _pad_dim(data, j, ix.size(j))
    out = torch.gather(data, d, ix, sparse_grad=sparse_grad)
    if keep is not None:
        out = torch.where(keep, out, torch.zeros((), dtype=out.dtype, device=out.device))
    mask = None if idx_b is None else idx_b._mask
    lp = lanes_present(x, False)
    if lp is not None:
        lp = lp.view([B] + [1] * (ix.dim() - 1))
        mask = lp if mask is None else mask & lp
    return new(out, canon_mask(mask, out.shape, dims), dims)


def _vector(index, op):
    """Whether per-example ``index`` is a vector ``(k,)`` per example (else
    one int); anything else raises, as torch does for one example."""
    n = index.padded_data.dim()
    if n == 2 and index._bdim is None:
        return True
    if n != 1:
        raise ValueError(f"{op}: the index must be 0-D or 1-D per example; got per-example "
                         f"shape {tuple(index.maxsize())}")
    return False


@register_distinct(torch.index_select, T.index_select)
def index_select(input, dim, index):
    """``torch.index_select`` per example: ``index`` a 1-D Tensor shared by
    every example, or a MaskedBatch of one int per example (data ``(B,)``)
    or of a 1-D index per example, ``(k,)`` (``k`` may be dynamic)."""
    x = input if is_mb(input) else _as_batch(input, index, "index_select")
    d = norm_dim(x, dim, "index_select")
    if is_mb(index):
        if _vector(index, "index_select"):
            ix = index.padded_data.long()
            out = take(x, d, ix, (ix.size(1),), "index_select", index._mask, index.dims,
                       negative=False)
            if index._present is not None:  # an empty index: say the result's other sizes
                lengths = {j: index._lengths(1) if j == d else x._lengths(j)
                           for j in range(1, out.padded_data.dim()) if out.dims[j - 1]}
                out._present, out._sizes = lengths_presence(lengths, x)
            return out
        return _per_example_index(x, d, index, "index_select", negative=False)
    if index.dim() > 1:
        raise ValueError("index_select: index must be a 1-D Tensor")
    index = index.reshape(-1).to(x.padded_data.device)
    if x.dims[d - 1] and x._mask is not None:
        return _shared_index(x, d, index, "index_select", negative=False)
    return new(x.padded_data.index_select(d, index), x._mask, x.dims)


__all__ = ["getitem", "setitem", "take", "gather", "index_select", "select", "narrow",
           "take_along_dim", "scatter", "scatter_add", "scatter_reduce",
           "index_add", "nonzero"]


# ------------------------------------------------------------------ take_along_dim
def _size_at(t, j):
    """(padded size, dynamic?) of per-example dim ``j`` of a batch or plain Tensor."""
    if is_mb(t):
        return (1, False) if j == 0 else (t.padded_data.size(j), t.dims[j - 1] and t._mask is not None)
    return t.size(j), False


def _expand_at(t, j, n):
    data = t.padded_data if is_mb(t) else t
    data = data.expand(*[n if i == j else -1 for i in range(data.dim())])
    return new(data, t._mask, t.dims) if is_mb(t) else data


@register_distinct(torch.take_along_dim, T.take_along_dim)
def take_along_dim(input, indices, dim=None, *, out=None):
    """``gather`` after torch's broadcast of the other dims; per example a
    dim broadcasts only when it is static (a dynamic dim must meet the same
    per-example sizes)."""
    if dim is None:
        raise ValueError("take_along_dim without dim flattens each example, its leading 1 "
                         "included; pass a per-example dim >= 1")
    ref = input if is_mb(input) else indices
    d = norm_dim(ref, dim, "take_along_dim")
    if input.dim() != indices.dim():
        raise RuntimeError(f"take_along_dim: input and indices should have the same number of "
                           f"dimensions per example, got {input.dim()} and {indices.dim()}")
    for j in range(1, input.dim()):
        (si, di), (sx, dx) = _size_at(indices, j), _size_at(input, j)
        if j == d or (si == sx and not (di or dx)):
            continue
        if di or dx:
            if not (di and dx):
                raise ValueError(
                    f"take_along_dim: dimension {j} is dynamic in one operand and static in the "
                    f"other; give both the same per-example sizes there (expand_as)")
            check_same_lengths(input, j, indices, j, "take_along_dim")
        elif si == 1:
            indices = _expand_at(indices, j, sx)
        elif sx == 1:
            input = _expand_at(input, j, si)
        else:
            raise RuntimeError(f"take_along_dim: sizes {sx} and {si} of dimension {j} do not broadcast")
    return gather(input, d, indices)


# ------------------------------------------------------------------ scatter / index_add
def _scatter(op, input, dim, index, src, **kwargs):
    """``op`` (torch.scatter / scatter_add / scatter_reduce) per example.
    Index entries that are not real (padding, dormant lanes) are sent to
    one extra slot past the end of ``dim``, with 0 as their source, and the
    slot is cut off after: they write nothing, and their source entries
    get no gradient.  Real index entries must be in range of each example's
    size along ``dim``; the index must fit the input (other dims) and the
    source per example, as torch requires."""
    name = op.__name__
    ref = next(t for t in (input, index, src) if is_mb(t))
    x = _as_batch(input, ref, name)
    d = norm_dim(x, dim, name)
    idx = index if is_mb(index) else _as_batch(index, x, name)
    s = None if not isinstance(src, torch.Tensor) and not is_mb(src) else (
        src if is_mb(src) else _as_batch(src, x, name))
    B, ix = x.padded_data.size(0), idx.padded_data.long()
    if ix.dim() != x.padded_data.dim() or (s is not None and s.padded_data.dim() != ix.dim()):
        raise RuntimeError(f"{name}: index, input and src must have the same number of dims per example")
    present = lanes_present(idx)
    for j in range(1, ix.dim()):
        li = idx._lengths(j)
        for other, what in ((x, "input"), (s, "src")):
            if other is None or (other is x and j == d):
                continue
            lo = other._lengths(j)
            bad = li > lo if present is None else (li > lo) & present
            fail_if(bad, lambda _: RuntimeError(
                f"{name}: index is larger than {what} along dimension {j} "
                f"({li.tolist()} vs {lo.tolist()}) per example"),
                f"{name}: index is larger than {what} along dimension {j}")
    length = x._lengths(d).view([B] + [1] * (ix.dim() - 1))
    ix, keep = _in_range(ix, length, present, real_mask(idx), name, d)
    data, shape = x.padded_data, x.padded_data.shape
    for j in range(1, ix.dim()):
        if j != d and ix.size(j) > data.size(j):
            data = _pad_dim(data, j, ix.size(j))
    trash = data.size(d)
    data = _pad_dim(data, d, trash + 1)
    if keep is not None:
        ix = torch.where(keep, ix, trash)
    if s is not None:
        sd = s.padded_data
        for j in range(1, ix.dim()):
            sd = _pad_dim(sd, j, ix.size(j)).narrow(j, 0, ix.size(j))
        if keep is not None:
            sd = torch.where(keep, sd, torch.zeros((), dtype=sd.dtype, device=sd.device))
        src = sd
    out = op(data, d, ix, src, **kwargs)
    for j in range(1, out.dim()):
        out = out.narrow(j, 0, shape[j])
    return new(out, x._mask, x.dims)


@register_distinct(torch.scatter, T.scatter)
def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """``torch.scatter`` per example (``src`` a Tensor, batch or number)."""
    src = value if src is None else src
    return _scatter(torch.scatter, input, dim, index, src, **({} if reduce is None else {"reduce": reduce}))


@register_distinct(torch.scatter_add, T.scatter_add)
def scatter_add(input, dim, index, src):
    """``torch.scatter_add`` per example."""
    return _scatter(torch.scatter_add, input, dim, index, src)


@register_distinct(torch.scatter_reduce, T.scatter_reduce)
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """``torch.scatter_reduce`` per example."""
    return _scatter(torch.scatter_reduce, input, dim, index, src, reduce=reduce,
                    include_self=include_self)


@register_distinct(torch.index_add, T.index_add)
def index_add(input, dim, index, source, *, alpha=1):
    """``torch.index_add`` per example as a ``scatter_add``: the 1-D index (a
    Tensor shared by every example, or a MaskedBatch of one int or one
    vector ``(k,)`` per example) spread over ``source``'s entries along
    ``dim``."""
    ref = input if is_mb(input) else source
    d = norm_dim(ref, dim, "index_add")
    src = source if is_mb(source) else _as_batch(source, ref, "index_add")
    if is_mb(index):
        ix = index.padded_data if _vector(index, "index_add") else index.padded_data[:, None]
        k = index.size_as_tensor(0).padded_data if ix is index.padded_data else 1
        if index._mask is not None:  # (padding entries index row 0: their source is not real)
            ix = torch.where(index._mask.reshape(ix.shape[0], -1), ix, 0)
    else:
        if index.dim() != 1:
            raise ValueError("index_add: index must be a 1-D Tensor")
        ix, k = index.to(src.padded_data.device)[None], index.numel()
    lens = src._lengths(d)
    fail_if(lens != k, lambda _: RuntimeError(
        f"index_add: source has per-example sizes {lens.tolist()} along dimension {d} but the "
        f"index has {k if isinstance(k, int) else k.tolist()} entries"),
        f"index_add: source and index sizes differ along dimension {d}")
    K = ix.size(1)
    view = [ix.size(0)] + [1] * (src.padded_data.dim() - 1)
    view[d] = K
    ix = ix.long().view(view).expand(src.padded_data.shape[:d] + (K,) + src.padded_data.shape[d + 1:])
    src = new(src.padded_data.narrow(d, 0, K), src._mask if src._mask is None or src._mask.size(d) == 1
              else src._mask.narrow(d, 0, K), src.dims)
    return scatter_add(input, d, new(ix, src._mask, src.dims), src if alpha == 1 else src * alpha)


# ------------------------------------------------------------------ nonzero / argwhere
@register_distinct(torch.nonzero, T.nonzero, torch.argwhere, T.argwhere)
def nonzero(input, *, out=None, as_tuple=False):
    """The indices of each example's non-zero real entries: per example
    ``(N, ndim)`` (``ndim`` counts its batch-of-one dimension, if any, whose
    index is 0), as torch gives, with ``N`` dynamic.  The result has no
    batch-of-one dimension (``batch_dim`` None): storage ``(B, N, ndim)``."""
    if out is not None:
        raise NotImplementedError("nonzero: the out= argument is not supported on a MaskedBatch")
    x = input
    B, n = x.padded_data.size(0), x.dim()
    hit = x.padded_data != 0
    m = real_mask(x)
    rows = (hit if m is None else hit & m).nonzero()
    counts = torch.bincount(rows[:, 0], minlength=B)
    N = int(counts.max()) if B else 0
    pos = torch.arange(rows.size(0), device=rows.device) - (counts.cumsum(0) - counts)[rows[:, 0]]
    data = rows.new_zeros(B, N, n)
    # each example's dim u is storage column storage_dim(u) of rows (0: its batch-of-one, index 0)
    cols = [storage_dim(x, u) for u in range(n)]
    data[rows[:, 0], pos] = torch.where(torch.tensor(cols, device=rows.device) == 0, 0,
                                        rows[:, cols])
    present, _ = lengths_presence({1: counts}, x)  # no non-zero entry: present, (0, ndim)
    if as_tuple:
        mask = mask_from_lengths({1: counts}, (B, N), (True,))
        return tuple(new(data[..., i], mask, (True,), bdim=None, present=present) for i in range(n))
    return new(data, mask_from_lengths({1: counts}, data.shape, (True, False)), (True, False), bdim=None,
               present=present)
