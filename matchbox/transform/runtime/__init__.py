"""The runtime that code rewritten by ``@batch`` calls (as ``_mb.<name>``).

The execution mask (the bool Tensor ``(B,)`` of active lanes, or ``None``
when every lane is active) lives in :mod:`matchbox._lanes`, per-thread
storage that each @batch call sets and resets, so threads each have their
own.  Every helper keeps plain Python semantics when its condition is a
Python value (or a plain Tensor at batch size one); only a
:class:`~matchbox.MaskedBatch` condition makes the code run lane by lane.

One concern per module, each importing only those listed before it (no
module imports one that imports it back; tests/transform/test_runtime_layers.py):

- :mod:`.lanerefs`: ``LaneRef`` (one example's row of a batch, gathered
  back with ``gather``); :mod:`.pyvalues`: ``PerExample`` (one Python value
  per example), ``lift``; :mod:`.perlane`: ``per_lane`` (code run for each
  example on its own values), PerExample's operators
- :mod:`.select`: per-lane ``select``; :mod:`.values`: ``Undefined``,
  ``Mixed``, ``returned``; :mod:`.regions`: how nested lanes lie within
  each other; :mod:`.update`: the masked update of a variable
- :mod:`.compaction`: running a loop or branch on its live lanes only
  (``@batch(compact=...)``)
- :mod:`.lists`: ``append``, ``extend``, ``insert`` (per-example lists);
  :mod:`.list_items`: ``pop``, ``getitem``, ``len`` and ``reversed`` of them
- :mod:`.conditions`: ``cond``, ``not_``, ``and_``, ``or_``; branches
  ``if_true``, ``if_false``, ``if_exp``
- :mod:`.assign`: ``assign``, ``aug_assign``, ``setattr_``, ``setitem``,
  ``inplace``, ``read``
- :mod:`.scalars`: ``size``, ``shape``, ``len_``, ``item``, ``int_``,
  ``float_``, ``bool_`` (per-example Python values)
- :mod:`.tensor_checks`: ``isinstance_``, ``tensor_call`` (``torch.is_tensor``,
  ``Variable``): a MaskedBatch is a Tensor to per-example code
- :mod:`.iterables`: ``range_``, ``enumerate_``, ``zip_``, ``reversed_``, ``sum_``
- :mod:`.loops`: ``while_loop``, ``for_loop``, ``step_loop`` (a ``for`` whose
  body is a function: compiled, one graph per step); :mod:`.maps`: ``map_loop``
  (a ``for`` whose iterations share no state, run once on every step)
- :mod:`.calls`: ``sibling_calls`` (merged sibling recursive calls), ``recursive``
  (a recursive call left plain), ``SiblingLoop``
- per-example Python values (SPEC 4b): :mod:`.pyslices` (items and slices
  with per-example keys), :mod:`.converted` (helper methods rewritten on
  their first call), :mod:`.containers` (``method``, ``mutate``: dicts and
  sets per example), :mod:`.pycalls` (``call``, ``contains``, ``is_``,
  ``comprehension``, ``mapped``, ``host``, ``and_value``, ``or_value``)

Each rewritten function calls its own runtime object
(:func:`function_runtime`, bound to its ``_mb``): a loop or branch that runs
compacted gathers and scatters for the code of the function that made it
only, and the calls in ``OWNED`` act for their caller's function, which
they are given as their first argument, ``owner``, that object.
"""
import functools
import operator
import types

from .assign import aug_assign, assign, inplace, read, setattr_, setitem
from .calls import SiblingLoop, recursive, sibling_calls
from .conditions import and_, assert_, cond, if_exp, if_false, if_true, not_, or_
from .containers import method, mutate
from .converted import converted, helper
from .iterables import LaneIterable, LaneRange, enumerate_, lane_items, presence, range_, \
    reversed_, sum_, zip_
from .list_items import getitem, pop
from .lists import append, extend, insert
from .loops import for_loop, step_loop, while_loop
from .maps import map_loop
from .pyslices import path
from .pycalls import and_value, call, comprehension, contains, host, is_, mapped, or_value
from .perlane import Star
from .pyvalues import PerExample
from .scalars import bool_, float_, int_, item, len_, shape, size
from .select import select
from .tensor_checks import isinstance_, tensor_call
from .values import Mixed, Undefined, returned

__all__ = ["Undefined", "Mixed", "read", "assign", "aug_assign", "setattr_", "setitem", "path", "inplace",
           "select",
           "cond", "not_", "and_", "or_", "assert_", "if_true", "if_false", "if_exp", "append", "extend",
           "insert", "pop", "getitem", "size", "shape", "len_", "item", "int_", "float_", "bool_",
           "isinstance_", "tensor_call",
           "while_loop", "for_loop", "step_loop", "map_loop", "LaneIterable", "LaneRange", "lane_items",
           "presence", "range_", "enumerate_", "zip_", "reversed_", "sum_", "sibling_calls",
           "recursive", "returned", "call", "comprehension", "contains", "host", "is_",
           "PerExample", "Star", "operator", "method", "mutate", "converted", "helper", "mapped",
           "and_value", "or_value"]

#: the calls that act for the function that calls them (their ``owner``)
OWNED = {"read": read, "assign": assign, "aug_assign": aug_assign, "setattr_": setattr_,
         "append": append, "extend": extend, "pop": pop, "getitem": getitem,
         "if_true": if_true, "if_false": if_false, "while_loop": while_loop,
         "for_loop": for_loop, "step_loop": step_loop, "map_loop": map_loop, "recursive": recursive,
         "SiblingLoop": SiblingLoop, "mapped": mapped, "path": path}


def function_runtime():
    """The runtime as one rewritten function calls it (its ``_mb``): every
    public name of this package, the calls of ``OWNED`` given this object
    as their ``owner``."""
    rt = types.SimpleNamespace(**{k: v for k, v in globals().items() if not k.startswith("_")})
    for name, f in OWNED.items():
        setattr(rt, name, functools.partial(f, rt))
    return rt
