"""Masked assignment: a store inside a branch or loop body changes only the
active lanes; a read there cuts the dormant lanes from the graph.

``Undefined`` is the value of a variable not yet assigned on a path.
Under a compacted loop (compaction.py) reads gather the live rows and
stores scatter them back, but only in the function that owns the loop.
"""
import operator
import sys

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from .select import select

class Undefined:
    """The value of a variable not yet assigned on this path."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def _fail(self, *args, **kwargs):
        raise NameError(
            f"variable {self.name!r} is used before it is assigned (for some example it "
            f"was assigned only on a path that was not taken)")

    __bool__ = __call__ = __iter__ = __getitem__ = __add__ = __radd__ = __mul__ = _fail
    __sub__ = __rsub__ = __truediv__ = __neg__ = __len__ = __index__ = __float__ = _fail

    def __getattr__(self, name):
        if name.startswith("__") or name == "name":  # (copy, pickle, torch.compile probe these)
            raise AttributeError(name)
        self._fail()

    def __repr__(self):
        return f"<undefined {self.name}>"


def _owned():
    """The loop compaction that the caller of the calling runtime function
    gathers and scatters for: only the loop's own function does."""
    comp = _COMPACT.get()
    return comp if comp is not None and sys._getframe(2).f_code in comp.codes else None


def read(x):
    """``x`` as read inside a masked region: its dormant lanes are cut from
    the graph, so whatever they compute there adds no gradient (JAX feeds
    inactive branches stop_gradient'ed inputs the same way)."""
    comp = _owned()
    if comp is not None:
        x = comp.take(x)
    return _read(x)


def _read(x):
    lanes = _ACTIVE.get()
    if lanes is None or type(x) is not MaskedBatch or not x.requires_grad \
            or x.batch_size != lanes.size(0):
        return x
    return MaskedBatch._read(x, lanes)


def assign(old, new):
    """``new`` for the active lanes, ``old`` for the dormant ones."""
    comp = _owned()
    return _assign(old, new) if comp is None else _compacted_assign(comp, old, new)


def _compacted_assign(comp, old, new, keep=True):
    """``assign`` in a compacted loop: the update of the live lanes, kept
    compacted (a variable in a compacted ``for``, with ``keep``) or
    scattered back into the full-batch ``old``."""
    if isinstance(new, tuple) and (isinstance(old, Undefined)
                                   or isinstance(old, tuple) and len(old) == len(new)):
        olds = old if isinstance(old, tuple) else (old,) * len(new)
        return tuple(_compacted_assign(comp, o, v, keep) for o, v in zip(olds, new))
    current = comp.take(old)
    new = _assign(current, new)
    undefined = isinstance(old, Undefined) or old is None
    kept = comp.keep(None if undefined else old, current, new) if keep else None
    if kept is not None:
        return kept
    if not undefined and comp.compacted(old):
        return new  # a loop temporary, bound (compacted) earlier in this iteration
    if comp.compacted(new):
        new = comp.expand(new)
    return new if undefined else select(comp.alive, new, comp.settle(old))


def _assign(old, new):
    lanes = _ACTIVE.get()
    if lanes is None or old is new or isinstance(old, Undefined) or old is None:
        return new
    if isinstance(new, Undefined):
        return old
    return select(lanes, new, old)


_AUG = {"+=": (operator.iadd, operator.add), "-=": (operator.isub, operator.sub),
        "*=": (operator.imul, operator.mul), "/=": (operator.itruediv, operator.truediv),
        "//=": (operator.ifloordiv, operator.floordiv), "%=": (operator.imod, operator.mod),
        "**=": (operator.ipow, operator.pow), "@=": (operator.imatmul, operator.matmul),
        "&=": (operator.iand, operator.and_), "|=": (operator.ior, operator.or_),
        "^=": (operator.ixor, operator.xor), "<<=": (operator.ilshift, operator.lshift),
        ">>=": (operator.irshift, operator.rshift)}


def aug_assign(old, op, value):
    """``old op= value``: in place (plain Python) when every lane is
    active, else a masked out-of-place update."""
    inplace, outplace = _AUG[op]
    comp = _owned()
    if comp is not None:
        return _compacted_assign(comp, old, outplace(_read(comp.take(old)), value))
    if _ACTIVE.get() is None:
        return inplace(old, value)
    return _assign(old, outplace(_read(old), value))


def setattr_(obj, name, value):
    """``obj.name = value`` for the active lanes."""
    old = getattr(obj, name, None)
    comp = _owned()
    setattr(obj, name, _assign(old, value) if comp is None
            else _compacted_assign(comp, old, value, keep=False))
