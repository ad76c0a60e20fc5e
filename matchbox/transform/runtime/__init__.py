"""The runtime that code rewritten by ``@batch`` calls (as ``_mb.<name>``).

The execution mask (the bool Tensor ``(B,)`` of active lanes, or ``None``
when every lane is active) lives in :mod:`matchbox._lanes`, per-thread
storage that each @batch call sets and resets, so threads each have their
own.  Every helper keeps plain Python semantics when its condition is a
Python value (or a plain Tensor at batch size one); only a
:class:`~matchbox.MaskedBatch` condition makes the code run lane by lane.

One concern per module:

- :mod:`.conditions`: ``cond``, ``not_``, ``and_``, ``or_``; branches
  ``if_true``, ``if_false``, ``if_exp``
- :mod:`.select` and :mod:`.assign`: per-lane ``select``; ``assign``,
  ``aug_assign``, ``setattr_``, ``setitem``, ``inplace``, ``read``; :mod:`.values`: ``Undefined``,
  ``Mixed``, ``returned``
- :mod:`.lists`: ``append``, ``extend``, ``insert``, ``pop``, ``getitem``
  (per-example lists)
- :mod:`.scalars`: ``size``, ``shape``, ``len_``, ``item``, ``int_``,
  ``float_``, ``bool_`` (per-example Python values)
- :mod:`.loops`: ``while_loop``, ``for_loop`` (and :mod:`.compaction`,
  what ``@batch(compact=...)`` runs them with); :mod:`.maps`: ``map_loop``
  (a ``for`` whose iterations share no state, run once on every step)
- :mod:`.iterables`: ``range_``, ``enumerate_``, ``zip_``, ``reversed_``, ``sum_``
- :mod:`.calls`: ``sibling_calls`` (merged sibling recursive calls), ``recursive``
  (a recursive call left plain)
"""
from .assign import aug_assign, assign, inplace, read, setattr_, setitem
from .calls import recursive, sibling_calls
from .conditions import and_, cond, if_exp, if_false, if_true, not_, or_
from .iterables import LaneIterable, LaneRange, enumerate_, lane_items, presence, range_, \
    reversed_, sum_, zip_
from .lists import append, extend, getitem, insert, pop
from .loops import for_loop, while_loop
from .maps import map_loop
from .scalars import bool_, float_, int_, item, len_, shape, size
from .select import select
from .values import Mixed, Undefined, returned

__all__ = ["Undefined", "Mixed", "read", "assign", "aug_assign", "setattr_", "setitem", "inplace",
           "select",
           "cond", "not_", "and_", "or_", "if_true", "if_false", "if_exp", "append", "extend",
           "insert", "pop", "getitem", "size", "shape", "len_", "item", "int_", "float_", "bool_",
           "while_loop", "for_loop", "map_loop", "LaneIterable", "LaneRange", "lane_items",
           "presence", "range_", "enumerate_", "zip_", "reversed_", "sum_", "sibling_calls",
           "recursive",
           "returned"]
