"""Per-example Python lists under ``@batch``: ``append`` records which
lanes appended, so each example's list has its own length; ``pop``,
``lst[i]``, ``lst[a:b:c]``, ``len(lst)``, ``reversed(lst)`` and a list's
truth read and change each example's own list, in the active lanes only.

A list is per-example when its examples hold different items: item ``k``
of the Python list is a MaskedBatch whose mask is False in the lanes that
do not hold it (an item ``append`` stored under some lanes, a step of
``x.unbind(d)`` past an example's length).  Each example's list is the
items it holds, in order.  The operations below first bring such a list
to its packed form (each example's ``j``-th item at index ``j``, the last
item tagged with every example's length), which ``append`` keeps too.
A list whose examples all hold every item is a plain Python list, and
every operation on it is Python's own.
"""
import operator

import torch

from ..._lanes import _ACTIVE, _Slot
from ...core import MaskedBatch, derived
from ...ops._registry import uncut
from .compaction import owned as _owned
from .conditions import _ALL, _inside, _within
from .select import _canonical, _full_mask, _lane_view, select

_new = MaskedBatch._new


# An item that @batch's ``append`` stores in a list is a MaskedBatch tagged
# with ``_listed = (presence, counts, full, length)``: the lanes in which
# the item exists, and, on the list's last item only, each lane's list
# length so far, (None if unknown) the lanes whose list holds every item
# (_ALL: all), and the Python length of the list those counts describe (a
# list made otherwise, e.g. ``a + b``, is not the one: its counts are
# recomputed from its items).
def _listed(x):
    return getattr(x, "_listed", None) if isinstance(x, MaskedBatch) else None


def _tag(x, presence, counts=None, full=None, length=None):
    x._listed = (presence, counts, full, length)
    return x


# Under torch.compile (dynamo sets no attribute on a Tensor, so lanes
# cannot carry ``_inside``'s record), the lanes of the running step of a
# for loop over steps and of the step before it, per thread as the active
# lanes; None outside such a loop.
_STEP = _Slot()


def step_lanes(lanes, last):
    """Record that ``lanes``, a for loop's step's, lie within ``last``, its
    last step's (None: all lanes), so appends in the step need no device read."""
    if torch.compiler.is_compiling():
        _STEP.set((lanes, _ALL if last is None else last))
    else:
        _inside(lanes, last)


def _within_step(lanes, outer):
    step = _STEP.get()
    return _within(lanes, outer) or step is not None and step[0] is lanes and step[1] is outer


def _counts(lst):
    """The per-lane lengths recorded on ``lst``'s last item, if they
    describe ``lst`` (None otherwise)."""
    tag = _listed(lst[-1]) if lst else None
    if tag is not None and tag[1] is not None and tag[3] == len(lst):
        return tag[1]
    return None


def _in_lanes(v, lanes, like=None):
    """``v`` as a MaskedBatch whose mask is False in the lanes not in ``lanes``
    (so those lanes are not real in it, and the gradient cut that a read
    made under these lanes left pending is not needed: ``uncut``)."""
    if type(v) is MaskedBatch:
        v = _new(uncut(v), v._mask, v.dims, bdim=v._bdim)
    data, mask, dims, bdim = _canonical(v, lanes.size(0), like)
    # one mask object for the items appended under these lanes, so the
    # caches kept on a mask serve them all (a cat of the list's items)
    full = derived(lanes, ("lane mask", data.dim()), _lane_view, data.dim())
    if mask is not None or any(dims):
        full = _full_mask(data, mask, dims, dims) & full
    return _tag(_new(data, full, dims, bdim=bdim), lanes)


def _lane_counts(lst, B, device):
    """Per-lane lengths of ``lst``: read off its last item, else (a list
    whose examples hold every item) its length in every lane."""
    counts = _counts(lst) if lst else None
    if counts is None and lst and _listed(lst[-1]) is not None:
        counts = _layout(lst)
    if counts is not None:
        return counts
    return torch.full((B,), len(lst), dtype=torch.long, device=device)


def append(lst, value):
    """``lst.append(value)`` that records the active lanes: per example the
    list grows only where the lane is active, so ``F.stack`` of the list
    builds a dynamic dimension with each example's own length."""
    if not isinstance(lst, list):
        return lst.append(value)
    _append_owned(lst, value, _owned())


def extend(lst, values):
    """``lst.extend(values)``: a masked append per item."""
    if not isinstance(lst, list):
        return lst.extend(values)
    extend_owned(lst, values, _owned())


def extend_owned(lst, values, comp):
    """``extend`` for a caller whose loop compaction (or None) is ``comp``
    (also ``lst += values``, through ``aug_assign``)."""
    for v in list(values):
        _append_owned(lst, v, comp)


def insert(lst, index, value):
    """``lst.insert(index, value)``, where every lane is active."""
    if isinstance(lst, list) and (_ACTIVE.get() is not None or lst and _listed(lst[-1])):
        raise NotImplementedError(
            "list.insert under per-example control flow (or into a list that examples "
            "filled to different lengths) cannot act per example; append and reverse the "
            "list, or insert before the per-example code")
    lst.insert(index, value)


def _append_owned(lst, value, comp):
    if comp is None:
        return _append(lst, value)
    token = _ACTIVE.set(comp.lanes(_ACTIVE.get()))
    try:
        return _append(lst, comp.expand(value) if comp.compacted(value) else value)
    finally:
        _ACTIVE.reset(token)


def _append(lst, value):
    lanes = _ACTIVE.get()
    last = _listed(lst[-1]) if lst else None
    if last is None and lanes is not None and lst and _layout(lst) is not None:
        last = _listed(lst[-1])  # examples hold different items: now packed
    if lanes is None and last is None:
        lst.append(value)
        return None
    own = _ALL if lanes is None else lanes
    if lanes is None:
        lanes = torch.ones_like(last[0])
    counts = _lane_counts(lst, lanes.size(0), lanes.device)
    grown = counts + lanes.long()
    if last is None or (last[2] is not None and last[3] == len(lst) and _within_step(own, last[2])) \
            or bool(((counts == len(lst)) | ~lanes).all()):
        # every active lane holds every item so far (a loop over a dynamic
        # dim, the common case): the value is a new last item.  Known
        # without reading the device when the lanes lie within the last
        # append's (the next iteration of the loop that made them).
        lst.append(_tag(_in_lanes(value, lanes, lst[0] if lst else None), lanes, grown, own,
                        len(lst) + 1))
        return None
    active_counts = counts[lanes]
    if active_counts.numel() == 0:
        return None
    lo, hi = int(active_counts.min()), int(active_counts.max())
    for k in range(lo, hi + 1):
        sel = lanes & (counts == k)
        if not bool(sel.any()):
            continue
        if k < len(lst):
            old = lst[k]
            held = _listed(old)[0] if _listed(old) else torch.ones_like(sel)
            lst[k] = _tag(select(sel, value, old), held | sel)
        else:
            lst.append(_in_lanes(value, sel, lst[0] if lst else None))
    lst[-1] = _tag(lst[-1], _listed(lst[-1])[0], grown, length=len(lst))
    return None


# ------------------------------------------------------------------ reading and popping
def _holds(item):
    """The lanes (bool ``(B,)``) that hold list item ``item``; None: all."""
    tag = _listed(item)
    if tag is not None:
        return tag[0]
    if type(item) is MaskedBatch:
        present = getattr(item, "_present", None)
        if present is not None:
            return present
        m = item._mask
        return None if m is None else m.reshape(m.size(0), -1).any(1)
    return None


def _layout(lst):
    """Each example's length (LongTensor ``(B,)``) of a per-example list,
    after packing it (each example's ``j``-th item at index ``j``); None
    when every example holds every item (a plain list)."""
    if not lst:
        return None
    if _counts(lst) is not None:
        return _counts(lst)
    holds = [_holds(v) for v in lst]
    ref = next((h for h in holds if h is not None), None)
    if ref is None:
        return None
    P = torch.stack([torch.ones_like(ref) if h is None else h for h in holds], 1)  # (B, L)
    every, packed = torch.stack([P.all(), (P[:, 1:] <= P[:, :-1]).all()]).tolist()
    if every:
        return None
    counts = P.sum(1)
    if packed:
        lst[-1] = _in_lanes(lst[-1], P[:, -1], lst[0])
    else:  # move each example's items to the front, in order
        order = torch.argsort((~P).to(torch.int8), dim=1, stable=True)
        lst[:] = _rebuilt(lst, [order[:, k] for k in range(int(counts.max()))], counts)
    lst[-1] = _tag(lst[-1], _listed(lst[-1])[0], counts, length=len(lst))
    return counts


def is_per_lane(lst):
    """Do the examples' lists (of Python list ``lst``) differ?"""
    return _layout(lst) is not None


def _pick(lst, src, lanes):
    """Per lane of ``lanes`` (bool ``(B,)``): item ``src[b]`` of ``lst``
    (the other lanes hold some item; the caller masks or ignores them)."""
    sel = src[lanes]
    if sel.numel() == 0:
        return _untagged(lst[0])
    lo, hi = torch.stack([sel.min(), sel.max()]).tolist()
    out = lst[hi]
    for k in range(hi - 1, lo - 1, -1):
        out = select(lanes & (src == k), lst[k], out)
    return _untagged(out)


_NOT_COPIED = {"_listed", "_kept", "_update_of", "__weakref__"}


def _untagged(x):
    """``x`` without the tag of a list item (a copy: the item stays tagged)."""
    if _listed(x) is None:
        return x
    y = object.__new__(MaskedBatch)
    for slot in MaskedBatch.__slots__:
        if slot not in _NOT_COPIED and hasattr(x, slot):
            setattr(y, slot, getattr(x, slot))
    return y


def _rebuilt(lst, sources, counts):
    """The packed list whose item ``k`` is, per lane ``b`` with
    ``k < counts[b]``, item ``sources[k][b]`` of ``lst``."""
    out = []
    for k, src in enumerate(sources):
        held = k < counts
        out.append(_in_lanes(_pick(lst, src, held), held, lst[0]))
    return out


def _lanes_now():
    """The active lanes as full-batch lanes, or None (all), and the loop
    compaction (or None) that the user code two frames up runs under."""
    comp = _owned_by_caller()
    lanes = _ACTIVE.get()
    return (lanes if comp is None else comp.lanes(lanes)), comp


def _owned_by_caller():
    import sys
    from ..._lanes import _COMPACT
    comp = _COMPACT.get()
    return comp if comp is not None and sys._getframe(3).f_code in comp.codes else None


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


def pop(lst, *args):
    """``lst.pop()`` / ``lst.pop(i)``: each active example pops its own
    item (an example with too short a list raises, as Python does)."""
    if type(lst) is not list:
        return lst.pop(*args)
    lanes, comp = _lanes_now()
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
    for k in range(lo, n):   # items after the popped one move down
        item = select(active & (pos <= k), lst[k + 1], lst[k]) if shifts and k + 1 < L else lst[k]
        lst[k] = _in_lanes(item, k < left, lst[0])
    del lst[n:]
    if lst:
        last = lst[-1] if _listed(lst[-1]) is not None else _in_lanes(lst[-1], n - 1 < left, lst[0])
        lst[-1] = _tag(last, _listed(last)[0], left, length=len(lst))
    return _result(value, comp, lanes is None)


def getitem(obj, key):
    """``obj[key]``; on a per-example list (or with a per-example index),
    each example's own item or slice."""
    if type(obj) is not list:
        return obj[key]
    lanes, comp = _lanes_now()
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
    if all(_holds(v) is None for v in lst):
        return lst[::-1]
    return [_tag(_untagged(v), _holds(v)) if type(v) is MaskedBatch else v for v in reversed(lst)]
