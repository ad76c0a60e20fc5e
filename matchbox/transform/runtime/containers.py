"""Python dicts, sets and lists changed per example (SPEC 4b).

A container made in the decorated function (``counts = {}``, ``seen =
set()``, ``collections.Counter()``: the rewrite passes ``own=True``) is
each example's own: it stays one plain container while every example
would change it alike, and becomes one copy per example (a PerExample,
bound back to the local variable) at the first change that differs
between examples: a per-example key or item, or a change made in some
examples only (a branch, a loop).  A container from outside (an argument,
an attribute, a global) is shared: each active example makes its own
change to it, one after the other, as each example run alone would.

    d[k] = v              ->  d = rt.setitem(d, k, v, 'd', own)     (assign.setitem)
    seen.add(w)           ->  seen = rt.mutate(seen, 'add', own, w)
    d.get(k, 0), ...      ->  rt.method(d, 'get', k, 0)
"""
import copy

from ..._lanes import _ACTIVE
from ...core import MaskedBatch
from .converted import converted
from .perlane import Star, _has_per_example, batch_size, per_lane, split
from .pyvalues import PerExample

#: methods the rewrite routes here (a plain container's, with a
#: per-example argument, runs per example), and those that change it
METHODS = {"get", "index", "count", "setdefault", "add", "update", "remove", "discard",
           "union", "intersection", "difference", "issubset", "issuperset", "isdisjoint",
           "most_common", "pop", "popitem", "clear", "copy", "keys", "values", "items",
           # a shared string's, with a per-example argument (all_letters.find(letter))
           "find", "rfind", "rindex", "startswith", "endswith", "join", "replace"}
MUTATORS = {"setdefault", "add", "update", "remove", "discard", "pop", "popitem", "clear"}
_CONTAINERS = (dict, set, list)
_VALUES = _CONTAINERS + (str, bytes, tuple, frozenset)   # (read per example)


def _per_example(args, kwargs=None):
    for a in list(args) + list((kwargs or {}).values()):
        t = type(a)
        if t is PerExample or t is MaskedBatch or t is Star or (
                (t is list or t is tuple) and a and _has_per_example(a)):
            return True
    return False


def _copies(obj, B):
    """One copy of container ``obj`` per example; an item stored while the
    examples agreed and that holds per-example values (``chart[0, 1] =
    [tree], score`` with a tree per example) becomes each example's own."""
    if type(obj) is dict and any(_per_example((v,)) for v in obj.values()):
        cols = {k: split(v, B) if _per_example((v,)) else None for k, v in obj.items()}
        return PerExample([{k: v if cols[k] is None else cols[k][b] for k, v in obj.items()}
                           for b in range(B)])
    if type(obj) is list and _per_example(obj):
        cols = [split(v, B) if _per_example((v,)) else None for v in obj]
        return PerExample([[v if c is None else c[b] for v, c in zip(obj, cols)]
                           for b in range(B)])
    return PerExample([copy.copy(obj) for _ in range(B)])


def _lanes_b(args, kwargs=None):
    B, _ = batch_size(args, kwargs)
    if B is None:
        lanes = _ACTIVE.get()
        B = None if lanes is None else lanes.numel()
    return B


def method(obj, name, *args, **kwargs):
    """``obj.name(*args, **kwargs)`` where ``obj`` may be a plain container
    or string read (or changed, if shared) with per-example arguments; a method of
    another object (``meter.update(v)``) runs as @batch rewrites it."""
    if type(obj) is not PerExample and not isinstance(obj, _VALUES):
        return converted(getattr(obj, name))(*args, **kwargs)
    if type(obj) is not PerExample and not _per_example(args, kwargs):
        return getattr(obj, name)(*args, **kwargs)
    return per_lane(_call_method, (obj, name) + args, kwargs)


def _call_method(obj, name, *args, **kwargs):
    return getattr(obj, name)(*args, **kwargs)


def mutate(obj, name, own, *args, **kwargs):
    """``obj.name(*args)`` as a statement on a local variable, and the object
    the variable holds after it: a container of the function's own changed
    differently by different examples becomes one copy per example first."""
    if type(obj) is not PerExample and isinstance(obj, _CONTAINERS) and own and (
            _per_example(args, kwargs) or _ACTIVE.get() is not None):
        B = _lanes_b(args, kwargs)
        if B is not None:
            obj = _copies(obj, B)
    method(obj, name, *args, **kwargs)
    return obj


def setitem(obj, key, value, own):
    """``obj[key] = value`` into a Python container with a per-example key,
    a new key of a container of the function's own stored by some examples
    only, or into a PerExample: the object the variable holds after it
    (None: not for this module, the caller stores as for any key)."""
    if type(obj) is PerExample:
        obj[key] = value
        return obj
    if not isinstance(obj, _CONTAINERS):
        return None
    if not _per_example((key,)):
        if not (own and _ACTIVE.get() is not None and type(obj) is not list and key not in obj):
            return None   # (an item every example has: the masked update of it)
    if own:
        B = _lanes_b((key, value))
        obj = _copies(obj, B)
        obj[key] = value
        return obj
    per_lane(_store, (obj, key, value))   # a shared container: each example stores its own
    return obj


def _store(obj, key, value):
    obj[key] = value

