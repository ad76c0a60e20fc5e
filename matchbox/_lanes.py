"""Per-context execution-lane state.

Inside ``@batch`` control flow some examples (lanes) are dormant.  The mask of
active lanes lives in a :class:`contextvars.ContextVar`, so every thread and
every asyncio task sees its own; it is never a module global.  Op rules that
could raise or poison gradients for a dormant lane (an index out of range, a
``log`` of a negative number) read it with :func:`active_lanes`.
"""
from contextlib import contextmanager
from contextvars import ContextVar

_ACTIVE = ContextVar("matchbox_active_lanes", default=None)
# the compaction of the @batch while loop running on its live lanes only
# (transform/compaction.py), or None
_COMPACT = ContextVar("matchbox_compaction", default=None)


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
