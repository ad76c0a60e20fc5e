"""Lane compaction for loops whose lanes leave at different times
(``@batch(compact=...)``).

When few lanes are left in a long loop, the dormant ones still cost
compute in every op.  With compaction on, once the share of lanes still
in a ``while`` loop drops to ``compact`` or below, each later iteration
runs on the live lanes only (:class:`Compaction`):

- reads (``_mb.read``) of a full-batch value gather its live rows, once
  per iteration and value;
- stores (``_mb.assign``, ``aug_assign``, ``setattr_``) scatter the result
  back into the full-batch value, so after the loop every variable holds
  all of its lanes again; ``append`` scatters its item too;
- the loop test's result is widened back to the full batch;
- inside, every compacted lane is active: ops take their unmasked paths.

Only the function that owns the loop (its code and the lambdas in it, which
call the runtime as that function's ``_mb``: the compaction's ``owner``)
gathers and scatters; functions it calls see compacted values only.
Loop temporaries (see ``analysis.loop_temporaries``) stay compacted: they
are rebound before every read.  An in-place change to a gathered copy would
be lost, so it raises instead (the check runs at every loop test).

A ``for`` over the steps of a dynamic dimension (``x.unbind(d)``) is
compacted the same way, but cheaper (:class:`StepCompaction`): the examples
are sorted by length once, so the live lanes of each step are the first
rows of that order, and the values the loop assigns stay compacted from one
iteration to the next instead of being scattered back at every store.

A branch that few lanes take runs gathered the same way: branch_compaction.py.
"""
import torch

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from ...ops._registry import scatter_rows
from .select import rebuilt
from .update import _assign
from .values import Mixed
from .pyvalues import GAP, PerExample

_new = MaskedBatch._new


def owned(owner):
    """The compaction that code calling the runtime as ``owner`` (its
    function's ``_mb``) gathers and scatters for: only the function that
    made the loop or branch does."""
    comp = _COMPACT.get()
    return comp if comp is not None and comp.owner is owner else None


class Compaction:
    """The live lanes ``alive`` (bool ``(B,)``) of a loop, as the ``n`` rows
    that this iteration runs on."""

    def __init__(self, alive, owner, description):
        self.alive, self.owner, self.description = alive, owner, description
        self.rows = alive.nonzero().squeeze(1)
        self.B, self.n = alive.numel(), self.rows.numel()
        self.cache = {}

    def full(self, x):
        t = type(x)
        return t is MaskedBatch and x.padded_data.size(0) == self.B \
            or t is PerExample and len(x._mb_values) == self.B

    def compacted(self, x):
        t = type(x)
        return t is MaskedBatch and x.padded_data.size(0) == self.n \
            or t is PerExample and len(x._mb_values) == self.n

    def _row_list(self):
        rows = self.__dict__.get("_rows_list")
        if rows is None or rows[0] is not self.rows:
            rows = self.__dict__["_rows_list"] = (self.rows, self.rows.tolist())
        return rows[1]

    def gather(self, x):
        """The live rows of a full-batch MaskedBatch (cached per iteration)."""
        hit = self.cache.get(id(x))
        if hit is not None:
            return hit[1]
        g = self.rows_of(x)
        if torch.is_grad_enabled() and type(g) is MaskedBatch:  # (one made under no_grad has
            # no history for later reads)
            self.cache[id(x)] = (x, g, g.padded_data, g.padded_data._version)
        return g

    def rows_of(self, x):
        if type(x) is PerExample:   # (the same objects: a change reaches them)
            return x._take(self._row_list())
        mask = x._mask
        if mask is not None and mask.size(0) == self.B:
            mask = self.mask_rows(mask)
        present = x._present
        if present is not None:
            present = present.index_select(0, self.rows)
        sizes = x._sizes
        if sizes is not None:
            sizes = {d: n.index_select(0, self.rows) for d, n in sizes.items()}
        return _new(x.padded_data.index_select(0, self.rows), mask, x.dims, x._zero, x._bdim,
                    present, sizes)

    def mask_rows(self, mask):
        """The live rows of a full-batch ``mask``, one Tensor for masks that
        are equal (``shared_rows``)."""
        if getattr(self, "_masks_of", None) is not self.rows:  # (kept while the rows are)
            self._masks_of, self._masks = self.rows, {}
        return shared_rows(self._masks, mask, lambda: mask.index_select(0, self.rows))

    def take(self, x):
        """``x`` as this iteration reads it: the live rows of a full-batch
        value (of each, in a tuple)."""
        if isinstance(x, tuple):
            return rebuilt(x, [self.take(v) for v in x])
        return self._take(x)

    def _take(self, x):
        return self.gather(x) if self.full(x) else x

    def keep(self, old, current, new):
        """The value to bind when a variable holding ``old`` (``current`` as
        taken) is assigned ``new``, if it can stay compacted; else None (it
        is scattered back into the full batch)."""
        return None

    def settle(self, x):
        """A variable's value after the loop, every example's again."""
        return x

    def expand(self, x):
        """A compacted MaskedBatch as a full-batch one (0 and mask False in
        the other lanes, which callers replace)."""
        if type(x) is PerExample:
            values = [GAP] * self.B
            for b, v in zip(self._row_list(), x._mb_values):
                values[b] = v
            return PerExample(values)
        mask = x._mask
        if mask is not None:
            mask = scatter_rows(mask.expand((self.n,) + mask.shape[1:]), self.rows, self.B)
        present = x._present
        if present is not None:
            present = scatter_rows(present, self.rows, self.B)
        sizes = x._sizes
        if sizes is not None:
            sizes = {d: scatter_rows(n, self.rows, self.B) for d, n in sizes.items()}
        return _new(scatter_rows(x.padded_data, self.rows, self.B), mask, x.dims, x._zero, x._bdim,
                    present, sizes)

    def lanes(self, lanes):
        """Full-batch lanes for the live lanes' ``lanes`` (None: all live)."""
        if lanes is None:
            return self.alive
        return scatter_rows(lanes, self.rows, self.B)

    def widen(self, c):
        """A loop test computed on the live lanes, as a full-batch value."""
        return self.expand(c) if self.compacted(c) else c

    def check(self):
        """Raise if a gathered copy was changed in place (the change would
        never reach the full-batch value)."""
        for x, g, data, version in self.cache.values():
            if g.padded_data is not data or data._version != version:
                raise RuntimeError(
                    f"{self.description} runs compacted (@batch(compact=...)) and a value it "
                    f"read was changed in place (an in-place op, x[...] = v or inplace=True); "
                    f"the change would only reach a copy of the live lanes. Write it out of "
                    f"place (x = x + v, torch.where) or leave compaction off for this function")


def shared_rows(made, mask, make):
    """``make()``, the rows of bool ``mask`` that a gather or stack takes,
    made once for masks equal to one in ``made`` ({id: (mask, rows)}, kept
    by the caller for one gather): values whose masks are equal without
    being one object (``left``, ``right``, ``word``, ``label`` of a batch of
    trees, each from its own ``fromlist``) then share one, and so the
    bounds, row sets and other caches that rules keep on a mask.  Compared
    on the host (CPU, eagerly) with the masks of the same shape made
    before."""
    hit = made.get(id(mask))
    if hit is not None and hit[0] is mask:
        return hit[1]
    rows = None
    if mask.is_cpu and not torch.compiler.is_compiling():
        rows = next((r for m, r in made.values() if m.shape == mask.shape and torch.equal(m, mask)),
                    None)
    if rows is None:
        rows = make()
    made[id(mask)] = (mask, rows)
    return rows


class StepCompaction(Compaction):
    """A ``for`` over the steps of a dynamic dim whose lanes only shrink
    (each example's steps are a prefix), from the first step at which the
    live share is ``compact`` or below.

    The examples are sorted by length once, longest first (as packed
    sequences are), so every step's live lanes are the first ``n`` rows of
    that ``order``.  A value the loop assigns to a variable is kept
    compacted ("kept": tagged ``_kept = (self, origin, tails)``): when lanes
    leave, the next read cuts it to its first ``n`` rows (a view) and puts
    the rows that left in ``tails``; after the loop ``settle`` puts the
    rows back in example order, taking those of examples that left before
    the compaction began from ``origin`` (the full-batch value the variable
    held then).  No gather or scatter per iteration for loop state: only
    loop items and values read from outside the loop are gathered."""

    def __init__(self, lengths, owner, description):
        self.owner, self.description = owner, description
        self.order = lengths.argsort(descending=True, stable=True)
        self.inverse = self.order.argsort()
        self.B, self.n, self.cache = lengths.numel(), None, {}

    def step(self, n, alive):
        """Start an iteration for the ``n`` longest examples (``alive``:
        those lanes as a full-batch bool)."""
        self.check()
        self.n, self.alive, self.rows = n, alive, self.order[:n]
        self.cache, self.moved = {}, {}

    def _kept(self, x):
        kept = getattr(x, "_kept", None) if type(x) is MaskedBatch else None
        return kept if kept is not None and kept[0] is self else None

    def _take(self, x):
        kept = self._kept(x)
        if kept is None:
            return super()._take(x)
        m = x._data.size(0)
        if m == self.n:
            return x
        hit = self.moved.get(id(x))
        if hit is None:
            # the cut is the loop's bookkeeping, kept for every later read and
            # for settle: it keeps the history whatever the grad mode of the
            # read that made it (a first read under ``with torch.no_grad():``)
            with torch.enable_grad():
                data = x.padded_data
                y = _new(data[:self.n], None, x.dims, bdim=x._bdim)
                y._kept = (self, kept[1], kept[2] + (data[self.n:m],))
            hit = self.moved[id(x)] = (x, y)
        return hit[1]

    def keep(self, old, current, new):
        if type(new) is not MaskedBatch or new._mask is not None or new._data.size(0) != self.n:
            return None
        kept = self._kept(current)
        if kept is not None:
            like, origin, tails = current, kept[1], kept[2]
        elif old is None:  # (or undefined)
            like, origin, tails = new, None, ()
        elif self.full(old) and old._mask is None:
            like, origin, tails = old, old, ()
        else:
            return None
        if like.dims != new.dims or like._data.shape[1:] != new._data.shape[1:] \
                or like._data.dtype != new._data.dtype:
            return None
        out = _new(new.padded_data, None, new.dims, bdim=new._bdim)  # a copy: ``new`` may be bound elsewhere too
        out._kept = (self, origin, tails)
        return out

    def settle(self, x):
        if isinstance(x, tuple):
            return rebuilt(x, [self.settle(v) for v in x])
        kept = self._kept(x)
        if kept is None:
            return x
        _, origin, tails = kept
        data = x.padded_data
        parts = [data, *reversed(tails)]
        top = sum(p.size(0) for p in parts)
        if top < self.B:  # examples that left before the compaction began
            rest = self.order[top:]
            parts.append(data.new_zeros((rest.numel(),) + data.shape[1:]) if origin is None
                         else origin.padded_data.index_select(0, rest))
        return _new(torch.cat(parts).index_select(0, self.inverse), None, x.dims, bdim=x._bdim)



class MapCompaction(Compaction):
    """The body of a map loop (``runtime/maps.py``) run once, each of its
    ``n`` lanes an (example, step) pair, ``rows`` (``(n,)``) the example of
    each.  A value read from outside the loop (``B`` lanes) is gathered to
    those lanes, an example's row repeated for each of its steps; the body
    assigns only variables of its own (``transform/maps.py``), plainly, and
    its appends are recorded (``record``) for the loop to make step by step
    after the body."""

    def __init__(self, rows, B, owner, description):
        self.rows, self.B, self.n = rows, B, rows.numel()
        self.owner, self.description = owner, description
        self.alive, self.cache, self.records = None, {}, []

    def _take(self, x):
        if type(x) is Mixed or type(x) is list and any(
                getattr(v, "_listed", None) is not None for v in x):
            raise NotImplementedError(
                f"{self.description} runs once on every (example, step) pair, and it reads a "
                f"value that holds items of another shape, or a per-example list, from before "
                f"the loop; bind it inside the loop, or decorate with @batch(compact=False)")
        if type(x) is list:
            return [self._take(v) for v in x]
        return super()._take(x)

    def assign(self, old, new, keep=True):
        return _assign(old, new)

    def record(self, lst, value):
        """``lst.append(value)`` in the body, made after it (``lst`` is a
        list from outside the loop, which the body only appends to)."""
        comp, lanes = _COMPACT.get(), _ACTIVE.get()
        if comp is not self:  # in a branch of the body run gathered
            if comp.compacted(value):
                value = comp.expand(value)
            lanes = comp.lanes(lanes)
        self.records.append((lst, value, lanes))
