"""matmul, @, bmm, mm, mv, dot with torch.matmul's per-example semantics.

Each operand is a MaskedBatch (per example ``(1, ...)``) or a plain Tensor
(shared by every example).  Both are laid out per example behind one extra
leading batch dim (a MaskedBatch's ``(B, *example)``, a Tensor's
``(1, *tensor)``), so torch.matmul broadcasting acts per example and never
mixes examples.  Non-real entries are set to 0 before the product, so only
real entries are contracted; dynamic dims that meet (contracted, or
broadcast batch dims) must have the same per-example lengths.  Result mask:
the outer product of the kept dims' masks; dims: the kept dims.
"""
import torch

from .._lanes import batch_size_hint
from ._registry import check_same_lengths, fail_if, is_mb, keep, neutralize, new, register, with_lanes

T = torch.Tensor


class _Side:
    """One operand laid out as ``(B or 1, *example padded to q dims)``; ``flags``
    and ``src`` give, per example position, dynamic-ness and the source data dim."""

    def __init__(self, o, q, promote):
        self.o, self.mb = o, is_mb(o)
        if self.mb:
            data, mask = neutralize(o, 0).unsqueeze(1), o._mask
            mask = None if mask is None else mask.unsqueeze(1)
            flags, src = [False] + list(o.dims), list(range(o.padded_data.dim()))
        else:
            data, mask = o, None
            flags, src = [False] * o.dim(), [None] * o.dim()
        at = {"row": -2, "col": -1}.get(promote)
        if at is not None:  # a 1-D operand becomes a row (left) or column (right) matrix
            data = data.unsqueeze(at)
            mask = None if mask is None else mask.unsqueeze(at)
            pos = len(flags) + 1 + at
            flags.insert(pos, False)
            src.insert(pos, None)
        k = q - len(flags)
        if self.mb or len(flags) > 2:  # a <=2-D Tensor broadcasts as it is
            lead = (slice(None),) if self.mb else (None,)
            data = data[lead + (None,) * k]
            mask = None if mask is None else mask[lead + (None,) * k]
        self.padded_data, self.mask = data, mask
        self.flags, self.src = [False] * k + flags, [None] * k + src
        self.q = q

    def size(self, i):
        i -= self.q
        return self.padded_data.size(i) if i >= -self.padded_data.dim() else 1

    def narrow(self, i, n):
        self.padded_data = self.padded_data.narrow(i - self.q, 0, n)
        if self.mask is not None and self.mask.size(i - self.q) != 1:
            self.mask = self.mask.narrow(i - self.q, 0, n)


def _meet(x, i, y, j, op, broadcast):
    """Check that position ``i`` of ``x`` and ``j`` of ``y`` agree per example
    (contracted dims, or broadcast batch dims) and trim extra padding."""
    dx, dy = x.flags[i], y.flags[j]
    if dx and dy:
        check_same_lengths(x.o, x.src[i], y.o, y.src[j], op)
        n = min(x.size(i), y.size(j))
        x.narrow(i, n), y.narrow(j, n)
    elif dx or dy:
        (dyn, di), (sta, si) = ((x, i), (y, j)) if dx else ((y, j), (x, i))
        s = sta.size(si)
        if broadcast and s == 1:
            return
        lens = dyn.o._lengths(dyn.src[di])
        fail_if(lens != s, lambda _: ValueError(
            f"{op}: dimension {dyn.src[di]} of a MaskedBatch operand is dynamic with "
            f"per-example sizes {lens.tolist()} but meets a static size {s} of the other "
            f"operand; per example the sizes must match"),
            f"{op}: a dynamic dimension meets a static size {s} that some example lacks")
        if dyn.size(di) > s:
            dyn.narrow(di, s)


def _matmul(a, b, op="matmul"):
    if is_mb(a) and is_mb(b) and a.padded_data.size(0) != b.padded_data.size(0):
        raise ValueError(f"{op}: batch sizes differ ({a.padded_data.size(0)} vs {b.padded_data.size(0)})" + batch_size_hint())
    pa, pb = a.dim(), b.dim()
    if pa == 0 or pb == 0:
        raise RuntimeError(f"{op}: both arguments need at least 1 dimension per example")
    q = max(pa + (pa == 1), pb + (pb == 1))
    x = _Side(a, q, "row" if pa == 1 else None)
    y = _Side(b, q, "col" if pb == 1 else None)
    for i in range(q - 2):
        _meet(x, i, y, i, op, broadcast=True)
    _meet(x, q - 1, y, q - 2, op, broadcast=False)

    out = torch.matmul(x.padded_data, y.padded_data)
    flags = [fx or fy for fx, fy in zip(x.flags[:q - 2], y.flags[:q - 2])]
    flags += [x.flags[q - 2], y.flags[q - 1]]
    mask = None
    if x.mask is not None:
        mask = x.mask.any(-1, keepdim=True) if x.mask.size(-1) > 1 else x.mask
    if y.mask is not None:
        my = y.mask.any(-2, keepdim=True) if y.mask.size(-2) > 1 else y.mask
        mask = my if mask is None else mask & my
    real = with_lanes(mask, q + 1)
    if real is not None:  # padding gets exactly zero gradient downstream of here
        out = keep(real, out, 0)

    # drop the promoted 1-D dims, then each example's leading 1
    drops = [i for i, p in ((q - 2, pa == 1), (q - 1, pb == 1)) if p]
    for i in sorted(drops, reverse=True):
        out = out.squeeze(i + 1)
        mask = None if mask is None else mask.squeeze(i + 1)
        del flags[i]
    if flags:
        if out.size(1) != 1 or flags[0]:
            raise ValueError(
                f"{op}: per example the result would have shape {tuple(out.shape[1:])}, whose "
                f"first dimension is not the example's leading 1; matchbox keeps examples "
                f"along dimension 0, so the operands must not broadcast into it")
        out = out.squeeze(1)
        mask = None if mask is None else mask.squeeze(1)
        del flags[0]
    if mask is not None:
        mask = mask.expand([out.size(0)] + [s if f else 1 for s, f in zip(out.shape[1:], flags)])
    return new(out, mask, tuple(flags), zero=True)


def _ndim_check(op, want):
    def check(a, b):
        got = (a.dim(), b.dim())
        if got != want:
            raise RuntimeError(
                f"{op}: needs per-example operands with {want[0]} and {want[1]} dimensions "
                f"(a MaskedBatch example counts its leading 1), got {got[0]} and {got[1]}")
    return check


@register(torch.matmul, T.matmul, T.__matmul__)
def matmul(input, other, *, out=None):
    """``input @ other`` per example; contracts real entries only."""
    if out is not None:
        raise NotImplementedError("matmul: the out= argument is not supported on a MaskedBatch")
    return _matmul(input, other)


@register(T.__rmatmul__)
def rmatmul(self, other):
    return _matmul(other, self)


def _fixed(op, want):
    check = _ndim_check(op, want)

    def rule(input, other, *args, **kwargs):
        if args or kwargs:
            raise NotImplementedError(f"{op}: extra arguments are not supported on a MaskedBatch")
        check(input, other)
        return _matmul(input, other, op)
    rule.__name__ = rule.__qualname__ = op
    rule.__doc__ = f"``torch.{op}`` per example (see matmul)."
    return rule


for _op, _want in {"mm": (2, 2), "bmm": (3, 3), "mv": (2, 1), "dot": (1, 1)}.items():
    register(getattr(torch, _op), getattr(T, _op))(_fixed(_op, _want))
