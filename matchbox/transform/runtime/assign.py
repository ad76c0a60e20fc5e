"""Masked assignment: a store inside a branch or loop body changes only the
active lanes; a read there cuts the dormant lanes from the graph.

``Undefined`` is the value of a variable not yet assigned on a path.
Under a compacted loop (compaction.py) reads gather the live rows and
stores scatter them back, but only in the function that owns the loop.
"""
import operator
import sys

import torch

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from . import containers
from .compaction import owned
from .list_items import getitem
from .lists import extend_owned
from .pyslices import Path, path_key
from .pyvalues import PerExample
from .select import ShapeMismatch, rebuilt, select
from .update import _assign
from .values import Mixed, Undefined


def read(owner, x, shared=True):
    """``x`` as read inside a masked region: its dormant lanes are cut from
    the graph, so whatever they compute there adds no gradient (JAX feeds
    inactive branches stop_gradient'ed inputs the same way).  Every read of
    one value under the same lanes gives the same batch: one cut (one
    backward node) where each read would make its own.  The target of an
    in-place op is read with ``shared=False``: a read of its own (a read
    shares ``x``'s storage, so the write reaches ``x``).  (``owner``, here and below: the runtime of
    the calling function, see compaction.py.)"""
    comp = owned(owner)
    return _read(x if comp is None else comp.take(x), shared)


def _read(x, shared=True):
    lanes = _ACTIVE.get()
    if type(x) is Mixed:
        x = x.resolve(lanes)
    if lanes is None or type(x) is not MaskedBatch or not x.requires_grad \
            or x.batch_size != lanes.size(0):
        return x
    if not shared or torch.compiler.is_compiling():
        return MaskedBatch._read(x, lanes)
    reads, d = _ACTIVE.reads(), x._data
    hit = reads.get(id(x))
    if hit is not None and hit[0] is x and hit[1] is d and hit[2] == d._version:
        return hit[3]
    r = MaskedBatch._read(x, lanes)
    reads[id(x)] = (x, d, d._version, r)
    return r


def assign(owner, old, new, name=None):
    """``new`` for the active lanes, ``old`` for the dormant ones (in
    variable ``name``, which the rewrite gives where a loop may run
    compacted, for the message when that cannot hold both)."""
    comp = owned(owner)
    if comp is None:
        return _assign(old, new)
    try:
        return _compacted_assign(comp, old, new)
    except ShapeMismatch as e:
        if name is None or e.name is not None:
            raise
        raise ShapeMismatch(e.new, e.old, name) from None


@torch.enable_grad()   # each lane keeps its history, as in select
def _compacted_assign(comp, old, new, keep=True):
    """``assign`` in a compacted loop: the update of the live lanes, kept
    compacted (a variable in a compacted ``for``, with ``keep``) or
    scattered back into the full-batch ``old``."""
    if hasattr(comp, "assign"):  # a branch run gathered (branch_compaction.BranchCompaction)
        return comp.assign(old, new, keep)
    if isinstance(new, tuple) and (isinstance(old, Undefined)
                                   or isinstance(old, tuple) and len(old) == len(new)):
        olds = old if isinstance(old, tuple) else (old,) * len(new)
        return rebuilt(new, [_compacted_assign(comp, o, v, keep) for o, v in zip(olds, new)])
    if type(old) is Mixed:  # a compacted loop keeps one value per variable
        raise ShapeMismatch(new, next(v for _, v in old.parts))
    current = comp.take(old)
    new = _assign(current, new)
    if type(new) is Mixed:  # a compacted loop keeps one value per variable
        raise ShapeMismatch(new.parts[0][1], new.parts[1][1])
    undefined = isinstance(old, Undefined) or old is None
    kept = comp.keep(None if undefined else old, current, new) if keep else None
    if kept is not None:
        return kept
    if not undefined and comp.compacted(old) and getattr(old, "_kept", None) is None:
        return new  # a loop temporary, bound (compacted) earlier in this iteration
    if comp.compacted(new):
        new = comp.expand(new)
    return new if undefined else select(comp.alive, new, comp.settle(old))


_AUG = {"+=": (operator.iadd, operator.add), "-=": (operator.isub, operator.sub),
        "*=": (operator.imul, operator.mul), "/=": (operator.itruediv, operator.truediv),
        "//=": (operator.ifloordiv, operator.floordiv), "%=": (operator.imod, operator.mod),
        "**=": (operator.ipow, operator.pow), "@=": (operator.imatmul, operator.matmul),
        "&=": (operator.iand, operator.and_), "|=": (operator.ior, operator.or_),
        "^=": (operator.ixor, operator.xor), "<<=": (operator.ilshift, operator.lshift),
        ">>=": (operator.irshift, operator.rshift)}


def aug_assign(owner, old, op, value, in_place=True):
    """``old op= value``: in place (plain Python) when every lane is
    active (but for a MaskedBatch), else a masked out-of-place update.  ``in_place=False``: the
    update of an item (``buf[k] += v``) that ``setitem`` then stores, out
    of place for a Tensor (a plain Tensor's item may take a per-example
    value)."""
    inplace, outplace = _AUG[op]
    comp = owned(owner)
    if op == "+=" and isinstance(old, list):  # lst += items: appends per lane
        extend_owned(old, value, comp)
        return old
    if comp is not None:
        return _compacted_assign(comp, old, outplace(_read(comp.take(old)), value))
    if _ACTIVE.get() is None:
        # (a batch out of place: a read of it in a branch before is a view of it,
        # which a change in place would invalidate for autograd)
        if type(old) is MaskedBatch or not in_place and isinstance(old, torch.Tensor):
            return outplace(old, value)
        return inplace(old, value)
    return _assign(old, outplace(_read(old), value))


def _path_store(obj, keys, value, name, own):
    """``obj[k1]...[kn] = value``: one store where ``path_key`` gives one
    index (so it can give each example its own copy of ``obj``); else
    through the items, as written."""
    key = path_key(obj, keys)
    if key is not None:
        return setitem(obj, key, value, name, own)
    target = obj
    for k in keys[:-1]:   # (each example's own item of a per-example list)
        target = getitem(keys.owner, target, k)
    setitem(target, keys[-1], value)
    return obj


def setitem(obj, key, value, name=None, own=False, fresh=False):
    """``obj[key] = value`` for the active lanes, and the object the local
    variable ``name`` (None: the target is no local variable) holds after
    it.  A Python dict or list keeps its old item in the dormant lanes (a
    new key takes ``value``, as a variable first bound in a branch does); a
    MaskedBatch honours the lanes itself; a plain Tensor of the function's
    own (``own``: the rewrite found that the function made it and lets
    nothing else hold it, transform/buffers.py) takes the store as one copy
    per example (``_own_copies``).  A per-example key: see
    ``containers.setitem`` (``fresh``: a container the function made)."""
    if type(key) is Path:
        return _path_store(obj, key, value, name, own)
    if type(obj) is PerExample or (type(key) in (PerExample, MaskedBatch)
                                   or fresh and _ACTIVE.get() is not None) \
            and not isinstance(obj, (torch.Tensor, MaskedBatch)):
        out = containers.setitem(obj, key, value, fresh)
        if out is not None:
            return out
    if type(obj) in (dict, list):
        if _ACTIVE.get() is not None and type(key) is not slice:
            old = obj.get(key) if type(obj) is dict else obj[key]
            value = _assign(old, value)
    elif type(obj) is torch.Tensor and (_ACTIVE.get() is not None or _per_example(key, value)):
        obj = _own_copies(obj, key, value, name, own)
    obj[key] = value
    return obj


def inplace(obj, method, name, *args, own=False, **kwargs):
    """``obj.method(*args, **kwargs)``, an in-place method called as a
    statement on local variable ``name``, for the active lanes, and the
    object ``name`` holds after it: a plain Tensor of the function's own
    (``own``, as for ``setitem``), changed under some lanes or by a
    per-example argument, becomes one copy per example first, so each
    example changes its own."""
    if type(obj) is torch.Tensor:
        value = next((a for a in (*args, *kwargs.values()) if type(a) is MaskedBatch), None)
        if _ACTIVE.get() is not None or value is not None:
            obj = _own_copies(obj, None, value, name, own, f"{name}.{method}(...)")
            if type(obj) is MaskedBatch:
                obj = obj.clone()  # (its copies are one expanded Tensor)
    getattr(obj, method)(*args, **kwargs)
    return obj


def _per_example(key, value):
    return type(value) is MaskedBatch or type(key) is MaskedBatch or (
        type(key) is tuple and any(type(k) is MaskedBatch for k in key))


def _own_copies(t, key, value, name, own, op=None):
    """Plain Tensor ``t``, stored into under some lanes or with a
    per-example key or value, as each example sees it: a MaskedBatch of one
    copy per example (no batch-of-one dimension: per example it is ``t``)
    when it is the function's own (``own``, and no view of another Tensor).
    Else it is shared by every example: a plain store (one value
    for every active lane) writes it as each example would; a per-example
    one, or an in-place method ``op`` (``"buf.add_(...)"``), raises."""
    shared = not own or t._base is not None
    # an in-place method (``op``) need not give every example one value
    per_example = op is not None or _per_example(key, value)
    if shared and not per_example:
        return t
    if shared:
        caller = sys._getframe(2)   # (for the message only)
        what = ("is no local variable" if name is None else "is a view of another Tensor"
                if t._base is not None else "something else holds too, or that "
                "this function did not make (an argument, an attribute, another variable, a "
                "list or attribute it is stored in)")
        raise NotImplementedError(
            f"{op or (name or 'x') + '[...] = v'} at {caller.f_code.co_filename}:"
            f"{caller.f_lineno}: a per-example change to a plain Tensor that {what}; every "
            f"example would change that one shared Tensor. Change a local variable bound to a Tensor "
            f"of its own (buf = torch.zeros(...), or buf = t.clone() in this function): @batch "
            f"gives each example its own copy")
    batches = [a for a in (value, *(key if type(key) is tuple else (key,)))
               if type(a) is MaskedBatch]
    B = batches[0].batch_size if batches else _ACTIVE.get().size(0)
    return MaskedBatch._new(t.expand(B, *t.shape), None, (False,) * t.dim(), bdim=None)


def _expanded(comp, value):
    if isinstance(value, tuple):
        return tuple(_expanded(comp, v) for v in value)
    return comp.expand(value) if type(value) is MaskedBatch and comp.compacted(value) else value


def setattr_(owner, obj, name, value):
    """``obj.name = value`` for the active lanes (each active example's own
    object, where ``obj`` is a PerExample: the others keep theirs)."""
    comp = owned(owner)
    if type(obj) is PerExample:
        if comp is not None and comp.full(obj):
            # in a gathered branch: the value at the full batch, stored by the
            # branch's lanes, as a variable's is (one layout for every lane)
            token = _ACTIVE.set(comp.lanes(_ACTIVE.get()))
            try:
                setattr(obj, name, _expanded(comp, value))
            finally:
                _ACTIVE.reset(token)
        else:
            setattr(obj, name, value)
        return
    old = getattr(obj, name, None)
    if comp is None:
        # a helper called in a compacted loop or gathered branch of another
        # function: what it keeps on an object is the full batch's again
        comp = _COMPACT.get()
        if comp is None or not (type(value) is MaskedBatch and comp.compacted(value)
                                and (old is None or comp.full(old))):
            comp = None
    setattr(obj, name, _assign(old, value) if comp is None
            else _compacted_assign(comp, old, value, keep=False))
