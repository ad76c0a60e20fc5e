"""Loops whose lanes leave one by one: ``while_loop`` and ``for_loop``,
the context managers that lowered ``while`` and ``for`` statements run in
(see transform/loops.py)."""
import torch

from ..._lanes import _ACTIVE, _COMPACT, active_lanes
from ...core import MaskedBatch
from ...ops.steps import Steps
from ..errors import LoopLimitError
from .compaction import Compaction, StepCompaction
from .conditions import _combine, _inside, cond
from .iterables import LaneIterable, lane_items, per_example_items
from .lists import _STEP, step_lanes
from .select import rebuilt
from .steps import compiled_step, eager

_new = MaskedBatch._new


class _Loop:
    def __init__(self, owner, description, max_iterations, compact=None):
        """``compact``: the share of lanes at which the loop compacts (see
        compaction.py); only the code of the function that made the loop
        (whose runtime is ``owner``) gathers and scatters."""
        self.owner, self.description, self.max_iterations = owner, description, max_iterations
        self.count = 0
        self.compact, self.compaction = compact, None

    def __enter__(self):
        self.outer = active_lanes()
        self.alive = self.outer
        self.token = _ACTIVE.set(self.outer)
        if self.compact is not None:  # the loop's compaction is undone when it ends
            self.compact_token = _COMPACT.set(_COMPACT.get())
        return self

    def __exit__(self, *exc):
        if self.compact is not None:
            _COMPACT.reset(self.compact_token)
        _ACTIVE.reset(self.token)
        return False

    def _tick(self):
        self.count += 1
        if self.max_iterations is not None and self.count > self.max_iterations:
            lanes = self.alive
            which = "" if lanes is None else f" (examples {lanes.nonzero().flatten().tolist()})"
            raise LoopLimitError(
                f"{self.description} ran more than max_iterations={self.max_iterations} "
                f"iterations{which}; some example never leaves it")

    def _narrow_alive(self, c):
        """Lanes where ``c`` is false leave the loop for good; False when
        no lane is left."""
        c = cond(c)
        if isinstance(c, bool):
            return c
        lanes = _inside(_combine(self.alive, c), self.alive)
        n = int(lanes.sum())
        if self.alive is None and n == lanes.numel() > 0:
            return True   # every lane stays (and there is one: B=0 ends at once)
        self.alive = lanes
        _ACTIVE.set(lanes)
        return n > 0


class while_loop(_Loop):
    """``with while_loop(desc, max) as loop: while loop.test(cond): body``.

    With ``compact`` (a share of lanes, from ``@batch(compact=...)``), the
    iterations after the live share drops to it or below run on the live
    lanes only (see compaction.py)."""

    def test(self, c):
        self._tick()
        if self.compaction is not None:
            self.compaction.check()
            c = self.compaction.widen(c)
        go = self._narrow_alive(c)
        if go and self.compact is not None and self.alive is not None \
                and _COMPACT.get() is self.compaction:  # never inside another's compaction
            self.compaction = None
            if int(self.alive.sum()) <= self.compact * self.alive.numel():
                self.compaction = Compaction(self.alive, self.owner, self.description)
                _ACTIVE.set(None)  # every live lane is active
            _COMPACT.set(self.compaction)
        return go


def _lane_masks_dropped(item):
    """``item`` without a mask that only says which lanes hold it (a step of
    ``x.unbind(d)`` with static dims): inside the iteration the active
    lanes say that already, and an unmasked item keeps the body's ops and
    masked updates on their fast paths."""
    if isinstance(item, (tuple, list)):
        return rebuilt(item, [_lane_masks_dropped(x) for x in item])
    if isinstance(item, MaskedBatch) and item._mask is not None \
            and item._mask.numel() == item._mask.size(0):
        return _new(item.padded_data, None, item.dims, bdim=item._bdim)
    return item


class for_loop(_Loop):
    """``with for_loop(it, extra, desc, max) as loop: for t in loop: body``.

    An iteration runs for the lanes that have the item (a MaskedBatch item
    whose mask is False in some lanes, a per-example ``range``) and that
    ``extra()`` (break/return flags) has not sent out of the loop.

    With ``compact`` (from ``@batch(compact=...)``), a loop over the steps
    of a dynamic dim with no break or return, entered with every lane
    active, runs compacted from the first step at which no more than that
    share of the lanes have it (see ``StepCompaction``); the variables it
    assigns are put back together after it by ``loop.settle(x)``."""

    def __init__(self, owner, iterable, extra, description, max_iterations, compact=None,
                 masked=None):
        super().__init__(owner, description, max_iterations, compact)
        self.iterable, self.extra = per_example_items(iterable), extra
        # every step masked, with no host read (compiled; see __iter__)
        self.masked = torch.compiler.is_compiling() if masked is None else masked

    def __enter__(self):
        self.outer_step = _STEP.get()  # a loop around this one's (step_lanes)
        return super().__enter__()

    def __exit__(self, *exc):
        _STEP.set(self.outer_step)
        return super().__exit__(*exc)

    def __iter__(self):
        # compiled, no lane count is read: every step with an item in some
        # lane runs masked (the longest example's steps; a graph has no host reads)
        masked = self.masked
        steps = _Steps.of(self.iterable, masked)
        items = lane_items(self.iterable) if steps is None else zip(self.iterable, steps.lanes)
        compacts = self.compact is not None and steps is not None and steps.shrinking \
            and self.alive is None and self.extra is None and _COMPACT.get() is None \
            and not masked
        last = self.alive  # the lanes of the last iteration that ran
        for t, (item, p) in enumerate(items):
            _ACTIVE.set(self.alive)
            self._tick()
            if self.extra is not None and not self._narrow_alive(self.extra()):
                return
            if p is None:
                _ACTIVE.set(self.alive)
            else:
                lanes = _combine(self.alive, p)
                if masked:
                    n = None
                else:
                    n = steps.counts[t] if steps is not None and self.alive is None \
                        else int(lanes.sum())
                    if n == 0:
                        continue
                if steps is not None and steps.shrinking:
                    step_lanes(lanes, last)
                # every lane active: no masked work at all in this iteration
                last = None if n == lanes.numel() else lanes
                _ACTIVE.set(last)
                item = _lane_masks_dropped(item)
                if compacts and last is not None and n <= self.compact * lanes.numel():
                    item = self._compacted(item, n, lanes, steps)
            yield item
        if self.compaction is not None:
            self.compaction.check()
        _ACTIVE.set(self.alive)

    def _compacted(self, item, n, lanes, steps):
        """Run this iteration on its ``n`` lanes only; its item compacted."""
        comp = self.compaction
        if comp is None:
            comp = self.compaction = StepCompaction(steps.presences.sum(1), self.owner,
                                                    self.description)
            _COMPACT.set(comp)
        comp.step(n, lanes)
        _ACTIVE.set(None)  # every live lane is active
        return comp.rows_of(item)

    def settle(self, x):
        """Variable ``x`` after the loop, holding every example again."""
        return x if self.compaction is None else self.compaction.settle(x)


def step_loop(owner, body, iterable, description, max_iterations, lists, args, back):
    """A ``for`` whose body the rewrite made a function (transform/steps.py):
    ``body(*lists, item, *args)`` for each item of ``iterable()``, under
    the item's lanes; what it returns goes back to ``args[back[0]]``,
    ``args[back[1]]``, ... for the next step, and is returned at the end.

    Under torch.compile a loop over per-example steps (``x.unbind(1)``, a
    per-example ``range``) runs outside the graph (``eager``) and each
    step as one compiled graph, the same for every step with the same
    shapes (runtime/steps.py): compiling takes a step's time, not the
    loop's.  A loop over a Python list or a ModuleList is traced into the
    graph as before."""
    if torch.compiler.is_compiling() and isinstance(iterable(), (Steps, MaskedBatch,
                                                                  LaneIterable)):
        return _compiled_loop(owner, body, iterable, description, max_iterations, lists, args,
                              back)
    return _loop(owner, body, iterable, description, max_iterations, lists, args, back)


def _loop(owner, body, iterable, description, max_iterations, lists, args, back,
          compiled=False):
    args, seen = list(args), set()
    with for_loop(owner, iterable(), None, description, max_iterations,
                  masked=True if compiled else None) as loop:
        for item in loop:
            step = (item,) + tuple(args)
            state = compiled_step(body, lists, step, seen, back) if compiled \
                else body(*lists, *step)
            for i, value in zip(back, state):
                args[i] = value
    return tuple(args[i] for i in back)


@eager
def _compiled_loop(*args):
    return _loop(*args, compiled=True)


class _Steps:
    """The lanes of each step of ``x.unbind(d)`` over a dynamic dim and
    their counts, read with one host transfer for the whole loop instead of
    one per iteration.  Masks are prefixes, so each step's lanes lie within
    the last one's (``shrinking``; checked in the same transfer): appends
    in the loop then know, without reading the device, that every active
    lane holds every item so far."""

    def __init__(self, presences, masked):  # (B, T) bool
        self.presences, self.lanes = presences, presences.t().unbind(0)
        if masked:  # no host read: masks are prefixes (SPEC), counts unknown
            self.counts, self.shrinking = None, True
            return
        shrinking = (presences[:, 1:] <= presences[:, :-1]).all()
        host = torch.cat([presences.sum(0), shrinking.long().view(1)]).tolist()
        self.counts, self.shrinking = host[:-1], bool(host[-1])

    @classmethod
    def of(cls, iterable, masked):
        presences = getattr(iterable, "presences", None)
        return None if presences is None else cls(presences(), masked)
