"""The runtime that code rewritten by ``@batch`` calls.

The execution mask (the bool Tensor ``(B,)`` of active lanes, or ``None``
when every lane is active) lives in :mod:`matchbox._lanes`, per-thread
storage that each @batch call sets and resets, so threads and asyncio
tasks each have their own.  Every helper here keeps
plain Python semantics when its condition is a Python value (or a plain
Tensor at batch size one); only a :class:`MaskedBatch` condition makes the
code run lane by lane.

- conditions: :func:`cond`, :func:`not_`, :func:`and_`, :func:`or_`
- branches: :func:`if_true`, :func:`if_false`, :func:`if_exp`
- loops: :func:`while_loop`, :func:`for_loop`, :func:`range_`,
  :func:`enumerate_`, :func:`zip_`, :func:`reversed_`
- state: :func:`assign`, :func:`aug_assign`, :func:`setattr_`,
  :func:`append`, :func:`read`, :class:`Undefined`
- calls: :func:`sibling_calls` (``@batch(merge_calls=True)``)
"""
import builtins
import operator
import sys
from contextlib import contextmanager

import torch

from .. import _lanes
from .._lanes import active_lanes
from ..core import MaskedBatch
from ..ops._registry import scatter_rows, uncut
from .compaction import Compaction, StepCompaction, function_codes
from .errors import LoopLimitError

_new = MaskedBatch._new
_ACTIVE = _lanes._ACTIVE
_COMPACT = _lanes._COMPACT


# ------------------------------------------------------------------ values
class Undefined:
    """The value of a variable not yet assigned on this path."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def _fail(self, *args, **kwargs):
        raise NameError(
            f"variable {self.name!r} is used before it is assigned (for some example it "
            f"was assigned only on a path that was not taken)")

    __bool__ = __call__ = __iter__ = __getitem__ = __add__ = __radd__ = __mul__ = _fail
    __sub__ = __rsub__ = __truediv__ = __neg__ = __len__ = __index__ = __float__ = _fail

    def __getattr__(self, name):
        if name.startswith("__") or name == "name":  # (copy, pickle, torch.compile probe these)
            raise AttributeError(name)
        self._fail()

    def __repr__(self):
        return f"<undefined {self.name}>"


def _lane_view(lanes, ndim):
    return lanes.view((-1,) + (1,) * (ndim - 1))


def _owned():
    """The loop compaction that the caller of the calling runtime function
    gathers and scatters for: only the loop's own function does."""
    comp = _COMPACT.get()
    return comp if comp is not None and sys._getframe(2).f_code in comp.codes else None


def read(x):
    """``x`` as read inside a masked region: its dormant lanes are cut from
    the graph, so whatever they compute there adds no gradient (JAX feeds
    inactive branches stop_gradient'ed inputs the same way)."""
    comp = _owned()
    if comp is not None:
        x = comp.take(x)
    return _read(x)


def _read(x):
    lanes = _ACTIVE.get()
    if lanes is None or type(x) is not MaskedBatch or not x.requires_grad \
            or x.batch_size != lanes.size(0):
        return x
    return MaskedBatch._read(x, lanes)


# ------------------------------------------------------------------ conditions
def cond(value):
    """A condition evaluated once: a Python bool (plain Python semantics) or,
    for a MaskedBatch, the bool Tensor ``(B,)`` of lanes where it holds."""
    if isinstance(value, MaskedBatch):
        d = value.data
        B = d.size(0)
        if d[0].numel() != 1:
            raise ValueError(
                f"a per-example condition must hold one value per example, but it has "
                f"per-example shape {tuple(d.shape[1:])}; reduce it with .any() or .all()")
        c = d.reshape(B) != 0 if d.dtype != torch.bool else d.reshape(B)
        if value._mask is not None:
            c = c & value._mask.reshape(B)
        return c
    return bool(value)


def _as_condition_batch(lanes):
    return _new(lanes, None, ())


def not_(value):
    c = cond(value)
    if isinstance(c, bool):
        return not c
    return _as_condition_batch(~c)


def _under(lanes, thunk):
    """Evaluate ``thunk`` with ``lanes`` (already combined) active."""
    token = _ACTIVE.set(lanes)
    try:
        return thunk()
    finally:
        _ACTIVE.reset(token)


def _combine(outer, c):
    return c if outer is None else outer & c


# The lanes of every lane (where the active lanes are None), for _within.
_ALL = "all lanes"


def _within(lanes, outer):
    """Whether every lane of ``lanes`` is known to be in ``outer`` (each a
    lanes Tensor or _ALL) without reading the device: ``outer`` is all
    lanes, or ``lanes`` was made inside it (a loop's iteration inside the
    previous one, a branch inside its surroundings: ``_inside``)."""
    return outer is _ALL or lanes is outer or getattr(lanes, "_mb_within", None) is outer


def _inside(lanes, outer):
    """Record that ``lanes`` (a fresh Tensor) lies within ``outer`` (lanes
    or None for all)."""
    lanes._mb_within = _ALL if outer is None else outer
    return lanes


def and_(a, b_thunk):
    """``a and b`` in a condition; ``b`` runs only for lanes where ``a``."""
    ca = cond(a)
    if isinstance(ca, bool):
        return b_thunk() if ca else False
    sub = _combine(active_lanes(), ca)
    if not bool(sub.any()):
        return _as_condition_batch(ca)
    cb = cond(_under(sub, b_thunk))
    if isinstance(cb, bool):
        return _as_condition_batch(ca if cb else torch.zeros_like(ca))
    return _as_condition_batch(ca & cb)


def or_(a, b_thunk):
    """``a or b`` in a condition; ``b`` runs only for lanes where not ``a``."""
    ca = cond(a)
    if isinstance(ca, bool):
        return True if ca else b_thunk()
    sub = _combine(active_lanes(), ~ca)
    if not bool(sub.any()):
        return _as_condition_batch(ca)
    cb = cond(_under(sub, b_thunk))
    if isinstance(cb, bool):
        return _as_condition_batch(torch.ones_like(ca) if cb else ca)
    return _as_condition_batch(ca | cb)


# ------------------------------------------------------------------ branches
def _narrow(c):
    """Set the active lanes to the current ones AND ``c``; return the token
    and whether any lane is active."""
    outer = active_lanes()
    lanes = c if outer is None else _inside(outer & c, outer)
    n = int(lanes.sum())
    if outer is None and n == lanes.numel():
        lanes = None  # every lane takes the branch: no masking needed
    return _ACTIVE.set(lanes), n > 0


@contextmanager
def if_true(c):
    """Run the body (``with if_true(c) as run: if run: ...``) for the lanes
    where ``c`` holds."""
    if isinstance(c, bool):
        yield c
        return
    token, run = _narrow(c)
    try:
        yield run
    finally:
        _ACTIVE.reset(token)


@contextmanager
def if_false(c):
    """The ``else`` of :func:`if_true`."""
    if isinstance(c, bool):
        yield not c
        return
    token, run = _narrow(~c)
    try:
        yield run
    finally:
        _ACTIVE.reset(token)


def if_exp(c, body, orelse):
    """``body() if c else orelse()``, each side evaluated only for its lanes."""
    c = cond(c)
    if isinstance(c, bool):
        return body() if c else orelse()
    outer = active_lanes()
    yes, no = _combine(outer, c), _combine(outer, ~c)
    a = _under(yes, body) if bool(yes.any()) else Undefined("<if branch>")
    b = _under(no, orelse) if bool(no.any()) else Undefined("<else branch>")
    if isinstance(a, Undefined):
        return b
    if isinstance(b, Undefined):
        return a
    return select(c, a, b)


# ------------------------------------------------------------------ selecting values
def _canonical(x, B, like):
    """``(data, mask, dims)`` of a per-example value at batch size ``B``."""
    if isinstance(x, MaskedBatch):
        return x.data, x._mask, x.dims
    if isinstance(x, torch.Tensor):
        if x.dim() == 0:
            return x.reshape(1).expand(B), None, ()
        if x.size(0) == 1:
            return x.expand((B,) + tuple(x.shape[1:])), None, (False,) * (x.dim() - 1)
        raise ValueError(
            f"cannot give a Tensor of shape {tuple(x.shape)} different values per example: a "
            f"per-example value needs a leading dimension of size 1")
    if isinstance(x, (bool, int, float)):
        ld = like.data if isinstance(like, MaskedBatch) else like
        if isinstance(x, bool):
            dtype = torch.bool
        elif isinstance(x, int):
            dtype = ld.dtype if isinstance(ld, torch.Tensor) and not ld.dtype.is_floating_point \
                and ld.dtype != torch.bool else torch.long
            if isinstance(ld, torch.Tensor) and ld.dtype.is_floating_point:
                dtype = ld.dtype
        else:
            dtype = ld.dtype if isinstance(ld, torch.Tensor) and ld.dtype.is_floating_point \
                else torch.get_default_dtype()
        device = ld.device if isinstance(ld, torch.Tensor) else None
        return torch.full((B,), x, dtype=dtype, device=device), None, ()
    raise TypeError(f"cannot give a {type(x).__name__} different values per example")


def _full_mask(data, mask, dims, sizes_dyn):
    """A canonical mask for ``data`` where the result dims are ``sizes_dyn``."""
    B = data.size(0)
    shape = [B] + [s if d else 1 for s, d in zip(data.shape[1:], sizes_dyn)]
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=data.device)
    return mask.expand(shape)


def _update_of(a, b, lanes):
    """Whether MaskedBatch ``a`` is known to equal ``b`` outside ``lanes``
    (made from ``b``'s data by a rule that wrote only these lanes' rows)."""
    made = getattr(a, "_update_of", None)
    return made is not None and made[0] is b.data and made[1] == made[0]._version \
        and made[2] is lanes


def select(lanes, a, b):
    """Per lane: ``a`` where ``lanes`` else ``b`` (values of any per-example
    kind: MaskedBatch, Tensor at batch size one, numbers, tuples of them)."""
    if a is b:
        return a
    if type(a) is MaskedBatch and type(b) is MaskedBatch and a._mask is b._mask \
            and a.dims == b.dims and a.data.shape == b.data.shape \
            and a.data.dtype == b.data.dtype:
        # the common case (loop state of one shape): one where, mask kept
        if _update_of(a, b, lanes):
            return a
        return _new(torch.where(_lane_view(lanes, a.data.dim()), a.data, b.data), a._mask, a.dims)
    if isinstance(a, (tuple, list)) and type(a) is type(b) and len(a) == len(b) \
            and any(isinstance(v, (torch.Tensor, MaskedBatch)) for v in a):
        return type(a)(select(lanes, x, y) for x, y in zip(a, b))
    tensors = (torch.Tensor, MaskedBatch)
    if not isinstance(a, tensors) and not isinstance(b, tensors):
        if isinstance(a, (bool, int, float)) and isinstance(b, (bool, int, float)):
            if a == b and type(a) is type(b):
                return a
        else:
            try:
                if a == b:
                    return a
            except Exception:
                pass
            raise TypeError(
                f"a value of type {type(a).__name__} and one of type {type(b).__name__} "
                f"would have to be held by different examples of one variable; @batch can "
                f"only do that for tensors and numbers")
    B = lanes.size(0)
    da, ma, dimsa = _canonical(a, B, b)
    db, mb, dimsb = _canonical(b, B, a)
    if da.dim() != db.dim():
        if da.dim() == 1:
            da = da.reshape((B,) + (1,) * (db.dim() - 1))
            dimsa = (False,) * (db.dim() - 1)
            ma = None if ma is None else ma.reshape(da.shape)
        elif db.dim() == 1:
            db = db.reshape((B,) + (1,) * (da.dim() - 1))
            dimsb = (False,) * (da.dim() - 1)
            mb = None if mb is None else mb.reshape(db.shape)
        else:
            raise ValueError(
                f"a variable would hold values with {da.dim() - 1} and {db.dim() - 1} "
                f"per-example dimensions in different examples")
    dtype = torch.promote_types(da.dtype, db.dtype)
    da, db = da.to(dtype), db.to(dtype)
    dims, masked = [], ma is not None or mb is not None
    for i in range(1, da.dim()):
        sa, sb = da.size(i), db.size(i)
        dyn = dimsa[i - 1] or dimsb[i - 1]
        if sa != sb and (dyn or (sa != 1 and sb != 1)):
            dyn, masked = True, True
        elif sa != sb:
            # a size-1 static dim meets a larger one: broadcast it
            if sa == 1:
                da = da.expand(*[-1] * i, sb, *[-1] * (da.dim() - i - 1))
            else:
                db = db.expand(*[-1] * i, sa, *[-1] * (db.dim() - i - 1))
        dims.append(dyn)
    mask = None
    if masked:
        ma2 = _pad_to(da, ma, dimsa, dims, db)
        mb2 = _pad_to(db, mb, dimsb, dims, da)
        da, db = _pad_data(da, db), _pad_data(db, da)
        mask = torch.where(_lane_view(lanes, ma2.dim()), ma2, mb2)
    data = torch.where(_lane_view(lanes, da.dim()), da, db)
    return _new(data, mask, tuple(dims))


def _pad_data(x, other):
    pads = []
    for i in reversed(range(1, x.dim())):
        pads += [0, max(0, other.size(i) - x.size(i))]
    return torch.nn.functional.pad(x, pads) if any(pads) else x


def _pad_to(x, mask, xdims, dims, other):
    """The canonical mask of ``x`` in the result's layout (padded to the
    larger size along each dimension, lengths for newly dynamic dims)."""
    B = x.size(0)
    m = _full_mask(x, mask, xdims, xdims)
    out_shape = [B]
    for i in range(1, x.dim()):
        n = max(x.size(i), other.size(i))
        if dims[i - 1]:
            if not xdims[i - 1]:
                # static in x: every entry up to its size is real
                real = torch.arange(n, device=x.device) < x.size(i)
                view = [1] * x.dim()
                view[i] = n
                m = m.expand(*[-1] * i, 1, *[-1] * (x.dim() - i - 1)) & real.view(view)
            elif m.size(i) < n:
                pad = [0, 0] * (x.dim() - 1 - i) + [0, n - m.size(i)]
                m = torch.nn.functional.pad(m, pad, value=False)
            out_shape.append(n)
        else:
            out_shape.append(1)
    return m.expand(out_shape)


def assign(old, new):
    """``new`` for the active lanes, ``old`` for the dormant ones."""
    comp = _owned()
    return _assign(old, new) if comp is None else _compacted_assign(comp, old, new)


def _compacted_assign(comp, old, new, keep=True):
    """``assign`` in a compacted loop: the update of the live lanes, kept
    compacted (a variable in a compacted ``for``, with ``keep``) or
    scattered back into the full-batch ``old``."""
    if isinstance(new, tuple) and (isinstance(old, Undefined)
                                   or isinstance(old, tuple) and len(old) == len(new)):
        olds = old if isinstance(old, tuple) else (old,) * len(new)
        return tuple(_compacted_assign(comp, o, v, keep) for o, v in zip(olds, new))
    current = comp.take(old)
    new = _assign(current, new)
    undefined = isinstance(old, Undefined) or old is None
    kept = comp.keep(None if undefined else old, current, new) if keep else None
    if kept is not None:
        return kept
    if not undefined and comp.compacted(old):
        return new  # a loop temporary, bound (compacted) earlier in this iteration
    if comp.compacted(new):
        new = comp.expand(new)
    return new if undefined else select(comp.alive, new, comp.settle(old))


def _assign(old, new):
    lanes = _ACTIVE.get()
    if lanes is None or old is new or isinstance(old, Undefined) or old is None:
        return new
    if isinstance(new, Undefined):
        return old
    return select(lanes, new, old)


_AUG = {"+=": (operator.iadd, operator.add), "-=": (operator.isub, operator.sub),
        "*=": (operator.imul, operator.mul), "/=": (operator.itruediv, operator.truediv),
        "//=": (operator.ifloordiv, operator.floordiv), "%=": (operator.imod, operator.mod),
        "**=": (operator.ipow, operator.pow), "@=": (operator.imatmul, operator.matmul),
        "&=": (operator.iand, operator.and_), "|=": (operator.ior, operator.or_),
        "^=": (operator.ixor, operator.xor), "<<=": (operator.ilshift, operator.lshift),
        ">>=": (operator.irshift, operator.rshift)}


def aug_assign(old, op, value):
    """``old op= value``: in place (plain Python) when every lane is
    active, else a masked out-of-place update."""
    inplace, outplace = _AUG[op]
    comp = _owned()
    if comp is not None:
        return _compacted_assign(comp, old, outplace(_read(comp.take(old)), value))
    if _ACTIVE.get() is None:
        return inplace(old, value)
    return _assign(old, outplace(_read(old), value))


def setattr_(obj, name, value):
    """``obj.name = value`` for the active lanes."""
    old = getattr(obj, name, None)
    comp = _owned()
    setattr(obj, name, _assign(old, value) if comp is None
            else _compacted_assign(comp, old, value, keep=False))


# ------------------------------------------------------------------ calls
def sibling_calls(f, first, second):
    """``(f(*first), f(*second))`` as ONE call of ``f`` on the active lanes
    of both, stacked: rows ``[0, n)`` are the first call's, ``[n, 2n)`` the
    second's (``@batch(merge_calls=True)``, see sibling_calls.py).  Inside,
    every stacked lane is active.  Two plain calls when the arguments do
    not stack: a non-MaskedBatch argument that differs between the calls,
    or MaskedBatches of different layouts."""
    lanes = _ACTIVE.get()
    B = next((a._data.size(0) for a in first + second if type(a) is MaskedBatch), None)
    if B is None or len(first) != len(second) or not all(
            _stackable(a, b, B) for a, b in zip(first, second)):
        return f(*first), f(*second)
    rows = None if lanes is None else lanes.nonzero().squeeze(1)
    n = B if rows is None else rows.numel()
    args = [_stacked(a, b, rows) if type(a) is MaskedBatch else a for a, b in zip(first, second)]
    active, compact = _ACTIVE.set(None), _COMPACT.set(None)
    try:
        out = f(*args)
    finally:
        _COMPACT.reset(compact)
        _ACTIVE.reset(active)
    return _unstacked(out, rows, n, B)


def _stackable(a, b, B):
    if a is b or type(a) in (bool, int, float, str) and type(a) is type(b) and a == b:
        return True
    return type(a) is MaskedBatch and type(b) is MaskedBatch and a.dims == b.dims \
        and a._data.shape == b._data.shape and a._data.size(0) == B \
        and a._data.dtype == b._data.dtype and (a._mask is None) == (b._mask is None) \
        and (a._mask is None or a._mask.shape == b._mask.shape)


def _stacked(a, b, rows):
    """The rows ``rows`` (None: all; the active lanes, so a read's cut of
    the dormant ones is not needed: ``uncut``) of ``a`` then those of ``b``."""
    def pick(x, y):
        if x is None:
            return None
        if rows is None:
            return torch.cat([x, y])
        return x.index_select(0, torch.cat([rows, rows])) if x is y \
            else torch.cat([x.index_select(0, rows), y.index_select(0, rows)])
    return _new(pick(uncut(a), uncut(b)), pick(a._mask, b._mask), a.dims)


def _unstacked(out, rows, n, B):
    """Split a result of the stacked call into the two calls' results, back
    at batch size ``B`` (rows outside ``rows`` are 0: the caller keeps only
    its active lanes)."""
    if isinstance(out, tuple):
        pairs = [_unstacked(o, rows, n, B) for o in out]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    if type(out) is MaskedBatch and out._data.size(0) == 2 * n:
        def half(x, k):
            x = x[k * n:(k + 1) * n]
            return x if rows is None else scatter_rows(x, rows, B)
        mask = out._mask
        return tuple(_new(half(out.data, k), None if mask is None else half(mask, k), out.dims)
                     for k in (0, 1))
    if isinstance(out, (torch.Tensor, MaskedBatch, list, dict)):
        raise TypeError(
            f"@batch(merge_calls=True): the merged calls returned a {type(out).__name__} that "
            f"cannot be split between them; return MaskedBatches, numbers or tuples of them, "
            f"or leave merge_calls off")
    return out, out  # a number, None or undefined: the same for every example


# ------------------------------------------------------------------ lists
# An item that @batch's ``append`` stores in a list is a MaskedBatch tagged
# with ``_listed = (presence, counts, full)``: the lanes in which the item
# exists, and, on the list's last item only, each lane's list length so far
# and (None if unknown) the lanes whose list holds every item (_ALL: all).
def _listed(x):
    return getattr(x, "_listed", None) if isinstance(x, MaskedBatch) else None


def _tag(x, presence, counts=None, full=None):
    x._listed = (presence, counts, full)
    return x


def _in_lanes(v, lanes, like=None):
    """``v`` as a MaskedBatch whose mask is False in the lanes not in ``lanes``
    (so those lanes are not real in it, and the gradient cut that a read
    made under these lanes left pending is not needed: ``uncut``)."""
    if type(v) is MaskedBatch:
        v = _new(uncut(v), v._mask, v.dims)
    data, mask, dims = _canonical(v, lanes.size(0), like)
    full = _lane_view(lanes, data.dim())
    if mask is not None or any(dims):
        full = _full_mask(data, mask, dims, dims) & full
    return _tag(_new(data, full, dims), lanes)


def _lane_counts(lst, B, device):
    """Per-lane lengths of ``lst``: read off its last item, else (a list
    no masked append has touched) its length in every lane."""
    tag = _listed(lst[-1]) if lst else None
    if tag is not None and tag[1] is not None:
        return tag[1]
    return torch.full((B,), len(lst), dtype=torch.long, device=device)


def append(lst, value):
    """``lst.append(value)`` that records the active lanes: per example the
    list grows only where the lane is active, so ``F.stack`` of the list
    builds a dynamic dimension with each example's own length."""
    if not isinstance(lst, list):
        return lst.append(value)
    comp = _owned()
    if comp is None:
        return _append(lst, value)
    token = _ACTIVE.set(comp.lanes(_ACTIVE.get()))
    try:
        return _append(lst, comp.expand(value) if comp.compacted(value) else value)
    finally:
        _ACTIVE.reset(token)


def _append(lst, value):
    lanes = _ACTIVE.get()
    last = _listed(lst[-1]) if lst else None
    if lanes is None and last is None:
        lst.append(value)
        return None
    own = _ALL if lanes is None else lanes
    if lanes is None:
        lanes = torch.ones_like(last[0])
    counts = _lane_counts(lst, lanes.size(0), lanes.device)
    grown = counts + lanes.long()
    if last is None or (last[2] is not None and _within(own, last[2])) \
            or bool(((counts == len(lst)) | ~lanes).all()):
        # every active lane holds every item so far (a loop over a dynamic
        # dim, the common case): the value is a new last item.  Known
        # without reading the device when the lanes lie within the last
        # append's (the next iteration of the loop that made them).
        lst.append(_tag(_in_lanes(value, lanes, lst[0] if lst else None), lanes, grown, own))
        return None
    active_counts = counts[lanes]
    if active_counts.numel() == 0:
        return None
    lo, hi = int(active_counts.min()), int(active_counts.max())
    for k in range(lo, hi + 1):
        sel = lanes & (counts == k)
        if not bool(sel.any()):
            continue
        if k < len(lst):
            old = lst[k]
            held = _listed(old)[0] if _listed(old) else torch.ones_like(sel)
            lst[k] = _tag(select(sel, value, old), held | sel)
        else:
            lst.append(_in_lanes(value, sel, lst[0] if lst else None))
    lst[-1] = _tag(lst[-1], _listed(lst[-1])[0], grown)
    return None


# ------------------------------------------------------------------ loops
class _Loop:
    def __init__(self, description, max_iterations, compact=None):
        """``compact``: the share of lanes at which the loop compacts (see
        compaction.py); only the code of the function that made the loop
        (the caller of the subclass's ``__init__``) gathers and scatters."""
        self.description, self.max_iterations = description, max_iterations
        self.count = 0
        self.compact, self.compaction = compact, None
        if compact is not None:
            self.codes = function_codes(sys._getframe(2).f_code)

    def __enter__(self):
        self.outer = active_lanes()
        self.alive = self.outer
        self.token = _ACTIVE.set(self.outer)
        if self.compact is not None:  # the loop's compaction is undone when it ends
            self.compact_token = _COMPACT.set(_COMPACT.get())
        return self

    def __exit__(self, *exc):
        if self.compact is not None:
            _COMPACT.reset(self.compact_token)
        _ACTIVE.reset(self.token)
        return False

    def _tick(self):
        self.count += 1
        if self.max_iterations is not None and self.count > self.max_iterations:
            lanes = self.alive
            which = "" if lanes is None else f" (examples {lanes.nonzero().flatten().tolist()})"
            raise LoopLimitError(
                f"{self.description} ran more than max_iterations={self.max_iterations} "
                f"iterations{which}; some example never leaves it")

    def _narrow_alive(self, c):
        """Lanes where ``c`` is false leave the loop for good; False when
        no lane is left."""
        c = cond(c)
        if isinstance(c, bool):
            return c
        lanes = _inside(_combine(self.alive, c), self.alive)
        n = int(lanes.sum())
        if self.alive is None and n == lanes.numel():
            return True
        self.alive = lanes
        _ACTIVE.set(lanes)
        return n > 0


class while_loop(_Loop):
    """``with while_loop(desc, max) as loop: while loop.test(cond): body``.

    With ``compact`` (a share of lanes, from ``@batch(compact=...)``), the
    iterations after the live share drops to it or below run on the live
    lanes only (see compaction.py)."""

    def __init__(self, description, max_iterations, compact=None):
        super().__init__(description, max_iterations, compact)

    def test(self, c):
        self._tick()
        if self.compaction is not None:
            self.compaction.check()
            c = self.compaction.widen(c)
        go = self._narrow_alive(c)
        if go and self.compact is not None and self.alive is not None \
                and _COMPACT.get() is self.compaction:  # never inside another's compaction
            self.compaction = None
            if int(self.alive.sum()) <= self.compact * self.alive.numel():
                self.compaction = Compaction(self.alive, self.codes, self.description)
                _ACTIVE.set(None)  # every live lane is active
            _COMPACT.set(self.compaction)
        return go


class LaneIterable:
    """An iterable whose items exist only in some lanes (``range(n)`` with a
    per-example ``n``): ``lane_items()`` yields ``(item, presence)``."""

    def lane_items(self):
        raise NotImplementedError


def presence(item):
    """The lanes in which ``item`` exists (None: all), read from masks."""
    if isinstance(item, MaskedBatch):
        m = item._mask
        if m is None:
            return None
        tag = _listed(item)
        if tag is not None:
            return tag[0]
        if m.dim() == 1:
            return m
        return m.reshape(m.size(0), -1).any(1)
    if isinstance(item, (tuple, list)):
        p = None
        for x in item:
            q = presence(x)
            if q is not None:
                p = q if p is None else p & q
        return p
    return None


def lane_items(iterable):
    if isinstance(iterable, LaneIterable):
        yield from iterable.lane_items()
    else:
        for item in iterable:
            yield item, presence(item)


def _lane_masks_dropped(item):
    """``item`` without a mask that only says which lanes hold it (a step of
    ``x.unbind(d)`` with static dims): inside the iteration the active
    lanes say that already, and an unmasked item keeps the body's ops and
    masked updates on their fast paths."""
    if isinstance(item, (tuple, list)):
        return type(item)(_lane_masks_dropped(x) for x in item)
    if isinstance(item, MaskedBatch) and item._mask is not None \
            and item._mask.numel() == item._mask.size(0):
        return _new(item.data, None, item.dims)
    return item


class for_loop(_Loop):
    """``with for_loop(it, extra, desc, max) as loop: for t in loop: body``.

    An iteration runs for the lanes that have the item (a MaskedBatch item
    whose mask is False in some lanes, a per-example ``range``) and that
    ``extra()`` (break/return flags) has not sent out of the loop.

    With ``compact`` (from ``@batch(compact=...)``), a loop over the steps
    of a dynamic dim with no break or return, entered with every lane
    active, runs compacted from the first step at which no more than that
    share of the lanes have it (see ``StepCompaction``); the variables it
    assigns are put back together after it by ``loop.settle(x)``."""

    def __init__(self, iterable, extra, description, max_iterations, compact=None):
        super().__init__(description, max_iterations, compact)
        self.iterable, self.extra = iterable, extra

    def __iter__(self):
        steps = _Steps.of(self.iterable)
        items = lane_items(self.iterable) if steps is None else zip(self.iterable, steps.lanes)
        compacts = self.compact is not None and steps is not None and steps.shrinking \
            and self.alive is None and self.extra is None and _COMPACT.get() is None
        last = self.alive  # the lanes of the last iteration that ran
        for t, (item, p) in enumerate(items):
            _ACTIVE.set(self.alive)
            self._tick()
            if self.extra is not None and not self._narrow_alive(self.extra()):
                return
            if p is None:
                _ACTIVE.set(self.alive)
            else:
                lanes = _combine(self.alive, p)
                n = steps.counts[t] if steps is not None and self.alive is None else int(lanes.sum())
                if n == 0:
                    continue
                if steps is not None and steps.shrinking:
                    _inside(lanes, last)
                # every lane active: no masked work at all in this iteration
                last = None if n == lanes.numel() else lanes
                _ACTIVE.set(last)
                item = _lane_masks_dropped(item)
                if compacts and last is not None and n <= self.compact * lanes.numel():
                    item = self._compacted(item, n, lanes, steps)
            yield item
        if self.compaction is not None:
            self.compaction.check()
        _ACTIVE.set(self.alive)

    def _compacted(self, item, n, lanes, steps):
        """Run this iteration on its ``n`` lanes only; its item compacted."""
        comp = self.compaction
        if comp is None:
            comp = self.compaction = StepCompaction(steps.presences.sum(1), self.codes,
                                                    self.description)
            _COMPACT.set(comp)
        comp.step(n, lanes)
        _ACTIVE.set(None)  # every live lane is active
        return comp.rows_of(item)

    def settle(self, x):
        """Variable ``x`` after the loop, holding every example again."""
        return x if self.compaction is None else self.compaction.settle(x)


class _Steps:
    """The lanes of each step of ``x.unbind(d)`` over a dynamic dim and
    their counts, read with one host transfer for the whole loop instead of
    one per iteration.  Masks are prefixes, so each step's lanes lie within
    the last one's (``shrinking``; checked in the same transfer): appends
    in the loop then know, without reading the device, that every active
    lane holds every item so far."""

    def __init__(self, presences):  # (B, T) bool
        self.presences, self.lanes = presences, presences.t().unbind(0)
        shrinking = (presences[:, 1:] <= presences[:, :-1]).all()
        host = torch.cat([presences.sum(0), shrinking.long().view(1)]).tolist()
        self.counts, self.shrinking = host[:-1], bool(host[-1])

    @classmethod
    def of(cls, iterable):
        presences = getattr(iterable, "presences", None)
        return None if presences is None else cls(presences())


def _lane_vector(x):
    d = x.data
    return d.reshape(d.size(0))


class LaneRange(LaneIterable):
    """``range(start, stop, step)`` where start or stop differ per example."""

    def __init__(self, start, stop, step, reverse=False):
        if isinstance(step, MaskedBatch):
            raise NotImplementedError("range() with a per-example step is not supported by @batch")
        if step == 0:
            raise ValueError("range() arg 3 must not be zero")
        self.start, self.stop, self.step, self.reverse = start, stop, step, reverse

    def __reversed__(self):
        return LaneRange(self.start, self.stop, self.step, not self.reverse)

    def _bounds(self):
        lanes = active_lanes()
        vals = {}
        for name in ("start", "stop"):
            v = getattr(self, name)
            if isinstance(v, MaskedBatch):
                vec = _lane_vector(v).long()
                sel = vec if lanes is None else vec[lanes]
                vals[name] = (vec, int(sel.min()) if sel.numel() else 0,
                              int(sel.max()) if sel.numel() else 0)
            else:
                v = int(v)
                vals[name] = (v, v, v)
        return vals

    def lane_items(self):
        b = self._bounds()
        start, lo_start, hi_start = b["start"]
        stop, lo_stop, hi_stop = b["stop"]
        step = self.step
        if step > 0:
            values = list(range(lo_start, hi_stop, 1))
        else:
            values = list(range(hi_start, lo_stop, -1))
        if self.reverse:
            values = values[::-1]
        for i in values:
            off = (i - start) if step > 0 else (start - i)
            if step > 0:
                p = (start <= i) & (stop > i) if isinstance(start, torch.Tensor) else (stop > i) & (i >= start)
            else:
                p = (start >= i) & (stop < i) if isinstance(start, torch.Tensor) else (stop < i) & (i <= start)
            if isinstance(off, torch.Tensor):
                p = p & (off % abs(step) == 0)
            elif off % abs(step):
                continue
            if isinstance(p, bool):
                if p:
                    yield i, None
                continue
            yield i, p


def range_(*args):
    """``range`` that accepts per-example bounds."""
    if not any(isinstance(a, MaskedBatch) for a in args):
        return builtins.range(*args)
    if len(args) == 1:
        return LaneRange(0, args[0], 1)
    return LaneRange(args[0], args[1], args[2] if len(args) > 2 else 1)


class _LaneEnumerate(LaneIterable):
    def __init__(self, iterable, start):
        self.iterable, self.start = iterable, start

    def lane_items(self):
        counts = None
        k = self.start
        for item, p in lane_items(self.iterable):
            if p is None and counts is None:
                yield (k, item), None
                k += 1
                continue
            if counts is None:
                B = p.size(0)
                counts = torch.full((B,), k, dtype=torch.long, device=p.device)
            sel = counts if p is None else counts[p]
            if sel.numel() and int(sel.min()) == int(sel.max()):
                idx = int(sel.min())
            else:
                idx = _new(counts.clone(), None, ())
            yield (idx, item), p
            counts = counts + (1 if p is None else p.long())


def enumerate_(iterable, start=0):
    """``enumerate`` that counts per lane over items that exist only in some lanes."""
    return _LaneEnumerate(iterable, start)


class _LaneZip(LaneIterable):
    def __init__(self, iterables):
        self.iterables = iterables

    def lane_items(self):
        for pairs in builtins.zip(*[lane_items(it) for it in self.iterables]):
            item = tuple(v for v, _ in pairs)
            p = None
            for _, q in pairs:
                if q is not None:
                    p = q if p is None else p & q
            yield item, p


def zip_(*iterables):
    if any(isinstance(it, LaneIterable) for it in iterables):
        return _LaneZip(iterables)
    return builtins.zip(*iterables)


class _LaneReversed(LaneIterable):
    def __init__(self, items):
        self.items = items

    def lane_items(self):
        for item, p in reversed(list(lane_items(self.items))):
            yield item, p


def reversed_(seq):
    if hasattr(seq, "per_example_reversed"):  # the steps of x.unbind(d), d dynamic
        return seq.per_example_reversed()
    if isinstance(seq, LaneRange):
        return reversed(seq)
    if isinstance(seq, LaneIterable):
        return _LaneReversed(seq)
    return builtins.reversed(seq)
