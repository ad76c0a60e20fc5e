"""Iterables whose items exist only in some lanes: ``range`` with
per-example bounds, and the per-lane ``enumerate``, ``zip`` and
``reversed`` that ``for`` loops under ``@batch`` call instead of the
builtins (plain builtins when nothing is per-example)."""
import builtins

import torch

from ..._lanes import _ACTIVE, active_lanes
from ...core import MaskedBatch
from ...ops.steps import Steps
from .list_items import reversed_list
from .perlane import per_lane
from .pyvalues import PerExample, held_by
from .select import select

_new = MaskedBatch._new


def per_example_items(iterable):
    """What a ``for`` under ``@batch`` walks: for a MaskedBatch, each
    example's own items along its first dimension (``x.unbind(0)``: for
    ``words`` of per-example shape ``(n, d)``, the ``n`` words of each)."""
    return iterable.unbind(0) if type(iterable) is MaskedBatch else iterable


class LaneIterable:
    """An iterable whose items exist only in some lanes (``range(n)`` with a
    per-example ``n``): ``lane_items()`` yields ``(item, presence)``."""

    def lane_items(self):
        raise NotImplementedError


def presence(item):
    """The lanes in which ``item`` exists (None: all), read from masks."""
    if type(item) is MaskedBatch or type(item) is PerExample:
        return held_by(item)
    if isinstance(item, (tuple, list)):
        p = None
        for x in item:
            q = presence(x)
            if q is not None:
                p = q if p is None else p & q
        return p
    return None


def lane_items(iterable):
    if isinstance(iterable, LaneIterable):
        yield from iterable.lane_items()
    elif type(iterable) is PerExample:   # each example's own items
        yield from iterable._lane_items()
    else:
        for item in per_example_items(iterable):
            yield item, presence(item)


def _lane_vector(x):
    d = x.padded_data
    return d.reshape(d.size(0))


class LaneRange(LaneIterable):
    """``range(start, stop, step)`` where start or stop differ per example."""

    def __init__(self, start, stop, step, reverse=False):
        if isinstance(step, MaskedBatch):
            raise NotImplementedError("range() with a per-example step is not supported by @batch")
        if step == 0:
            raise ValueError("range() arg 3 must not be zero")
        self.start, self.stop, self.step, self.reverse = start, stop, step, reverse

    def __reversed__(self):
        return LaneRange(self.start, self.stop, self.step, not self.reverse)

    def _bounds(self):
        lanes = active_lanes()
        vals = {}
        for name in ("start", "stop"):
            v = getattr(self, name)
            if isinstance(v, MaskedBatch):
                vec = _lane_vector(v).long()
                sel = vec if lanes is None else vec[lanes]
                vals[name] = (vec, int(sel.min()) if sel.numel() else 0,
                              int(sel.max()) if sel.numel() else 0)
            else:
                v = int(v)
                vals[name] = (v, v, v)
        return vals

    def lane_items(self):
        b = self._bounds()
        start, lo_start, hi_start = b["start"]
        stop, lo_stop, hi_stop = b["stop"]
        step = self.step
        if step > 0:
            values = list(range(lo_start, hi_stop, 1))
        else:
            values = list(range(hi_start, lo_stop, -1))
        if self.reverse:
            values = values[::-1]
        for i in values:
            off = (i - start) if step > 0 else (start - i)
            if step > 0:
                p = (start <= i) & (stop > i) if isinstance(start, torch.Tensor) else (stop > i) & (i >= start)
            else:
                p = (start >= i) & (stop < i) if isinstance(start, torch.Tensor) else (stop < i) & (i <= start)
            if isinstance(off, torch.Tensor):
                p = p & (off % abs(step) == 0)
            elif off % abs(step):
                continue
            if isinstance(p, bool):
                if p:
                    yield i, None
                continue
            yield i, p


def range_(*args):
    """``range`` that accepts per-example bounds."""
    if not any(isinstance(a, MaskedBatch) for a in args):
        return builtins.range(*args)
    if len(args) == 1:
        return LaneRange(0, args[0], 1)
    return LaneRange(args[0], args[1], args[2] if len(args) > 2 else 1)


class _LaneEnumerate(LaneIterable):
    def __init__(self, iterable, start):
        self.iterable, self.start = iterable, start

    def lane_items(self):
        counts = None
        k = self.start
        for item, p in lane_items(self.iterable):
            if p is None and counts is None:
                yield (k, item), None
                k += 1
                continue
            if counts is None:
                B = p.size(0)
                counts = torch.full((B,), k, dtype=torch.long, device=p.device)
            sel = counts if p is None else counts[p]
            if sel.numel() and int(sel.min()) == int(sel.max()):
                idx = int(sel.min())
            else:
                idx = _new(counts.clone(), None, (), bdim=None)
            yield (idx, item), p
            counts = counts + (1 if p is None else p.long())


def enumerate_(iterable, start=0):
    """``enumerate`` that counts per lane over items that exist only in some lanes."""
    return _LaneEnumerate(iterable, start)


class _LaneZip(LaneIterable):
    def __init__(self, iterables):
        self.iterables = iterables

    def lane_items(self):
        for pairs in builtins.zip(*[lane_items(it) for it in self.iterables]):
            item = tuple(v for v, _ in pairs)
            p = None
            for _, q in pairs:
                if q is not None:
                    p = q if p is None else p & q
            yield item, p


def zip_(*iterables):
    if any(isinstance(it, LaneIterable) for it in iterables):
        return _LaneZip(iterables)
    return builtins.zip(*iterables)


class _LaneReversed(LaneIterable):
    def __init__(self, items):
        self.items = items

    def lane_items(self):
        for item, p in reversed(list(lane_items(self.items))):
            yield item, p


def sum_(iterable, start=0):
    """``sum(items, start)``: each example's sum of its own items (the
    steps of ``x.unbind(d)``, a per-example list, a generator over them):
    an item adds only in the lanes that hold it."""
    if type(iterable) is Steps and iterable:
        x, d = iterable._src()
        return start + iterable._like(x.sum(d))
    if type(iterable) is PerExample:   # each example's own sequence (of Python values)
        return per_lane(builtins.sum, (iterable, start))
    out = start
    for item in iterable:
        held = held_by(item)
        if held is None:
            out = out + item
            continue
        lanes = active_lanes()
        token = _ACTIVE.set(held if lanes is None else lanes & held)
        try:
            out = select(held, out + item, out)
        finally:
            _ACTIVE.reset(token)
    return out


def reversed_(seq):
    seq = per_example_items(seq)
    if type(seq) is list:
        return reversed_list(seq)
    if type(seq) is PerExample:   # each example's own items, reversed
        return seq.__reversed__()
    if hasattr(seq, "per_example_reversed"):  # the steps of x.unbind(d), d dynamic
        return seq.per_example_reversed()
    if isinstance(seq, LaneRange):
        return reversed(seq)
    if isinstance(seq, LaneIterable):
        return _LaneReversed(seq)
    return builtins.reversed(seq)
