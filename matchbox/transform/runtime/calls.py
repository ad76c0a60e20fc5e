"""Sibling recursive calls run as one call (see transform/sibling_calls.py)."""
import torch

from ..._lanes import _ACTIVE, _COMPACT, _Slot
from ...core import MaskedBatch
from ...ops._registry import scatter_rows, uncut
from .compaction import owned, shared_rows
from .converted import converted
from .lists import _append_owned
from .pyvalues import GAP, PerExample
from .select import rebuilt
from .values import Mixed

_new = MaskedBatch._new

# True while a call that merging could not run goes again unmerged: the
# calls inside it run one after the other too (so a failure deep in a
# recursion is retried once, not once per level)
_UNMERGED = _Slot()


class _Unsplittable(TypeError):
    pass


def sibling_calls(f, *calls, auto=False):
    """``(f(*calls[0]), f(*calls[1]), ...)`` as ONE call of ``f`` on the
    active lanes of every call, stacked: rows ``[k n, (k + 1) n)`` are call
    ``k``'s.  Inside, every stacked lane is active.  Plain calls one after
    the other when the arguments do not stack: a non-MaskedBatch argument
    that differs between the calls, or MaskedBatches of different layouts.

    ``auto``: merged by default (the function has no effects that merging
    could reorder, transform/effects.py), so a stacked call that fails or
    returns what cannot be split between the calls (a list, a plain
    tensor) runs again as plain calls, with merging off inside; only an
    error that the plain calls raise too reaches the caller."""
    f = converted(f)
    lanes = _ACTIVE.get()
    if _UNMERGED.get():
        return tuple(_call(f, args, lanes) for args in calls)
    B = _batch_size(calls)
    if B is None or len({len(args) for args in calls}) != 1 or not all(
            _stackable([args[j] for args in calls], B) for j in range(len(calls[0]))):
        return tuple(_call(f, args, lanes) for args in calls)
    parts = [None if lanes is None else lanes.nonzero().squeeze(1)] * len(calls)
    stacked = _stacked_args(calls, parts, B)
    if stacked is None:
        return tuple(_call(f, args, lanes) for args in calls)
    active, compact = _ACTIVE.set(None), _COMPACT.set(None)
    try:
        out = f(*stacked)
        return _unstacked(out, parts, B)
    except Exception:
        if not auto:
            raise
    finally:
        _COMPACT.reset(compact)
        _ACTIVE.reset(active)
    token = _UNMERGED.set(True)
    try:
        return tuple(_call(f, args, lanes) for args in calls)
    finally:
        _UNMERGED.reset(token)


class SiblingLoop:
    """The recursive calls of a loop over a node's children,
    ``for c in kids: hs.append(f(c))``, run as ONE call after the loop:
    ``defer(hs, *args)`` records each iteration's arguments and active
    lanes, ``run()`` stacks every call's active lanes, calls ``f`` once and
    appends each call's part to its list with the lanes it had, as the
    loop would have (see sibling_calls.py).  Calls that do not stack run
    one by one, at ``run``, with their own lanes.  ``owner``: the runtime
    of the function that holds the loop."""

    def __init__(self, owner, f, auto=False):
        self.owner, self.f, self.auto, self.pending = owner, converted(f), auto, []

    def defer(self, lst, *args):
        """``lst.append(f(*args))`` (``lst`` None: ``f(*args)`` as a statement)."""
        comp = owned(self.owner)
        if _UNMERGED.get() or not any(type(a) in (MaskedBatch, PerExample) for a in args):
            r = _call(self.f, args, _ACTIVE.get())
            return None if lst is None else _append_owned(lst, r, comp)
        self.pending.append((lst, args, _ACTIVE.get(), comp))

    def run(self):
        pending, self.pending = self.pending, []
        if not pending:
            return
        calls = [args for _, args, _, _ in pending]
        B = _batch_size(calls)
        results = None
        if len(pending) > 1 and len({len(args) for args in calls}) == 1 and all(
                _stackable([args[j] for args in calls], B) for j in range(len(calls[0]))):
            results = self._merged(pending, calls, B)
        if results is None:
            token = _UNMERGED.set(True) if len(pending) > 1 else _UNMERGED.get()
            try:
                results = [_call(self.f, args, lanes) for _, args, lanes, _ in pending]
            finally:
                _UNMERGED.reset(token)
        for (lst, _, lanes, comp), r in zip(pending, results):
            if lst is None:
                continue
            active = _ACTIVE.set(lanes)
            try:
                _append_owned(lst, r, comp)
            finally:
                _ACTIVE.reset(active)

    def _merged(self, pending, calls, B):
        parts = [None if lanes is None else lanes.nonzero().squeeze(1)
                 for _, _, lanes, _ in pending]
        stacked = _stacked_args(calls, parts, B)
        if stacked is None:
            return None
        active, compact = _ACTIVE.set(None), _COMPACT.set(None)
        try:
            return _unstacked(self.f(*stacked), parts, B)
        except Exception:
            if not self.auto:
                raise
            return None
        finally:
            _COMPACT.reset(compact)
            _ACTIVE.reset(active)


def recursive(owner, f):
    """``f`` as its own code (whose runtime is ``owner``) calls it (a call
    that merging left plain): run outside the compaction that the caller
    gathers for (a gathered branch or loop of that call, whose reads
    gathered the arguments), as a stacked call does; the callee's code
    would take it for its own."""
    if owned(owner) is None:
        return converted(f)   # (a helper's own calls: rewritten as the helper is)

    def outside(*args, **kwargs):
        token = _COMPACT.set(None)
        try:
            return converted(f)(*args, **kwargs)
        finally:
            _COMPACT.reset(token)
    return outside


def _call(f, args, lanes):
    """``f(*args)`` with ``lanes`` active, as called in the loop; a
    compaction around the loop (a gathered branch) already gathered the
    arguments, so ``f`` (the same function: its code would claim that
    compaction) runs outside it, as the stacked call does."""
    active, compact = _ACTIVE.set(lanes), _COMPACT.set(None)
    try:
        return f(*args)
    finally:
        _COMPACT.reset(compact)
        _ACTIVE.reset(active)


def _batch_size(calls):
    for args in calls:
        for a in args:
            if type(a) is MaskedBatch:
                return a._data.size(0)
            if type(a) is PerExample:
                return len(a._mb_values)
    return None


def _stacked_args(calls, parts, B):
    """The arguments of the stacked call (None: they do not stack: the
    examples' objects are not all distinct, so a store into one, per
    call, would become one store for two calls)."""
    rows = _Rows(parts, B)
    out = []
    for j in range(len(calls[0])):
        values = [args[j] for args in calls]
        if type(values[0]) is MaskedBatch:
            out.append(_stacked(values, parts, rows))
        elif type(values[0]) is PerExample:
            objs = [o for v, p in zip(values, parts)
                    for o in (v._mb_values if p is None else v._take(p.tolist())._mb_values)]
            if len({id(o) for o in objs}) < len(objs) and not all(
                    o is None or type(o) in (bool, int, float, str) for o in objs):
                return None
            out.append(PerExample(objs))
        else:
            out.append(values[0])
    return out


def _stackable(values, B):
    a = values[0]
    if all(v is a for v in values) and type(a) is not PerExample:
        return True
    if type(a) in (bool, int, float, str):
        return all(type(v) is type(a) and v == a for v in values)
    if type(a) is PerExample:
        return all(type(v) is PerExample and len(v._mb_values) == B for v in values)
    return type(a) is MaskedBatch and a._data.size(0) == B and all(
        type(b) is MaskedBatch and a.dims == b.dims and a._data.shape == b._data.shape
        and a._data.dtype == b._data.dtype and (a._mask is None) == (b._mask is None)
        and (a._mask is None or a._mask.shape == b._mask.shape)
        and (a._present is None) == (b._present is None)
        and (a._sizes or {}).keys() == (b._sizes or {}).keys() for b in values)


def _stacked(values, parts, rows):
    """The rows ``parts[k]`` (None: all; the active lanes, so a read's cut
    of the dormant ones is not needed: ``uncut``) of each value ``k``, one
    after the other, with their presence and sizes: one gather (``rows``,
    see ``_Rows``) of the value the calls share, or of the calls' values
    concatenated."""
    def pick(xs):
        if xs[0] is None:
            return None
        if rows.all_rows:
            return torch.cat(xs)
        if all(x is xs[0] for x in xs):
            return xs[0].index_select(0, rows.of_one())
        return torch.cat(xs).index_select(0, rows.of_all())
    a = values[0]
    masks = [v._mask for v in values]
    if masks[0] is not None and all(m is masks[0] for m in masks):
        mask = shared_rows(rows.masks, masks[0], lambda: pick(masks))
    else:
        mask = pick(masks)
    sizes = a._sizes and {d: pick([v._sizes[d] for v in values]) for d in a._sizes}
    return _new(pick([uncut(v) for v in values]), mask, a.dims,
                bdim=a._bdim, present=pick([v._present for v in values]), sizes=sizes)


class _Rows:
    """The rows of a stacked call in its inputs at batch size ``B``, for
    the calls' ``parts`` (each its rows, None: all ``B``), made once per
    call: ``of_one`` when every call reads one shared value, ``of_all``
    when each reads its own (the values concatenated)."""

    def __init__(self, parts, B):
        self.parts, self.B = parts, B
        self.all_rows = all(rows is None for rows in parts)
        self.one = self.all = None
        self.masks = {}  # the stacked masks (see compaction.shared_rows)

    def _each(self):
        device = next(rows for rows in self.parts if rows is not None).device
        return [torch.arange(self.B, device=device) if rows is None else rows
                for rows in self.parts]

    def of_one(self):
        if self.one is None:
            p = self.parts[0]
            self.one = p.repeat(len(self.parts)) if all(r is p for r in self.parts) \
                else torch.cat(self._each())
        return self.one

    def of_all(self):
        if self.all is None:
            self.all = torch.cat([rows + k * self.B for k, rows in enumerate(self._each())])
        return self.all


def _unstacked(out, parts, B):
    """Split a result of the stacked call into the calls' results, back at
    batch size ``B``: ``parts`` holds each call's rows (None: all ``B``;
    rows outside a call's are 0: the caller keeps only its active lanes)."""
    k = len(parts)
    if isinstance(out, tuple):
        split = [_unstacked(o, parts, B) for o in out]
        return tuple(rebuilt(out, [p[i] for p in split]) for i in range(k))
    sizes = [B if rows is None else rows.numel() for rows in parts]
    if type(out) is MaskedBatch and out._data.size(0) == sum(sizes):
        data, mask = out.padded_data, out._mask  # (presence and sizes split alike)
        if all(rows is parts[0] for rows in parts):  # k parts of one size: one scatter
            def split(x):
                x = x.reshape((k, sizes[0]) + x.shape[1:])
                if parts[0] is not None:
                    x = x.new_zeros((k, B) + x.shape[2:]).index_copy_(1, parts[0], x)
                return x.unbind(0)
        else:
            def split(x):
                xs = x.split(sizes)
                return [x if rows is None else scatter_rows(x, rows, B)
                        for x, rows in zip(xs, parts)]
        def each(x):
            return [None] * k if x is None else split(x)
        per_dim = {d: split(n) for d, n in (out._sizes or {}).items()}
        lengths = [{d: ns[i] for d, ns in per_dim.items()} or None for i in range(k)]
        return tuple(_new(d, m, out.dims, bdim=out._bdim, present=p, sizes=n) for d, m, p, n
                     in zip(split(data), each(mask), each(out._present), lengths))
    if type(out) is PerExample and len(out._mb_values) == sum(sizes):
        outs, start = [], 0
        for rows, n in zip(parts, sizes):
            vals = out._mb_values[start:start + n]
            start += n
            if rows is not None:
                full = [GAP] * B
                for b, v in zip(rows.tolist(), vals):
                    full[b] = v
                vals = full
            outs.append(PerExample(vals))
        return tuple(outs)
    if isinstance(out, (torch.Tensor, MaskedBatch, list, dict, Mixed, PerExample)):
        raise _Unsplittable(
            f"@batch(merge_calls=True): the merged calls returned a {type(out).__name__} that "
            f"cannot be split between them; return MaskedBatches, numbers or tuples of them, "
            f"or leave merge_calls off")
    return (out,) * k  # a number, None or undefined: the same for every example
