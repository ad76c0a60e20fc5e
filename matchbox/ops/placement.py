"""Where each op puts the batch-of-one dimension (SPEC section 2).

Per example a value is ``(1, n_1, ..., n_k)`` (its batch-of-one dimension
at 0, the default), has that dimension elsewhere (``(n, 1, d)``,
sequence-first), or has none (``(n, d)``, as for ``torch.func.vmap``).  The
storage is batch-first whatever it is, so the rules of the other modules
are written once, for the batch-of-one dimension at 0.  An adapter here
serves the ops whose operands hold it elsewhere or that can move, drop or
create it: it relabels each operand as if it were at 0 (the same storage),
turns the op's dimension arguments into storage dims (``core.storage_dim``,
the one map), calls the rule, and labels the result with where the
batch-of-one dimension went.

An op with no adapter for its operands' batch-of-one dimensions
(``unplaced``) runs through the general fallback (ops/fallback.py).
"""
import inspect
import math

import torch

from ..core import (PLACEMENTS, RULES, MaskedBatch, Unplaced, adopt, relabel, squeezed,
                    storage_dim, unlabeled)
from ._registry import func_name, is_mb
from .boolean_index import select_rows
from .indexing import put
from .lanes import Items
from .softmax import implicit_dim

__all__ = ["unplaced"]

T = torch.Tensor
F = torch.nn.functional


def unplaced(func, args):
    where = sorted({a._bdim for a in _batches(args) if a._bdim != 0}, key=str)
    return Unplaced(
        f"{func_name(func)} has no rule yet for values whose batch-of-one dimension is "
        f"{'absent' if where == [None] else f'at position {where}'} (matchbox/ops/placement.py "
        f"lists the ops that have one). Move it to the front first: x.unsqueeze(0) where "
        f"there is none, x.movedim(d, 0) where it is at d")


def _batches(args):
    for a in args:
        if is_mb(a):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (b for b in a if is_mb(b))


def _rebuilt(out, items):
    """Tuple ``out`` with ``items`` (itself when they are its own items:
    tuple subclasses such as unbind's steps keep what they record)."""
    if all(a is b for a, b in zip(out, items)):
        return out
    return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)


def _label(out, bdim, inputs=()):
    """Set where the batch-of-one dimension of each MaskedBatch in ``out``
    (a result or a tuple of them) sits."""
    if is_mb(out):
        if any(out is a for a in inputs):
            return relabel(out, bdim)
        out._bdim = bdim
        return out
    if isinstance(out, tuple):
        items = [_label(o, bdim, inputs) for o in out]
        return _rebuilt(out, items)
    if isinstance(out, list):
        return [_label(o, bdim, inputs) for o in out]
    return out


class _Adapter:
    """Base: ``always`` adapters run for every call (the op can drop or
    create the batch-of-one dimension even when it is at 0); the others
    only when some operand holds it elsewhere."""
    always = False

    def __init__(self, *params, signature=None, **options):
        self.params, self.options, self.signature = params, options, signature

    def prepare(self, rule):
        """Read ``rule``'s parameters once, at import (not while torch.compile
        traces a call)."""
        params = inspect.signature(self.signature or rule).parameters.values()
        rule._mb_params = {q.name: (i, None if q.default is inspect.Parameter.empty else q.default)
                           for i, q in enumerate(params)}

    def arg(self, rule, args, kwargs, name, default=None):
        """The argument ``name`` of a call to ``rule`` (positional or
        keyword; the signature's default when not given, else ``default``)
        and its position in ``args`` (None: a keyword or not given)."""
        i, dflt = rule._mb_params.get(name, (None, default))
        if dflt is None:
            dflt = default
        if name in kwargs:
            return kwargs[name], None
        if i is not None and i < len(args):
            return args[i], i
        return dflt, None

    def replace(self, args, kwargs, name, i, value):
        if i is None:
            kwargs = dict(kwargs)
            kwargs[name] = value
        else:
            args = args[:i] + (value,) + args[i + 1:]
        return args, kwargs


def _right_offset(items, op):
    """The common distance of the batch-of-one dimension from the end
    among the MaskedBatch operands that have one (None if none has)."""
    ks = {a.dim() - a._bdim for a in items if is_mb(a) and a._bdim is not None}
    if len(ks) > 1:
        raise ValueError(
            f"{func_name(op)}: the operands hold their batch-of-one dimension at different places "
            f"(counted from the end: {sorted(ks)}), so broadcasting them would not line the "
            f"examples up; move one with x.movedim / x.transpose first")
    return ks.pop() if ks else None


def _to_front(a, k, op):
    """Operand ``a`` of a broadcasting op relabeled as if its batch-of-one
    dimension were at 0, when the result holds it ``k`` dims from the end
    (``k`` None: no operand has one)."""
    if isinstance(a, MaskedBatch):
        if a._bdim is None and k is not None and a.dim() >= k:
            s = a.dim() - k + 1
            if a.dims[s - 1] or a.padded_data.size(s) != 1:
                raise ValueError(
                    f"{func_name(op)}: dimension {a.dim() - k} of one operand (size "
                    f"{a.maxsize(a.dim() - k)}) meets the other's batch-of-one dimension, so "
                    f"the result would have no batch dimension; unsqueeze it there first")
            a = squeezed(a, s)
        return relabel(a, 0)
    if isinstance(a, torch.Tensor) and k is not None and a.dim() >= k:
        if a.size(a.dim() - k) != 1:
            raise ValueError(
                f"{func_name(op)}: dimension {a.dim() - k} of a plain Tensor of shape {tuple(a.shape)} "
                f"meets the examples' batch-of-one dimension, which it would replace; it must "
                f"have size 1 there")
        return a.squeeze(a.dim() - k)
    return a


def _meets_batch_dim(items, k):
    """Whether an operand has a size other than 1 (or a dynamic dim) ``k``
    dims from the end, where the others hold their batch-of-one dimension."""
    for a in items:
        if isinstance(a, MaskedBatch):
            if a._bdim is None and a.dim() >= k:
                s = a.dim() - k + 1
                if a.dims[s - 1] or a.padded_data.size(s) != 1:
                    return True
        elif isinstance(a, torch.Tensor) and a.dim() >= k and a.size(a.dim() - k) != 1:
            return True
    return False


def _unplaced_one(a):
    """MaskedBatch ``a`` (the same values per example) with its batch-of-one
    dimension read as a plain static dimension of size 1: it has none."""
    if not isinstance(a, MaskedBatch) or a._bdim is None:
        return a
    p = a._bdim
    mask = None if a._mask is None else a._mask.unsqueeze(p + 1)
    return MaskedBatch._new(a.padded_data.unsqueeze(p + 1), mask, a.dims[:p] + (False,) + a.dims[p:],
                            a._zero, None)


def _agree(a, p, rank, op):
    """MaskedBatch ``a`` read with its batch-of-one dimension at ``p`` (None:
    read as a plain size 1) when its examples have ``rank`` dims and a
    static 1 there: the same values per example, so operands whose examples
    have the same shape work together whatever their labels.  As it is
    otherwise (the op's own checks then speak)."""
    if not is_mb(a) or a._bdim == p or a.dim() != rank:
        return a
    if p is None:
        return _unplaced_one(a)
    try:
        return adopt(a, p, func_name(op))
    except ValueError:
        return a


def _agree_all(args, kwargs, x, op):
    """``_agree`` every operand after ``x`` (the first) with ``x``."""
    p, n = x._bdim, x.dim()
    return ((args[0],) + tuple(_agree(a, p, n, op) for a in args[1:]),
            {k: _agree(v, p, n, op) for k, v in kwargs.items()})


class Broadcast(_Adapter):
    """Elementwise ops: operands broadcast from the right, so the
    batch-of-one dimension stays the same distance from the end."""

    def __call__(self, func, rule, args, kwargs):
        op = func
        batches = [a for a in list(args) + list(kwargs.values()) if is_mb(a)]
        if len({a._bdim for a in batches}) > 1:  # those of one shape take one label
            x = max(batches, key=lambda a: a.dim())
            args = tuple(_agree(a, x._bdim, x.dim(), op) for a in args)
            kwargs = {n: _agree(v, x._bdim, x.dim(), op) for n, v in kwargs.items()}
        k = _right_offset(list(args) + list(kwargs.values()), op)
        if k is not None and _meets_batch_dim(list(args) + list(kwargs.values()), k):
            # per example, the batch-of-one dimension broadcasts against a size
            # other than 1 (lanes made by x.join_dims(0, d) meeting a (1, ...)
            # value): as in PyTorch, the result has no batch-of-one dimension
            args = tuple(unlabeled(a) for a in args)
            kwargs = {n: unlabeled(v) for n, v in kwargs.items()}
            k = None
        if k is None:
            # no operand has a batch-of-one dimension: the result has the rank
            # of the operand with the most dims (a plain Tensor, maybe)
            rank = max(a.dim() for a in list(args) + list(kwargs.values())
                       if isinstance(a, (torch.Tensor, MaskedBatch)))
            args = tuple(_with_rank(a, rank) for a in args)
            kwargs = {n: _with_rank(v, rank) for n, v in kwargs.items()}
        args = tuple(_to_front(a, k, op) for a in args)
        kwargs = {n: _to_front(v, k, op) for n, v in kwargs.items()}
        out = rule(*args, **kwargs)
        if k is None:
            return _label(out, None, args)
        return _label_from_end(out, k, args)


def _with_rank(a, rank):
    """A MaskedBatch operand with no batch-of-one dimension given leading
    size-1 dims up to ``rank`` per example, as broadcasting would."""
    if not is_mb(a) or a.dim() >= rank:
        return a
    k = rank - a.dim()
    B = a.padded_data.size(0)
    lead = (B,) + (1,) * k
    mask = None if a._mask is None else a._mask.reshape(lead + a._mask.shape[1:])
    sizes = None if a._sizes is None else {d + k: n for d, n in a._sizes.items()}
    return MaskedBatch._new(a.padded_data.reshape(lead + a.padded_data.shape[1:]), mask,
                            (False,) * k + a.dims, a._zero, None, a._present, sizes)


def _label_from_end(out, k, inputs):
    if is_mb(out):
        return _label(out, out.padded_data.dim() - k, inputs)
    if isinstance(out, tuple):
        items = [_label_from_end(o, k, inputs) for o in out]
        return _rebuilt(out, items)
    return out


class Rowwise(_Adapter):
    """Ops over the last ``trailing`` dims of their first operand (linear,
    layer_norm, embedding appends one): the leading dims, and the
    batch-of-one dimension among them, keep their places."""

    def __call__(self, func, rule, args, kwargs):
        x = args[0]
        p, trailing = x._bdim, self.options.get("trailing", 1)
        if p is not None and x.dim() - p <= trailing:
            raise ValueError(
                f"{func_name(func)}: works on the last {trailing} dimension(s) of each example, "
                f"which include its batch-of-one dimension (at {p} of {x.dim()}); move it first")
        args, kwargs = _agree_all(args, kwargs, x, func)
        others = [a for a in list(args[1:]) + list(kwargs.values()) if is_mb(a) and a._bdim != p]
        if others:
            raise unplaced(func, args)
        args = tuple(relabel(a, 0) if is_mb(a) else a for a in args)
        kwargs = {n: relabel(v, 0) if is_mb(v) else v for n, v in kwargs.items()}
        return _label(rule(*args, **kwargs), p, args)


class Lookup(Rowwise):
    """embedding: with a MaskedBatch weight (each example's own table) the
    rule reads where the batch-of-one dimensions sit itself; else as
    ``Rowwise``."""

    def __call__(self, func, rule, args, kwargs):
        if is_mb(self.arg(rule, args, kwargs, "weight")[0]):
            return rule(*args, **kwargs)
        return super().__call__(func, rule, args, kwargs)


class Channels(_Adapter):
    """prelu: the weight applies along dimension 1 of each example, its
    channels (one channel where it has fewer dims or where dimension 1 is
    its batch-of-one dimension); moved to storage dim 1 for the rule."""

    def __call__(self, func, rule, args, kwargs):
        x, weight = args[0], args[1] if len(args) > 1 else kwargs["weight"]
        s = storage_dim(x, 1) if x.dim() >= 2 else 0
        if weight.numel() != 1 and s == 0:
            raise RuntimeError(f"{func_name(func)}: Mismatch of parameter numbers and input channel "
                               f"size. Found parameter numbers = {weight.numel()} and channel size = 1.")
        y = relabel(x, 0)
        if s <= 1:
            return _label(rule(y, weight), x._bdim, (x, y))
        move = _rule(torch.movedim)
        return _label(move(rule(move(y, s, 1), weight), 1, s), x._bdim)


def _dim_to_storage(x, d, op):
    if d is None:
        return None
    if isinstance(d, (tuple, list)):
        return type(d)(storage_dim(x, i, op) for i in d)
    return storage_dim(x, d, op)


class Dims(_Adapter):
    """Ops whose dimension arguments (``params``) name dims of the first
    operand.  ``reduce=True``: those dims are removed unless ``keepdim``
    (with no dim, every one: a 0-dim result per example); otherwise every
    dim keeps its place.  ``implicit``: the dim picked from each example's
    rank when none is given (softmax's legacy rule).  The batch-of-one
    dimension itself may be named only where the rule takes storage dim 0
    as that size-1 dim (``size_one``); elsewhere it is refused."""

    def __init__(self, *params, reduce=False, keepdim="keepdim", full=True, **options):
        super().__init__(*params, **options)
        self.reduce, self.keepdim_name = reduce, keepdim
        self.always = reduce and full

    def __call__(self, func, rule, args, kwargs):
        x = args[0]
        op = func
        p = x._bdim
        if p == 0 and self.reduce and "other" not in kwargs:  # the common case: x.sum(1)
            d, _ = self.arg(rule, args, kwargs, self.params[0])
            if type(d) is int and d != 0 and d != -x.dim() or type(d) is tuple and 0 not in d:
                return rule(*args, **kwargs)
        named, all_dims, given = [], True, (args, kwargs)
        if self.options.get("varargs"):  # flip(x, 0, 1) as well as flip(x, (0, 1))
            kwargs = dict(kwargs)
            dims = kwargs.pop("dims") if "dims" in kwargs else args[1:] if len(args) != 2 else args[1]
            args = (x, tuple([dims] if isinstance(dims, int) else dims))
        if isinstance(kwargs.get("other"), (torch.Tensor, MaskedBatch)):  # max(x, other=y)
            return Broadcast()(func, rule, args, kwargs)
        for name in self.params:
            d, i = self.arg(rule, args, kwargs, name)
            if isinstance(d, bool):  # var(x, unbiased): the overload with no dim
                d = None
            if d is None and "implicit" in self.options:
                d = self.options["implicit"](x.dim())
                args, kwargs = self.replace(args, kwargs, name, i, d)
            if isinstance(d, (torch.Tensor, MaskedBatch)):  # max(x, y): elementwise
                return Broadcast()(func, rule, args, kwargs)
            if d is not None:
                all_dims = False
                ds = list(d) if isinstance(d, (tuple, list)) else [d]
                named += [storage_dim(x, j, op) for j in ds]
                if 0 in named and p is not None and self.reduce:
                    # sum(h, 0) of a (1, d) example: its batch-of-one dimension, as any other
                    return MaskedBatch.__torch_function__(
                        func, (MaskedBatch,), (unlabeled(x),) + tuple(given[0][1:]),
                        given[1])
                if p != 0:
                    args, kwargs = self.replace(args, kwargs, name, i, _dim_to_storage(x, d, op))
        args, kwargs = _agree_all(args, kwargs, x, op)  # gather's index, scatter's src ...
        if any(is_mb(a) and a._bdim != p and a.dim() == x.dim()
               for a in list(args[1:]) + list(kwargs.values())):
            raise unplaced(func, args)
        if p == 0 and not (self.reduce and all_dims):
            return rule(*args, **kwargs)
        if 0 in named and p != 0 and not self.options.get("size_one"):
            raise ValueError(
                f"{func_name(op)} over dimension {p} of each example, its batch-of-one dimension: move it "
                f"first (x.movedim({p}, 0)) or name another dimension")
        # (operands laid out as x; a 1-D index of index_select / index_add is not)
        args = (relabel(x, 0),) + tuple(
            relabel(a, 0) if is_mb(a) and a._bdim == p and a.dim() == x.dim() else a
            for a in args[1:])
        out = rule(*args, **kwargs)
        if not self.reduce:
            return _label(out, p, args)
        keep, _ = self.arg(rule, args, kwargs, self.keepdim_name, False)
        if all_dims and not keep:
            return _label(out, None, args)
        if keep or p is None:
            return _label(out, p, args)
        return _label(out, p - sum(1 for s in named if s <= p), args)


class Norm(Dims):
    """torch.norm: ``p='nuc'`` is a matrix norm over two dims of each
    example, with no ``dim`` its every dim (torch's rule): named here, so
    that they map to the storage as any dims do."""

    def __call__(self, func, rule, args, kwargs):
        p, _ = self.arg(rule, args, kwargs, "p")
        if isinstance(p, str) and p == "nuc":
            d, i = self.arg(rule, args, kwargs, "dim")
            ds = tuple(range(args[0].dim())) if d is None else d
            if not isinstance(ds, (tuple, list)) or len(ds) != 2:
                got = (f"dim={d!r}" if d is not None else
                       f"no dim, and each example has shape {tuple(args[0].maxsize())}")
                raise ValueError(f"{func_name(func)}: p='nuc' is a matrix norm over 2 dims of each "
                                 f"example; got {got}. Name the matrix's two dims, e.g. "
                                 f"dim=(-2, -1)")
            args, kwargs = self.replace(args, kwargs, "dim", i, tuple(ds))
        return super().__call__(func, rule, args, kwargs)


class Loss(_Adapter):
    """Losses reduce each example to one value (a 0-dim result per
    example) unless ``reduction='none'``.  A class-dim loss
    (cross_entropy, nll_loss) on input with no batch-of-one dimension,
    ``(N, C, d...)`` per example (``(N, C)`` as after ``logits.view(-1, C)``),
    runs as the K-dim loss ``(1, C, N, d...)``, a probability target
    ``(N, C, d...)`` with it.  A target whose examples have the input's
    shape (or, for class indices, its shape without the class dim) takes
    the input's label."""
    always = True

    def __call__(self, func, rule, args, kwargs):
        x = args[0]
        red, _ = self.arg(rule, args, kwargs, "reduction", "mean")
        p = x._bdim if is_mb(x) else 0
        op = func
        t, i = self.arg(rule, args, kwargs, "target")
        if is_mb(x) and is_mb(t) and t._bdim != p:
            u = _agree(t, p, x.dim(), op)
            if self.options.get("classes") and p in (0, None):  # (1, C) input, (1,) target
                u = _agree(u, p, x.dim() - 1, op)
            args, kwargs = self.replace(args, kwargs, "target", i, u)
        if p == 0 and any(is_mb(a) and a._bdim is None for a in args[1:]):
            # a target (1,) made with no batch-of-one dimension: its 1 is one
            args = (x,) + tuple(_adopted(a, 0, op) for a in args[1:])
        if p != 0 and red == "batchmean" and x.dim() > 0:
            # 'batchmean' divides by size(0) of each example, its own first dim here
            s = storage_dim(x, 0)
            n = x._lengths(s) if x.dims[s - 1] else x.padded_data.size(s)
            _, i = self.arg(rule, args, kwargs, "reduction")
            args, kwargs = self.replace(args, kwargs, "reduction", i, "sum")
            total = self(func, rule, args, kwargs)
            if torch.is_tensor(n):
                n = MaskedBatch._new(n.to(total.dtype), None, (), bdim=None)
            return total / n
        if p != 0:
            if p is not None:
                if self.options.get("classes") or any(
                        is_mb(a) and a._bdim != p for a in list(args) + list(kwargs.values())):
                    raise unplaced(func, args)
                args = tuple(relabel(a, 0) if is_mb(a) else a for a in args)
                kwargs = {n: relabel(v, 0) if is_mb(v) else v for n, v in kwargs.items()}
                return _label(rule(*args, **kwargs), None if red != "none" else p, args)
            if self.options.get("classes") and x.dim() >= 2:
                # (N, C, d...) runs as (1, C, N, d...): its target (N, d...)
                # lines up, and a probability target (N, C, d...) moves as it
                t, i = self.arg(rule, args, kwargs, "target")
                if is_mb(t) and t._bdim is None and t.dim() == x.dim():
                    args, kwargs = self.replace(args, kwargs, "target", i,
                                                relabel(t, 0).transpose(1, 2))
                x = relabel(x, 0).transpose(1, 2)
            args = (relabel(x, 0) if is_mb(x) else x,) + tuple(
                relabel(a, 0) if is_mb(a) and a._bdim is None else _to_front(a, None, op)
                for a in args[1:])
        out = rule(*args, **kwargs)
        return _label(out, None if red != "none" else p, args)


# ------------------------------------------------------------------ shape ops
def _rule(func):
    return RULES[func]


def _permuted(x, perm, op):
    """``x`` with its per-example dims in the order ``perm`` (user dims)."""
    p = x._bdim
    rest = [storage_dim(x, u, op) for u in perm if u != p]
    out = _rule(torch.permute)(relabel(x, 0), [0] + rest)
    return _label(out, None if p is None else perm.index(p))


def _norm(x, d, n=None, op=None):
    n = x.dim() if n is None else n
    if not -n <= d < n:
        raise IndexError(f"{func_name(op)}: dimension {d} out of range for examples with {n} dimensions")
    return d + n if d < 0 else d


class Permute(_Adapter):
    always = True

    def __call__(self, func, rule, args, kwargs):
        x, op = args[0], func
        n = x.dim()
        kind = self.options["kind"]
        if kind == "transpose":
            a, _ = self.arg(rule, args, kwargs, "dim0")
            b, _ = self.arg(rule, args, kwargs, "dim1")
            a, b = _norm(x, a, op=op), _norm(x, b, op=op)
            perm = list(range(n))
            perm[a], perm[b] = perm[b], perm[a]
        elif kind == "permute":
            dims = args[1:] if len(args) > 2 or not isinstance(args[1], (tuple, list)) else args[1]
            dims = kwargs.get("dims", dims)
            perm = [_norm(x, d, op=op) for d in dims]
        elif kind == "movedim":
            src, _ = self.arg(rule, args, kwargs, "source")
            dst, _ = self.arg(rule, args, kwargs, "destination")
            src = [src] if isinstance(src, int) else list(src)
            dst = [dst] if isinstance(dst, int) else list(dst)
            src, dst = [_norm(x, d, op=op) for d in src], [_norm(x, d, op=op) for d in dst]
            perm = [None] * n
            for s, d in zip(src, dst):
                perm[d] = s
            rest = iter(u for u in range(n) if u not in src)
            perm = [u if u is not None else next(rest) for u in perm]
        else:  # t: swap the two dims of a 2-d example (no-op on fewer)
            if n > 2:
                raise ValueError(f"t() expects examples with <= 2 dimensions, these have {n}; "
                                 f"use transpose(d0, d1)")
            perm = list(range(n))[::-1]
        if x._bdim == 0 and perm[0] == 0:
            return rule(*args, **kwargs)
        return _permuted(x, perm, op)


class Unsqueeze(_Adapter):
    always = True

    def __call__(self, func, rule, args, kwargs):
        x, op = args[0], func
        dim, _ = self.arg(rule, args, kwargs, "dim")
        u = _norm(x, dim, x.dim() + 1, op)
        p = x._bdim
        if p is None:
            if u == 0:  # x.unsqueeze(0) brings the batch-of-one dimension back
                return relabel(x, 0)
            return _label(rule(relabel(x, 0), u + 1), None)
        q = p + (u <= p)
        return _label(rule(relabel(x, 0), u + 1 if u < q else u), q, (x,))


class Squeeze(_Adapter):
    always = True

    def __call__(self, func, rule, args, kwargs):
        x, op = args[0], func
        dim, _ = self.arg(rule, args, kwargs, "dim")
        p = x._bdim
        if p == 0 and type(dim) is int:  # the common x.squeeze(d), d not the batch-of-one dim
            u = _norm(x, dim, op=op)
            if u:
                out = rule(x, u)
                return relabel(out, 0) if out is x else out
        if dim is None:  # every size-1 dim, the batch-of-one one too
            # (a dynamic dim only where every example has size 1 there: the
            # rule refuses one that is 1 in some examples only)
            ones = tuple(storage_dim(x, u) for u in range(x.dim())
                         if u != p and (x.dims[storage_dim(x, u) - 1]
                                        or x.padded_data.size(storage_dim(x, u)) == 1))
            out = rule(relabel(x, 0), ones) if ones else relabel(x, 0)
            return _label(out, None, (x,))
        us = sorted({_norm(x, d, op=op) for d in ([dim] if isinstance(dim, int) else dim)})
        drop = p in us
        rest = tuple(storage_dim(x, u) for u in us if u != p)
        y = relabel(x, 0)
        out = rule(y, rest) if rest else y
        if drop or p is None:
            return _label(out, None, (x, y))
        removed = x.padded_data.dim() - out.padded_data.dim()
        gone = [u for u in us if u < p and x.padded_data.size(storage_dim(x, u)) == 1]
        return _label(out, p - len(gone) if removed else p, (x, y))


class Flatten(_Adapter):
    always = True

    def __call__(self, func, rule, args, kwargs):
        x, op = args[0], func
        s, _ = self.arg(rule, args, kwargs, "start_dim", 0)
        e, _ = self.arg(rule, args, kwargs, "end_dim", -1)
        n = max(x.dim(), 1)
        s, e = _norm(x, s, n, op), _norm(x, e, n, op)
        p = x._bdim
        if p == 0 and s >= 1:
            return rule(x, s, e)
        inside = [u for u in range(s, e + 1) if u != p]
        y = relabel(x, 0)
        out = rule(y, storage_dim(x, inside[0]), storage_dim(x, inside[-1])) if len(inside) > 1 else y
        if p is None or s <= p <= e:
            return _label(out, None if s < e or p is None else p, (x, y))
        return _label(out, p if p < s else p - (e - s), (x, y))


def _sizes(sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        return list(sizes[0])
    return list(sizes)


def _adopted(a, q, op):
    """MaskedBatch ``a`` with its batch-of-one dimension at ``q`` where a
    static 1 there can be it (else ``a`` as it is)."""
    if not is_mb(a) or a._bdim == q:
        return a
    try:
        return adopt(a, q, func_name(op))
    except ValueError:
        return a


def _padded_sizes(x, sizes, op):
    """``sizes`` of a view of ``x`` with each per-example size (a per-example
    int, ``len(sentence)`` under @batch) as the padded size of the dynamic
    dimension of ``x`` whose sizes it is, which is how a view names it."""
    out = list(sizes)
    for i, s in enumerate(sizes):
        if not is_mb(s):
            continue
        n = s.padded_data.reshape(-1).long()
        for d, dyn in enumerate(x.dims, 1):
            if dyn and bool((x._lengths(d) == n).all()):
                out[i] = x.padded_data.size(d)
                break
        else:
            raise NotImplementedError(
                f"{func_name(op)}: size {i} differs between examples but is not the size of "
                f"one of the value's dynamic dimensions; write that dimension as -1")
    return out


class View(_Adapter):
    """view / reshape: the batch-of-one dimension goes to a size-1 entry
    of the target that starts at the same place in the flat order (its own
    index when that fits); with none (``view(-1, C)``), the result has no
    batch-of-one dimension.  A value that has none gets one back from a
    leading 1 (``x.view(1, -1)``)."""
    always = True

    def __call__(self, func, rule, args, kwargs):
        x = args[0]
        sizes = _sizes(args[1:]) if len(args) > 1 else list(kwargs.get("shape", kwargs.get("size", ())))
        if not self.options.get("like") and any(is_mb(s) for s in sizes):
            # view(len(words), 1, -1) under @batch
            sizes = _padded_sizes(x, sizes, func)
            args, kwargs = (x, *sizes), {}
        if len(sizes) == 1 and isinstance(sizes[0], torch.dtype):
            return _label(rule(relabel(x, 0), sizes[0]), x._bdim)
        if self.options.get("like"):
            other = args[1]
            if is_mb(other):
                if other.dims != tuple(False for _ in other.dims) and other._bdim != x._bdim:
                    raise unplaced(func, args)
                sizes = list(other.maxsize())
            else:
                sizes = list(other.shape)
            rule = _rule(T.view if self.options["like"] == "view" else torch.reshape)
        q = self._lead(x, sizes)
        y = relabel(x, 0)
        if q is None:
            return _label(rule(y, [1] + sizes), None, (x, y))
        if x._bdim == 0 and q == 0:
            return rule(x, sizes)
        return _label(rule(y, [1] + sizes[:q] + sizes[q + 1:]), q, (x, y))

    @staticmethod
    def _lead(x, sizes):
        p = x._bdim
        if p is None:
            return 0 if sizes and sizes[0] == 1 else None
        shape = x.maxsize()
        if -1 in sizes and not any(x.dims):  # every example has the size the -1 stands for
            known = math.prod(s for s in sizes if s != -1)
            sizes = [math.prod(shape) // known if s == -1 and known else s for s in sizes]
        dyn_before = any(x.dims[storage_dim(x, u) - 1] for u in range(p))
        before = None if dyn_before else math.prod(shape[:p])

        def fits(q):
            if sizes[q] != 1:
                return False
            if q == p and all(s == -1 or s == shape[i] for i, s in enumerate(sizes[:q])):
                return True
            return -1 not in sizes[:q] and before is not None and math.prod(sizes[:q]) == before
        cands = [q for q in range(len(sizes)) if fits(q)]
        return p if p in cands else (cands[0] if cands else None)


class Expand(_Adapter):
    def __call__(self, func, rule, args, kwargs):
        x = args[0]
        sizes = _sizes(args[1:])
        if self.options.get("like"):
            if is_mb(args[1]):
                raise unplaced(func, args)
            sizes = list(args[1].shape)
        p = x._bdim
        if len(sizes) != x.dim():
            raise unplaced(func, args)
        if p is None:
            return _label(_rule(T.expand)(relabel(x, 0), [1] + sizes), None)
        if sizes[p] not in (1, -1):
            raise ValueError(f"{func_name(func)}{tuple(sizes)}: size {sizes[p]} at dimension {p}, "
                             f"each example's batch-of-one dimension; it must stay 1")
        return _label(_rule(T.expand)(relabel(x, 0), [1] + sizes[:p] + sizes[p + 1:]), p)


class Cat(_Adapter):
    """cat / stack of a sequence: the parts share where their batch-of-one
    dimension sits; plain Tensors are shared by every example."""
    always = True

    def __call__(self, func, rule, args, kwargs):
        seq = list(args[0] if args else kwargs["tensors"])
        dim, _ = self.arg(rule, args, kwargs, "dim", 0)
        op = func
        stack = self.options["kind"] == "stack"
        batches = [a for a in seq if is_mb(a)]
        if not batches:
            return rule(*args, **kwargs)
        ps = {a._bdim for a in batches}
        if len(ps) > 1:  # a static 1 where another part holds it can hold it too
            try:
                q = min(ps - {None})
                seq = [adopt(a, q, func_name(op)) if is_mb(a) else a for a in seq]
            except ValueError:
                raise ValueError(f"{func_name(op)}: the parts hold their batch-of-one dimension at "
                                 f"different places ({sorted(ps, key=str)}); move them to one place "
                                 f"first") from None
            ps = {q}
            args, kwargs = self.replace(args, kwargs, "tensors", 0 if args else None, seq)
        p = ps.pop()
        x = next(a for a in seq if is_mb(a))
        n = x.dim() + stack
        u = _norm(x, dim, n, op)
        extra = {k: v for k, v in kwargs.items() if k not in ("tensors", "dim")}
        if p == 0 and u >= 1:
            return rule(*args, **kwargs)
        k = None if p is None else x.dim() - p

        def part(a):  # read as batch-first, a plain Tensor (one shared example) too
            if is_mb(a):
                return relabel(a, 0)
            return a.unsqueeze(0) if p is None and isinstance(a, torch.Tensor) else _to_front(a, k, op)
        parts = [part(a) for a in seq]
        if stack:
            q = None if p is None else p + (u <= p)
            s = u + 1 if q is None or u < q else u
            return _label(rule(parts, s, **extra), q)
        if u == p:  # along the batch-of-one dimension: it becomes a dim of len(seq)
            return _label(_rule(torch.stack)(parts, p + 1), None)
        return _label(rule(parts, storage_dim(x, u, op), **extra), p)


class Unbind(_Adapter):
    """unbind / split / chunk / narrow / select along a dimension."""
    always = True

    def __call__(self, func, rule, args, kwargs):
        x, op, kind = args[0], func, self.options["kind"]
        name = "dim"
        d, i = self.arg(rule, args, kwargs, name, 0)
        u = _norm(x, d, op=op)
        p = x._bdim
        if p == 0 and u != 0:
            return rule(*args, **kwargs)
        if u == p:
            if kind == "select":
                idx, _ = self.arg(rule, args, kwargs, "index")
                if idx not in (0, -1):
                    raise IndexError(f"{func_name(op)}: index {idx} out of range for dimension {p} of size 1 "
                                     f"(each example's batch-of-one dimension)")
                return relabel(x, None)
            if kind == "unbind":
                return (relabel(x, None),)
            if kind == "narrow":
                return x
            return (x,)
        args, kwargs = self.replace(args, kwargs, name, i, storage_dim(x, u, op))
        args = (relabel(x, 0),) + tuple(args[1:])
        out = rule(*args, **kwargs)
        drops = kind in ("unbind", "select")
        return _label(out, None if p is None else p - (drops and u < p), args)


class Index(_Adapter):
    """``x[...]``: ints, slices, None and Ellipsis on any dims, per-example
    indices (MaskedBatch) and plain index Tensors where the batch-of-one
    dimension is at 0 and kept."""
    always = True

    def __call__(self, func, rule, args, kwargs):
        x, index = args[0], args[1]
        mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
        if isinstance(mask, (torch.Tensor, MaskedBatch)) and mask.dtype == torch.bool and mask.dim():
            return self.boolean(x, mask)
        if not is_mb(x):
            return rule(*args, **kwargs)
        if x._bdim == 0:  # the batch-of-one dimension at 0 and kept: the rule as is
            first = (index[0] if index else None) if isinstance(index, tuple) else index
            if first is Ellipsis and x.dim() > 1 or isinstance(first, slice) and first == slice(None):
                return rule(*args, **kwargs)
        index, q = self.storage_index(func, args, x, index)
        y = relabel(x, 0)
        return _label(rule(y, index), q, (x, y))

    @staticmethod
    def boolean(x, mask):
        """``x[mask]``: the rows where a bool ``mask`` over each example's
        first ``k`` dims holds; the batch-of-one dimension is kept only
        where it lies after them."""
        p = x._bdim if is_mb(x) else None
        if not is_mb(x):  # a plain Tensor: one value every example shares
            x = MaskedBatch._new(x.expand((mask.batch_size,) + tuple(x.shape)), None,
                                 (False,) * x.dim(), bdim=None)
        k = mask.dim()
        out = select_rows(_unplaced_one(x), _unplaced_one(mask), "x[mask]")
        return out if p is None or p < k else adopt(out, p - k + 1, "x[mask]")

    @staticmethod
    def storage_index(func, args, x, index):
        """``index`` (per example, on ``x``) as an index of ``relabel(x, 0)``,
        and where the batch-of-one dimension of ``x[index]`` sits."""
        p = x._bdim
        items = list(index) if isinstance(index, tuple) else [index]
        consumed = sum(0 if it is None or it is Ellipsis else
                       (it.dim() if isinstance(it, torch.Tensor) and it.dtype == torch.bool else 1)
                       for it in items)
        e = next((j for j, it in enumerate(items) if it is Ellipsis), None)
        if e is not None:
            items[e:e + 1] = [slice(None)] * (x.dim() - consumed)
        items += [slice(None)] * (x.dim() - sum(it is not None for it in items))
        out_items, q, u, pos = [], None, 0, 0
        for it in items:
            if it is None:
                if p is None and pos == 0 and q is None and u == 0:
                    q = 0  # x[None] brings the batch-of-one dimension back
                else:
                    out_items.append(None)
                pos += 1
                continue
            if u == p:
                if isinstance(it, slice) and len(range(*it.indices(1))) == 1:
                    q = pos
                    pos += 1
                elif isinstance(it, int) and it in (0, -1):
                    pass
                else:
                    raise IndexError(
                        f"x[...]: index {it!r} on dimension {p}, each example's batch-of-one "
                        f"dimension (size 1): use 0, -1 or ':'")
                u += 1
                continue
            if isinstance(it, torch.Tensor) and not is_mb(it) and p not in (0, None) \
                    and it.dim() > 0:
                raise unplaced(func, args)
            out_items.append(it)
            u += 1
            pos += 0 if isinstance(it, int) or (is_mb(it) and not it.dims and it.dim() == 0) else 1
        return tuple([slice(None)] + out_items), q


class SetItem(_Adapter):
    """``x[index] = value``: the index read as ``Index`` reads it; the value
    lined up with ``x[index]`` per example, as a broadcasting operand
    (``put`` hands it the selected entries)."""

    def __call__(self, func, rule, args, kwargs):
        x, index, value = args
        first = (index[0] if index else None) if isinstance(index, tuple) else index
        if not is_mb(x) or x._bdim == 0 and (not is_mb(value) or value._bdim == 0) and not (
                isinstance(first, int) and not isinstance(first, bool)):
            return rule(*args, **kwargs)  # per-example indices are the rule's own
        # (x[0, j] = v: the int on the batch-of-one dimension is read as Index reads it)
        storage, q = Index.storage_index(func, args, x, index)

        def place(sel, v):
            sel = _label(sel, q)
            if q is None:  # the value's batch-of-one dimension, if any, broadcasts as a 1
                v = unlabeled(v)
            return _to_front(v, _right_offset([sel, v], func), func)
        x.padded_data = put(relabel(x, 0), storage, value, "x[...] = v", place=place)


class Matmul(_Adapter):
    """matmul / @.  A MaskedBatch whose batch-of-one dimension sits among
    its batch or row dims, with a plain Tensor (shared weights) or a
    MaskedBatch of the same layout: as is.  Examples with no batch-of-one
    dimension (vmap style) may be vectors on either side: a vector becomes
    a one-row (left) or one-column (right) matrix, and that dim is dropped
    from the result, as torch.matmul does."""

    def __call__(self, func, rule, args, kwargs):
        a, b = args[0], args[1]
        ps = {x._bdim for x in (a, b) if is_mb(x)}
        if len(ps) > 1 and not kwargs:  # (1, 1, n) held sequence-first is batch-first too
            try:
                a, b = (adopt(x, 0, func_name(func)) if is_mb(x) else x for x in (a, b))
            except ValueError:
                raise unplaced(func, args) from None
            ps = {0}
        if kwargs or len(ps) != 1:
            raise unplaced(func, args)
        p = ps.pop()
        if p is None:
            return self._no_batch_dim(rule, a, b)
        x = a if is_mb(a) else None
        if x is None or x.dim() - p < 2 or is_mb(b) and b.dim() < 2:
            raise unplaced(func, args)
        out = rule(relabel(a, 0), relabel(b, 0) if is_mb(b) else b)
        return _label(out, out.padded_data.dim() - (x.dim() - p))

    @staticmethod
    def _no_batch_dim(rule, a, b):
        ra, rb = a.dim(), b.dim()
        rank = 0 if ra == rb == 1 else rb - 1 if ra == 1 else ra - 1 if rb == 1 else max(ra, rb)
        if is_mb(b):
            b = relabel(b.unsqueeze(-1) if rb == 1 else b, 0)
        elif rb == 1:
            b = b.unsqueeze(-1)
        a = relabel(a, 0) if is_mb(a) else (a.unsqueeze(0) if ra == 1 else a)
        out = rule(a, b)
        if rb == 1:
            out = squeezed(out, out.padded_data.dim() - 1)
        if ra == 1 and out.padded_data.dim() > rank + 1:
            out = squeezed(out, out.padded_data.dim() - (1 if rb == 1 else 2))
        return _label(out, None)


class Made(_Adapter):
    """Constructors called on a batch (``x.new_zeros(1, h)``): the result's
    layout comes from the sizes given, not from ``x``'s."""

    def __call__(self, func, rule, args, kwargs):
        return rule(*(relabel(a, 0) if is_mb(a) else a for a in args), **kwargs)


class Own(_Adapter):
    """Rules that read where the batch-of-one dimension sits themselves
    (the RNN layers and cells adopt a static 1 where torch has the batch)."""

    def __call__(self, func, rule, args, kwargs):
        return rule(*args, **kwargs)


# ------------------------------------------------------------------ the table
def _declare(adapter, *funcs):
    for f in funcs:
        if f is not None and f in RULES:
            PLACEMENTS[f] = adapter
            adapter.prepare(RULES[f])


def _declare_module(adapter, module, skip=()):
    _declare(adapter, *(f for f, rule in RULES.items()
                        if rule.__module__ == module and f not in PLACEMENTS and f not in skip))


def _var(input, dim=None, unbiased=None, keepdim=False):
    """How torch.var / std / var_mean / std_mean take their arguments."""


_declare(Dims("dim", reduce=True, signature=_var), torch.var, T.var, torch.std, T.std,
         torch.var_mean, torch.std_mean)
_declare(Dims("dim", reduce=True), torch.sum, T.sum, torch.mean, T.mean, torch.prod, T.prod,
         torch.nansum, T.nansum, torch.amax, T.amax, torch.amin, T.amin, torch.logsumexp,
         T.logsumexp, torch.max, T.max, torch.min, T.min, torch.argmax, T.argmax, torch.argmin,
         T.argmin, torch.any, T.any, torch.all, T.all, torch.count_nonzero, T.count_nonzero,
         torch.median, T.median, torch.linalg.vector_norm)
_declare(Norm("dim", reduce=True), torch.norm, T.norm)
_declare(Dims("dim", reduce=True, full=False), torch.kthvalue, T.kthvalue)
_declare(Dims("dim", implicit=implicit_dim, size_one=True), torch.softmax, T.softmax, F.softmax,
         torch.log_softmax, T.log_softmax, F.log_softmax, F.softmin, torch.special.softmax,
         torch.special.log_softmax)
_declare(Dims("dim"), torch.cumsum, T.cumsum, torch.cumprod, T.cumprod,
         torch.sort, T.sort, torch.argsort, T.argsort, torch.topk, T.topk, torch.gather, T.gather,
         torch.index_select, T.index_select, F.normalize, F.glu)
_declare(Dims("dims", varargs=True), torch.flip, T.flip)
_declare(Dims("dims"), torch.roll, T.roll)
_declare(Dims("dim"), torch.diff, T.diff, torch.cummax, T.cummax, torch.cummin, T.cummin,
         torch.logcumsumexp, T.logcumsumexp, torch.take_along_dim, T.take_along_dim,
         torch.scatter, T.scatter, torch.scatter_add, T.scatter_add, torch.index_add, T.index_add)
_declare(Dims("dim", reduce=True, full=False), torch.cosine_similarity, F.cosine_similarity)
_declare(Permute(kind="transpose"), torch.transpose, T.transpose, torch.swapaxes, T.swapaxes,
         torch.swapdims, T.swapdims)
_declare(Permute(kind="permute"), torch.permute, T.permute)
_declare(Permute(kind="movedim"), torch.movedim, T.movedim, torch.moveaxis, T.moveaxis)
_declare(Permute(kind="t"), torch.t, T.t)
_declare(Unsqueeze(), torch.unsqueeze, T.unsqueeze)
_declare(Squeeze(), torch.squeeze, T.squeeze)
_declare(Flatten(), torch.flatten, T.flatten)
_declare(View(), T.view, torch.reshape, T.reshape)
_declare(View(like="view"), T.view_as)
_declare(View(like="reshape"), T.reshape_as)
_declare(Expand(), T.expand, torch.broadcast_to, T.broadcast_to)
_declare(Expand(like=True), T.expand_as)
_declare(Cat(kind="cat"), torch.cat, torch.concat, torch.concatenate)
_declare(Cat(kind="stack"), torch.stack)
_declare(Unbind(kind="unbind"), torch.unbind, T.unbind)
_declare(Unbind(kind="split"), torch.split, T.split, torch.chunk, T.chunk)
_declare(Unbind(kind="narrow"), torch.narrow, T.narrow)
_declare(Unbind(kind="select"), torch.select, T.select)
_declare(Index(), T.__getitem__)
_declare(SetItem(), T.__setitem__)
_declare(Loss(classes=True), F.cross_entropy, F.nll_loss)
_declare_module(Loss(), "matchbox.ops.loss")
_declare(Lookup(trailing=0), F.embedding)
_declare(Rowwise(trailing=0), F.one_hot, F.dropout, F.alpha_dropout,
         F.feature_alpha_dropout, torch.dropout, torch.alpha_dropout, torch.feature_alpha_dropout)
_declare(Rowwise(trailing=1), F.linear, F.layer_norm, F.rms_norm, F.bilinear, torch.bilinear)
_declare(Channels(), F.prelu, torch.prelu, getattr(T, "prelu", None))
_declare(Rowwise(trailing=2), torch.tril, T.tril, torch.triu, T.triu)
_declare_module(Broadcast(), "matchbox.ops.pointwise")
_declare(Own(), F.multi_head_attention_forward, torch.zeros, torch.ones, torch.empty, torch.full,
         torch.masked_select, T.masked_select, torch.is_floating_point)
_declare(Own(), torch.nonzero, T.nonzero, torch.argwhere, T.argwhere)
_declare(Own(), torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu, torch.lstm_cell,
         torch.gru_cell, torch.rnn_tanh_cell, torch.rnn_relu_cell)
_declare_module(Own(), "matchbox.ops.inplace", skip=(T.copy_, T.index_put_, torch.index_put_))
_declare(Own(), torch.autograd.grad, torch.autograd.backward)
_declare(Rowwise(trailing=0), torch.zeros_like, torch.ones_like, torch.full_like,
         torch.empty_like, torch.rand_like, torch.randn_like, torch.randint_like)
_declare(Own(), T.repeat)   # (the rule reads where the batch-of-one dimension sits)
_declare(Made(), T.new_zeros, T.new_ones, T.new_full, T.new_empty, T.new_tensor, T.new)
_declare(Matmul(), torch.matmul, T.matmul, T.__matmul__, torch.bmm, T.bmm)
_declare(Broadcast(), T.masked_fill)
_declare(Rowwise(trailing=2), F.scaled_dot_product_attention)
# the input's dim 0 is the module's batch: examples may hold items there (ops/lanes.py)
_declare(Items(1), torch.conv1d, torch.conv_transpose1d, F.max_pool1d, F.max_pool1d_with_indices,
         torch.max_pool1d, torch.max_pool1d_with_indices, F.avg_pool1d, torch.avg_pool1d,
         F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d, F.adaptive_max_pool1d,
         F.adaptive_max_pool1d_with_indices, torch.adaptive_max_pool1d)
_declare(Items(2), torch.conv2d, torch.conv_transpose2d, F.max_pool2d, F.max_pool2d_with_indices,
         torch.max_pool2d, torch._C._nn.max_pool2d_with_indices, F.avg_pool2d,
         torch._C._nn.avg_pool2d, F.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d,
         F.adaptive_max_pool2d, F.adaptive_max_pool2d_with_indices,
         torch._C._nn.adaptive_max_pool2d)
_declare(Items(3), torch.conv3d)
_declare(Items(), F.batch_norm, F.instance_norm, F.group_norm)
_declare(Items("pad"), F.pad, torch._C._nn.pad)
