"""The masked update of a variable: ``new`` in the active lanes, ``old``
in the others, for every kind of value a variable holds (a Mixed where
the two differ in per-example rank)."""
from ..._lanes import _ACTIVE
from .select import ShapeMismatch, select
from .values import Mixed, Undefined


def _mixed_assign(lanes, old, new):
    """``new`` in ``lanes`` and ``old`` elsewhere, where ``old`` (a Mixed, or
    a value) holds values of another rank than ``new`` in some lanes."""
    parts = old.parts if type(old) is Mixed else [(None, old)]  # None: every lane
    out, held, rest = new, lanes, []
    for lanes_v, v in parts:
        keep = ~lanes if lanes_v is None else lanes_v & ~lanes
        try:
            out = select(held, out, v)
            held = held | keep
        except ShapeMismatch:
            if bool(keep.any()):
                rest.append((keep, v))
    return out if not rest else Mixed([(held, out)] + rest)


def _assign(old, new):
    """``new`` for the active lanes, ``old`` for the dormant ones."""
    lanes = _ACTIVE.get()
    if lanes is None or old is new or isinstance(old, Undefined) or old is None:
        return new
    if isinstance(new, Undefined):
        return old
    if type(old) is Mixed:
        return _mixed_assign(lanes, old, new)
    try:
        return select(lanes, new, old)
    except ShapeMismatch:
        return _mixed_assign(lanes, old, new)
