"""matmul, @, bmm, mm, mv, dot with torch.matmul's per-example semantics;
einsum, tensordot, bilinear, outer and addmm/addmv/addr/baddbmm.

Each operand is a MaskedBatch (per example ``(1, ...)``) or a plain Tensor
(shared by every example).  Both are laid out per example behind one extra
leading batch dim (a MaskedBatch's ``(B, *example)``, a Tensor's
``(1, *tensor)``), so torch.matmul broadcasting acts per example and never
mixes examples.  Non-real entries are set to 0 before the product, so only
real entries are contracted; dynamic dims that meet (contracted, or
broadcast batch dims) must have the same per-example lengths.  Result mask:
the outer product of the kept dims' masks; dims: the kept dims.
"""
import string

import torch

from .._lanes import batch_size_hint
from ..core import mask_from_lengths
from ._registry import (canon_mask, check_same_lengths, fail_if, is_mb, keep, neutralize, new,
                        register, with_lanes)

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


def _empty_contraction(side, i, kept):
    """``kept``, a side's mask reduced over its contracted position ``i``,
    real also in the examples of length 0 there (``x.mT @ y`` of an empty
    example), whose product over nothing is 0, a value, when the side's
    other dims are static (their entries are all real)."""
    if not side.flags[i] or side.o._present is None \
            or any(f for k, f in enumerate(side.flags) if k != i):
        return kept
    empty = side.o._lengths(side.src[i]) == 0
    return kept | empty.view((-1,) + (1,) * (kept.dim() - 1))


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
        mask = _empty_contraction(x, q - 1, mask)
    if y.mask is not None:
        my = y.mask.any(-2, keepdim=True) if y.mask.size(-2) > 1 else y.mask
        my = _empty_contraction(y, q - 2, my)
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


# ------------------------------------------------------------------ einsum and its kin
def _einsum_subscripts(equation, ndims):
    """Each operand's subscripts and the output's, as lists of letters, with
    ``...`` spelled out in letters of its own; and one more unused letter."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum: the equation names {len(terms)} operands, got {len(ndims)}")
    free = [c for c in string.ascii_letters if c not in equation]
    n_ell = max([n - len(t) + 3 for t, n in zip(terms, ndims) if "..." in t], default=0)
    ell, free = free[:n_ell], free[n_ell:]
    ins = []
    for t, n in zip(terms, ndims):
        a, dots, b = t.partition("...")
        sub = list(a) + (ell[n_ell - (n - len(a) - len(b)):] if dots else []) + list(b)
        if len(sub) != n:
            raise RuntimeError(f"einsum: subscripts {t!r} do not fit an operand with {n} dims "
                               f"per example (a MaskedBatch example counts its leading 1)")
        ins.append(sub)
    if arrow:
        out = list(rhs.replace("...", "".join(ell)))
    else:  # torch's implicit output: the ellipsis, then the letters used once, sorted
        once = [c for c in sorted(set(lhs)) if c.isalpha() and sum(s.count(c) for s in ins) == 1]
        out = ell + once
    return ins, out, free[0]


def _sublists(args):
    """torch.einsum's sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``
    as ``(equation, operands)``."""
    def letters(sub):
        return "".join("..." if s is Ellipsis else string.ascii_uppercase[s] if s < 26
                       else string.ascii_lowercase[s - 26] for s in sub)
    eq = ",".join(letters(s) for s in args[1::2])
    if len(args) % 2:
        return eq + "->" + letters(args[-1]), args[:-1:2]
    return eq, args[::2]


def _size(o, i):
    """Per-example size of dim ``i`` of an operand (padded, for a MaskedBatch)."""
    return o.shape[i] if not is_mb(o) else 1 if i == 0 else o.padded_data.size(i)


@register(torch.einsum)
def einsum(*args):
    """``torch.einsum`` per example.  Every MaskedBatch operand gets a
    batch letter of its own (its examples' leading 1 stays a dim of size 1),
    its non-real entries are 0, so contractions see real entries only; a
    letter that is dynamic in one operand must have the same per-example
    lengths wherever it appears (or static size 1).  Result mask: real
    where some real entry of every operand contributes (the masks contracted
    the same way); dims: a letter is dynamic if it is in any operand.  The
    result's first dim must be the examples' leading 1, as in matmul."""
    equation, ops = (args[0], args[1:]) if isinstance(args[0], str) else _sublists(args)
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    mbs = [o for o in ops if is_mb(o)]
    B = mbs[0].padded_data.size(0)
    if any(o.padded_data.size(0) != B for o in mbs):
        raise ValueError("einsum: the MaskedBatch operands hold different numbers of examples"
                         + batch_size_hint())
    ins, out, z = _einsum_subscripts(equation, [o.dim() for o in ops])
    # where each letter is dynamic, and the size every operand is narrowed to there
    owner, size = {}, {}
    for o, sub in zip(ops, ins):
        for i, c in enumerate(sub):
            if is_mb(o) and i and o.dims[i - 1]:
                owner.setdefault(c, (o, i))
    for o, sub in zip(ops, ins):
        for i, c in enumerate(sub):
            if c not in owner or (owner[c][0] is o and owner[c][1] == i):
                continue
            s = _size(o, i)
            if is_mb(o) and i and o.dims[i - 1]:
                check_same_lengths(owner[c][0], owner[c][1], o, i, "einsum")
            elif s != 1:
                lens = owner[c][0]._lengths(owner[c][1])
                fail_if(lens != s, lambda _: ValueError(
                    f"einsum: subscript {c!r} is dynamic with per-example sizes {lens.tolist()} "
                    f"but another operand has static size {s} there"),
                    f"einsum: subscript {c!r} is dynamic but meets a static size {s}")
    for o, sub in zip(ops, ins):
        for i, c in enumerate(sub):
            s = _size(o, i)
            if c in owner and s != 1:
                size[c] = min(size.get(c, s), s)
    datas, masks, msubs = [], [], []
    for o, sub in zip(ops, ins):
        if not is_mb(o):
            datas.append(o)
            continue
        d, m = neutralize(o, 0), o._mask
        for i, c in enumerate(sub):
            if i and c in size and d.size(i) > size[c]:
                d = d.narrow(i, 0, size[c])
                m = m if m is None or m.size(i) == 1 else m.narrow(i, 0, size[c])
        datas.append(d.unsqueeze(1))
        if m is not None:
            masks.append(m.unsqueeze(1).float())
            msubs.append(z + "".join(sub))
    subs = ",".join(z + "".join(s) if is_mb(o) else "".join(s) for o, s in zip(ops, ins))
    res = torch.einsum(f"{subs}->{z}{''.join(out)}", *datas)
    dims = [c in owner for c in out]
    mask = None
    if masks and any(o._present is not None for o in mbs):
        # an example of length 0 somewhere: its contractions over nothing are
        # 0, values; each kept letter is real below its own length
        lengths = {1 + k: owner[c][0]._lengths(owner[c][1]) for k, c in enumerate(out)
                   if c in owner}
        mask = mask_from_lengths(lengths, res.shape, dims)
    elif masks:  # contract the masks as the data: real where some real product contributes
        seen = [c for c in out if any(c in s for s in msubs)]
        mask = torch.einsum(f"{','.join(msubs)}->{z}{''.join(seen)}", *masks) > 0
        mask = mask.reshape([B] + [mask.size(1 + seen.index(c)) if c in seen else 1 for c in out])
        mask = canon_mask(mask, res.shape, dims)
    real = with_lanes(mask, res.dim())
    if real is not None:  # padding gets exactly zero gradient downstream of here
        res = keep(real, res, 0)
    if out:
        if res.size(1) != 1 or dims[0]:
            raise ValueError(
                f"einsum: per example the result would have shape {tuple(res.shape[1:])}, whose "
                f"first dimension is not the example's leading 1; keep a MaskedBatch operand's "
                f"first subscript first in the output (e.g. 'bij,bjk->bik')")
        res, dims = res.squeeze(1), dims[1:]
        mask = None if mask is None else mask.squeeze(1)
    return new(res, mask, tuple(dims), zero=True)


@register(torch.tensordot)
def tensordot(a, b, dims=2, out=None):
    """``torch.tensordot`` per example, as the einsum that contracts the
    given dims (each example's leading 1 is a dim like any other)."""
    if out is not None:
        raise NotImplementedError("tensordot: the out= argument is not supported on a MaskedBatch")
    na, nb = a.dim(), b.dim()
    if isinstance(dims, torch.Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        da, db = list(range(na - dims, na)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da, db = [d % na for d in da], [d % nb for d in db]
    la, lb = string.ascii_letters[:na], list(string.ascii_letters[na:na + nb])
    for i, j in zip(da, db):
        lb[j] = la[i]
    lb = "".join(lb)
    keep_ = [c for i, c in enumerate(la) if i not in da] + [c for j, c in enumerate(lb) if j not in db]
    return einsum(f"{la},{lb}->{''.join(keep_)}", a, b)


@register(torch.bilinear)
def bilinear(input1, input2, weight, bias=None):
    """``F.bilinear`` / ``nn.Bilinear``: ``x1 W x2 + b`` over the last dims,
    an einsum that contracts only the feature dims."""
    y = einsum("...i,oij,...j->...o", input1, weight, input2)
    return y if bias is None else y + bias


@register(torch.outer, T.outer, torch.ger, T.ger)
def outer(input, vec2):
    """``torch.outer`` per example: both sides 1-D per example (a MaskedBatch
    example ``(1,)``: one number)."""
    if input.dim() != 1 or vec2.dim() != 1:
        raise RuntimeError(f"outer: expected 1-D vectors per example (a MaskedBatch example "
                           f"counts its leading 1), got {input.dim()} and {vec2.dim()} dims")
    return einsum("i,j->ij", input, vec2)


def _add_product(op, product):
    """``beta * input + alpha * product(a, b)`` (addmm, addmv, addr, baddbmm),
    with the product's rule; ``beta=0`` ignores ``input`` (even NaN), as torch."""
    def rule(input, a, b, *, beta=1, alpha=1, out=None):
        if out is not None:
            raise NotImplementedError(f"{op}: the out= argument is not supported on a MaskedBatch")
        p = product(a, b)
        p = p if alpha == 1 else p * alpha
        if beta == 0:
            return torch.zeros_like(input) + p
        return (input if beta == 1 else input * beta) + p
    rule.__name__ = rule.__qualname__ = op
    rule.__doc__ = f"``torch.{op}`` per example: ``beta * input + alpha * product``."
    return rule


for _op, _product in {"addmm": torch.mm, "addmv": torch.mv, "addr": torch.outer,
                      "baddbmm": torch.bmm}.items():
    register(getattr(torch, _op), getattr(T, _op))(_add_product(_op, _product))


@register(torch.addbmm, T.addbmm)
def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    raise ValueError(
        "addbmm sums the products over dimension 0, each example's leading 1 (the batch "
        "dimension of a MaskedBatch), so per example its result has no leading 1; use "
        "baddbmm(input, batch1, batch2), which keeps it (for one example the same numbers)")
