"""Lane compaction for divergent ``while`` loops (``@batch(compact=...)``).

When few lanes are left in a long loop, the dormant ones still cost
compute in every op.  With compaction on, once the share of lanes still
in a ``while`` loop drops to ``compact`` or below, each later iteration
runs on the live lanes only:

- reads (``_mb.read``) of a full-batch value gather its live rows, once
  per iteration and value;
- stores (``_mb.assign``, ``aug_assign``, ``setattr_``) scatter the result
  back into the full-batch value, so after the loop every variable holds
  all of its lanes again; ``append`` scatters its item too;
- the loop test's result is widened back to the full batch;
- inside, every compacted lane is active: ops take their unmasked paths.

Only the function that owns the loop (its code and the lambdas in it)
gathers and scatters; functions it calls see compacted values only.
Loop temporaries (see ``analysis.loop_temporaries``) stay compacted: they
are rebound before every read.  An in-place change to a gathered copy would
be lost, so it raises instead (the check runs at every loop test).
"""
from ..core import MaskedBatch
from ..ops._registry import scatter_rows

_new = MaskedBatch._new


def function_codes(code):
    """``code`` and the code objects nested in it (its lambdas)."""
    out, todo = set(), [code]
    while todo:
        c = todo.pop()
        out.add(c)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_consts"))
    return frozenset(out)


class Compaction:
    """The live lanes ``alive`` (bool ``(B,)``) of a loop, as the ``n`` rows
    that this iteration runs on."""

    def __init__(self, alive, codes, description):
        self.alive, self.codes, self.description = alive, codes, description
        self.rows = alive.nonzero().squeeze(1)
        self.B, self.n = alive.numel(), self.rows.numel()
        self.cache = {}

    def full(self, x):
        return type(x) is MaskedBatch and x.data.size(0) == self.B

    def compacted(self, x):
        return type(x) is MaskedBatch and x.data.size(0) == self.n

    def gather(self, x):
        """The live rows of a full-batch MaskedBatch (cached per iteration)."""
        hit = self.cache.get(id(x))
        if hit is not None:
            return hit[1]
        mask = x._mask
        if mask is not None and mask.size(0) == self.B:
            mask = mask.index_select(0, self.rows)
        g = _new(x.data.index_select(0, self.rows), mask, x.dims, x._zero)
        self.cache[id(x)] = (x, g, g.data, g.data._version)
        return g

    def expand(self, x):
        """A compacted MaskedBatch as a full-batch one (0 and mask False in
        the other lanes, which callers replace)."""
        mask = x._mask
        if mask is not None:
            mask = scatter_rows(mask.expand((self.n,) + mask.shape[1:]), self.rows, self.B)
        return _new(scatter_rows(x.data, self.rows, self.B), mask, x.dims, x._zero)

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
            if g.data is not data or data._version != version:
                raise RuntimeError(
                    f"{self.description} runs compacted (@batch(compact=...)) and a value it "
                    f"read was changed in place (an in-place op, x[...] = v or inplace=True); "
                    f"the change would only reach a copy of the live lanes. Write it out of "
                    f"place (x = x + v, torch.where) or leave compaction off for this function")
