"""Per-example Python values (SPEC section 4b): a value that each example
holds for itself, whatever its type.

Numbers each example holds are per-example scalars (MaskedBatches of one
value per example, ``scalars.py``); tensors are MaskedBatches.  Anything
else (strings, containers, objects, None) is a :class:`PerExample`: one
Python object per example (lane).  Whatever code does with one (an
operator, an attribute, a method call, an item) runs for each active
example on its own value (``perlane.py``, which installs those operations),
and the results are put together again by ``lift``:

- a result the same in every active example stays one plain value (a
  number, None, a function, a module): it costs nothing then;
- numbers become a per-example scalar, so tensor code takes them;
- tensors (the examples' own rows, ``LaneRef``) become a MaskedBatch
  again: gathered, one ``index_select`` per source (``lanerefs.py``);
- a tuple holding tensors becomes a tuple of such values, a list of them
  a per-example list (item ``k`` held by the examples whose list has one);
- anything else stays a PerExample.

A per-example argument is given to each example as its own value: a
PerExample's item, a per-example scalar's Python number, a MaskedBatch's
row (a ``LaneRef``).  Dormant lanes (outside the active lanes of a branch
or loop) run nothing and hold ``GAP`` in results.
"""
import types

import torch

from ..._lanes import _ACTIVE
from ... import core as _core
from ...core import MaskedBatch
from ...ops._registry import func_name
from .lanerefs import LaneRef, gather, gather_grid, stack

_new = MaskedBatch._new


class _Gap:
    """What a lane holds where it computed nothing (dormant, or no item)."""

    __slots__ = ()

    def __repr__(self):
        return "<no value>"


GAP = _Gap()


def lane_rows(B):
    """The active lanes (a list of lane indices), None when all ``B`` are."""
    lanes = _ACTIVE.get()
    if lanes is None or lanes.numel() != B:
        return None
    rows = getattr(lanes, "_mb_rows", None)
    if rows is None:
        rows = lanes.nonzero().flatten().tolist()
        if not torch.compiler.is_compiling():
            lanes._mb_rows = rows
    return rows


def is_number_batch(x):
    """Is MaskedBatch ``x`` one number per example (``x.size(d)``, ``.item()``)?
    Such a value without gradient is a Python number to Python code."""
    return not x.dims and x._bdim is None and not x._data.requires_grad


class PerExample:
    """One Python value per example: ``_mb_values[b]`` is example ``b``'s.
    Its own names start with ``_``: every other attribute is the examples'."""

    __slots__ = ("_mb_values", "_listed")

    def __init__(self, values):
        object.__setattr__(self, "_mb_values", values)
        object.__setattr__(self, "_listed", None)

    # ------------------------------------------------------------ per lane
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        rows = lane_rows(len(self._mb_values))
        vals = self._mb_values
        got = [getattr(vals[b], name) for b in (range(len(vals)) if rows is None else rows)]
        method = _batched_method(got)
        if method is not None:   # the same @batch method of every example's object
            return types.MethodType(method, self)
        return lift(_spread(got, rows, len(vals)), rows)

    # ------------------------------------------------------------ no single value
    def _one(self, what):
        raise TypeError(
            f"{what} of a per-example value (each example holds its own: "
            f"{_preview(self._mb_values)}); here it needs one value for all. "
            f"Write it where @batch runs it per example (a builtin, an operator, a method "
            f"call or a for loop in the decorated function), or reduce to one value first")

    def __bool__(self):
        self._one("bool()")

    def __len__(self):
        self._one("len()")

    def __index__(self):
        self._one("an int")

    def __int__(self):
        self._one("int()")

    def __float__(self):
        self._one("float()")

    def __format__(self, spec):
        self._one("format()")

    def __contains__(self, item):
        self._one("'in'")

    def __hash__(self):
        self._one("hash() (a dict key or a set item)")

    def __iter__(self):
        """Unpacking (``a, b = pair``): the items of every example, where each
        example holds the same number of them."""
        rows = lane_rows(len(self._mb_values))
        lanes = range(len(self._mb_values)) if rows is None else rows
        items = {b: list(self._mb_values[b]) for b in lanes}
        counts = {len(v) for v in items.values()}
        if len(counts) > 1:
            raise TypeError(
                f"the examples hold different numbers of items here ({sorted(counts)}), so "
                f"they cannot be unpacked into one set of names; a for loop in the decorated "
                f"function walks each example's own items")
        for k in range(counts.pop() if counts else 0):
            yield lift(_spread([items[b][k] for b in lanes], rows, len(self._mb_values)), rows)

    def __repr__(self):
        return f"PerExample({self._mb_values!r})"

    def _lane_items(self):
        """``(item, lanes)`` for ``for v in self`` under @batch: item ``k`` of
        every example whose value has one (``lanes``: those, None: all)."""
        vals = self._mb_values
        B = len(vals)
        rows = lane_rows(B)
        lanes = range(B) if rows is None else rows
        items = [GAP] * B
        for b in lanes:
            items[b] = list(vals[b])
        lens = [0 if v is GAP else len(v) for v in items]
        device = None if _ACTIVE.get() is None else _ACTIVE.get().device
        for k in range(max(lens, default=0)):
            held = [b for b in lanes if lens[b] > k]
            item = lift([v[k] if n > k else GAP for v, n in zip(items, lens)], held)
            if len(held) == B:
                yield item, None
            else:
                yield item, torch.tensor([n > k for n in lens], dtype=torch.bool, device=device)

    def _operand(self, func=None):
        """This value where an op takes tensors: numbers or tensors in every
        active example (a MaskedBatch), else a TypeError naming the op."""
        out = lift(self._mb_values, lane_rows(len(self._mb_values)))
        if type(out) is PerExample:
            kinds = sorted({type(v).__name__ for v in self._mb_values if v is not GAP})
            raise TypeError(
                f"{func_name(func) if func is not None else 'a tensor op'} got a per-example "
                f"value whose examples hold {', '.join(kinds)}: only numbers and tensors make "
                f"a batch (each example's value: {_preview(self._mb_values)})")
        return out

    # ------------------------------------------------------------ lanes
    def _truth(self):
        """Each example's truth value, a bool Tensor ``(B,)``."""
        lanes = _ACTIVE.get()
        return torch.tensor([v is not GAP and bool(v) for v in self._mb_values], dtype=torch.bool,
                            device=None if lanes is None else lanes.device)

    def _take(self, idx):
        """The examples at ``idx`` (a list of lane indices), as a PerExample."""
        v = self._mb_values
        return PerExample([v[b] for b in idx])


def _preview(values, n=3):
    head = ", ".join(repr(v) for v in values[:n])
    return f"[{head}{', ...' if len(values) > n else ''}]"


def _batched_method(got):
    """The function of bound methods ``got`` if all are one @batch method."""
    m = got[0] if got else None
    f = getattr(m, "__func__", None)
    if f is None or not getattr(f, "__matchbox_batched__", False):
        return None
    return f if all(getattr(g, "__func__", None) is f for g in got) else None


def held_by(item):
    """The lanes (bool ``(B,)``) that hold ``item`` of a per-example list or
    of ``x.unbind(d)``'s steps (None: every lane)."""
    tag = getattr(item, "_listed", None) if type(item) in (MaskedBatch, PerExample) else None
    if tag is not None:
        return tag[0]
    if type(item) is not MaskedBatch:
        return None
    if item._present is not None:   # (some examples hold no value)
        return item._present
    m = item._mask
    return None if m is None else m if m.dim() == 1 else m.reshape(m.size(0), -1).any(1)


def _spread(vals, rows, B):
    """The list of ``B`` lane values holding ``vals`` at ``rows`` (None: all)."""
    if rows is None:
        return vals
    out = [GAP] * B
    for b, v in zip(rows, vals):
        out[b] = v
    return out


# ------------------------------------------------------------------ putting results together
# what every example may hold as one object: values, callables, modules
# (not strings: tensors made from one would be plain ones, meant for every
# example, where the examples' own are batches)
_SHARED = {MaskedBatch, type(None), type(Ellipsis), bool, int, float, type,
           types.FunctionType, types.BuiltinFunctionType}
_SHARED_KINDS = (torch.nn.Module,)
_NUMBERS = (bool, int, float)


def lift(values, rows=None, like=None):
    """The per-example value whose example ``b`` holds ``values[b]`` (see
    the module doc); ``rows``: the lanes that hold one (None: all)."""
    B = len(values)
    held = values if rows is None else [values[b] for b in rows]
    if not held:
        return PerExample(values)
    v0 = held[0]
    t0 = type(v0)
    if t0 in _SHARED or isinstance(v0, _SHARED_KINDS):
        if all(v is v0 for v in held):
            return v0   # (an object, a tensor: each example's own, even where they agree)
    if t0 in _NUMBERS and all(type(v) in _NUMBERS for v in held):
        if all(type(v) is t0 and v == v0 for v in held):
            return v0
        return _scalar(values, held, like)
    if _tensorish(v0) and all(_tensorish(v) for v in held):
        return _batched(values, B)
    if (t0 is tuple or t0 is list) and all(type(v) is tuple or type(v) is list for v in held):
        first = next((v[0] for v in held if v), None)
        if first is not None and _tensorish(first):
            if t0 is tuple and all(type(v) is tuple and len(v) == len(v0) for v in held):
                cols = list(zip(*[(GAP,) * len(v0) if v is GAP else v for v in values]))
                return tuple(lift(list(c), rows, like) for c in cols)  # (h, c) states
            return lane_list(values, rows, like)   # each example's own number of tensors
    return PerExample(values)


def _tensorish(v):
    t = type(v)
    return t is LaneRef or t is MaskedBatch or isinstance(v, torch.Tensor)


def _batched(values, B):
    vals = [LaneRef(v, b) if type(v) is MaskedBatch and v._data.size(0) == B else v
            for b, v in enumerate(values)]
    if all(type(v) is LaneRef or v is GAP for v in vals):
        return gather(vals, B)
    return stack(vals, B)


def _scalar(values, held, like):
    """Numbers: a per-example scalar (floats in float64, marked as Python
    floats: they take the dtype of the tensor they meet, core._python_floats)."""
    floats = False
    if all(type(v) is bool for v in held):
        dtype = torch.bool
    elif all(type(v) is not float for v in held):
        dtype = torch.long
    else:
        dtype, floats = torch.float64, True
    fill = held[0]
    device = None if like is None else like._data.device
    data = torch.tensor([fill if v is GAP else v for v in values], dtype=dtype, device=device)
    out = _new(data, None, (), bdim=None)
    if floats:
        out._pyfloat = True
    return out


def lane_list(values, rows=None, like=None):
    """A per-example list (``lists.py``) from each lane's Python list:
    item ``k`` held by the lanes whose list has one."""
    B = len(values)
    lens = [len(v) if type(v) in (list, tuple) else 0 for v in values]
    n = max(lens)
    refs = gather_grid(values, lens, n)
    out = []
    for k in range(n):
        if refs is not None:
            item = refs(k)
        else:
            item = lift([v[k] if lens[b] > k else GAP for b, v in enumerate(values)],
                        [b for b in range(B) if lens[b] > k], like)
        device = item._data.device if type(item) is MaskedBatch else None
        present = torch.tensor([m > k for m in lens], dtype=torch.bool, device=device)
        out.append(held_item(item, present))
    if out and min(lens) != n:
        counts = torch.tensor(lens, dtype=torch.long, device=present.device)
        out[-1]._listed = (out[-1]._listed[0], counts, None, len(out))
    return out


def held_item(x, lanes):
    """``x`` as an item of a per-example list held by ``lanes`` only (its
    mask False elsewhere; tagged ``_listed``, as ``lists.append`` tags)."""
    if type(x) is MaskedBatch:
        data, m = x.padded_data, x._mask
        view = lanes.view((-1,) + (1,) * (data.dim() - 1))
        if m is not None or any(x.dims):
            view = x.mask.expand((data.size(0),) + tuple(
                n if d else 1 for n, d in zip(data.shape[1:], x.dims))) & view
        x = _new(data, view, x.dims, bdim=x._bdim, present=x._present, sizes=x._sizes)
    elif type(x) in _NUMBERS:
        x = _scalar([x] * lanes.numel(), [x], None)
    elif type(x) is not PerExample:
        x = PerExample([x] * lanes.numel())
    else:
        x = PerExample(x._mb_values)
    x._listed = (lanes, None, None, None)
    return x
_core.PER_EXAMPLE = PerExample
