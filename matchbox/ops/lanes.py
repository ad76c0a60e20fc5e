"""Nested batches: a per-example dimension used as a module's batch dimension.

Per example, code may give a module a value whose batch dimension is one of
the example's own dims: the DyNet char tagger runs a char ``nn.LSTM`` over
``(L, k, C)`` letters, ``k`` the rare words of the sentence, which differs
from sentence to sentence; a conv runs over ``(k, C, L)``.  Each example
then holds ``k`` items, and every item of every example runs together: the
items are folded into lanes (SPEC section 6: ``join_dims(0, d)`` makes each
example ``n`` lanes), the op's rule runs on the ``B * K`` lanes (``K`` the
largest ``k``) as on any batch, each lane one item whose batch-of-one
dimension is the folded dim, and each result is unfolded, its lanes
becoming a ``k``-sized dimension of the example again (dynamic where ``k``
is).

Lanes past an example's ``k`` are padding: they run as dormant lanes (the
active lanes of ``@batch`` are folded the same way), so rules give them no
value and no gradient, and the results are 0 there.  They keep the
example's sizes along its other dims, so that an example with ``k = 0``
gets results of size 0 along ``k`` and its own sizes elsewhere, as torch
gives for one example.  Batch norm in training mode normalizes over the
real entries of every item of every example (SPEC section 3).
"""
import torch

from .._lanes import active_lanes, batch_size_hint, lanes
from ..core import adopt, empty_present, empty_sizes, mask_from_lengths, relabel, unlabeled
from ._registry import _pad_dim, check_same_lengths, is_mb, keep, new, uncut

__all__ = ["Lanes", "nested", "Items"]


def nested(x, m):
    """Whether per-example dim ``m`` of MaskedBatch ``x``, a module's batch
    dim, holds items of the example's own: the examples have no
    batch-of-one dimension (where they have one elsewhere, as batch-first
    examples given to a sequence-first layer, the rules raise saying so)
    and dim ``m`` is not a static 1, which ``core.adopt`` reads as one."""
    return x._bdim is None and (x.dims[m] or x.padded_data.size(m + 1) != 1)


class Lanes:
    """The items along per-example dim ``m`` of ``x`` as lanes: ``fold``
    makes the lanes of ``x`` and of the operands that share its items,
    ``run`` calls a rule on them, ``unfold`` gives each example its items'
    results."""

    def __init__(self, x, m, op):
        s = m + 1  # (x has no batch-of-one dimension: see ``nested``)
        self.op, self.ref, self.dynamic, self.present = op, (x, s), x.dims[m], x._present
        self.B, self.n = x.padded_data.size(0), x.padded_data.size(s)
        self.K = max(self.n, 1)  # (one lane per example at least: it gives the other sizes)
        self.k = x._lengths(s) if self.dynamic else None  # (B,) items per example
        active = active_lanes()
        # a lane is active where its item is real and its example active
        self.items = None if self.k is None else \
            torch.arange(self.K, device=self.k.device) < self.k[:, None]
        folded = None if active is None else active[:, None].expand(self.B, self.K)
        if self.items is not None:
            folded = self.items if folded is None else folded & self.items
        self.active = None if folded is None else folded.reshape(-1)

    def fold(self, v, m):
        """MaskedBatch ``v`` (the same examples and items as ``x``, along its
        per-example dim ``m``) as ``B * K`` lanes, each item with its
        batch-of-one dimension at ``m``."""
        v = unlabeled(v)
        s, B, K = m + 1, self.B, self.K
        if v.padded_data.size(0) != B:
            raise ValueError(f"{self.op}: batch sizes differ ({B} vs {v.padded_data.size(0)})"
                             + batch_size_hint())
        if v.dims[m] != self.dynamic or not self.dynamic and v.padded_data.size(s) != self.n:
            raise ValueError(f"{self.op}: the operands hold different numbers of items per "
                             f"example (their dimensions {self.ref[1] - 1} and {m})")
        if self.dynamic and v is not self.ref[0]:
            check_same_lengths(self.ref[0], self.ref[1], v, s, f"{self.op} (items per example)")
        data = _pad_dim(uncut(v), s, K)
        data = data.movedim(s, 1).reshape((B * K,) + data.shape[1:s] + data.shape[s + 1:])
        if self.items is not None:  # padding items hold garbage (NaN would leak into gradients)
            data = keep(self.items.view((B * K,) + (1,) * (data.dim() - 1)), data, 0)
        dims, mask, present = v.dims[:m] + v.dims[m + 1:], v._mask, None
        if mask is not None and not self.dynamic:  # one box for every item of an example
            mask = mask.movedim(s, 1).expand((B, K) + mask.shape[1:s] + mask.shape[s + 1:])
            mask = mask.reshape((B * K,) + mask.shape[2:])
        elif mask is not None:  # the box of the example's other dims, in every lane
            lengths = {d - (d > s): v._lengths(d).repeat_interleave(K)
                       for d in range(1, data.dim() + 1) if d != s and v.dims[d - 1]}
            mask = mask_from_lengths(lengths, data.shape, dims)
            present = empty_present(lengths) if v._present is not None else None
        return new(data, mask, dims, bdim=m, present=present)

    def plain(self, t, m):
        """A plain Tensor that every example shares, whose dim ``m`` holds
        the items (e.g. an initial RNN state ``(L * D, k, H)``), as lanes."""
        if self.dynamic or t.size(m) != self.K:
            raise ValueError(
                f"{self.op}: a plain Tensor of shape {tuple(t.shape)} is shared by every "
                f"example, so its dimension {m} must have each example's number of items "
                f"({'which differs between examples' if self.dynamic else self.K}); give "
                f"a value per example (a MaskedBatch) instead")
        data = t.movedim(m, 0).expand((self.B,) + t.movedim(m, 0).shape)
        data = data.reshape((self.B * self.K,) + data.shape[2:])
        return new(data, None, (False,) * (t.dim() - 1), bdim=m)

    def run(self, rule, *args, **kwargs):
        """``rule`` on lane operands, its results unfolded."""
        with lanes(self.active):
            out = rule(*args, **kwargs)
        return self.unfold(out)

    def unfold(self, y):
        """A result on the lanes (a MaskedBatch whose batch-of-one dimension
        is each item's, or a tuple of them) per example: that dimension
        holds the example's items."""
        if isinstance(y, (tuple, list)):
            return type(y)(self.unfold(o) for o in y)
        if not is_mb(y):
            return y
        B, K, q = self.B, self.K, y._bdim
        data = y.padded_data
        data = data.reshape((B, K) + data.shape[1:]).movedim(1, q + 1)
        dims = y.dims[:q] + (self.dynamic,) + y.dims[q:]
        # sizes along the other dims: lane 0's (every lane has its example's)
        lengths = {d + (d > q): y._lengths(d).view(B, K)[:, 0]
                   for d in range(1, y.padded_data.dim()) if y.dims[d - 1]}
        zero = y._zero
        if self.k is not None:
            lengths[q + 1] = self.k
            view = [B] + [1] * (data.dim() - 1)
            view[q + 1] = K
            data, zero = keep(self.items.view(view), data, 0), True
        if self.n == 0:  # no example has an item
            data = data.narrow(q + 1, 0, 0)
        mask = mask_from_lengths(lengths, data.shape, dims)
        present = sizes = None
        if self.present is not None:  # some example is empty: say which hold a value
            present = empty_present(lengths, self.present)
            sizes = empty_sizes(lengths, present)
        return new(data, mask, dims, zero=zero, bdim=None, present=present, sizes=sizes)


class Items:
    """Placement adapter (ops/placement.py) of the ops whose input's dim 0
    is the module's batch (conv, pooling, norm, pad): an input whose
    examples hold items there, ``(k, C, *spatial)`` with no batch-of-one
    dimension, runs every item as a lane; one in the unbatched form
    ``(C, *spatial)`` (``spatial`` dims, where the op has that form) runs
    as ``(1, C, *spatial)``."""
    always = False

    def __init__(self, spatial=None):
        self.spatial = spatial

    def prepare(self, rule):
        pass

    def __call__(self, func, rule, args, kwargs):
        x, rest = args[0], args[1:]
        if not is_mb(x) or x._bdim == 0:
            return rule(*args, **kwargs)
        name = getattr(func, "__name__", "this op")
        if type(self.spatial) is int and x.dim() == self.spatial + 1:  # unbatched
            if x._bdim is not None:
                raise ValueError(
                    f"{name}: each example {tuple(x.maxsize())} is in the unbatched form "
                    f"(C, {('L', 'H, W', 'D, H, W')[self.spatial - 1]}) but has a batch-of-one "
                    f"dimension at {x._bdim}; move it to the front first "
                    f"(x.movedim({x._bdim}, 0))")
            return _relabeled(rule(relabel(x, 0), *rest, **kwargs), None)
        padded = len(rest[0] if rest else kwargs["pad"]) // 2 if self.spatial == "pad" else 0
        if x.dim() <= padded:
            raise NotImplementedError(
                f"{name}: padding all {x.dim()} dimensions of examples that have no "
                f"batch-of-one dimension is not supported; give them one (x.unsqueeze(0))")
        if not nested(x, 0):
            return rule(adopt(x, 0, name), *rest, **kwargs)
        items = Lanes(x, 0, name)
        return items.run(rule, items.fold(x, 0), *rest, **kwargs)


def _relabeled(out, bdim):
    if isinstance(out, tuple):
        return tuple(_relabeled(o, bdim) for o in out)
    return relabel(out, bdim) if is_mb(out) else out
