"""One iteration of a ``for`` loop as one graph that torch.compile
compiles once and runs for every step.

A loop whose body is straight-line code (transform/steps.py says which)
is lowered with its body as a function of the values it reads, returning
the variables it sets, and run by ``step_loop`` (loops.py):

    def loop_step(out, x, c, cell, h):
        ...
        return (c, h)
    (c, h) = _mb.step_loop(loop_step, lambda: xs.unbind(1), desc, limit,
                           (out,), (c, cell, h), (0, 2))

Eagerly ``step_loop`` just calls it.  Compiled, dynamo would otherwise
trace and unroll the body at every step (the BiLSTM tagger's loss took
11 to 14 minutes to compile at the paper's size).  Instead a loop over
per-example steps runs outside the graph (``eager``: a graph break), and
``compiled_step`` runs each step as one graph (the region): the step's
values are cut to the rows of its active lanes (step_rows.py), go in as
Tensors (a MaskedBatch as its data and masks), and the region rebuilds
them, runs the body and returns the Tensors of what it returns, which
are put back among the other rows.  Steps whose values have the same
structure, shapes (but the number of rows) and modules share one key
and one compiled function (with the backend of the compile that runs
the loop, ``fullgraph``, the rows dynamic), so the body is compiled once
for all of them.  The first step of a key in a loop runs eagerly and
records how to put what it returned back together (``_specs``), the next
compiles; the compiled function records nothing (a Python effect there
would be guarded on).  The lists the body appends to are stand-ins
(``_Appends``) that record what it appended, and the appends are made
after the call; the lanes and the other per-thread state it sets are
reset before it returns.  Values the body passes through unchanged come
back as the caller's own objects.

A value whose rows cannot be put back (a variable with no value before
the loop) makes the step run on every lane, masked.  Anything a graph
cannot take (a list, a dict, an object, an int that changes every step,
every lane active, a loop inside a compaction, a body that does not
compile to one graph) runs the body inline, eagerly.
"""
import functools
import types

import torch
try:   # dynamo's frame hook; without it a loop runs eagerly, compiled
    from torch._C._dynamo.eval_frame import set_eval_frame
except ImportError:   # pragma: no cover
    set_eval_frame = None

from ..._lanes import _ACTIVE, _COMPACT, _Slot
from ...core import MaskedBatch
from . import step_rows
from .lists import _STEP, _append_owned
from .values import Undefined

_new = MaskedBatch._new

# per thread: the backend of the torch.compile that runs a loop (``eager``);
# {key: spec of what a step returned}; {key: its compiled step function}
_BACKEND = _Slot()
_SPECS = _Slot()
_FUNCTIONS = _Slot()


_INLINE = object()   # a key whose step does not compile to one graph
_MASKED = object()   # a key whose values cannot be put back among the rows


class _NotFlat(Exception):
    """A value that cannot cross the region's boundary as Tensors."""


class _Appends:
    """Stands for a list that the body only appends to: records each
    appended value and the lanes active at the append."""

    def __init__(self):
        self.records = []

    def append(self, value):
        self.records.append((value, _ACTIVE.get()))


def _flatten(x, leaves, batched=None):
    """The structure of ``x`` as Python constants, its Tensors appended to
    ``leaves`` (a module is passed as it is); ``batched``: a list that
    gets the positions of the leaves with a row per example."""
    t = type(x)
    if t is MaskedBatch:
        if getattr(x, "_listed", None) is not None or getattr(x, "_kept", None) is not None:
            raise _NotFlat   # a list's item, a compacted value: more than its tensors
        sizes = tuple(sorted(x._sizes)) if x._sizes else None
        parts = [x.padded_data, x._mask, x._present] + [x._sizes[k] for k in sizes or ()]
        parts = [p for p in parts if p is not None]
        if batched is not None:
            batched.extend(range(len(leaves), len(leaves) + len(parts)))
        leaves.extend(parts)
        return ("mb", x.dims, x._bdim, x._mask is not None, x._present is not None, sizes)
    if isinstance(x, torch.Tensor):
        leaves.append(x)
        return ("t",)
    if t is int:   # a step's index: compiled, one graph per value (it runs inline)
        raise _NotFlat
    if x is None or t in (bool, float, str):
        return ("c", x)
    if t is tuple:
        return ("tuple",) + tuple(_flatten(v, leaves, batched) for v in x)
    if t is Undefined:
        return ("undef", x.name)
    if isinstance(x, torch.nn.Module):
        leaves.append(x)
        return ("module",)
    raise _NotFlat


def _unflatten(spec, leaves):
    """The value that ``_flatten`` made ``spec`` of (``leaves``: an iterator)."""
    kind = spec[0]
    if kind == "mb":
        _, dims, bdim, masked, present, sizes = spec
        data = next(leaves)
        mask = next(leaves) if masked else None
        present = next(leaves) if present else None
        sizes = {k: next(leaves) for k in sizes} if sizes else None
        return _new(data, mask, dims, bdim=bdim, present=present, sizes=sizes)
    if kind in ("t", "module"):
        return next(leaves)
    if kind == "c":
        return spec[1]
    if kind == "tuple":
        return tuple(_unflatten(s, leaves) for s in spec[1:])
    return Undefined(spec[1])


def _key(body, spec, leaves, rows=()):
    """The region's reuse key: calls with equal keys run the same graph.
    The body counts by its code (it reads no closure variable but the
    runtime: the rewrite passes the others as arguments), modules by
    identity, Tensors by their metadata and aliasing (``rows``: the
    positions of the leaves whose number of rows does not count)."""
    meta = []
    for i, x in enumerate(leaves):
        if isinstance(x, torch.nn.Module):
            meta.append(("module", id(x), x.training))
        else:
            same = next((j for j in range(i) if leaves[j] is x), None)
            shape = (None,) + tuple(x.shape[1:]) if i in rows else tuple(x.shape)
            meta.append((shape, x.stride(), x.dtype, x.device, x.requires_grad, same))
    return (body.__code__, spec, tuple(meta), torch.is_grad_enabled())


def _distinct(leaves):
    """The region's inputs: each Tensor once, and no two views of one
    Tensor (a region's inputs may not alias: a later one is copied);
    ``index[i]``: the input that leaf ``i`` is."""
    inputs, index, roots = [], [], []
    for x in leaves:
        j = next((j for j, y in enumerate(inputs) if y is x), None)
        if j is None:
            if isinstance(x, torch.Tensor):
                root = x if x._base is None else x._base
                if any(r is root for r in roots):
                    x = x.clone()
                    root = x
                roots.append(root)
            j = len(inputs)
            inputs.append(x)
        index.append(j)
    return inputs, tuple(index)


def _per_thread(slot):
    d = slot.get()
    if d is None:
        d = {}
        slot.set(d)
    return d


def _specs():
    return _per_thread(_SPECS)


def _functions():
    return _per_thread(_FUNCTIONS)


def _out_spec(x, ins, args, out):
    """Like ``_flatten`` for what the region returns, its Tensors appended
    to ``out`` once each, and no view (a region's outputs may not alias
    its inputs): an argument returned as it is comes back as the caller's
    object (``("arg", k)``), an input Tensor as the caller's (``("in", j)``)."""
    for k, a in enumerate(args):
        if type(x) is not tuple and type(a) is not tuple and x is a \
                and not isinstance(a, (bool, int, float, str, type(None))):
            return ("arg", k)
    if type(x) is MaskedBatch:
        sizes = tuple(sorted(x._sizes)) if x._sizes else None
        parts = [x.padded_data, x._mask, x._present] + [x._sizes[k] for k in sizes or ()]
        return ("mb", x.dims, x._bdim, tuple(
            None if p is None else _out_spec(p, ins, (), out) for p in parts), sizes)
    if isinstance(x, torch.Tensor):
        for j, t in enumerate(ins):
            if x is t:
                return ("in", j)
        for j, t in enumerate(out):
            if x is t:
                return ("t", j)
        out.append(x if x._base is None else x.clone())
        return ("t", len(out) - 1)
    if type(x) is tuple:
        return ("tuple",) + tuple(_out_spec(v, ins, args, out) for v in x)
    try:
        return ("c", _flatten(x, []))   # a constant, or an Undefined
    except _NotFlat:
        raise TypeError(
            f"a @batch loop step compiled as one region (torch.compile) set a variable to "
            f"a {type(x).__name__}, which cannot leave the region; only Tensors, MaskedBatches, "
            f"tuples of them and Python constants can") from None


def _rebuilt(spec, outs, ins, args):
    kind = spec[0]
    if kind == "arg":
        return args[spec[1]]
    if kind == "in":
        return ins[spec[1]]
    if kind == "t":
        return outs[spec[1]]
    if kind == "mb":
        _, dims, bdim, parts, sizes = spec
        data, mask, present, *lengths = [None if p is None else _rebuilt(p, outs, ins, args)
                                         for p in parts]
        return _new(data, mask, dims, bdim=bdim, present=present,
                    sizes=dict(zip(sizes, lengths)) if sizes else None)
    if kind == "tuple":
        return tuple(_rebuilt(s, outs, ins, args) for s in spec[1:])
    return _unflatten(spec[1], iter(()))


def _region(call, inputs, record):
    """The body called on the values ``inputs`` hold, under their lanes;
    returns the Tensors of what it returned and of what it appended, and
    with ``record`` notes how to rebuild the values from them (its first
    call for the key, eager: the compiled one records nothing, which
    torch.compile would guard on).  ``call``: ``(key, body, number of
    lists, argument spec, index)``."""
    key, body, nlists, spec, index = call
    leaves = [inputs[j] for j in index]
    lanes, *args = _unflatten(spec, iter(leaves))
    lists = [_Appends() for _ in range(nlists)]
    tokens = _ACTIVE.set(lanes), _STEP.set(None)
    try:
        state = body(*lists, *args)
    finally:
        _STEP.reset(tokens[1])
        _ACTIVE.reset(tokens[0])
    out = []
    records = tuple((i, _out_spec(v, leaves, (), out), _out_spec(m, leaves, (), out))
                    for i, lst in enumerate(lists) for v, m in lst.records)
    state = _out_spec(state, leaves, args, out)
    if record:
        _specs()[key] = (state, records)
    return tuple(out)


def _step_function(call, backend, rows):
    """``_region(call, ...)`` compiled with ``backend`` as one graph, under
    a code object of its own: dynamo keeps its compiled graphs per code
    object, so no key recompiles another's.  ``rows``: whether the inputs
    are live rows (their number dynamic)."""
    def step(*inputs):
        return _region(call, inputs, False)
    step = types.FunctionType(step.__code__.replace(co_name=f"loop_step_{len(_functions())}"),
                              step.__globals__, None, None, step.__closure__)
    return torch.compile(step, backend=backend, fullgraph=True, dynamic=None if rows else False)


def eager(fn):
    """``fn`` run outside torch.compile's graph (a graph break where it is
    called), with the backend of the compile that called it at hand for
    ``compiled_step`` (the compile's frame callback holds it).  Nothing
    from torch._dynamo is imported before a compile has (importing it
    changes torch.manual_seed)."""
    if set_eval_frame is None:   # pragma: no cover
        return torch.compiler.disable(fn)

    @functools.wraps(fn)
    def run(*args):
        if torch.compiler.is_compiling():   # dynamo converting this frame: run it as it is
            from torch._dynamo import skip_frame
            skip_frame()
        outer = set_eval_frame(None)
        # the compile's frame callback wraps its backend (in one wrapper or more)
        backend = getattr(outer, "_torchdynamo_orig_backend", None)
        while hasattr(backend, "_torchdynamo_orig_backend"):
            backend = backend._torchdynamo_orig_backend
        token = _BACKEND.set(backend)
        try:
            return fn(*args)
        finally:
            _BACKEND.reset(token)
            set_eval_frame(outer)
    run._torchdynamo_disable = True   # traced, a call of it is a graph break
    return run


def compiled_step(body, lists, args, seen, back, live=True):
    """``body(*lists, *args)`` as one compiled graph, the same for every
    step with the same key (see above), or inline; on the live rows only
    where the values it sets can be put back (step_rows.py; ``back``: the
    positions among ``args[1:]`` of the values it returns).  ``seen``: the
    keys of the loop's steps so far; a key compiles at its second step in
    a loop (a first step's own key, as when the state starts as zeros that
    need no gradient, is not worth a compile).  ``live=False``: every
    lane, masked."""
    lanes, backend = _ACTIVE.get(), _BACKEND.get()
    if backend is None or lanes is None or _COMPACT.get() is not None:
        return body(*lists, *args)
    rows = lanes.nonzero().flatten() if live and lanes.dim() == 1 else None
    if rows is not None and rows.numel() == 0:
        return tuple(args[1 + k] for k in back)
    try:
        step_args = args if rows is None else step_rows.take(args, rows)
    except step_rows.NoRows:
        rows, step_args = None, args
    leaves, batched = [], []
    try:
        spec = _flatten((None if rows is not None else lanes,) + step_args, leaves, batched)
    except _NotFlat:
        return body(*lists, *args)
    # (a step compiles with the backend of the compile that runs it)
    key = (id(backend), _key(body, spec, leaves, set(batched) if rows is not None else ()))
    fn = _functions().get(key)
    if fn is _MASKED:   # its values cannot be put back: all lanes, masked
        return compiled_step(body, lists, args, seen, back, live=False)
    inputs, index = _distinct(leaves)
    call = (key, body, len(lists), spec, index)
    if fn is None and key in seen:
        fn = _functions()[key] = _step_function(call, backend, rows is not None)
    seen.add(key)
    if fn is None:   # eagerly, recording how to rebuild what it returns
        outs = _region(call, inputs, True)
    elif fn is _INLINE:
        return body(*lists, *args)
    else:
        if rows is not None:
            for i in batched:
                torch._dynamo.maybe_mark_dynamic(inputs[index[i]], 0)
        try:
            outs = fn(*inputs)
        except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.FailOnRecompileLimitHit):
            # a graph break, or a recompile too many: this key runs inline
            _functions()[key] = _INLINE
            return body(*lists, *args)
    state_spec, records = _specs()[key]
    state = _rebuilt(state_spec, outs, leaves, args)
    appended = [(i, _rebuilt(v, outs, leaves, ()), _rebuilt(m, outs, leaves, ()))
                for i, v, m in records]
    if rows is not None:
        try:
            state = tuple(step_rows.put(args[1 + k], v, rows) for k, v in zip(back, state))
        except step_rows.NoRows:
            _functions()[key] = _MASKED
            return compiled_step(body, lists, args, seen, back, live=False)
        appended = [(i, step_rows.spread(v, rows, lanes.numel()), lanes)
                    for i, v, _ in appended]
    for i, value, on in appended:   # the appends, in the lanes that made them
        token = _ACTIVE.set(on)
        try:
            _append_owned(lists[i], value, None)
        finally:
            _ACTIVE.reset(token)
    return state

