"""Running Python code for each example on its own values (SPEC 4b).

``per_lane(f, args)`` calls ``f`` once per active example with that
example's values (``split``): a PerExample's item, a per-example scalar's
Python number, a MaskedBatch's row (a ``LaneRef``), and puts the results
together with ``pyvalues.lift``.  Each example's call runs as the example
would alone: no lanes are active in it, no compaction.  The operators,
items, calls and stores of a :class:`~.pyvalues.PerExample` are installed
here, as they split their arguments per example.
"""
import math
import operator
import types

import torch

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from .lanerefs import LaneRef
from .pyvalues import GAP, PerExample, _spread, held_by, is_number_batch, lane_rows, lift

_new = MaskedBatch._new


# ------------------------------------------------------------------ splitting per lane
def _stores(target, value):
    """``(object, value)`` for each active example of PerExample ``target``;
    two examples that hold the same object cannot each store their own value."""
    B = len(target._mb_values)
    rows = lane_rows(B)
    lanes = range(B) if rows is None else rows
    objs = [target._mb_values[b] for b in lanes]
    col = split(_batch_of_tensors(value, B), B)
    if type(col) is not _Repeat and len({id(o) for o in objs}) < len(objs):
        raise ValueError(
            "two examples hold the same object, so a store into it cannot keep each "
            "example's own value (the second would overwrite the first); give each example "
            "an object of its own (copy.deepcopy)")
    return [(o, col[b]) for o, b in zip(objs, lanes)]


def _batch_of_tensors(value, B):
    """``value`` to store for every example, a plain Tensor (one value for
    all, e.g. made from a number every example agrees on) as a batch of it
    (expanded, no copy), so the examples' stored values read back as rows."""
    if type(value) is tuple:
        return tuple(_batch_of_tensors(v, B) for v in value)
    if type(value) is not torch.Tensor:
        return value
    if value.dim() and value.size(0) == 1:   # (a leading 1: each example's batch-of-one dim)
        return _new(value.expand((B,) + value.shape[1:]), None, (False,) * (value.dim() - 1))
    return _new(value.unsqueeze(0).expand((B,) + value.shape), None, (False,) * value.dim(),
                bdim=None)


class _Repeat:
    """The same value in every lane."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __getitem__(self, b):
        return self.value


class _Refs:
    """Each lane's row of a MaskedBatch."""

    __slots__ = ("batch",)

    def __init__(self, batch):
        self.batch = batch

    def __getitem__(self, b):
        return LaneRef(self.batch, b)


class Star:
    """``*value`` in a call made per example: each example's items."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _numbers(x):
    """Each example's Python number of a per-example scalar."""
    values = x._data.tolist()
    if x._mask is not None:
        held = x._mask.reshape(-1).tolist()
        values = [v if h else GAP for v, h in zip(values, held)]
    return values


def split(x, B):
    """``x`` as each lane sees it: an object indexable by lane."""
    t = type(x)
    if t is PerExample:
        return x._mb_values
    if t is MaskedBatch:
        if x._data.size(0) != B:
            raise ValueError(f"a per-example value of {x._data.size(0)} examples meets one of {B}")
        return _numbers(x) if is_number_batch(x) else _Refs(x)
    if sequence(x) and _has_per_example(x):
        return _lane_lists(x, B) if t is list else _lanes_of(x, B, t)
    if t is Star:
        return split(x.value, B)
    if t is slice and _has_per_example((x.start, x.stop, x.step)):
        return [slice(*v) for v in _lanes_of((x.start, x.stop, x.step), B, tuple)]
    if t is types.FunctionType and x.__closure__:
        return _closure_lanes(x, B)
    return _Repeat(x)


def _closure_lanes(f, B, depth=0):
    """A function made in @batch code (``key=lambda s: chart[left, s]``)
    that closes over per-example values, as each lane calls it: a copy
    whose cells hold that lane's values (a lane of ``max(..., key=f)``
    calls ``f`` with its own items, which the other lanes do not have)."""
    cols = [None if not _per_example_cell(v, depth) else
            _closure_lanes(v, B, depth + 1) if type(v) is types.FunctionType else split(v, B)
            for v in map(_contents, f.__closure__)]
    if all(c is None for c in cols):
        return _Repeat(f)
    return [_lane_function(types.FunctionType(
        f.__code__, f.__globals__, f.__name__, f.__defaults__,
        tuple(cell if c is None else types.CellType(c[b]) for cell, c in zip(f.__closure__, cols))),
        B, b) for b in range(B)]


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:   # (not assigned yet)
        return None


def _per_example_cell(v, depth=0):
    t = type(v)
    if t is types.FunctionType:
        return depth < 3 and closes_over_per_example(v, depth + 1)
    return t is PerExample or t is MaskedBatch or (t is list or t is tuple) and v \
        and _has_per_example(v)


def closes_over_per_example(f, depth=0):
    """Does function ``f`` (a lambda made in @batch code) read per-example
    values of the code that made it?"""
    return bool(f.__closure__) and any(_per_example_cell(_contents(c), depth)
                                       for c in f.__closure__)


def _lane_function(f, B, b):
    """``f`` (lane ``b``'s copy) giving lane ``b``'s value of its result: a
    value read from a per-example container holds every example's (a
    batch), of which this lane's is its own."""
    def lane(*args, **kwargs):
        return split(f(*args, **kwargs), B)[b]
    return lane


def _is_lane_list(lst):
    """Is ``lst`` a per-example list (its items held by some examples only)?"""
    return any(getattr(v, "_listed", None) is not None for v in lst[-1:])


def _lane_lists(lst, B):
    """Each example's own list of ``lst``'s items: those it holds (an item
    of a per-example list, a step of ``x.unbind(d)``, held by some only)."""
    held = [held_by(v) for v in lst]
    held = [None if h is None else h.tolist() for h in held]
    cols = [split(v, B) for v in lst]
    return [[c[b] for c, h in zip(cols, held) if h is None or h[b]] for b in range(B)]


def sequence(v):
    """Is ``v`` a list, a tuple or a namedtuple (``Hyp(score, h)``), whose
    items a per-example value may be?"""
    t = type(v)
    return t is list or t is tuple or isinstance(v, tuple) and hasattr(t, "_fields")


def _lanes_of(seq, B, t):
    cols = [split(v, B) for v in seq]
    if hasattr(t, "_fields"):   # a namedtuple takes its fields one by one
        return [t(*(c[b] for c in cols)) for b in range(B)]
    return [t(c[b] for c in cols) for b in range(B)]


def _has_per_example(seq, depth=0):
    """Does list or tuple ``seq`` hold a per-example value (looking at a
    long one's ends only, and into nested ones, ``[[i]]``)?"""
    items = seq if len(seq) <= 16 else (seq[0], seq[-1])
    for v in items:
        t = type(v)
        if t is PerExample or t is MaskedBatch or t is Star or (
                sequence(v) and depth < 3 and v and _has_per_example(v, depth + 1)):
            return True
    return False


def batch_size(args, kwargs=None):
    """``(B, like)``: the number of examples of the per-example values among
    ``args``, and a MaskedBatch among them (for a device and float dtype)."""
    B, like = None, None
    for a in list(args) + list((kwargs or {}).values()):
        if type(a) is Star:
            a = a.value
        if type(a) is slice:
            a = (a.start, a.stop, a.step)
        elif type(a) is types.FunctionType and a.__closure__:   # (key=lambda s: chart[s])
            a = [v for v in map(_contents, a.__closure__) if _per_example_cell(v)]
        if sequence(a) and _has_per_example(a):
            B2, like2 = batch_size(a)
            B = B if B is not None else B2
            like = like if like is not None else like2
        elif type(a) is PerExample:
            B = len(a._mb_values) if B is None else B
        elif type(a) is MaskedBatch:
            B = a._data.size(0) if B is None else B
            if like is None or not like._data.is_floating_point():
                like = a
    return B, like


_PLAIN = (int, float, bool, str, bytes, type(None), torch.device, torch.dtype)


def _plain(v):
    """Whether ``v`` is plain Python data: numbers, strings and containers
    of them (no Tensor, batch or object that a rewrite may treat apart)."""
    if type(v) in (list, tuple, set, frozenset):
        return all(type(x) in _PLAIN or _plain(x) for x in v)  # (no call per number)
    if type(v) is dict:
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return type(v) in _PLAIN


def per_lane(f, args, kwargs=None, B=None, like=None):
    """``f(*args, **kwargs)`` run for each active example on its own values.
    A @batch function given only plain Python values runs its code as
    written (on one example's plain values the rewrite means the same, and
    costs a runtime call per read)."""
    kwargs = kwargs or {}
    plain_f = getattr(f, "__matchbox_plain__", None) if type(f) is types.FunctionType else None
    if B is None:
        B, like = batch_size(args, kwargs)
    rows = lane_rows(B)
    cols = [(type(a) is Star, split(a, B)) for a in args]
    kcols = {k: split(v, B) for k, v in kwargs.items()}
    out = []
    # each example runs as one example does alone: no lanes, no compaction
    active, compact = _ACTIVE.set(None), _COMPACT.set(None)
    try:
        for b in (range(B) if rows is None else rows):
            lane = []
            for star, c in cols:
                if star:
                    lane.extend(c[b])
                else:
                    lane.append(c[b])
            kw = {k: c[b] for k, c in kcols.items()}
            g = plain_f if plain_f is not None and _plain(lane) and _plain(kw) else f
            try:
                out.append(g(*lane, **kw))
            except Exception as e:
                if hasattr(e, "add_note") and B > 1:
                    e.add_note(f"(matchbox: raised for example {b} of the batch, run on its "
                               f"own values)")
                raise
    finally:
        _COMPACT.reset(compact)
        _ACTIVE.reset(active)
    return lift(_spread(out, rows, B), rows, like)


# ------------------------------------------------------------------ PerExample's operations
def _setattr(self, name, value):
    if name in PerExample.__slots__:   # its own (``_listed``: an item of a per-example list)
        object.__setattr__(self, name, value)
        return
    for obj, v in _stores(self, value):
        setattr(obj, name, v)


def _delattr(self, name):
    for obj, _ in _stores(self, None):
        delattr(obj, name)


def _getitem(obj, key):
    return obj[key]


def _setitem(obj, key, value):
    obj[key] = value


def _delitem(obj, key):
    del obj[key]


def _call(f, *args, **kwargs):
    return f(*args, **kwargs)


def _binary(op):
    def f(self, other):
        return per_lane(op, (self, other))

    def r(self, other):
        return per_lane(op, (other, self))
    return f, r


def _unary(op):
    def f(self, *args):
        return per_lane(op, (self,) + args)
    return f


def _install():
    """PerExample's operations that run per example (its class, in
    pyvalues.py, lifts results; these split the arguments too)."""
    P = PerExample
    P.__setattr__, P.__delattr__ = _setattr, _delattr
    P.__getitem__ = lambda self, key: per_lane(_getitem, (self, key))
    P.__setitem__ = lambda self, key, value: per_lane(_setitem, (self, key, value))
    P.__delitem__ = lambda self, key: per_lane(_delitem, (self, key))
    P.__call__ = lambda self, *args, **kwargs: per_lane(_call, (self,) + args, kwargs)
    P.__torch_function__ = classmethod(
        lambda cls, func, types, args=(), kwargs=None: per_lane(func, args, kwargs or {}))
    for name in ("add sub mul truediv floordiv mod pow matmul and or xor lshift "
                 "rshift").split():
        f, r = _binary(getattr(operator, name + "_" if name in ("and", "or") else name))
        setattr(P, f"__{name}__", f)
        setattr(P, f"__r{name}__", r)
    for name in ("eq ne lt le gt ge").split():
        setattr(P, f"__{name}__", _binary(getattr(operator, name))[0])
    for name, op in (("neg", operator.neg), ("pos", operator.pos), ("abs", abs),
                     ("invert", operator.invert), ("round", round), ("trunc", math.trunc),
                     ("floor", math.floor), ("ceil", math.ceil),
                     ("reversed", lambda v: list(reversed(v)))):
        setattr(P, f"__{name}__", _unary(op))


_install()
