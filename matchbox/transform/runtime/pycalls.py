"""Python operations that ``@batch`` routes through the runtime, so that
they run for each example on its own values (SPEC 4b; the rewrite is
``transform/python_calls.py``):

    min(a, b), math.sqrt(n), str(n) ...  ->  rt.call(f, a, b)
    f"len{n}", "%.1f" % v                ->  rt.call(lambda v0: f"len{v0}", n), ...
    a in b, a not in b                   ->  rt.contains(a, b), rt.contains(a, b, True)
    a is b, a is not b                   ->  rt.is_(a, b), rt.is_(a, b, True)
    [e for w in ws]                      ->  rt.comprehension(lambda ws: [...], 1, ws)
    [f(w) for w in ws]                   ->  rt.mapped(ws, lambda w: f(w))
    a and b, a or b (not a test)         ->  rt.and_value(a, lambda: b), rt.or_value(...)
    x.tolist(), x.numpy()                ->  rt.host(x, 'tolist'), rt.host(x, 'numpy')

With no per-example argument each is the plain operation (one extra call).
A per-example scalar given to Python code is each example's Python
number; tensor code keeps a MaskedBatch where torch takes one: a builtin
that computes with tensors (``abs``, ``sum``, ``pow``) gets it whole,
``torch.ones(n, n)`` / ``torch.tensor([i, j])`` with per-example ``n``, ``i``
make a batch with a value per example.
"""
import builtins
import operator
import types

import torch

from ...core import MaskedBatch
from ..._lanes import active_lanes
from .conditions import cond as cond_of, if_true
from .regions import _combine, _under
from .select import select
from .iterables import LaneIterable
from .lists import _append_owned
from .loops import for_loop
from .perlane import Star, _has_per_example, _is_lane_list, closes_over_per_example, per_lane
from .pyvalues import PerExample, is_number_batch

_NATIVE = {builtins.abs, builtins.sum, builtins.pow}


def _per_example(x):
    t = type(x)
    return t is PerExample or t is MaskedBatch or t is Star or (
        (t is list or t is tuple) and x and _has_per_example(x)) or (
        t is types.FunctionType and closes_over_per_example(x))   # (sorted(key=lambda ...))


def call(f, *args, **kwargs):
    """``f(*args, **kwargs)``, for each example on its own values where an
    argument is per example."""
    for a in args:
        if _per_example(a):
            return _routed(f, args, kwargs)
    if kwargs:
        for a in kwargs.values():
            if _per_example(a):
                return _routed(f, args, kwargs)
        if f in _KEYED and len(args) == 1 and type(kwargs.get("key")) is types.FunctionType:
            return _keyed(f, args[0], kwargs)
    return f(*args, **kwargs)


_KEYED = {builtins.max, builtins.min, builtins.sorted}


def _keyed(f, items, kwargs):
    """``max(items, key=k)`` (``min``, ``sorted``) over items every example
    shares, whose key may give a value per example (``key=lambda s:
    chart[s].item()``, a read of batches): the keys are computed once, and
    each example orders the items by its own."""
    items = list(items)
    keys = [kwargs["key"](v) for v in items]
    rest = {k: v for k, v in kwargs.items() if k != "key"}

    def pick(*keys):
        if not items and "default" in rest:
            return rest["default"]
        i = f(range(len(items)), key=keys.__getitem__, **rest)
        return [items[j] for j in i] if f is builtins.sorted else items[i]
    return per_lane(pick, keys) if any(_per_example(k) for k in keys) else pick(*keys)


def _routed(f, args, kwargs):
    if any(type(a) is Star for a in args) and not any(
            type(a) is Star and _per_example(a.value) for a in args):
        flat = []
        for a in args:
            flat.extend(a.value if type(a) is Star else (a,))
        return call(f, *flat, **kwargs)
    adapter = _ADAPTERS.get(f)
    if adapter is not None:
        out = adapter(f, args, kwargs)
        if out is not NotImplemented:
            return out
    if f in _NATIVE and not any(type(a) is PerExample for a in args):
        return f(*args, **kwargs)   # abs(x), sum(xs): torch computes per example
    return per_lane(f, args, kwargs)


# ------------------------------------------------------------------ torch constructors
def _sized(f, args, kwargs):
    """``torch.ones(n, n)``: per-example sizes, given as one size tuple (the
    form the op rule takes; torch reads loose arguments only as ints)."""
    if not args or any(type(a) is PerExample for a in args):
        return NotImplemented
    if f is torch.full:
        return f(tuple(args[0]), *args[1:], **kwargs)
    if len(args) == 1:
        return f(*args, **kwargs)
    return f(tuple(args), **kwargs)


def _flat(data):
    """``(shape, items)`` of a nested list / tuple literal, or None if it is
    not rectangular."""
    if type(data) not in (list, tuple):
        return (), [data]
    parts = [_flat(v) for v in data]
    if any(p is None for p in parts) or len({p[0] for p in parts}) > 1:
        return None
    shape = (len(data),) + (parts[0][0] if parts else ())
    return shape, [i for p in parts for i in p[1]]


def _tensor(f, args, kwargs):
    """``torch.tensor(data)`` whose entries are numbers or per-example
    numbers: one stack (per-example lists of other lengths run per example)."""
    if len(args) != 1 or set(kwargs) - {"dtype", "device", "requires_grad"}:
        return NotImplemented
    flat = _flat(args[0])
    if flat is None:
        return NotImplemented
    shape, items = flat
    batches = [v for v in items if type(v) is MaskedBatch]
    if not batches or not all(
            type(v) in (bool, int, float) or type(v) is MaskedBatch and is_number_batch(v)
            and getattr(v, "_listed", None) is None for v in items):
        return NotImplemented   # (an item of a per-example list: some examples lack it)
    B = batches[0]._data.size(0)
    device = kwargs.get("device") or batches[0]._data.device
    kinds = {v._data.dtype if type(v) is MaskedBatch else type(v) for v in items}
    dtype = kwargs.get("dtype") or _DTYPES.get(f) or (
        torch.bool if kinds <= {torch.bool, bool} else
        torch.get_default_dtype() if any(k is float or getattr(k, "is_floating_point", False)
                                         for k in kinds) else torch.long)
    cols = [v._data.to(dtype) if type(v) is MaskedBatch
            else torch.full((B,), v, dtype=dtype, device=device) for v in items]
    data = torch.stack(cols, 1).reshape((B,) + shape)
    mask = None
    masks = [v._mask.reshape(B) for v in batches if v._mask is not None]
    if masks:
        mask = torch.stack(masks).all(0).reshape((B,) + (1,) * len(shape))
    if kwargs.get("requires_grad"):
        data.requires_grad_()
    if shape and shape[0] == 1:   # a leading 1: each example's batch-of-one dimension
        data = data.squeeze(1)
        return MaskedBatch._new(data, None if mask is None else mask.squeeze(1),
                                (False,) * (len(shape) - 1))
    return MaskedBatch._new(data, mask, (False,) * len(shape), bdim=None)


_DTYPES = {torch.LongTensor: torch.long, torch.FloatTensor: torch.float32,
           torch.DoubleTensor: torch.float64, torch.BoolTensor: torch.bool}

_ADAPTERS = {f: _sized for f in (torch.ones, torch.zeros, torch.empty, torch.full)}
_ADAPTERS.update({f: _tensor for f in (torch.tensor, torch.as_tensor, *_DTYPES)})


# ------------------------------------------------------------------ operators
def _not(v):
    if type(v) is MaskedBatch:
        return MaskedBatch._new(~v._data if v._data.dtype == torch.bool else v._data == 0,
                                v._mask, v.dims, bdim=v._bdim)
    return not v


def contains(item, container, negate=False):
    """``item in container`` (``not in`` with ``negate``), per example where
    either is per example."""
    if _per_example(item) or _per_example(container) or type(container) is list \
            and container and _is_lane_list(container):
        out = per_lane(operator.contains, (container, item))
    else:
        out = item in container
    return _not(out) if negate else out


def is_(a, b, negate=False):
    """``a is b`` (``is not`` with ``negate``), per example for PerExamples."""
    if type(a) is PerExample or type(b) is PerExample:
        out = per_lane(operator.is_, (a, b))
        return _not(out) if negate else out
    return (a is not b) if negate else (a is b)


def comprehension(fn, n_iter, *values):
    """A comprehension (``fn``, a lambda of the names it reads; the first
    ``n_iter`` are those its ``for`` clauses iterate over) run for each
    example on its own values where it reads a per-example Python value (a
    PerExample, a per-example number, a list of them, or a per-example
    list to iterate over); else run once, as written (over tensors, a
    batch of them)."""
    for k, v in enumerate(values):
        if _python_value(v) or k < n_iter and type(v) is list and v and _is_lane_list(v):
            return per_lane(fn, values)
    return fn(*values)


def _python_value(v):
    t = type(v)
    if t is PerExample or t is MaskedBatch and is_number_batch(v):
        return True
    return (t is list or t is tuple) and 0 < len(v) <= 64 and any(_python_value(x) for x in v[:8])


def host(x, method):
    """``x.tolist()`` / ``x.numpy()``: each example's own values."""
    if type(x) is MaskedBatch or type(x) is PerExample:
        return per_lane(operator.methodcaller(method), (x,))
    return getattr(x, method)()


def mapped(owner, iterable, elem, cond=None):
    """``[elem(t) for t in iterable if cond(t)]`` (a comprehension whose
    element calls a function or module; ``owner``: the calling function's
    runtime).  Over a per-example iterable (each example's own items: a
    PerExample, a per-example list or range) it runs as a ``for`` loop
    does: step ``k`` computes item ``k`` of every example that has one, in
    one batched call, and each example's list holds its own results."""
    if not (type(iterable) is PerExample or isinstance(iterable, LaneIterable)
            or type(iterable) is list and iterable and _is_lane_list(iterable)):
        if cond is None:
            return [elem(t) for t in iterable]
        return [elem(t) for t in iterable if cond(t)]
    out = []
    with for_loop(owner, iterable, None, "list comprehension", None) as loop:
        for t in loop:
            if cond is None:
                _append_owned(out, elem(t), None)
                continue
            with if_true(owner, cond_of(cond(t))) as run:
                if run:
                    _append_owned(out, elem(t), None)
    return out


def and_value(a, b_thunk):
    """``a and b`` as a value (not a test): per example ``a`` where it is
    false, else ``b``, which runs only for the examples where ``a`` holds."""
    c = cond_of(a)
    if isinstance(c, bool):
        return b_thunk() if c else a
    return _either(c, b_thunk, a)


def or_value(a, b_thunk):
    """``a or b`` as a value: per example ``a`` where it is true, else ``b``
    (run only for those examples)."""
    c = cond_of(a)
    if isinstance(c, bool):
        return a if c else b_thunk()
    return _either(~c, b_thunk, a)


def _either(c, b_thunk, a):
    """``b_thunk()`` in lanes ``c`` (run for those only), ``a`` in the others."""
    sub = _combine(active_lanes(), c)
    if not bool(sub.any()):
        return a
    b = _under(sub, b_thunk)
    return select(c, b, a)
