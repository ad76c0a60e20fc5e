"""Nested lane regions: what is known, without reading the device, about
how the lanes of a branch or loop step lie within those around it."""
from ..._lanes import _ACTIVE

# The lanes of every lane (where the active lanes are None), for _within.
_ALL = "all lanes"


def _combine(outer, c):
    return c if outer is None else outer & c


def _within(lanes, outer):
    """Whether every lane of ``lanes`` is known to be in ``outer`` (each a
    lanes Tensor or _ALL) without reading the device: ``outer`` is all
    lanes, or ``lanes`` was made inside it (a loop's iteration inside the
    previous one, a branch inside its surroundings: ``_inside``)."""
    return outer is _ALL or lanes is outer or getattr(lanes, "_mb_within", None) is outer


def _inside(lanes, outer):
    """Record that ``lanes`` (a fresh Tensor) lies within ``outer`` (lanes
    or None for all)."""
    lanes._mb_within = _ALL if outer is None else outer
    return lanes


def _under(lanes, thunk):
    """Evaluate ``thunk`` with ``lanes`` (already combined) active."""
    token = _ACTIVE.set(lanes)
    try:
        return thunk()
    finally:
        _ACTIVE.reset(token)
