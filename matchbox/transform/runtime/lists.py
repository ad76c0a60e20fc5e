"""Per-example Python lists under ``@batch``: ``append`` records which
lanes appended, so each example's list has its own length (reading and
popping items: list_items.py).

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
import torch

from ..._lanes import _ACTIVE, _Slot
from ...core import MaskedBatch, derived
from ...ops._registry import uncut
from ...ops.shape import gather_line
from .compaction import owned
from .regions import _ALL, _inside, _within
from .perlane import _has_per_example, sequence, split
from .pyvalues import PerExample, held_by, held_item
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
    return getattr(x, "_listed", None) if type(x) is MaskedBatch or type(x) is PerExample \
        else None


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
    made under these lanes left pending is not needed: ``uncut``).  A Python
    value that is not a number (a string, an object, a tuple) is a PerExample
    item (``_per_lane``)."""
    if not isinstance(v, (MaskedBatch, torch.Tensor, bool, int, float)):
        return held_item(_per_lane(v, lanes.size(0)), lanes)
    if type(v) is MaskedBatch:
        v = _new(uncut(v), v._mask, v.dims, bdim=v._bdim)
    data, mask, dims, bdim = _canonical(v, lanes.size(0), like)
    # one mask object for the items appended under these lanes, so the
    # caches kept on a mask serve them all (a cat of the list's items)
    full = derived(lanes, ("lane mask", data.dim()), _lane_view, data.dim())
    if mask is not None or any(dims):
        full = _full_mask(data, mask, dims, dims) & full
    return _tag(_new(data, full, dims, bdim=bdim), lanes)


def _per_lane(v, B):
    """A tuple or list holding per-example values (``(score, toks, h)``) as
    each example's own tuple or list (its numbers, its Python values, its
    rows: ``LaneRef``), so code run per example (``sorted(key=...)``) sees
    that example's values; else ``v`` unchanged."""
    if sequence(v) and _has_per_example(v):
        return PerExample(list(split(v, B)))
    return v


def _chosen(lanes, a, b):
    """Per lane ``a`` where ``lanes`` else ``b``, as a value a list item
    can be: a PerExample where either is one (``select`` would lift it)."""
    if type(a) is not PerExample and type(b) is not PerExample:
        return select(lanes, a, b)
    B = lanes.size(0)
    ca, cb = split(a, B), split(b, B)
    return PerExample([ca[i] if p else cb[i] for i, p in enumerate(lanes.tolist())])


def _lane_counts(lst, B, device):
    """Per-lane lengths of ``lst``: read off its last item, else (a list
    whose examples hold every item) its length in every lane."""
    counts = _counts(lst) if lst else None
    if counts is None and lst and _listed(lst[-1]) is not None:
        counts = _layout(lst)
    if counts is not None:
        return counts
    return torch.full((B,), len(lst), dtype=torch.long, device=device)


def append(owner, lst, value):
    """``lst.append(value)`` that records the active lanes: per example the
    list grows only where the lane is active, so ``F.stack`` of the list
    builds a dynamic dimension with each example's own length.  (``owner``,
    here and below: the runtime of the calling function, see compaction.py.)"""
    if not isinstance(lst, list):
        return lst.append(value)
    _append_owned(lst, value, owned(owner))


def extend(owner, lst, values):
    """``lst.extend(values)``: a masked append per item."""
    if not isinstance(lst, list):
        return lst.extend(values)
    extend_owned(lst, values, owned(owner))


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
    value = _per_lane(value, lanes.size(0))
    lo, hi = int(active_counts.min()), int(active_counts.max())
    for k in range(lo, hi + 1):
        sel = lanes & (counts == k)
        if not bool(sel.any()):
            continue
        if k < len(lst):
            old = lst[k]
            held = _listed(old)[0] if _listed(old) else torch.ones_like(sel)
            lst[k] = _tag(_chosen(sel, value, old), held | sel)
        else:
            lst.append(_in_lanes(value, sel, lst[0] if lst else None))
    lst[-1] = _tag(lst[-1], _listed(lst[-1])[0], grown, length=len(lst))
    return None


# ------------------------------------------------------------------ reading and popping
def _layout(lst):
    """Each example's length (LongTensor ``(B,)``) of a per-example list,
    after packing it (each example's ``j``-th item at index ``j``); None
    when every example holds every item (a plain list)."""
    if not lst:
        return None
    if _counts(lst) is not None:
        return _counts(lst)
    holds = [held_by(v) for v in lst]
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
    if hi - lo > 1 and _alike(lst[lo:hi + 1]):
        return _gathered(lst[lo:hi + 1], torch.where(lanes, src - lo, hi - lo))
    out = lst[hi]
    for k in range(hi - 1, lo - 1, -1):
        out = select(lanes & (src == k), lst[k], out)
    return _untagged(out)


def _alike(items):
    """Whether ``items`` are MaskedBatches of one layout (data shape,
    dtype, dims, masks of one shape) with no empty example: one gather
    picks among them."""
    a = items[0]
    if type(a) is not MaskedBatch or a._present is not None:
        return False
    shape, dtype, dims, bdim, ma = a._data.shape, a._data.dtype, a.dims, a._bdim, a._mask
    mshape = None if ma is None else ma.shape
    for b in items:
        if type(b) is not MaskedBatch or b._present is not None or b._data.shape != shape \
                or b._data.dtype != dtype or b.dims != dims or b._bdim != bdim:
            return False
        mb = b._mask
        if (mb is None) != (ma is None) or mb is not None and mb.shape != mshape:
            return False
    return True


def _gathered(items, pos):
    """Per lane ``b``, item ``pos[b]`` of ``items`` (of one layout, see
    ``_alike``): one gather from the stacked items, where selecting lane by
    lane costs one ``where`` per item."""
    B, a = pos.size(0), items[0]
    index = pos.view(B, 1)
    data = gather_line(torch.stack([v.padded_data for v in items], 1), 1, index).squeeze(1)
    mask = a._mask
    if mask is not None and any(v._mask is not mask for v in items):
        mask = gather_line(torch.stack([v._mask for v in items], 1), 1, index).squeeze(1)
    return _new(data, mask, a.dims, bdim=a._bdim)


def held_after_pop(lst, lo, n, left):
    """Items ``lo..n-1`` of ``lst`` after a ``pop()``, in place: held by
    the lanes with ``k < left``.  For items of one value per example (the
    positions a parser's stack holds): one comparison over the stacked
    items, where going item by item costs a masking each.  False (nothing
    done) for other items."""
    items = lst[lo:n]
    if not items or not _alike(items) or items[0].dims \
            or any(v._cut is not None or v.requires_grad for v in items):
        return False
    lanes = (torch.arange(lo, n, device=left.device)[:, None] < left).contiguous()  # (item, lane)
    masks = lanes if items[0]._mask is None else torch.stack([v._mask for v in items]) & lanes
    for k, v in enumerate(items):
        lst[lo + k] = _tag(_new(v._data, masks[k], (), bdim=v._bdim), lanes[k])
    return True


_NOT_COPIED = {"_listed", "_kept", "_update_of", "__weakref__"}


def _untagged(x):
    """``x`` without the tag of a list item (a copy: the item stays tagged)."""
    if _listed(x) is None:
        return x
    if type(x) is PerExample:
        return PerExample(x._mb_values)
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
