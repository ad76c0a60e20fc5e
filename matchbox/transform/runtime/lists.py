"""List accumulation under per-example control flow: ``append`` records
which lanes appended, so each example's list has its own length."""
import torch

from ..._lanes import _ACTIVE
from ...core import MaskedBatch
from ...ops._registry import uncut
from .compaction import owned as _owned
from .conditions import _ALL, _within
from .select import _canonical, _full_mask, _lane_view, select

_new = MaskedBatch._new


# An item that @batch's ``append`` stores in a list is a MaskedBatch tagged
# with ``_listed = (presence, counts, full)``: the lanes in which the item
# exists, and, on the list's last item only, each lane's list length so far
# and (None if unknown) the lanes whose list holds every item (_ALL: all).
def _listed(x):
    return getattr(x, "_listed", None) if isinstance(x, MaskedBatch) else None


def _tag(x, presence, counts=None, full=None):
    x._listed = (presence, counts, full)
    return x


def _in_lanes(v, lanes, like=None):
    """``v`` as a MaskedBatch whose mask is False in the lanes not in ``lanes``
    (so those lanes are not real in it, and the gradient cut that a read
    made under these lanes left pending is not needed: ``uncut``)."""
    if type(v) is MaskedBatch:
        v = _new(uncut(v), v._mask, v.dims, bdim=v._bdim)
    data, mask, dims, bdim = _canonical(v, lanes.size(0), like)
    full = _lane_view(lanes, data.dim())
    if mask is not None or any(dims):
        full = _full_mask(data, mask, dims, dims) & full
    return _tag(_new(data, full, dims, bdim=bdim), lanes)


def _lane_counts(lst, B, device):
    """Per-lane lengths of ``lst``: read off its last item, else (a list
    no masked append has touched) its length in every lane."""
    tag = _listed(lst[-1]) if lst else None
    if tag is not None and tag[1] is not None:
        return tag[1]
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
    if lanes is None and last is None:
        lst.append(value)
        return None
    own = _ALL if lanes is None else lanes
    if lanes is None:
        lanes = torch.ones_like(last[0])
    counts = _lane_counts(lst, lanes.size(0), lanes.device)
    grown = counts + lanes.long()
    if last is None or (last[2] is not None and _within(own, last[2])) \
            or bool(((counts == len(lst)) | ~lanes).all()):
        # every active lane holds every item so far (a loop over a dynamic
        # dim, the common case): the value is a new last item.  Known
        # without reading the device when the lanes lie within the last
        # append's (the next iteration of the loop that made them).
        lst.append(_tag(_in_lanes(value, lanes, lst[0] if lst else None), lanes, grown, own))
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
    lst[-1] = _tag(lst[-1], _listed(lst[-1])[0], grown)
    return None
