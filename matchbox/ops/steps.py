"""The steps of ``x.unbind(d)`` over a dynamic dimension: a tuple of as
many batches as the longest example has steps, the ``i``-th holding no
value (``_present`` False) in the examples that have ``i`` steps or fewer.

Read as each example's own tuple (SPEC section 4b: a value computed per
example is per example, a tuple included):

- ``steps[-1]`` is each example's own last step, ``steps[i]`` its own
  ``i``-th (an example without it raises ``IndexError``, as its tuple
  would; under ``@batch`` only the active examples are checked) and
  ``steps[a:b]`` its own slice (``x[:, -1]``, ``x[:, i]``, ``x[:, a:b]``);
- under ``@batch``, ``len(steps)`` is each example's own length (so
  ``for i in range(len(steps))`` runs each example's own steps),
  ``sum(steps)`` its own sum and ``reversed(steps)`` walks its own steps
  from its own last one (the runtime's ``len_``, ``sum_``, ``reversed_``);
- iterating walks the padded steps: a ``for`` loop under ``@batch`` runs
  each step for the examples that have it; elsewhere (plain ``reversed()``
  too) an op that joins a step some examples lack with a value they hold
  raises there (``_registry.keep_presence``).
"""
import operator

import torch

from ..core import MaskedBatch, relabel


class Steps(tuple):
    """``x.unbind(d)`` over a dynamic dim (see the module docstring);
    ``of(x, d)`` records the batch (its batch-of-one dimension at 0) and
    the data dim it was unbound along."""

    def of(self, x, d):
        self._source = (x, d)
        return self

    def _src(self):
        """``(x, d)``; for steps rebuilt from their items (a masked update of
        a variable holding them selects item by item, a compacted loop takes
        each item's rows), the items stacked again (each example's own)."""
        src = getattr(self, "_source", None)
        if src is None:
            items = [relabel(t, 0) if t._bdim != 0 else t for t in tuple.__iter__(self)]
            src = self._source = (torch.stack(items, 1), 1)
        return src

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self._sliced(key)
        if type(key) is not MaskedBatch:
            key = operator.index(key)
        x, d = self._src()
        if not self:
            raise IndexError("tuple index out of range (no example has a step)")
        try:
            return self._like(x[(slice(None),) * d + (key,)])
        except IndexError as e:   # name the steps, not the x[...] they read
            raise IndexError(str(e).replace("x[...]", f"steps[{key}] of x.unbind(...)", 1)
                             + " (its own tuple of steps is shorter)") from None

    def _sliced(self, key):
        x, d = self._src()
        if key.step is not None and key.step < 0:
            if key.start is None and key.stop is None and key.step == -1:
                return self.per_example_reversed()
            raise NotImplementedError(
                f"steps[{key.start}:{key.stop}:{key.step}] of x.unbind(d): a negative step other "
                f"than steps[::-1] is not supported per example; reverse with steps[::-1] first")
        return self._each_like(torch.unbind(x[(slice(None),) * d + (key,)], d))

    def _each_like(self, steps):
        """The steps ``steps`` (of the source, or of a part of it) laid out as
        these are."""
        out = tuple([self._like(s) for s in steps])   # (torch 2.10 cannot compile a generator here)
        return Steps(out).of(*steps._source) if isinstance(steps, Steps) else out

    def _like(self, v):
        """``v`` (a per-example step, made from the source) laid out as the
        steps are (where their batch-of-one dimension sits)."""
        bdim = next(iter(self))._bdim if self else 0   # (the padded first step)
        return v if v._bdim == bdim else relabel(v, bdim)

    def __reversed__(self):   # plain reversed(): the padded steps, last first
        return reversed(tuple(self))

    def per_example_reversed(self):
        """Each example's own steps, from its own last one."""
        x, d = self._src()
        return self._each_like(torch.unbind(torch.flip(x, (d,)), d))

    def presences(self):
        """``(B, n)`` bool: which examples hold each step."""
        from ._registry import prefix_mask
        x, d = self._src()
        return prefix_mask(x, d)

    def lengths(self):
        """Each example's number of steps: an int where they all have the
        same, else a per-example int (a MaskedBatch of one value each)."""
        x, d = self._src()
        n = x._lengths(d)
        lo, hi = torch.stack([n.min(), n.max()]).tolist() if n.numel() else (0, 0)
        return lo if lo == hi else MaskedBatch._new(n, None, (), bdim=None)
