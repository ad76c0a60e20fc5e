"""Sibling recursive calls run as one call (``@batch(merge_calls=True)``,
see transform/sibling_calls.py)."""
import torch

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from ...ops._registry import scatter_rows, uncut

_new = MaskedBatch._new


def sibling_calls(f, first, second):
    """``(f(*first), f(*second))`` as ONE call of ``f`` on the active lanes
    of both, stacked: rows ``[0, n)`` are the first call's, ``[n, 2n)`` the
    second's (``@batch(merge_calls=True)``, see sibling_calls.py).  Inside,
    every stacked lane is active.  Two plain calls when the arguments do
    not stack: a non-MaskedBatch argument that differs between the calls,
    or MaskedBatches of different layouts."""
    lanes = _ACTIVE.get()
    B = next((a._data.size(0) for a in first + second if type(a) is MaskedBatch), None)
    if B is None or len(first) != len(second) or not all(
            _stackable(a, b, B) for a, b in zip(first, second)):
        return f(*first), f(*second)
    rows = None if lanes is None else lanes.nonzero().squeeze(1)
    n = B if rows is None else rows.numel()
    args = [_stacked(a, b, rows) if type(a) is MaskedBatch else a for a, b in zip(first, second)]
    active, compact = _ACTIVE.set(None), _COMPACT.set(None)
    try:
        out = f(*args)
    finally:
        _COMPACT.reset(compact)
        _ACTIVE.reset(active)
    return _unstacked(out, rows, n, B)


def _stackable(a, b, B):
    if a is b or type(a) in (bool, int, float, str) and type(a) is type(b) and a == b:
        return True
    return type(a) is MaskedBatch and type(b) is MaskedBatch and a.dims == b.dims \
        and a._data.shape == b._data.shape and a._data.size(0) == B \
        and a._data.dtype == b._data.dtype and (a._mask is None) == (b._mask is None) \
        and (a._mask is None or a._mask.shape == b._mask.shape)


def _stacked(a, b, rows):
    """The rows ``rows`` (None: all; the active lanes, so a read's cut of
    the dormant ones is not needed: ``uncut``) of ``a`` then those of ``b``."""
    def pick(x, y):
        if x is None:
            return None
        if rows is None:
            return torch.cat([x, y])
        return x.index_select(0, torch.cat([rows, rows])) if x is y \
            else torch.cat([x.index_select(0, rows), y.index_select(0, rows)])
    return _new(pick(uncut(a), uncut(b)), pick(a._mask, b._mask), a.dims, bdim=a._bdim)


def _unstacked(out, rows, n, B):
    """Split a result of the stacked call into the two calls' results, back
    at batch size ``B`` (rows outside ``rows`` are 0: the caller keeps only
    its active lanes)."""
    if isinstance(out, tuple):
        pairs = [_unstacked(o, rows, n, B) for o in out]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    if type(out) is MaskedBatch and out._data.size(0) == 2 * n:
        def half(x, k):
            x = x[k * n:(k + 1) * n]
            return x if rows is None else scatter_rows(x, rows, B)
        mask = out._mask
        return tuple(_new(half(out.padded_data, k), None if mask is None else half(mask, k),
                          out.dims, bdim=out._bdim) for k in (0, 1))
    if isinstance(out, (torch.Tensor, MaskedBatch, list, dict)):
        raise TypeError(
            f"@batch(merge_calls=True): the merged calls returned a {type(out).__name__} that "
            f"cannot be split between them; return MaskedBatches, numbers or tuples of them, "
            f"or leave merge_calls off")
    return out, out  # a number, None or undefined: the same for every example
