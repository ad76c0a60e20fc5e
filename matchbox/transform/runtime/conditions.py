"""Per-lane conditions and branches.

``cond`` turns a test into a Python bool (plain Python semantics) or the
bool Tensor ``(B,)`` of lanes where it holds; ``not_``/``and_``/``or_``
combine tests lane by lane; ``if_true``/``if_false`` narrow the active
lanes for a branch; ``if_exp`` is ``a if c else b`` per lane.
"""
import torch

from ..._lanes import _ACTIVE, _COMPACT, active_lanes
from ...core import MaskedBatch
from .branch_compaction import branch_compaction
from .list_items import list_len
from .regions import _combine, _inside, _under
from .pyvalues import PerExample
from .select import select
from .values import Undefined

_NONE = object()  # no compaction token to reset

_new = MaskedBatch._new


def cond(value):
    """A condition evaluated once: a Python bool (plain Python semantics) or,
    for a MaskedBatch, the bool Tensor ``(B,)`` of lanes where it holds."""
    if isinstance(value, MaskedBatch):
        d = value.padded_data
        B = d.size(0)
        if d.shape[1:].numel() != 1:  # (not d[0]: a batch may hold no example)
            raise ValueError(
                f"a per-example condition must hold one value per example, but it has "
                f"per-example shape {tuple(d.shape[1:])}; reduce it with .any() or .all()")
        c = d.reshape(B) != 0 if d.dtype != torch.bool else d.reshape(B)
        if value._mask is not None:
            c = c & value._mask.reshape(B)
        return c
    if type(value) is PerExample:
        return value._truth()
    if type(value) is list and value:  # a list is true where the example's list is not empty
        n = list_len(value)
        return cond(n > 0) if type(n) is MaskedBatch else n > 0
    return bool(value)


def assert_(test, message=None):
    """``assert test, message()`` for every active example: one whose test
    is false (and real) raises AssertionError naming it."""
    c = cond(test)
    if isinstance(c, bool):
        if not c:
            raise AssertionError(*(() if message is None else (message(),)))
        return
    bad = ~c
    if isinstance(test, MaskedBatch):   # (an example that holds no value is no failure)
        if test._mask is not None:
            bad = bad & test._mask.reshape(-1)
        if test._present is not None:
            bad = bad & test._present
    lanes = active_lanes()
    if lanes is not None:
        bad = bad & lanes
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        msg = None if message is None else message()
        if type(msg) is PerExample:
            msg = msg._mb_values[b]
        error = AssertionError(*(() if msg is None else (msg,)))
        if hasattr(error, "add_note"):   # (Python 3.11+)
            error.add_note(f"(matchbox: the assert failed for example {b} of the batch)")
        raise error


def _as_condition_batch(lanes):
    return _new(lanes, None, (), bdim=None)


def not_(value):
    c = cond(value)
    if isinstance(c, bool):
        return not c
    return _as_condition_batch(~c)


def and_(a, b_thunk):
    """``a and b`` in a condition; ``b`` runs only for lanes where ``a``."""
    ca = cond(a)
    if isinstance(ca, bool):
        return b_thunk() if ca else False
    sub = _combine(active_lanes(), ca)
    if not bool(sub.any()):
        return _as_condition_batch(ca)
    cb = cond(_under(sub, b_thunk))
    if isinstance(cb, bool):
        return _as_condition_batch(ca if cb else torch.zeros_like(ca))
    return _as_condition_batch(ca & cb)


def or_(a, b_thunk):
    """``a or b`` in a condition; ``b`` runs only for lanes where not ``a``."""
    ca = cond(a)
    if isinstance(ca, bool):
        return True if ca else b_thunk()
    sub = _combine(active_lanes(), ~ca)
    if not bool(sub.any()):
        return _as_condition_batch(ca)
    cb = cond(_under(sub, b_thunk))
    if isinstance(cb, bool):
        return _as_condition_batch(torch.ones_like(ca) if cb else ca)
    return _as_condition_batch(ca | cb)


# ------------------------------------------------------------------ branches
def _narrow(c):
    """Set the active lanes to the current ones AND ``c``; return the token,
    whether any lane is active and how many are."""
    outer = active_lanes()
    lanes = c if outer is None else _inside(outer & c, outer)
    n = int(lanes.sum())
    if outer is None and n == lanes.numel():
        lanes = None  # every lane takes the branch: no masking needed
    return _ACTIVE.set(lanes), n > 0, n


class if_true:
    """Run the body (``with if_true(c) as run: if run: ...``) for the lanes
    where ``c`` holds.

    ``gather`` (the branch's description, for a branch that may run
    gathered: ``conditionals.py`` decides which) lets the branch run on its
    lanes only, gathered and scattered back (``branch_compaction.BranchCompaction``),
    when few lanes take it: ``share`` is ``@batch(compact=...)``'s share,
    None for the measured rule (``branch_compaction.branch_compaction``).
    ``owner``: the runtime of the function whose code holds the branch;
    ``holder``: a method's ``self``, whose attributes a gathered branch
    gathers and scatters back as it does variables, and those of ``parts``,
    the names of its attributes the branch calls (``self.speller(w)``)."""

    __slots__ = ("owner", "c", "gather", "share", "holder", "parts", "token", "compact_token")

    def __init__(self, owner, c, gather=None, share=None, holder=None, *parts):
        self.owner, self.c, self.gather, self.share = owner, c, gather, share
        self.holder, self.parts = holder, parts

    def _lanes(self):
        return self.c

    def __enter__(self):
        c = self.c
        if isinstance(c, bool):
            self.token = None
            return self._lanes()
        self.compact_token = _NONE
        c = self._lanes()
        self.token, run, n = _narrow(c)
        if run and self.gather is not None:
            lanes = _ACTIVE.get()
            comp = None if lanes is None else branch_compaction(
                lanes, n, self.share, self.owner, self.gather)
            if comp is not None:
                self.compact_token = _COMPACT.set(comp)
                _ACTIVE.set(None)  # every gathered lane is active
                comp.hold_attributes(self.holder, self.parts)
        return run

    def __exit__(self, kind, error, tb):
        if self.token is None and isinstance(self.c, bool):
            return False
        if self.compact_token is not _NONE:
            _COMPACT.get().release_attributes(error is None)
            _COMPACT.reset(self.compact_token)
        _ACTIVE.reset(self.token)
        return False


class if_false(if_true):
    """The ``else`` of :func:`if_true`."""

    __slots__ = ()

    def _lanes(self):
        return not self.c if isinstance(self.c, bool) else ~self.c


def if_exp(c, body, orelse):
    """``body() if c else orelse()``, each side evaluated only for its lanes."""
    c = cond(c)
    if isinstance(c, bool):
        return body() if c else orelse()
    outer = active_lanes()
    yes, no = _combine(outer, c), _combine(outer, ~c)
    a = _under(yes, body) if bool(yes.any()) else Undefined("<if branch>")
    b = _under(no, orelse) if bool(no.any()) else Undefined("<else branch>")
    if isinstance(a, Undefined):
        return b
    if isinstance(b, Undefined):
        return a
    return select(c, a, b)
