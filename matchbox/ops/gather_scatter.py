"""gather, index_select, take_along_dim, scatter/scatter_add/scatter_reduce,
index_add, nonzero: per example, through the gather core (index_core.py)
(an index means what it means for one example; out-of-range indices raise
only for real entries of active lanes; results are masked where not real).
"""
import torch

from ..core import mask_from_lengths, storage_dim
from ._registry import (_pad_dim, canon_mask, check_same_lengths, fail_if, is_mb,
                        lengths_presence, new, norm_dim, real_mask, register_distinct)
from .index_core import _in_range, _per_example_index, _shared_index, take
from .shape import _as_batch, lanes_present

T = torch.Tensor

__all__ = ["gather", "index_select", "take_along_dim", "scatter", "scatter_add",
           "scatter_reduce", "index_add", "nonzero"]


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
