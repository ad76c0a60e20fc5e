"""``obj[key]`` where the object or the key is per example (and ``obj`` is
not a Python list: ``lists.getitem`` takes those): a per-example value's
item, a dict / str / tuple item at a per-example key, and a slice of a
tensor whose bounds are per-example ints (``x[:, :n]``, ``x[:, n // 2:]``,
``pe[:n]``), which gives each example its own size along that dimension
(a dynamic dimension where they differ).  ``Path``: the keys of
``x[k1][k2]...[kn]``, which the rewrite stores into (and reads, for
``+=``) as one index where it can."""
import operator

import torch

from ...core import MaskedBatch, storage_dim
from .perlane import per_lane
from .pyvalues import PerExample, is_number_batch

_new = MaskedBatch._new
_KEYED = (dict, str, tuple, range, bytes)


class Path(tuple):
    """The keys of ``x[k1][k2]...[kn] = v`` (``path(k1, ..., kn)``: the
    rewrite's form of a store into an item of a local variable), and the
    runtime of the function that wrote it (``owner``), whose reads walk
    the items where they are not one index."""


def path(owner, *keys):
    p = Path(keys)
    p.owner = owner
    return p


def _an_int(k):
    """Is ``k`` an int index (one per example, maybe): ``x[k][j]`` is then
    ``x[k, j]``."""
    t = type(k)
    if t is int:
        return True
    if t is PerExample:
        return all(type(v) is int for v in k._mb_values)
    return t is MaskedBatch and k.dim() == 0 and not k.dtype.is_floating_point \
        and k.dtype is not torch.bool


def path_key(obj, keys):
    """``obj[k1]...[kn]`` as one index ``obj[k1, ..., kn]`` where ``obj`` is
    a Tensor or a batch and the outer keys are ints (each takes one dim);
    else None (read it item by item).  On a batch whose examples hold their
    batch-of-one dim first, ``x[0][j]`` is ``x[:, j]``: the same entries."""
    *outer, last = keys
    if not isinstance(obj, (torch.Tensor, MaskedBatch)) or not all(_an_int(k) for k in outer):
        return None
    key = tuple(outer) + (last if type(last) is tuple else (last,))
    if type(obj) is MaskedBatch and obj._bdim == 0 and type(key[0]) is int and key[0] in (0, -1):
        key = (slice(None),) + key[1:]
    return key


def item_of(obj, key):
    """``obj[key]``, per example where the object or the key is."""
    tk = type(key)
    if tk is PerExample or type(obj) is PerExample or (
            tk is MaskedBatch and type(obj) in _KEYED):
        return per_lane(operator.getitem, (obj, key))
    if tk is slice and _per_example_slice(key) or tk is tuple and any(
            type(k) is slice and _per_example_slice(k) for k in key):
        if isinstance(obj, (torch.Tensor, MaskedBatch)):
            return sliced(obj, key if tk is tuple else (key,))
        return per_lane(operator.getitem, (obj, key))
    return obj[key]


def _per_example_slice(s):
    return type(s.start) is MaskedBatch or type(s.stop) is MaskedBatch \
        or type(s.step) is MaskedBatch


def _ints(v, B):
    if type(v) is MaskedBatch:
        if not is_number_batch(v):
            raise TypeError("slice indices must be integers (one per example), not tensors")
        return v._data.reshape(B).tolist()
    return [v] * B


def sliced(x, key):
    """``x[key]`` where one entry of ``key`` is a slice with per-example
    bounds and the entries before it are ``:``."""
    pos = next(i for i, k in enumerate(key) if type(k) is slice and _per_example_slice(k))
    rest = key[pos + 1:]
    if any(k != slice(None) for k in key[:pos]):
        raise NotImplementedError(
            "a slice with per-example bounds after an index or a slice with bounds: write "
            "the other indexing as a step of its own (y = x[i]; y[:, :n])")
    if type(x) is not MaskedBatch:   # one Tensor for all: each example slices its own copy
        B = next(v._data.size(0) for k in key if type(k) is slice
                 for v in (k.start, k.stop, k.step) if type(v) is MaskedBatch)
        x = _new(x.unsqueeze(0).expand((B,) + x.shape), None, (False,) * x.dim(), bdim=None)
    B = x._data.size(0)
    d = storage_dim(x, pos)
    if d == 0:
        raise NotImplementedError(
            "a slice with per-example bounds of each example's batch-of-one dimension")
    s = key[pos]
    step = s.step
    if type(step) is MaskedBatch:
        raise NotImplementedError("a slice with a per-example step")
    sizes = x._lengths(d).tolist()
    starts, stops = _ints(s.start, B), _ints(s.stop, B)
    ranges = [range(n)[slice(a, b, step)] for n, a, b in zip(sizes, starts, stops)]
    lengths = [len(r) for r in ranges]
    L = max(lengths, default=0)
    data = x.padded_data
    if all(r.start == 0 and r.step == 1 for r in ranges if len(r)):
        out = data.narrow(d, 0, L)
        mask = x._mask.narrow(d, 0, L) if x._mask is not None and x.dims[d - 1] else x._mask
    else:
        index = torch.tensor([[r[k] if k < len(r) else 0 for k in range(L)] for r in ranges],
                             dtype=torch.long, device=data.device).reshape(B, L)
        out = _take(data, d, index)
        mask = x._mask
        if mask is not None and x.dims[d - 1]:
            mask = _take(mask, d, index)
    length = torch.tensor(lengths, dtype=torch.long, device=data.device)
    view = [1] * out.dim()
    view[0], view[d] = B, L
    real = (torch.arange(L, device=data.device) < length[:, None]).view(view)
    dyn = x.dims[d - 1] or len(set(lengths)) > 1
    dims = x.dims[:d - 1] + (dyn,) + x.dims[d:]
    if dyn:
        shape = [B] + [n if dy else 1 for n, dy in zip(out.shape[1:], dims)]
        mask = real.expand(shape) if mask is None else mask.expand(shape) & real
    y = _new(out, mask, dims, bdim=x._bdim)
    return y[(slice(None),) * (pos + 1) + rest] if rest else y


def _take(t, d, index):
    """``t``'s entries along dim ``d`` at ``index`` ``(B, L)``, per row."""
    view = [1] * t.dim()
    view[0], view[d] = index.size(0), index.size(1)
    shape = list(t.shape)
    shape[d] = index.size(1)
    return t.gather(d, index.view(view).expand(shape))
