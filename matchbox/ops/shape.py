"""Shape ops: view/reshape, transpose/permute, (un)squeeze, flatten, expand,
repeat, tile, repeat_interleave, split/chunk/unbind, cat/stack, flip, roll,
diff, diagonal, cumsum/cumprod/cummax/cummin/logcumsumexp, and the
example-level helpers ``split_dim`` / ``join_dims``.

Per-example dimension ``d`` of the user's code is data dimension ``d``;
dimension 0 is each example's leading 1 (the batch in ``padded_data``).  No rule
moves, merges or drops it: an op that would (``x.t()`` on a 2-D example,
``flatten(0)``, ``view(-1)``, ``stack(seq, 0)``) raises a ValueError naming
the per-example form to use instead.

How each family keeps the contract (real data = a prefix along every
dynamic dimension):

- ops that only move or add dimensions (transpose, permute, unsqueeze,
  expand, unbind, static split) move the mask with the data, at no cost;
- ops that put entries one after another along a dynamic dimension (cat,
  stack with a dynamic new dimension, flatten / join_dims of a group whose
  later dims are dynamic, repeat of a dynamic dim) work on the padded data
  and then *compact* it (:func:`compact`): a stable gather that moves each
  example's real entries to the front, in order.  Because it is a
  permutation, gradients of padding never reach real entries;
- view/reshape keep every dynamic dimension as a dimension of its own (the
  dims before and after it reshape among themselves).  In the size list a
  dynamic dimension is written ``-1`` or as its padded size
  ``x.maxsize(d)`` (which on a plain Tensor is its size, so the same code runs
  on both).  Merging it with others is ``flatten`` / ``join_dims``;
  splitting a static one is ``split_dim``;
- stack's new dimension is dynamic when ``dynamic=True`` or, with
  ``dynamic=None``, when the elements' lanes differ (an element with no real
  entry in a lane, e.g. appended while that lane was inactive, is absent
  for that example).  Absent elements are skipped, so an example's list is
  its present elements in order, even when an absent one comes before a
  present one;
- ops that return pieces of a dynamic dimension (unbind, split with an int
  size, chunk) give each example its own pieces, as a per-example list: as
  many as the longest example has, a piece an example does not have being a
  batch that holds no value in that lane, which the ``@batch`` runtime uses
  as the active lanes of a ``for`` iteration (``tensor_split``, whose count
  is the same for every example, runs through the general fallback);
- flip reverses each example's real prefix and roll rolls it (gathers);
  cumsum/cumprod/cummax/cummin/logcumsumexp and diff over a dynamic dim mask
  their output with ``where`` so gradients arriving at padding (possibly NaN)
  never reach real entries;
- repeat_interleave by an int repeats data and mask alike (a real prefix
  stays a prefix); diagonal of dynamic dims is a prefix of the padded
  diagonal.  An example left with no entries (diff of a length-1 example)
  is present (see ``_registry.lengths_presence``).
"""
import functools
import operator

import torch

from .. import _lanes
from ._registry import (_pad_dim, canon_mask, fail_if, is_mb, lengths_presence, neutralize, new,
                        norm_dim, real_mask, register_distinct, true_rows)
from ._gather import select_rows
from .helpers import helper
from .steps import Steps
from ..core import MaskedBatch, derived, unlabeled, relabel, storage_dim

T = torch.Tensor

__all__ = ["stack", "cat", "split_dim", "join_dims", "compact", "gather_line",
           "lanes_present"]


# ------------------------------------------------------------------ shared helpers
def lanes_present(x, active=True):
    """Bool ``(B,)``: lanes of ``x`` that hold a value (some real entry, or
    an example of length 0) and, with ``active``, are active lanes; None
    when that is every lane."""
    p = x._present
    if p is not None:
        lanes = _lanes.active_lanes() if active else None
        return p if lanes is None else p & lanes
    m = real_mask(x) if active else x._mask
    if m is None:
        return None
    return derived(m, ("lanes present",), _rows_present)  # (one Tensor per mask)


def _rows_present(m):
    if m.numel() == m.size(0):  # a lane mask (static dims): no reduction
        return m.reshape(m.size(0))
    return m.reshape(m.size(0), m.shape[1:].numel()).sum(1) > 0  # (a bool any(1) is ~5x slower on CPU)


def gather_line(t, d, index, zero=None):
    """``t`` gathered along dim ``d`` with one index line per example:
    ``index`` is ``(B, K)``; the result has size K at ``d``, and 0 where
    the bool ``zero`` (broadcastable to ``index``; None: nowhere) holds.

    Entries after ``d`` move as whole rows (one ``index_select`` over the
    ``(B * n, row)`` view: on CPU 4x faster than ``torch.gather`` with an
    index expanded over every entry, and faster backward; the gathers of
    one source share one gradient buffer, see ``_gather.py``).  On CPU,
    eagerly, the zero entries are filled in place (their positions kept on
    ``zero``: the gathers under one set of lanes share it): a masked_fill
    of the result costs up to 3x as much."""
    B, K = index.shape
    rows = d == 1 and t.dim() > 2 and t.is_contiguous()
    zeros = None
    if zero is not None and (rows or t.dim() == 2) and t.is_cpu \
            and not torch.compiler.is_compiling():
        zeros, zero = derived(zero, ("true rows", B, K), true_rows, (B, K)), None
        zeros = zeros if zeros.numel() else None
    if rows:
        out = select_rows(t, (index + _row_starts(t, B)).reshape(-1), zeros).view(
            (B, K) + t.shape[2:])
    else:
        shape = list(t.shape)
        shape[d] = K
        view = [1] * t.dim()
        view[0], view[d] = B, K
        out = torch.gather(t, d, index.view(view).expand(shape))
        if zeros is not None:  # (B, K)
            out.view(-1).index_fill_(0, zeros, 0)
    if zero is None:
        return out
    return out.masked_fill(
        zero.expand(B, K).reshape([B] + [1] * (d - 1) + [K] + [1] * (t.dim() - d - 1)), 0)


def _row_starts(t, B):
    """The first row of each example in ``t`` seen as ``(B * n, row)``:
    ``(B, 1)``, kept on ``t`` (the gathers of one source share it)."""
    n = t.size(1)
    kept = getattr(t, "_mb_row_starts", None)
    if kept is None or kept[0] != (B, n) or torch.compiler.is_compiling():
        kept = (B, n), torch.arange(0, B * n, n, device=t.device).unsqueeze(1)
        if not torch.compiler.is_compiling():
            t._mb_row_starts = kept
    return kept[1]


def compact(data, mask, d):
    """Move each example's real entries along ``d`` to the front, keeping
    their order.  ``mask`` is canonical and full size at ``d``."""
    other = [i for i in range(1, mask.dim()) if i != d]
    key = mask.any(dim=other) if other else mask
    order = torch.sort(~key, dim=1, stable=True).indices
    return gather_line(data, d, order), gather_line(mask, d, order)


def _full_mask(x, d):
    """``x``'s mask (materialized) expanded to full size along dim ``d``."""
    m = x.mask
    return m if m.size(d) == x.padded_data.size(d) else m.expand(
        *[x.padded_data.size(d) if i == d else -1 for i in range(m.dim())])


def _check_lengths(a, da, b, db, op):
    """ValueError unless ``a`` and ``b`` have the same per-example size along
    ``da`` / ``db`` in every lane where both hold real data."""
    if a._mask is b._mask and da == db:
        return
    la, lb = a._lengths(da), b._lengths(db)
    bad = la != lb
    for p in (lanes_present(a, False), lanes_present(b, False)):
        if p is not None:
            bad = bad & p
    fail_if(bad, lambda _: ValueError(
        f"{op}: per-example sizes differ along dimension {da} ({la.tolist()}) and "
        f"dimension {db} ({lb.tolist()}) of the inputs; they must match in every example"),
        f"{op}: per-example sizes differ along dimension {da} and dimension {db} of the inputs")


def _sizes(sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = sizes[0]
    return [int(s) for s in sizes]


def _prod(xs):
    return functools.reduce(operator.mul, xs, 1)


def _permuted(x, perm, op):
    perm = [int(p) for p in perm]
    if perm[0] != 0:
        raise ValueError(
            f"{op} would move dimension 0, each example's leading 1 (the batch dimension of a "
            f"MaskedBatch), so the examples would no longer have a leading 1. Permute only "
            f"dimensions >= 1, e.g. x.transpose(1, 2).")
    if perm == list(range(len(perm))):
        return x
    mask = None if x._mask is None else x._mask.permute(perm)
    sizes = None if x._sizes is None else {perm.index(d): n for d, n in x._sizes.items()}
    return new(x.padded_data.permute(perm), mask, tuple(x.dims[p - 1] for p in perm[1:]), x._zero,
               present=x._present, sizes=sizes)


# ------------------------------------------------------------------ transpose / permute
@register_distinct(torch.transpose, T.transpose, torch.swapaxes, T.swapaxes, torch.swapdims, T.swapdims)
def transpose(x, dim0, dim1):
    """Swap two per-example dims; the mask moves along.  (Moving the
    batch-of-one dimension is ops/placement.py's.)"""
    n = x.padded_data.dim()
    d0, d1 = x._norm_dim(dim0), x._norm_dim(dim1)
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permuted(x, perm, f"transpose({dim0}, {dim1})")


@register_distinct(torch.permute, T.permute)
def permute(x, *dims):
    return _permuted(x, [x._norm_dim(d) for d in _sizes(dims)], f"permute{tuple(_sizes(dims))}")


@register_distinct(torch.movedim, T.movedim, torch.moveaxis, T.moveaxis)
def movedim(x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src, dst = [x._norm_dim(s) for s in src], [x._norm_dim(d) for d in dst]
    order = [i for i in range(x.padded_data.dim()) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _permuted(x, order, "movedim")


@register_distinct(torch.t, T.t)
def t(x):
    if x.padded_data.dim() < 2:
        return x
    raise ValueError(
        "x.t() on an example with a leading 1 would move that leading 1 (the batch dimension). "
        "Use x.transpose(1, 2) or x.mT to swap per-example dimensions.")


def _mT(x):
    if x.dim() < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got "
                           f"{x.dim()}-D tensor.")
    return x.transpose(-2, -1)  # through dispatch: the batch-of-one dim may move (placement.py)


def _T(x):
    return x.permute(*reversed(range(x.dim())))


MaskedBatch.mT = property(_mT, doc="Swap the last two dims (a per-example transpose).")
MaskedBatch.T = property(_T, doc="All dims reversed, as ``Tensor.T``.")


# ------------------------------------------------------------------ (un)squeeze
def _unsqueeze(x, d, dynamic=False):
    mask = None if x._mask is None else x._mask.unsqueeze(d)
    return new(x.padded_data.unsqueeze(d), mask, x.dims[:d - 1] + (dynamic,) + x.dims[d - 1:], x._zero)


@register_distinct(torch.unsqueeze, T.unsqueeze)
def unsqueeze(x, dim):
    """A new static dim of size 1.  ``unsqueeze(0)`` is ``unsqueeze(1)``: both
    leading dims of the result have size 1 per example."""
    n = x.padded_data.dim() + 1
    if not -n <= dim < n:
        raise IndexError(f"unsqueeze: dimension {dim} out of range for examples with {n - 1} dims")
    d = dim + n if dim < 0 else dim
    return _unsqueeze(x, max(d, 1))


def _squeeze1(x, d, dim):
    if x.dims[d - 1]:
        lens, present = x._lengths(d), lanes_present(x, False)
        one = lens == 1 if present is None else (lens == 1) | ~present
        other = lens != 1 if present is None else (lens != 1) | ~present
        if bool(other.all()):
            return x
        if not bool(one.all()):
            raise ValueError(
                f"squeeze({dim}): dimension {d} is dynamic and has size 1 in some examples but "
                f"not in others ({lens.tolist()}), so the examples' results would have different "
                f"numbers of dims. Select an element instead (x[:, 0]) or keep the dim.")
        data = x.padded_data.narrow(d, 0, 1)
        mask = None if x._mask is None else x._mask.narrow(d, 0, 1).squeeze(d)
        return new(data.squeeze(d), mask, x.dims[:d - 1] + x.dims[d:], x._zero)
    if x.padded_data.size(d) != 1:
        return x
    mask = None if x._mask is None else x._mask.squeeze(d)
    return new(x.padded_data.squeeze(d), mask, x.dims[:d - 1] + x.dims[d:], x._zero)


@register_distinct(torch.squeeze, T.squeeze)
def squeeze(x, dim=None):
    if dim is None:
        raise ValueError(
            "squeeze() with no dim would also remove each example's leading 1 (the batch "
            "dimension) and, on dynamic dims, depend on each example's size; name the dims: "
            "x.squeeze(d) or x.squeeze((d1, d2))")
    dims = [dim] if isinstance(dim, int) else list(dim)
    ds = sorted({norm_dim(x, d, "squeeze") for d in dims}, reverse=True)
    for d in ds:
        x = _squeeze1(x, d, d)
    return x


# ------------------------------------------------------------------ flatten / join
def _merge(x, s, e):
    """Merge data dims ``s..e`` (1 <= s <= e) into one; compact when a dim
    after the first of the group is dynamic."""
    if s == e:
        return x
    group = x.dims[s - 1:e]
    dyn = any(group)
    dims = x.dims[:s - 1] + (dyn,) + x.dims[e:]
    data = x.padded_data.flatten(s, e)
    if x._mask is None:
        return new(data, None, dims)
    if not dyn:
        return new(data, x._mask.flatten(s, e), dims, x._zero)
    full = x._mask.expand([x.padded_data.size(i) if s <= i <= e else -1 for i in range(x.padded_data.dim())])
    mask = full.flatten(s, e)
    if not any(group[1:]):
        return new(data, mask, dims, x._zero)  # the first dim leads: real entries already a prefix
    data, mask = compact(data, mask, s)
    return new(data, mask, dims)


@register_distinct(torch.flatten, T.flatten)
def flatten(x, start_dim=0, end_dim=-1):
    s, e = x._norm_dim(start_dim), x._norm_dim(end_dim)
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    if s == 0 and e > 0:
        raise ValueError(
            f"flatten({start_dim}, {end_dim}) would merge each example's leading 1 (the batch "
            f"dimension) into the others; use x.flatten(1) (or flatten(1, {end_dim})) to keep it")
    return x if s == e else _merge(x, s, e)


def _helper_dim(dim, n, op):
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension {dim} out of range for a {n}-dim value")
    return dim + n if dim < 0 else dim


@helper
def join_dims(x, dim1, dim2):
    """Merge per-example dim ``dim2`` into ``dim1`` (the original Matchbox's
    meaning): the result has one dim, of size ``s1 * s2``, at ``dim1``'s
    place, with ``dim2`` varying fastest (``dim2`` is moved right after
    ``dim1``, then the two are flattened).  Works on Tensors and
    MaskedBatch; on a MaskedBatch either dim may be dynamic.

    ``join_dims(0, d)`` on a ``(1, ...)`` example folds ``d`` into its
    batch-of-one dimension: each example becomes ``n = s_d`` lanes, a
    batch of ``n`` along its dim 0, as in the multi-head attention of the
    Matchbox talk (``x.split_dim(-1, N).join_dims(0, -1)``: ``(1, T, D)`` to
    ``(N, T, D / N)``, one head per lane).  A MaskedBatch keeps its
    examples (``batch_size``); its storage ``(B, n, ...)`` is the ``B * n``
    lanes, example-major, and each example's dim 0 (size ``n``) is a plain
    dimension, so every op, a reduction over the lanes included, means per
    example what it means on the Tensor.  ``split_dim(0, n)`` undoes it."""
    n = x.dim()
    d1, d2 = _helper_dim(dim1, n, "join_dims"), _helper_dim(dim2, n, "join_dims")
    if d1 == d2:
        raise ValueError(f"join_dims({dim1}, {dim2}) needs two different dims of a {n}-dim value")
    order = [i for i in range(n) if i != d2]
    p = order.index(d1)
    order.insert(p + 1, d2)
    if order != list(range(n)):
        x = x.permute(*order)
    return x.flatten(p, p + 1)  # the placement adapters follow the batch-of-one dim


@helper
def split_dim(x, dim, n):
    """Split per-example dim ``dim`` of size ``s`` into ``(s // n, n)`` (the
    original Matchbox's meaning; ``s`` must be divisible by ``n``; ``n``
    varies fastest).  Works on Tensors and MaskedBatch; on a MaskedBatch
    the dim must be static.

    ``split_dim(0, n)`` undoes ``join_dims(0, d)``: ``n`` lanes per example
    ``(n, ...)`` become ``(1, n, ...)``, the 1 each example's batch-of-one
    dimension again (``o.split_dim(0, N).join_dims(-1, 1)`` in the Matchbox
    talk's multi-head attention: ``(N, T, D / N)`` back to ``(1, T, D)``)."""
    d = _helper_dim(dim, x.dim(), "split_dim")
    mb = is_mb(x)
    p = x._bdim if mb else 0
    if mb and d != p and x.dims[storage_dim(x, d) - 1]:
        raise ValueError(
            f"split_dim({dim}, {n}): dimension {d} is dynamic; only static dims can be split "
            f"(split a feature dim, or move the dynamic dim last and split another)")
    size = x.maxsize(d) if mb else x.size(d)
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"split_dim({dim}, {n!r}): n must be an int") from None
    if n <= 0 or size % n:
        raise ValueError(f"split_dim({dim}, {n}): size {size} is not divisible by {n}")
    if not mb:
        return x.unflatten(d, (size // n, n))
    if d == p:  # the batch-of-one dimension itself: (1,) -> (1, 1)
        return x.unsqueeze(d + 1)
    s = storage_dim(x, d)
    if p is None and d == 0 and size == n:
        # (n, ...) per example, with no batch-of-one dimension (n lanes made by
        # join_dims(0, d)): (1, n, ...), the 1 its batch-of-one dimension again
        return relabel(x, 0)
    data = x.padded_data
    mask = None if x._mask is None else x._mask.unsqueeze(s)
    return new(data.unflatten(s, (size // n, n)), mask, x.dims[:s - 1] + (False, False) + x.dims[s:],
               x._zero, None if p is None else p + (p > d))


@register_distinct(torch.unflatten, T.unflatten)
def unflatten(x, dim, sizes):
    d = norm_dim(x, dim, "unflatten")
    if x.dims[d - 1]:
        raise ValueError(f"unflatten: dimension {d} is dynamic; only static dims can be unflattened")
    data = x.padded_data.unflatten(d, sizes)
    k = data.dim() - x.padded_data.dim()
    mask = x._mask
    if mask is not None:
        mask = mask.reshape(mask.shape[:d] + (1,) * (k + 1) + mask.shape[d + 1:])
    return new(data, mask, x.dims[:d - 1] + (False,) * (k + 1) + x.dims[d:], x._zero)


# ------------------------------------------------------------------ view / reshape
def _view_target(x, sizes, op):
    """The padded target shape and result dims of ``x.view(*sizes)`` (sizes
    per example, with the leading 1)."""
    old = [1] + list(x.padded_data.shape[1:])
    sizes = list(sizes)
    free = [i for i, s in enumerate(sizes) if s == -1]
    if len(free) > 1:
        raise ValueError(f"{op}{tuple(sizes)}: only one dimension can be -1")
    total, known = _prod(old), _prod(s for s in sizes if s != -1)
    if free:
        if known == 0 or total % known:
            raise ValueError(f"{op}{tuple(sizes)} does not fit examples of padded shape {tuple(old)}")
        sizes[free[0]] = total // known
    elif known != total:
        raise ValueError(f"{op}{tuple(sizes)} does not fit examples of padded shape {tuple(old)}")
    if not sizes or sizes[0] != 1:
        raise ValueError(
            f"{op}{tuple(sizes)}: the per-example shape must keep the leading 1 (the batch "
            f"dimension), e.g. x.{op}(1, -1) rather than x.{op}(-1)")
    new_dims = [False] * (len(sizes) - 1)
    j = 0
    for d in range(1, len(old)):
        if not x.dims[d - 1]:
            continue
        pre = _prod(old[:d])
        cands = [i for i in range(max(j, 1), len(sizes))
                 if _prod(sizes[:i]) == pre and sizes[i] == old[d]]
        pick = [i for i in cands if i in free] or cands
        if not pick:
            raise ValueError(
                f"{op}{tuple(sizes)}: dimension {d} is dynamic (its size differs between "
                f"examples), so it must stay a dimension of its own, written as -1 or as "
                f"x.maxsize({d}). To merge it with others use flatten / join_dims; to split a "
                f"static dim use split_dim.")
        j = pick[0]
        new_dims[j - 1] = True
        j += 1
    return sizes, tuple(new_dims)


def _viewed(x, sizes, op):
    if len(sizes) == 1 and isinstance(sizes[0], torch.dtype):
        return new(x.padded_data.view(sizes[0]), x._mask, x.dims)
    sizes, dims = _view_target(x, _sizes(sizes), op)
    shape = (x.padded_data.size(0),) + tuple(sizes[1:])
    data = x.padded_data
    try:
        data = data.view(shape) if op == "view" else data.reshape(shape)
    except RuntimeError:   # an example's contiguous value in a batch that is not (the
        data = data.reshape(shape)   # layout an RNN returns its states in): a copy
    mask = x._mask
    if mask is not None:
        mask = mask.reshape([mask.size(0)] + [s if dyn else 1 for s, dyn in zip(sizes[1:], dims)])
    return new(data, mask, dims, x._zero)


@register_distinct(T.view)
def view(x, *sizes):
    """``x.view(1, ...)`` with per-example sizes; see the module docstring
    for dynamic dims."""
    return _viewed(x, sizes, "view")


@register_distinct(torch.reshape, T.reshape)
def reshape(x, *sizes):
    return _viewed(x, sizes, "reshape")


def _shape_of(other):
    return (1,) + tuple(other.padded_data.shape[1:]) if is_mb(other) else tuple(other.shape)


@register_distinct(T.view_as)
def view_as(x, other):
    return _viewed(x, (_shape_of(other),), "view")


@register_distinct(T.reshape_as)
def reshape_as(x, other):
    return _viewed(x, (_shape_of(other),), "reshape")


# ------------------------------------------------------------------ expand / repeat
def _lead(x, sizes, op):
    """Per-example sizes may add leading dims: lay them out after the batch
    dim.  Returns the widened batch and the sizes for data dims 1..."""
    extra = len(sizes) - x.padded_data.dim()
    if extra < 0:
        raise ValueError(f"{op}{tuple(sizes)}: fewer sizes than the examples' {x.padded_data.dim()} dims")
    if sizes[0] not in ((1, -1) if extra == 0 else (1,)):
        raise ValueError(f"{op}{tuple(sizes)}: the leading per-example size must stay 1 (the batch "
                         f"dimension)")
    for _ in range(extra):
        x = _unsqueeze(x, 1)
    return x, sizes[1:]


@register_distinct(T.expand)
def expand(x, *sizes, implicit=False):
    """Per-example ``expand``; a dynamic dim must be given as -1 (or its
    padded size).  To expand a size-1 dim to a dynamic size use
    ``expand_as(other)``."""
    x, rest = _lead(x, _sizes(sizes), "expand")
    for d, (s, dyn) in enumerate(zip(rest, x.dims), 1):
        if dyn and s not in (-1, x.padded_data.size(d)):
            raise ValueError(f"expand: dimension {d} is dynamic; give it as -1 (or use expand_as)")
    return new(x.padded_data.expand((x.padded_data.size(0),) + tuple(rest)), x._mask, x.dims)


@register_distinct(torch.broadcast_to, T.broadcast_to)
def broadcast_to(x, size):
    return expand(x, *size)


@register_distinct(T.expand_as)
def expand_as(x, other):
    if not is_mb(other):
        return expand(x, *other.shape)
    from ._registry import align
    if not is_mb(x):
        x = _as_batch(x, other, "expand_as")
    (dx, do), mask, dims = align((x, other), "expand_as")
    return new(dx.expand(do.shape), canon_mask(mask, do.shape, dims), dims)


@register_distinct(T.repeat)
def repeat(x, *sizes):
    """Per-example ``repeat``; along a dynamic dim each example's real
    entries are repeated (the copies are compacted together).  A count may
    be a per-example int (``h.repeat(len(kids), 1)`` under @batch) where
    the size is 1: each example gets its own size there."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    if x._bdim != 0 or any(is_mb(s) for s in sizes):
        return _repeat_per_example(x, sizes)
    x, reps = _lead(x, _sizes(sizes), "repeat")
    static = [1 if dyn else r for r, dyn in zip(reps, x.dims)]
    if any(r != 1 for r in static):
        x = new(x.padded_data.repeat([1] + static), x._mask, x.dims)
    for d, (r, dyn) in enumerate(zip(reps, x.dims), 1):
        if dyn and r != 1:
            x = _cat([x] * r, d, "repeat")
    return x


def _repeat_per_example(x, reps):
    """``repeat`` of examples with no batch-of-one dimension in front, or by
    per-example counts: on the examples' whole shape (``batch_dim`` None)."""
    y = unlabeled(x)
    if len(reps) < y.dim():
        raise ValueError(f"repeat{tuple(reps)}: fewer sizes than the examples' {y.dim()} dims")
    for _ in range(len(reps) - y.dim()):
        y = relabel(_unsqueeze(relabel(y, 0), 1), None)
    data, mask, dims = y.padded_data, y._mask, list(y.dims)
    plain = [1] + [1 if is_mb(r) or dyn else int(r) for r, dyn in zip(reps, dims)]
    if any(r != 1 for r in plain):
        data = data.repeat(plain)
    out = new(data, mask, tuple(dims), bdim=None)
    for d, (r, dyn) in enumerate(zip(reps, y.dims), 1):
        if is_mb(r):
            if dyn or data.size(d) != 1:
                raise NotImplementedError(
                    f"repeat: a per-example count for dimension {d - 1}, whose size is not 1")
            n = r.padded_data.reshape(-1).long()
            size = int(n.max()) if n.numel() else 0
            shape = list(out.padded_data.shape)
            shape[d] = size
            lengths = (torch.arange(size, device=n.device) < n[:, None])
            view = [1] * len(shape)
            view[0], view[d] = n.size(0), size
            m = lengths.view(view)
            m_shape = [shape[0]] + [s if dy or j == d else 1 for j, (s, dy) in
                                    enumerate(zip(shape[1:], out.dims), 1)]
            mask = m.expand(m_shape) if out._mask is None else \
                out._mask.expand(m_shape) & m.expand(m_shape)
            dims = list(out.dims)
            dims[d - 1] = True
            out = new(out.padded_data.expand(shape), mask, tuple(dims), bdim=None)
        elif dyn and int(r) != 1:
            out = relabel(_cat([relabel(out, 0)] * int(r), d, "repeat"), None)
    return out


# ------------------------------------------------------------------ cat / stack
def _as_batch(t, ref, op):
    """A plain Tensor (one example, leading 1) shared by every example."""
    if is_mb(t):
        return t
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: expected Tensors or MaskedBatches, got {type(t).__name__}")
    if t.dim() != ref.padded_data.dim() or t.size(0) != 1:
        raise ValueError(
            f"{op}: a plain Tensor of shape {tuple(t.shape)} next to MaskedBatches with "
            f"{ref.padded_data.dim()}-dim examples must be one shared example: same number of dims "
            f"and a leading 1")
    return new(t.expand((ref.padded_data.size(0),) + tuple(t.shape[1:])), None, (False,) * (t.dim() - 1))


def _cat(parts, d, op, dynamic=False):
    """Concatenate MaskedBatches along data dim ``d`` per example."""
    B, n = parts[0].padded_data.size(0), parts[0].padded_data.dim()
    for p in parts:
        if p.padded_data.dim() != n or p.padded_data.size(0) != B:
            raise ValueError(
                f"{op}: inputs differ in batch size or number of dims "
                f"({tuple(parts[0].padded_data.shape)} vs {tuple(p.padded_data.shape)})")
    dims = [any(p.dims[j] for p in parts) for j in range(n - 1)]
    dims[d - 1] = dims[d - 1] or bool(dynamic)
    sizes = [max(p.padded_data.size(j) for p in parts) for j in range(n)]
    for j in range(1, n):
        if j != d and dims[j - 1]:
            owner = next(p for p in parts if p.dims[j - 1])
            for p in parts:
                if p is not owner:
                    _check_lengths(owner, j, p, j, op)
    masked = any(p._mask is not None for p in parts)
    datas, masks = [], []
    for p in parts:
        data = p.padded_data
        mask = canon_mask(p.mask, data.shape, dims) if masked else None
        for j in range(1, n):
            if j != d and dims[j - 1] and data.size(j) < sizes[j]:
                data = _pad_dim(data, j, sizes[j])
                if mask is not None:
                    mask = _pad_dim(mask, j, sizes[j])
        datas.append(data)
        masks.append(mask)
    data = torch.cat(datas, d)
    dims = tuple(dims)
    if not masked:
        return new(data, None, dims)
    if not dims[d - 1]:
        same = all(m is masks[0] for m in masks)
        return new(data, masks[0] if same else functools.reduce(operator.and_, masks), dims)
    mask = torch.cat(masks, d)
    if any(p._mask is not None for p in parts[:-1]):
        data, mask = compact(data, mask, d)
    return new(data, mask, dims)


def _new_dim(dim, n, op):
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension {dim} out of range for results with {n} dims")
    dim = dim + n if dim < 0 else dim
    if dim == 0:
        raise ValueError(
            f"{op} along dimension 0 would change each example's leading 1 (the batch dimension "
            f"of a MaskedBatch); {op} along a per-example dimension instead, e.g. {op}(seq, 1)")
    return dim


@register_distinct(torch.cat, torch.concat, torch.concatenate)
def cat(sequence, dim=0, *, axis=None, out=None):
    """``torch.cat`` per example; along a dynamic dim each example's real
    entries are concatenated (``x[:len_x]`` then ``y[:len_y]``)."""
    dim = dim if axis is None else axis
    seq = list(sequence)
    ref = next((s for s in seq if is_mb(s)), None)
    if ref is None:
        return torch.cat(seq, dim) if out is None else torch.cat(seq, dim, out=out)
    if out is not None:
        raise ValueError("cat: out= is not supported for MaskedBatch")
    d = _new_dim(dim, ref.padded_data.dim(), "cat")
    parts = [_as_batch(s, ref, "cat") for s in seq]
    dynamic = False
    if not any(p.dims[d - 1] for p in parts) and _items(sequence, parts):
        dynamic = _items_differ([lanes_present(p) for p in parts], ref.padded_data)[0]
        return _joined(_cat(parts, d, "cat", dynamic), parts)
    return _cat(parts, d, "cat", dynamic)


def _joined(out, parts, pres=None):
    """``out``, the join of items each example holds some of (stack, cat of
    a per-example sequence), holds a value where an example holds any
    item (said here where an item says where it is held: keep_presence
    would want every item)."""
    if all(p._present is None for p in parts):
        return out
    pres = [lanes_present(p, False) for p in parts] if pres is None else pres
    ones = torch.ones(out._data.size(0), dtype=torch.bool, device=out._data.device)
    out._present = torch.stack([ones if p is None else p for p in pres]).any(0)
    return out


def _items(sequence, parts):
    """Are ``parts`` the items of a per-example sequence that some examples
    may lack (the steps of ``x.unbind(d)``, a per-example list's items under
    ``@batch``)?  An example then joins only the items it holds, a shorter
    sequence.  Any other value that an example lacks leaves it no value."""
    if isinstance(sequence, Steps):
        return True
    held = [p for p in parts if p._present is not None
            or p._mask is not None and p._mask.numel() == p._mask.size(0)]
    return bool(held) and all(getattr(p, "_listed", None) is not None for p in held)


@register_distinct(torch.stack)
def stack(sequence, dim=0, dynamic=None, *, out=None):
    """``F.stack(seq, dim, dynamic=None)``: stack examples' values along a
    new dim.  The new dim is dynamic if ``dynamic`` is True, or (``None``)
    when the elements' lanes differ; an element absent from a lane (no real
    entry there) is skipped for that example."""
    seq = list(sequence)
    ref = next((s for s in seq if is_mb(s)), None)
    if ref is None:
        return torch.stack(seq, dim) if out is None else torch.stack(seq, dim, out=out)
    if out is not None:
        raise ValueError("stack: out= is not supported for MaskedBatch")
    if not seq:
        raise ValueError("stack needs a non-empty sequence")
    parts = [_as_batch(s, ref, "stack") for s in seq]
    d = _new_dim(dim, ref.padded_data.dim() + 1, "stack")
    pres = [lanes_present(p, False) for p in parts]
    if dynamic is None:
        dynamic, gaps, held = _items_differ(pres, ref.padded_data)
    else:  # an example may lack an item before its last
        gaps, held = any(p is not None for p in pres[:-1]), None
    shape = ref.padded_data.shape
    if all(p.padded_data.shape == shape and not any(p.dims) for p in parts):
        return _joined(_stack_static(parts, pres, held, d, bool(dynamic), gaps), parts, pres)
    return _joined(_cat([_unsqueeze(p, d, bool(dynamic)) for p in parts], d, "stack", dynamic),
                   parts, pres)


def _items_differ(pres, like):
    """For items held in lanes ``pres`` (each a bool ``(B,)``, None for
    all): ``(dynamic, gaps, held)``: do examples hold different numbers of
    them, may an example lack an item that one after it has, and the
    ``(k, B)`` lanes if read.  One host read for the whole sequence (none
    in a compiled graph: a dynamic dim whose lengths may all be equal)."""
    gaps = any(p is not None for p in pres[:-1])
    if all(p is pres[0] for p in pres):  # (None: all) every example holds all or none
        return False, False, None
    if torch.compiler.is_compiling():
        return True, gaps, None
    held = _held(pres, like)
    same, prefix = torch.stack([(held == held[:1]).all(), (held[1:] <= held[:-1]).all()]).tolist()
    return not same, gaps and not prefix, held


def _held(pres, like):
    """``(k, B)`` bool: the lanes that hold each of k items (``pres``: each
    item's lanes, None for all)."""
    ones = torch.ones(like.size(0), dtype=torch.bool, device=like.device)
    return torch.stack([ones if p is None else p for p in pres])


def _stack_static(parts, pres, held, d, dynamic, gaps):
    """``stack`` of same-shape values with static dims (RNN states): one
    ``torch.stack``; their masks, if any, only say which lanes hold them
    (``pres``: each part's lanes, None for all; ``held``: ``_held(pres)``
    if already made).  ``gaps``: some example lacks an item that one after
    it has."""
    data = torch.stack([p.padded_data for p in parts], d)
    dims = (False,) * (d - 1) + (dynamic,) + (False,) * (data.dim() - d - 1)
    if all(p is None for p in pres):
        return new(data, None, dims)
    if held is None:
        held = _held(pres, data)
    view = [data.size(0)] + [1] * (data.dim() - 1)
    if not dynamic:
        return new(data, held.all(0).view(view), dims)
    view[d] = len(parts)
    mask = held.t().reshape(view)
    if gaps:  # move each example's items to the front
        data, mask = compact(data, mask, d)
    return new(data, mask, dims)


# ------------------------------------------------------------------ unbind / split / chunk
@register_distinct(torch.unbind, T.unbind)
def unbind(x, dim=0):
    """Per-example unbind.  Over a dynamic dim it returns ``maxsize(dim)``
    batches; the i-th has mask False in the lanes of examples shorter than
    i + 1 (the active lanes of that ``for`` iteration)."""
    d = norm_dim(x, dim, "unbind")
    dims = x.dims[:d - 1] + x.dims[d:]
    datas = x.padded_data.unbind(d)
    if x._mask is None:
        return tuple(new(t, None, dims) for t in datas)
    if not x.dims[d - 1]:
        m = x._mask.squeeze(d)
        return tuple(new(t, m, dims) for t in datas)
    steps = [new(t, m, dims) for t, m in zip(datas, x._mask.unbind(d))]
    # step i exists where an example is longer than i (an op that joins it
    # with a value the other examples hold raises: _registry.keep_presence)
    lens = x._lengths(d)
    for i, step in enumerate(steps):
        step._present = lens > i if x._present is None else x._present & (lens > i)
    return Steps(steps).of(x, d)


class Pieces(tuple):
    """The pieces of ``x.split(size, d)`` / ``x.chunk(n, d)`` along a
    dynamic dim: a per-example list, whose ``k``-th piece exists in the
    examples that have ``k + 1`` pieces or more and holds no value in the
    others.  ``@batch``'s for loop runs each example over its own pieces
    (``presences``); ``torch.cat`` / ``F.stack`` join each example's own."""

    def of(self, exists):
        self._exists = exists
        return self

    def presences(self):
        """``(B, K)`` bool: which examples hold each piece."""
        return self._exists.t()


def _pieces(x, d, starts, lens, exists):
    """The pieces of MaskedBatch ``x`` along its dynamic dim ``d``: piece
    ``k`` of example ``b`` is its entries ``starts[k, b]`` on, ``lens[k, b]``
    of them, and exists where ``exists[k, b]`` (``(K, B)`` Tensors)."""
    data, n = x.padded_data, x.padded_data.size(d)
    mask, present = _full_mask(x, d), x._present
    sizes = lens.max(1).values.clamp(min=1).tolist()
    pos = torch.arange(max(sizes), device=data.device)
    out = []
    for k, size in enumerate(sizes):
        idx = (starts[k].unsqueeze(1) + pos[:size]).clamp(max=n - 1)
        inside = (pos[:size] < lens[k].unsqueeze(1)).view(
            [idx.size(0)] + [size if i == d else 1 for i in range(1, data.dim())])
        m = gather_line(mask, d, idx) & inside & exists[k].view([-1] + [1] * (data.dim() - 1))
        p = exists[k] if present is None else exists[k] & present
        out.append(new(gather_line(data, d, idx), m, x.dims,
                       present=p if bool(((lens[k] == 0) & p).any()) else None))
    return Pieces(out).of(exists)


@register_distinct(torch.split, T.split)
def split(x, split_size_or_sections, dim=0):
    """Per-example split.  On a dynamic dim only an int size is allowed;
    each example gets its own pieces, a per-example list (``Pieces``): as
    many as the longest example has, piece ``k`` holding no value in the
    examples with fewer."""
    d = norm_dim(x, dim, "split")
    s = split_size_or_sections
    if x.dims[d - 1] and x._mask is not None:
        if not isinstance(s, int):
            raise ValueError(
                f"split: dimension {d} is dynamic, so a list of section sizes cannot add up to "
                f"every example's size; split by an int size or split a static dim")
        parts = list(zip(x.padded_data.split(s, d), _full_mask(x, d).split(s, d)))
        lens, present = x._lengths(d), x._present
        # (an example of length 0 has one empty piece)
        exists = torch.stack([(lens > i * s) | (i == 0) for i in range(len(parts))])
        return Pieces(new(t, m, x.dims, present=None if present is None else present & e)
                      for (t, m), e in zip(parts, exists)).of(exists)
    return tuple(new(t, x._mask, x.dims) for t in x.padded_data.split(s, d))


@register_distinct(torch.chunk, T.chunk)
def chunk(x, chunks, dim=0):
    """Per-example chunk: on a dynamic dim each example is cut into its own
    chunks of ``ceil(n / chunks)`` entries (fewer than ``chunks`` of them
    where torch gives fewer), a per-example list (``Pieces``)."""
    d = norm_dim(x, dim, "chunk")
    if x.dims[d - 1] and x._mask is not None:
        n = x._lengths(d)
        size = torch.clamp((n + chunks - 1) // chunks, min=1)
        count = torch.where(n == 0, chunks, (n + size - 1) // size)
        k = torch.arange(int(count.max()), device=n.device).unsqueeze(1)
        return _pieces(x, d, k * size, (n - k * size).clamp(0, None).minimum(size), k < count)
    return tuple(new(t, x._mask, x.dims) for t in x.padded_data.chunk(chunks, d))


# ------------------------------------------------------------------ flip / cumsum
def reversed_index(lengths, n):
    """``(B, n)`` gather index that reverses each example's prefix of
    ``lengths`` and leaves padding in place."""
    ar = torch.arange(n, device=lengths.device)
    ln = lengths[:, None]
    return torch.where(ar < ln, ln - 1 - ar, ar)


@register_distinct(torch.flip, T.flip)
def flip(x, *dims):
    """Reverse per-example dims; a dynamic dim reverses each example's real
    prefix."""
    ds = sorted({x._norm_dim(d) for d in _sizes(dims)} - {0})
    static = [d for d in ds if not x.dims[d - 1] or x._mask is None]
    data = x.padded_data.flip(static) if static else x.padded_data
    for d in ds:
        if d not in static:
            data = gather_line(data, d, reversed_index(x._lengths(d), data.size(d)))
    return new(data, x._mask, x.dims)


def _cumulative(fn, safe):
    def rule(x, dim, *, dtype=None):
        n = x.padded_data.dim()
        d = dim + n if dim < 0 else dim
        if d == 0:  # over each example's leading 1: the values themselves
            return new(fn(x.padded_data.unsqueeze(1), 1, dtype=dtype).squeeze(1), x._mask, x.dims)
        d = norm_dim(x, d, fn.__name__)
        if not x.dims[d - 1] or x._mask is None:
            return new(fn(x.padded_data, d, dtype=dtype), x._mask, x.dims)
        data = x.padded_data if safe is None else neutralize(x, safe)
        out = fn(data, d, dtype=dtype)
        out = torch.where(x._mask, out, torch.zeros((), dtype=out.dtype, device=out.device))
        return new(out, x._mask, x.dims)
    rule.__name__ = fn.__name__
    return rule


register_distinct(torch.cumsum, T.cumsum)(_cumulative(torch.cumsum, None))
register_distinct(torch.cumprod, T.cumprod)(_cumulative(torch.cumprod, 1.0))


def _logcumsumexp(x, dim, dtype=None):
    return torch.logcumsumexp(x, dim)


_logcumsumexp.__name__ = "logcumsumexp"
register_distinct(torch.logcumsumexp, T.logcumsumexp)(_cumulative(_logcumsumexp, 0.0))


def _cumulative_pair(fn):
    """cummax / cummin: (values, indices) as ``_cumulative``.  Real entries
    are a prefix, so their running max never sees padding; the result is
    zeroed past it, so no gradient reaches a real entry from there."""
    result_type = getattr(torch.return_types, fn.__name__)

    def rule(x, dim):
        n = x.padded_data.dim()
        d = dim + n if dim < 0 else dim
        if d == 0:  # over each example's leading 1: the values, index 0
            v, i = fn(x.padded_data.unsqueeze(1), 1)
            v, i = v.squeeze(1), i.squeeze(1)
        else:
            d = norm_dim(x, d, fn.__name__)
            dyn = x.dims[d - 1] and x._mask is not None
            v, i = fn(neutralize(x, 0) if dyn else x.padded_data, d)
            if dyn:
                v = torch.where(x._mask, v, torch.zeros((), dtype=v.dtype, device=v.device))
        return result_type((new(v, x._mask, x.dims), new(i, x._mask, x.dims)))
    rule.__name__ = rule.__qualname__ = fn.__name__
    return rule


register_distinct(torch.cummax, T.cummax)(_cumulative_pair(torch.cummax))
register_distinct(torch.cummin, T.cummin)(_cumulative_pair(torch.cummin))


# ------------------------------------------------------------------ roll / tile / repeat_interleave / diff / diagonal
def _with_lengths(data, mask, dims, x, lengths):
    """A result of ``x`` whose mask a rule made from the per-example
    ``lengths`` of its dynamic dims (data dim -> ``(B,)``): an example left
    with no entries is present, as torch's empty result (see
    ``_registry.lengths_presence``)."""
    present, sizes = (None, None) if mask is None else lengths_presence(lengths, x)
    return new(data, mask, dims, present=present, sizes=sizes)


@register_distinct(torch.roll, T.roll)
def roll(input, shifts, dims=None):
    """Per-example roll: along a dynamic dim each example's real prefix
    rolls within itself (a gather; padding stays in place).  Rolling the
    leading 1 changes nothing.  Without ``dims`` the example rolls
    flattened, which needs static dims."""
    x, data = input, input.padded_data
    if dims is None:
        if x._mask is not None and any(x.dims):
            raise ValueError("roll without dims rolls each example flattened, which mixes its "
                             "dynamic dims with their padding; pass dims (roll(x, s, dims=d))")
        return new(data.flatten(1).roll(shifts, 1).view_as(data), x._mask, x.dims)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dims must align, got {len(shifts)} and {len(dims)}")
    for s, dm in zip(shifts, dims):
        d = norm_dim(x, dm, "roll", allow_batch=True)
        if d == 0:
            continue
        if not x.dims[d - 1] or x._mask is None:
            data = data.roll(s, d)
            continue
        length = x._lengths(d)[:, None]
        ar = torch.arange(data.size(d), device=data.device)
        data = gather_line(data, d, torch.where(ar < length, (ar - s) % length.clamp_min(1), ar))
    return new(data, x._mask, x.dims)


@register_distinct(torch.tile, T.tile)
def tile(input, *dims):
    """``tile`` is ``repeat`` with the reps padded with leading 1s."""
    reps = _sizes(dims)
    return repeat(input, *([1] * (input.dim() - len(reps)) + reps))


@register_distinct(torch.repeat_interleave, T.repeat_interleave)
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each entry along ``dim`` ``repeats`` times in a row.  An int keeps a
    real prefix a prefix (data and mask repeat alike).  A MaskedBatch of one
    count per example (data ``(B,)``) gives each example its own size
    there, ``count * size``: a dynamic dim, made by a gather."""
    if repeats is None or not is_mb(input):
        raise NotImplementedError(
            "repeat_interleave(repeats) with per-example repeats returns a flat index tensor "
            "with no leading 1; matchbox supports x.repeat_interleave(r, dim) on a MaskedBatch x")
    if dim is None:
        raise ValueError("repeat_interleave without dim flattens each example, its leading 1 "
                         "included; pass a per-example dim >= 1 (flatten(1) first if needed)")
    x, d = input, norm_dim(input, dim, "repeat_interleave")
    if isinstance(repeats, torch.Tensor) and not is_mb(repeats) and repeats.numel() == 1:
        repeats = int(repeats)
    if isinstance(repeats, int):
        m = x._mask
        m = m if m is None or m.size(d) == 1 else m.repeat_interleave(repeats, d)
        return new(x.padded_data.repeat_interleave(repeats, d), m, x.dims)
    if not is_mb(repeats):
        if x.dims[d - 1] and x._mask is not None:
            raise ValueError(
                f"repeat_interleave: a Tensor of repeats has one count per entry, but dimension "
                f"{d} is dynamic (its size differs per example); use an int, or a MaskedBatch "
                f"of one count per example")
        return new(x.padded_data.repeat_interleave(repeats.to(x.device), d), x._mask, x.dims)
    if repeats.padded_data.dim() != 1:
        raise ValueError("repeat_interleave: per-example repeats must be one count per example "
                         f"(a MaskedBatch with data (B,)); got {tuple(repeats.padded_data.shape)}")
    r = repeats.padded_data.long()
    fail_if(r < 0, lambda b: RuntimeError(f"repeat_interleave: example {b[0]} repeats "
                                          f"{int(r[b])} times; repeats must be non-negative"),
            "repeat_interleave: repeats must be non-negative")
    size = r * x._lengths(d)
    j = torch.arange(int(size.max()), device=r.device)
    valid = j < size[:, None]
    data = gather_line(x.padded_data, d, torch.where(valid, j // r.clamp_min(1)[:, None], 0))
    view = [r.size(0)] + [1] * (d - 1) + [j.numel()] + [1] * (data.dim() - d - 1)
    data = torch.where(valid.view(view), data, torch.zeros((), dtype=data.dtype, device=data.device))
    mask = valid.view(view) if x._mask is None else x._mask.any(d, keepdim=True) & valid.view(view)
    dims = x.dims[:d - 1] + (True,) + x.dims[d:]
    lengths = {i: x._lengths(i) for i in range(1, data.dim()) if dims[i - 1] and i != d}
    return _with_lengths(data, canon_mask(mask, data.shape, dims), dims, x, {**lengths, d: size})


def _diff1(x, d):
    """One step of diff along data dim ``d``: entry i is x[i+1] - x[i], real
    when x[i+1] is (so each example's size drops by one)."""
    data, k = x.padded_data, x.padded_data.size(d)
    s, k = min(k, 1), max(k - 1, 0)
    hi, lo = data.narrow(d, s, k), data.narrow(d, 0, k)
    out = torch.logical_xor(hi, lo) if data.dtype == torch.bool else hi - lo
    if not x.dims[d - 1] or x._mask is None:
        return new(out, x._mask, x.dims)
    mask = x._mask.narrow(d, s, k)
    out = torch.where(mask, out, torch.zeros((), dtype=out.dtype, device=out.device))
    lengths = {i: x._lengths(i) for i in range(1, data.dim()) if x.dims[i - 1]}
    lengths[d] = (lengths[d] - 1).clamp_min(0)
    return _with_lengths(out, mask, x.dims, x, lengths)


@register_distinct(torch.diff, T.diff)
def diff(input, n=1, dim=-1, prepend=None, append=None):
    """Per-example diff along ``dim``: ``prepend``/``append`` join each
    example's real entries as ``cat`` does, then each step is the next entry
    minus this one, over real entries only."""
    d = norm_dim(input if is_mb(input) else prepend if is_mb(prepend) else append, dim, "diff")
    x = input
    if prepend is not None or append is not None:
        x = cat([p for p in (prepend, input, append) if p is not None], d)
    for _ in range(n):
        x = _diff1(x, d)
    return x


@register_distinct(torch.diagonal, T.diagonal)
def diagonal(input, offset=0, dim1=0, dim2=1):
    """Per-example diagonal of dims ``dim1``, ``dim2`` (both >= 1), appended
    last.  Each example's diagonal along dynamic dims is a prefix of the
    padded one, of length ``min(l1, l2 - offset)`` (``min(l1 + offset, l2)``
    for a negative offset): dynamic when either dim is."""
    x = input
    d1, d2 = norm_dim(x, dim1, "diagonal"), norm_dim(x, dim2, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dim1 and dim2 cannot be the same ({dim1}, {dim2})")
    data = x.padded_data.diagonal(offset, d1, d2)
    dyn = x.dims[d1 - 1] or x.dims[d2 - 1]
    dims = tuple(dm for i, dm in enumerate(x.dims, 1) if i not in (d1, d2)) + (dyn,)
    if x._mask is None:
        return new(data, None, dims)
    mask = x._mask.any(d2, keepdim=True).any(d1, keepdim=True).squeeze(max(d1, d2)).squeeze(min(d1, d2))
    mask = mask.unsqueeze(-1)
    if not dyn:
        return new(data, mask, dims)
    l1, l2 = x._lengths(d1), x._lengths(d2)
    size = (torch.minimum(l1, l2 - offset) if offset >= 0 else torch.minimum(l1 + offset, l2))
    size = size.clamp_min(0)
    mask = mask & (torch.arange(data.size(-1), device=data.device) < size[:, None]).view(
        [size.size(0)] + [1] * (data.dim() - 2) + [data.size(-1)])
    others = [i for i in range(1, x.padded_data.dim()) if i not in (d1, d2)]
    lengths = {k: x._lengths(i) for k, i in enumerate(others, 1) if dims[k - 1]}
    return _with_lengths(data, canon_mask(mask, data.shape, dims), dims, x,
                         {**lengths, data.dim() - 1: size})
