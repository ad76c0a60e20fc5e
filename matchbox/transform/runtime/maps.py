"""A ``for`` over the steps of a dynamic dim whose iterations share no
state (``transform/maps.py``): ``map_loop`` runs its body once, with every
(example, step) pair a lane of its own.

    with _mb.map_loop(desc, max, True, words.unbind(1), letters.unbind(1)) as loop:
        for word, spelling in loop:        (one iteration: every word of every sentence)
            ...
            loop.append(out, e)            (out.append(e): made step by step after the body)

The loop's item is each iterable's source with the step dim folded into
the lanes, the pairs that exist (and whose example is active) gathered: one
index per iterable instead of one iteration per step.  A value read from
before the loop is gathered to the pairs' examples (``MapCompaction``); a
branch that few pairs take runs gathered on them, so its body runs once for
the whole loop.  After the body each recorded append is split back into the
steps and appended as the loop would have, step by step, in the lanes that
appended it.  Anything else (a loop inside a compaction, an iterable other
than steps of dynamic dims, a compiled run) runs as a plain ``for_loop``.
"""
import torch

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from ...ops.shape import Steps
from .compaction import MapCompaction, owned
from .iterables import zip_
from .lists import _append_owned
from .loops import for_loop
from .select import rebuilt
from .values import Mixed

_new = MaskedBatch._new

# A loop runs as a map unless the values it reads from before it, gathered
# to every step, would copy more than MAX_COPY times its items' bytes (and
# over 1 MiB): a memory bound, so that a map never needs much more memory
# than the loop's own steps.
MAX_COPY = 4


class map_loop(for_loop):
    """``with map_loop(desc, max, zipped, reads, *its) as loop: for t in loop: body``:
    the loop over ``zip(*its)`` (``zipped``) or ``its[0]`` (see above);
    ``reads()``: the values from before the loop that the body reads."""

    def __init__(self, owner, description, max_iterations, zipped, reads, *iterables):
        super().__init__(owner, zip_(*iterables) if zipped else iterables[0], None, description,
                         max_iterations)
        self.zipped, self.reads, self.iterables = zipped, reads, iterables
        self.map, self.running = None, False

    def __exit__(self, kind, error, tb):
        if self.running:  # the body raised
            _COMPACT.reset(None)
            self.running = False
            if isinstance(error, Exception):
                error.add_note(
                    f"(matchbox: raised in {self.description}, run once over every (example, "
                    f"step) pair since its steps share no state (docs/batch.md). If batch sizes "
                    f"differ: a value of the whole batch reached it other than through a "
                    f"variable, e.g. an attribute of self; read it into a variable before the "
                    f"loop, or use @batch(compact=False))")
        return super().__exit__(kind, error, tb)

    def __iter__(self):
        sources = _sources(self.iterables)
        if sources is None or _COMPACT.get() is not None or torch.compiler.is_compiling():
            yield from super().__iter__()
            return
        presences = [steps.presences() for steps, _ in sources]          # (B, T_i)
        T = min(p.size(1) for p in presences)   # zip: as far as the shortest
        presence = presences[0][:, :T]
        for p in presences[1:]:
            presence = presence & p[:, :T]
        if self.alive is not None:
            presence = presence & self.alive[:, None]
        B, T = presence.shape
        if self.max_iterations is not None and T > self.max_iterations:
            yield from super().__iter__()
            return
        pairs = presence.reshape(-1).nonzero().squeeze(1)                # example-major
        if pairs.numel() in (0, B):  # (B: a pair's lanes would read as the batch's)
            yield from super().__iter__()
            return
        rows, t = pairs // T, pairs % T
        item = tuple(_fold(x, d, steps[0], rows * p.size(1) + t)
                     for (steps, (x, d)), p in zip(sources, presences))
        if not self._worth_it(item, pairs.numel() / B):
            yield from super().__iter__()
            return
        self.map = MapCompaction(rows, B, self.owner, self.description)
        self.presence = presence
        _COMPACT.set(self.map)  # (over None: a map runs in no other compaction)
        _ACTIVE.set(None)
        self.running = True
        yield item if self.zipped else item[0]
        self.map.check()
        _COMPACT.reset(None)
        self.running = False
        self._append_steps(pairs, B, T)
        _ACTIVE.set(self.alive)

    def _worth_it(self, item, steps):
        """False when gathering the values the body reads from before the
        loop (``steps`` copies of each example's, on average) would copy
        much more than the loop's items: a large value read at every step
        (an attention memory) is better read by one step at a time.  False
        too when one is a per-example list or holds values of different
        ranks (``Mixed``), which cannot be gathered."""
        try:
            reads = self.reads()
        except NameError:  # (one not bound yet on this path)
            return False
        if any(type(v) is Mixed or type(v) is list and any(
                getattr(x, "_listed", None) is not None for x in v) for v in reads):
            return False   # (a per-example list, a variable holding ranks that differ)

        def size(v):
            if type(v) is list:
                return sum(map(size, v))
            return v.padded_data.numel() * v.padded_data.element_size() \
                if type(v) is MaskedBatch else 0
        copied = steps * sum(map(size, reads))
        return copied <= MAX_COPY * sum(map(size, item)) + 2 ** 20

    def append(self, lst, value):
        """``lst.append(value)`` in the body (``lst`` from before the loop)."""
        comp = _COMPACT.get()
        if self.map is not None and comp is not None \
                and (comp is self.map or getattr(comp, "parent", None) is self.map):
            self.map.record(lst, value)
        else:
            _append_owned(lst, value, owned(self.owner))

    def _append_steps(self, pairs, B, T):
        """Make the body's appends, step by step, in the lanes that made them."""
        records = self.map.records
        if not records:
            return
        grids = []
        for _, value, lanes in records:
            grid = self.presence if lanes is None else \
                _into(lanes, pairs, B * T).view(B, T)
            grids.append(grid)
        counts = torch.stack([g.sum(0) for g in grids]).tolist()
        parts = [_split(value, pairs, B, T) for _, value, _ in records]
        for t in range(T):
            for k, (lst, _, _) in enumerate(records):
                if counts[k][t]:
                    lanes = None if counts[k][t] == B else grids[k][:, t]
                    token = _ACTIVE.set(lanes)
                    try:
                        _append_owned(lst, parts[k](t), None)
                    finally:
                        _ACTIVE.reset(token)


def _sources(iterables):
    """``[(steps, (x, d))]``: the steps of dynamic dims the loop walks
    (each ``x.unbind(d)``), else None."""
    out = []
    for it in iterables:
        source = getattr(it, "_source", None) if isinstance(it, Steps) else None
        if source is None:
            return None
        x, d = source
        if x._present is not None or x._sizes is not None or x._mask is None or not it:
            return None
        out.append((it, source))
    return out


def _fold(x, d, like, pairs):
    """The steps of ``x`` along data dim ``d`` at ``pairs`` (indices into
    the example-major ``(B * n_d)`` pairs): one lane per pair, each laid out
    as the step ``like``."""
    data = x.padded_data
    B, T = data.size(0), data.size(d)
    rest = data.shape[1:d] + data.shape[d + 1:]
    flat = data.movedim(d, 1).reshape((B * T,) + rest).index_select(0, pairs)
    dims = like.dims
    mask = None
    if any(dims):
        m = x._mask
        shape = list(m.shape)
        shape[0], shape[d] = B, T   # (static dims keep their size-1 mask dims)
        m = m.expand(shape).movedim(d, 1)
        mask = m.reshape((B * T,) + m.shape[2:]).index_select(0, pairs)
    return _new(flat, mask, dims, bdim=like._bdim)


def _into(y, pairs, n):
    return y.new_zeros((n,) + y.shape[1:]).index_copy(0, pairs, y)


def _split(value, pairs, B, T):
    """``t -> value's lanes of step t`` (as a value of the ``B`` examples)."""
    if isinstance(value, (tuple, list)):
        parts = [_split(v, pairs, B, T) for v in value]
        return lambda t: rebuilt(value, [p(t) for p in parts])
    if type(value) is not MaskedBatch:
        if isinstance(value, (Mixed, dict)):
            raise NotImplementedError(
                f"a loop run once over all its steps (a map, docs/batch.md) appended a "
                f"{type(value).__name__}; append tensors (or tuples of them), or decorate with "
                f"@batch(compact=False)")
        return lambda t: value   # the same in every example (a plain Tensor, a number)
    data = _into(value.padded_data, pairs, B * T)
    data = data.view((B, T) + data.shape[1:])
    mask = value._mask
    if mask is not None:
        mask = _into(mask.expand((pairs.numel(),) + mask.shape[1:]), pairs, B * T)
        mask = mask.view((B, T) + mask.shape[1:])
    present, sizes = value._present, value._sizes
    if present is not None:
        present = _into(present, pairs, B * T).view(B, T)
    if sizes is not None:
        sizes = {k: _into(n, pairs, B * T).view(B, T) for k, n in sizes.items()}
    return lambda t: _new(data[:, t], None if mask is None else mask[:, t], value.dims,
                          bdim=value._bdim, present=None if present is None else present[:, t],
                          sizes=None if sizes is None else {k: n[:, t] for k, n in sizes.items()})
