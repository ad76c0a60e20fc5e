"""Per-thread execution-lane state.

Inside ``@batch`` control flow some examples (lanes) are dormant.  The mask of
active lanes lives in per-thread storage (:class:`threading.local`), so every
thread sees its own; it is never a module global.  Not a
:class:`contextvars.ContextVar`: torch.compile cannot trace ``ContextVar.get``
and would break the graph at every op rule that reads the lanes.  The state is
set and reset within one synchronous ``@batch`` call, so per thread is per
call.  Op rules that
could raise or poison gradients for a dormant lane (an index out of range, a
``log`` of a negative number) read it with :func:`active_lanes`.
"""
import threading
from contextlib import contextmanager


class _Local(threading.local):
    """One thread's value of a ``_Slot`` (None until set: an attribute read
    is ~5x faster than ``getattr`` with a default, and the runtime reads
    the lanes several hundred times a loop step).  Set in every thread's
    ``__init__``, not as class defaults: torch.compile then guards on
    their values, not on whether this thread has set them yet."""

    def __init__(self):
        self.value = self.reads = None


class _Slot:
    """A per-thread variable with ContextVar's ``get``/``set``/``reset``
    (``set`` returns the token that ``reset`` restores: the old value)."""

    def __init__(self):
        self._local = _Local()

    def get(self):
        return self._local.value

    def set(self, value):
        token = self.get()
        self._local.value = value
        return token

    def reset(self, token):
        self._local.value = token


class _LaneSlot(_Slot):
    """The active lanes, and the reads made under them (``reads``): each
    change of the lanes drops those, so they never outlive the region that
    made them."""

    def set(self, value):
        self._local.reads = None
        return super().set(value)

    def reset(self, token):
        self._local.reads = None
        super().reset(token)

    def reads(self):
        """The dict that @batch's ``read`` keeps the reads made under the
        active lanes in, so that every read of one value there shares one
        gradient cut (transform/runtime/assign.py)."""
        reads = self._local.reads
        if reads is None:
            reads = self._local.reads = {}
        return reads


_ACTIVE = _LaneSlot()
# the compaction of the @batch while loop running on its live lanes only
# (transform/runtime/compaction.py), or None
_COMPACT = _Slot()


def active_lanes():
    """The bool Tensor ``(B,)`` of active lanes, or ``None`` when all are."""
    return _ACTIVE.get()


@contextmanager
def lanes(mask):
    """Run the body with ``mask`` (a bool Tensor ``(B,)`` or ``None``) as the
    active lanes.  Nested uses must pass the already-combined mask."""
    token = _ACTIVE.set(mask)
    try:
        yield mask
    finally:
        _ACTIVE.reset(token)


def batch_size_hint():
    """Advice to add to a batch-size mismatch, when a compacted loop runs."""
    comp = _COMPACT.get()
    if comp is None:
        return ""
    return (f" ({comp.description} runs on its {comp.n} live lanes of {comp.B} "
            f"(@batch(compact=...)); a value of the full batch reached it without a "
            f"read of the loop's function, e.g. returned by a call: bind it to a local "
            f"variable before the loop, or leave compaction off)")
