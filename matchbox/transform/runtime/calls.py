"""Sibling recursive calls run as one call (see transform/sibling_calls.py)."""
import torch

from ..._lanes import _ACTIVE, _COMPACT, _Slot
from ...core import MaskedBatch
from ...ops._registry import scatter_rows, uncut
from .values import Mixed

_new = MaskedBatch._new

# True while a call that merging could not run goes again unmerged: the
# calls inside it run one after the other too (so a failure deep in a
# recursion is retried once, not once per level)
_UNMERGED = _Slot()


class _Unsplittable(TypeError):
    pass


def sibling_calls(f, *calls, auto=False):
    """``(f(*calls[0]), f(*calls[1]), ...)`` as ONE call of ``f`` on the
    active lanes of every call, stacked: rows ``[k n, (k + 1) n)`` are call
    ``k``'s.  Inside, every stacked lane is active.  Plain calls one after
    the other when the arguments do not stack: a non-MaskedBatch argument
    that differs between the calls, or MaskedBatches of different layouts.

    ``auto``: merged by default (the function has no effects that merging
    could reorder, transform/effects.py), so a stacked call that fails or
    returns what cannot be split between the calls (a list, a plain
    tensor) runs again as plain calls, with merging off inside; only an
    error that the plain calls raise too reaches the caller."""
    if _UNMERGED.get():
        return tuple(f(*args) for args in calls)
    lanes = _ACTIVE.get()
    B = next((a._data.size(0) for args in calls for a in args if type(a) is MaskedBatch), None)
    if B is None or len({len(args) for args in calls}) != 1 or not all(
            _stackable([args[j] for args in calls], B) for j in range(len(calls[0]))):
        return tuple(f(*args) for args in calls)
    rows = None if lanes is None else lanes.nonzero().squeeze(1)
    n = B if rows is None else rows.numel()
    stacked = [_stacked([args[j] for args in calls], rows) if type(calls[0][j]) is MaskedBatch
               else calls[0][j] for j in range(len(calls[0]))]
    active, compact = _ACTIVE.set(None), _COMPACT.set(None)
    try:
        out = f(*stacked)
        return _unstacked(out, rows, n, B, len(calls))
    except Exception:
        if not auto:
            raise
    finally:
        _COMPACT.reset(compact)
        _ACTIVE.reset(active)
    token = _UNMERGED.set(True)
    try:
        return tuple(f(*args) for args in calls)
    finally:
        _UNMERGED.reset(token)


def _stackable(values, B):
    a = values[0]
    if all(v is a for v in values):
        return True
    if type(a) in (bool, int, float, str):
        return all(type(v) is type(a) and v == a for v in values)
    return type(a) is MaskedBatch and a._data.size(0) == B and all(
        type(b) is MaskedBatch and a.dims == b.dims and a._data.shape == b._data.shape
        and a._data.dtype == b._data.dtype and (a._mask is None) == (b._mask is None)
        and (a._mask is None or a._mask.shape == b._mask.shape) for b in values)


def _stacked(values, rows):
    """The rows ``rows`` (None: all; the active lanes, so a read's cut of
    the dormant ones is not needed: ``uncut``) of each value, one after
    the other."""
    def pick(xs):
        if xs[0] is None:
            return None
        if rows is None:
            return torch.cat(xs)
        if all(x is xs[0] for x in xs):
            return xs[0].index_select(0, rows.repeat(len(xs)))
        return torch.cat([x.index_select(0, rows) for x in xs])
    a = values[0]
    return _new(pick([uncut(v) for v in values]), pick([v._mask for v in values]), a.dims,
                bdim=a._bdim)


def _unstacked(out, rows, n, B, k):
    """Split a result of the stacked call into the ``k`` calls' results,
    back at batch size ``B`` (rows outside ``rows`` are 0: the caller keeps
    only its active lanes)."""
    if isinstance(out, tuple):
        parts = [_unstacked(o, rows, n, B, k) for o in out]
        return tuple(tuple(p[i] for p in parts) for i in range(k))
    if type(out) is MaskedBatch and out._data.size(0) == k * n:
        def part(x, i):
            x = x[i * n:(i + 1) * n]
            return x if rows is None else scatter_rows(x, rows, B)
        mask = out._mask
        return tuple(_new(part(out.padded_data, i), None if mask is None else part(mask, i),
                          out.dims, bdim=out._bdim) for i in range(k))
    if isinstance(out, (torch.Tensor, MaskedBatch, list, dict, Mixed)):
        raise _Unsplittable(
            f"@batch(merge_calls=True): the merged calls returned a {type(out).__name__} that "
            f"cannot be split between them; return MaskedBatches, numbers or tuples of them, "
            f"or leave merge_calls off")
    return (out,) * k  # a number, None or undefined: the same for every example
