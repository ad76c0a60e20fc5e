"""Reading and popping items of per-example lists under ``@batch``:
``pop``, ``lst[i]``, ``lst[a:b:c]``, ``len(lst)`` and ``reversed(lst)``
read and change each example's own list, in the active lanes only (see
lists.py for how such a list is held).
"""
import operator

import torch

from ..._lanes import _ACTIVE
from ...core import MaskedBatch
from .compaction import owned
from .lists import (_in_lanes, _layout, _listed, _pick, _rebuilt, _tag, _untagged,
                    held_after_pop)
from .pyslices import Path, item_of, path_key
from .pyvalues import PerExample, held_by
from .select import select

_new = MaskedBatch._new


def _lanes_now(owner):
    """The active lanes as full-batch lanes, or None (all), and the
    compaction (or None) that the code calling as ``owner`` runs under."""
    comp = owned(owner)
    lanes = _ACTIVE.get()
    return (lanes if comp is None else comp.lanes(lanes)), comp


def _per_lane_state(lst, lanes, index=None):
    """``(counts, active)`` of a list that is read or changed per lane, or
    None where Python's own list operation is right (every example holds
    the same items, every lane is active and the index is one int)."""
    counts = _layout(lst)
    if counts is None and lanes is None and type(index) is not MaskedBatch:
        return None
    if counts is None:
        ref = lanes if lanes is not None else index.padded_data
        counts = torch.full((ref.size(0),), len(lst), dtype=torch.long, device=ref.device)
    active = torch.ones_like(counts, dtype=torch.bool) if lanes is None else lanes
    return counts, active


def _positions(index, counts):
    """Each lane's list index for ``index`` (an int, or a per-example int)."""
    if type(index) is MaskedBatch:
        i = index.padded_data.reshape(counts.size(0))
        if i.is_floating_point() or i.dtype == torch.bool:
            raise TypeError("list indices must be integers or slices, not a per-example "
                            f"{i.dtype} (use int(...) per example)")
        return torch.where(i < 0, i + counts, i)
    i = operator.index(index)
    return counts + i if i < 0 else torch.full_like(counts, i)


def _check(bad, what):
    lanes = bad.nonzero().flatten().tolist()
    if lanes:
        raise IndexError(f"{what} in examples {lanes} (their own lists are shorter)")


def _result(value, comp, all_active):
    """A value read from a list, for the caller: without a mask that only
    said which lanes hold it, where every lane holds it."""
    if all_active and type(value) is MaskedBatch and value._mask is not None \
            and value._mask.numel() == value._mask.size(0) and bool(value._mask.all()):
        value = _new(value.padded_data, None, value.dims, bdim=value._bdim)
    return value if comp is None else comp.take(value)


def pop(owner, lst, *args):
    """``lst.pop()`` / ``lst.pop(i)``: each active example pops its own
    item (an example with too short a list raises, as Python does)."""
    if type(lst) is not list:
        return lst.pop(*args)
    lanes, comp = _lanes_now(owner)
    index = args[0] if args else -1
    state = _per_lane_state(lst, lanes, index)
    if state is None:
        return lst.pop(index)
    counts, active = state
    pos = _positions(index, counts)
    bad = active & ((pos < 0) | (pos >= counts))
    _check(bad & (counts == 0), "pop from empty list")
    _check(bad, "pop index out of range")
    value = _pick(lst, pos, active)
    left = counts - active.long()
    L = len(lst)
    lo, n = torch.stack([torch.where(active, pos, L).min(), left.max()]).tolist()
    shifts = not (type(index) is int and index == -1)   # pop() moves no item
    if shifts or not held_after_pop(lst, lo, n, left):
        for k in range(lo, n):   # items after the popped one move down
            item = select(active & (pos <= k), lst[k + 1], lst[k]) if shifts and k + 1 < L else lst[k]
            lst[k] = _in_lanes(item, k < left, lst[0])
    del lst[n:]
    if lst:
        last = lst[-1] if _listed(lst[-1]) is not None else _in_lanes(lst[-1], n - 1 < left, lst[0])
        lst[-1] = _tag(last, _listed(last)[0], left, length=len(lst))
    return _result(value, comp, lanes is None)


def getitem(owner, obj, key):
    """``obj[key]``; on a per-example list (or with a per-example index),
    each example's own item or slice; ``obj[k1]...[kn]`` for a ``Path``
    key (the rewrite's ``buf[i][j] += v``)."""
    if type(key) is Path:
        one = path_key(obj, key)
        if one is None:
            for k in key:
                obj = getitem(owner, obj, k)
            return obj
        key = one
    if type(obj) is not list or type(key) is PerExample:
        return item_of(obj, key)
    if type(key) is int and not (obj and type(obj[-1]) in (MaskedBatch, PerExample, tuple)):
        return obj[key]   # a list of Python values: every example's the same (the last item
        # of a list examples hold differently is always a batch)
    lanes, comp = _lanes_now(owner)
    if type(key) is slice and key.start is None and key.stop is None and key.step == -1:
        out = _reversed(obj)
        return out if comp is None else [comp.take(v) for v in out]
    if type(key) is slice:
        counts = _layout(obj)
        if counts is None:
            return obj[key]
        out = _sliced(obj, key, counts)
        return out if comp is None else [comp.take(v) for v in out]
    state = _per_lane_state(obj, lanes, key)
    if state is None:
        return obj[key]
    counts, active = state
    pos = _positions(key, counts)
    _check(active & ((pos < 0) | (pos >= counts)), "list index out of range")
    return _result(_pick(obj, pos, active), comp, lanes is None)


def _sliced(lst, sl, counts):
    """Each example's ``its_list[sl]``, as a new list (packed)."""
    picks = [range(c)[sl] for c in counts.tolist()]
    lengths = [len(r) for r in picks]
    n = max(lengths, default=0)
    src = torch.tensor([[r[k] if k < len(r) else 0 for k in range(n)] for r in picks],
                       dtype=torch.long, device=counts.device).reshape(len(picks), n)
    new_counts = torch.tensor(lengths, dtype=torch.long, device=counts.device)
    out = _rebuilt(lst, list(src.unbind(1)), new_counts)
    if out and min(lengths) != n:
        out[-1] = _tag(out[-1], _listed(out[-1])[0], new_counts, length=len(out))
    elif out:   # every example's slice has n items: a plain list
        out = [_result(_untagged(v), None, True) for v in out]
    return out


def list_len(lst):
    """``len(lst)``: an int where every example's list has the same length,
    else each example's own length (a per-example int)."""
    counts = _layout(lst)
    if counts is None:
        return len(lst)
    lo, hi = torch.stack([counts.min(), counts.max()]).tolist()
    if lo == hi:
        return lo
    return _new(counts, None, (), bdim=None)


def reversed_list(lst):
    """``reversed(lst)``: each example's own list, reversed."""
    return iter(_reversed(lst))


def _reversed(lst):
    """Each example's own list reversed, without moving any item between
    lanes: an example's list is the items it holds, in order, so the items
    in reverse order, each still held by its lanes, are every example's
    list reversed (O(len); a per-lane slice moves items lane by lane).  The
    result is not packed (an example's items need not start at 0): it
    records no per-lane counts, so the list operations that need them pack
    it first, and F.stack packs each example's items itself."""
    if all(held_by(v) is None for v in lst):
        return lst[::-1]
    return [_tag(_untagged(v), held_by(v)) if type(v) in (MaskedBatch, PerExample) else v
            for v in reversed(lst)]
