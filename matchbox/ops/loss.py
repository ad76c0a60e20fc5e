"""Losses: cross_entropy, nll_loss, and the elementwise losses (mse_loss,
l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy(_with_logits),
kl_div).

Layouts follow torch for one example (which has its leading 1):

- ``cross_entropy`` / ``nll_loss``: the class dimension is dimension 1 and
  must be static.  A classifier gives logits ``(1, C)`` and target ``(1,)``;
  a sequence model gives logits ``(1, C, n)`` and target ``(1, n)`` (move the
  class dimension with ``logits.transpose(1, 2)``; the usual
  ``logits.view(-1, C)`` flattening cannot be done on a dynamic dimension,
  and is not needed).  Probability targets (float, shaped like the input)
  work too.
- elementwise losses: input and target broadcast as in pointwise ops.

``reduction='none'`` returns a MaskedBatch (one loss per example and
position).  ``'mean'``, ``'sum'`` (and kl_div's ``'batchmean'``) reduce
**per example**, as the same call on that example alone does (SPEC section
1): the result is a MaskedBatch of per-example scalars (data ``(B,)``, dims
``()``, masked like a full reduction ``x.sum()``), each example's ``'mean'``
dividing by its own count of real entries (class losses with ``weight`` /
``ignore_index``: by its own sum of the weights of its non-ignored targets).
Combining examples is the caller's step, outside the per-example code:
``loss.backward()`` backpropagates the sum over examples, and
:func:`example_sum`, :func:`example_mean` and :func:`token_mean` give the
usual batch objectives as scalar Tensors.

Non-real entries (padding, dormant lanes) contribute exactly zero to values
and gradients: on CPU the class losses gather the real positions and never
read the rest (see ``gathers_rows``); otherwise, and for the other losses,
non-real entries get an ignored target or a safe value via ``where``.  An
example with no real entry (a dormant lane) gets 0 for ``'mean'``, not 0/0.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn import _reduction as _Reduction

from .._lanes import active_lanes, batch_size_hint
from ..core import refuse_absent
from . import _registry
from ._registry import (align, canon_mask, fail_if, is_mb, keep, new, presence, register,
                        scatter_rows, true_rows, with_lanes)

__all__ = ["cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
           "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
           "example_sum", "example_mean", "token_mean"]

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(reduction, size_average, reduce, opname, extra=()):
    if size_average is not None or reduce is not None:
        reduction = _Reduction.legacy_get_string(size_average, reduce)
    if reduction not in _REDUCTIONS + tuple(extra):
        raise ValueError(
            f"{opname}: reduction must be one of {_REDUCTIONS + tuple(extra)}, got {reduction!r}")
    return reduction


def _no_mb(opname, **kwargs):
    for name, v in kwargs.items():
        if is_mb(v):
            raise NotImplementedError(
                f"{opname}: a MaskedBatch as {name} is not supported (give a plain Tensor)")


def _presence(*operands):
    """Bool ``(B,)``: the examples that hold a value in every MaskedBatch
    operand, where one has an example of length 0 (else None: the masks
    say it; see core.absent_examples)."""
    mbs = [o for o in operands if is_mb(o)]
    if not any(o._present is not None for o in mbs):
        return None
    p = None
    for o in mbs:
        q = presence(o)
        p = q if p is None else p if q is None else p & q
    return p


def _per_example(loss, real, pos, reduction, denom=None, present=None):
    """One value per example from the unreduced ``loss`` ``(B, ...)``, which
    must be 0 at every non-real entry: the example's sum (``'sum'``), or that
    sum over ``denom`` (``(B,)``; by default the example's count of real
    entries) for ``'mean'``.  ``real``: the real entries, lanes included
    (None: all); ``pos``: the real positions without lanes, which give the
    result's mask as for a full reduction.  An example with no real entry
    (a dormant lane, a loop step it lacks) divides by 1, so neither its value
    nor the gradient that reaches it is 0/0.  ``present`` (see ``_presence``):
    the examples that hold a value, where one is empty (length 0): its sum
    is 0 and its mean NaN, as torch's loss of an empty tensor."""
    B = loss.size(0)
    total = loss.reshape(B, loss.shape[1:].numel()).sum(1)
    mask = None if pos is None else pos.expand(loss.shape).reshape(B, loss.shape[1:].numel()).any(1)
    if present is not None:
        empty = present if mask is None else present & ~mask
        mask = present
    if reduction == "sum":
        return new(total, mask, ())
    r = None if real is None else real.expand(loss.shape).reshape(B, loss.shape[1:].numel())
    if denom is None:
        denom = loss[0].numel() if r is None else r.sum(1).to(total.dtype)
    if r is not None:
        denom = torch.where(r.any(1), denom, torch.ones((), dtype=total.dtype, device=total.device))
    mean = total / denom
    if present is not None:
        mean = torch.where(empty, torch.full((), float("nan"), dtype=mean.dtype, device=mean.device),
                           mean)
    return new(mean, mask, ())


def _class_weights(td, real, weight, ignore_index, dtype):
    """Per position, the weight torch's class-index ``'mean'`` divides by:
    ``weight[target]`` (1 without ``weight``), 0 at ignored targets and at
    non-real positions."""
    valid = td != ignore_index
    if real is not None:
        valid = valid & real
    if weight is None:
        return valid.to(dtype)
    w = weight.to(dtype)[td.clamp(0, weight.numel() - 1)]
    return torch.where(valid, w, torch.zeros((), dtype=dtype, device=w.device))


# ------------------------------------------------------------------ class losses
class _Operand:
    """A MaskedBatch or plain Tensor lined up on the batch dimension."""

    def __init__(self, x, B, what, opname):
        if is_mb(x):
            if x.padded_data.size(0) != B:
                raise ValueError(f"{opname}: batch sizes differ ({B} vs {x.padded_data.size(0)})" + batch_size_hint())
            self.padded_data, self.mask, self.dims, self.mb = x.padded_data, x._mask, tuple(x.dims), x
        elif isinstance(x, torch.Tensor):
            if x.dim() == 0 or x.size(0) != 1:
                # shared by every example, never one row per example by its size
                raise ValueError(
                    f"{opname}: the {what} is a plain Tensor of shape {tuple(x.shape)}; a plain "
                    f"Tensor is shared by every example, so it needs the examples' leading 1. "
                    f"For one {what} per example, make it a MaskedBatch "
                    f"(MaskedBatch.fromlist or MaskedBatch.from_padded)")
            self.padded_data = x.expand((B,) + tuple(x.shape[1:]))
            self.mask, self.dims, self.mb = None, (False,) * (x.dim() - 1), None
        else:
            raise TypeError(f"{opname}: the {what} must be a Tensor or MaskedBatch, got {type(x).__name__}")

    def lengths(self, d):
        if self.mb is not None:
            return self.mb._lengths(d)
        return torch.full((self.padded_data.size(0),), self.padded_data.size(d), dtype=torch.long,
                          device=self.padded_data.device)

    def narrow(self, d, n):
        if self.padded_data.size(d) == n:
            return
        self.padded_data = self.padded_data.narrow(d, 0, n)
        if self.mask is not None and self.mask.size(d) != 1:
            self.mask = self.mask.narrow(d, 0, n)


def _line_up_spatial(x, t, opname):
    """Check that the spatial dims (input dims 2.., target dims 1..) agree
    per example and cut their data to a common padded size."""
    for i in range(t.padded_data.dim() - 1):
        dx, dt = i + 2, i + 1
        if not (x.dims[dx - 1] or t.dims[dt - 1]):
            if x.padded_data.size(dx) != t.padded_data.size(dt):
                raise ValueError(
                    f"{opname}: input dimension {dx} has size {x.padded_data.size(dx)} but target "
                    f"dimension {dt} has size {t.padded_data.size(dt)}")
            continue
        lx, lt = x.lengths(dx), t.lengths(dt)
        fail_if(lx != lt, lambda _: ValueError(
            f"{opname}: per-example sizes differ between input dimension {dx} and target "
            f"dimension {dt}: {lx.tolist()} vs {lt.tolist()}"),
            f"{opname}: per-example sizes differ between input dimension {dx} and target "
            f"dimension {dt}")
        n = min(x.padded_data.size(dx), t.padded_data.size(dt))
        x.narrow(dx, n)
        t.narrow(dt, n)


def _class_loss(opname, fn, input, target, weight, ignore_index, reduction, **extra):
    _no_mb(opname, weight=weight)
    B = (input if is_mb(input) else target).padded_data.size(0)
    x = _Operand(input, B, "input", opname)
    t = _Operand(target, B, "target", opname)
    if x.padded_data.dim() < 2:
        raise ValueError(
            f"{opname}: per example the input must be (1, C) or (1, C, d_1, ...) with the classes "
            f"in dimension 1; got a batch with no per-example dimensions")
    if x.dims[0]:
        raise ValueError(
            f"{opname}: the class dimension (dimension 1 of the input) is dynamic; it must be "
            f"static. For a sequence, put classes in dimension 1: (1, C, n) logits with a (1, n) "
            f"target, e.g. F.{opname}(logits.transpose(1, 2), target)")
    zero = torch.zeros((), dtype=x.padded_data.dtype, device=x.padded_data.device)

    if t.padded_data.dim() == x.padded_data.dim() and t.padded_data.is_floating_point():
        # class probabilities, shaped like the input
        datas, mask, dims = align((_as_mb(x), _as_mb(t)), opname)
        if dims[0]:
            raise ValueError(f"{opname}: the class dimension of the target is dynamic; it must be static")
        pos = None if mask is None else mask.squeeze(1)
        real = with_lanes(pos, datas[0].dim() - 1)
        xd, td = datas
        if real is not None:
            r1 = real.unsqueeze(1)
            xd = torch.where(r1, xd, zero)
            td = torch.where(r1, td, torch.zeros((), dtype=td.dtype, device=td.device))
        loss = fn(xd, td, weight, ignore_index=ignore_index, reduction="none", **extra)
        out_dims = dims[1:]
        if reduction == "none":
            return new(loss, canon_mask(pos, loss.shape, out_dims), out_dims)
        if real is not None:
            loss = keep(real, loss, 0)
        return _per_example(loss, real, pos, reduction,  # 'mean': over positions
                            present=_presence(input, target))

    if t.padded_data.dim() != x.padded_data.dim() - 1:
        raise ValueError(
            f"{opname}: per example the target must have one dimension fewer than the input "
            f"(class indices) or the input's shape (class probabilities); got input with "
            f"{x.padded_data.dim()} and target with {t.padded_data.dim()} dimensions (leading 1 included)")
    _line_up_spatial(x, t, opname)
    pos = x.mask.squeeze(1) if x.mask is not None else None
    if t.mask is not None:
        pos = t.mask if pos is None else pos & t.mask
    out_dims = tuple(a or b for a, b in zip(x.dims[1:], t.dims))
    real = with_lanes(pos, t.padded_data.dim())
    xd, td = x.padded_data, t.padded_data
    if real is not None and _registry.gathers_rows(xd):
        return _on_real_positions(fn, xd, td, real, pos, out_dims, reduction,
                                  _presence(input, target), weight=weight,
                                  ignore_index=ignore_index, **extra)
    if real is not None:
        if not (x.mb is not None and x.mb._zero and active_lanes() is None):
            xd = keep(real.unsqueeze(1), xd, 0)  # (else its padding is 0 already)
        td = torch.where(real, td, torch.full((), ignore_index, dtype=td.dtype, device=td.device))
    out = fn(xd, td, weight, ignore_index=ignore_index, reduction="none", **extra)
    if reduction != "none":
        return _class_reduce(out, td, real, pos, reduction, weight, ignore_index,
                             _presence(input, target))
    return new(out, canon_mask(pos, out.shape, out_dims), out_dims)


def _class_reduce(loss, td, real, pos, reduction, weight, ignore_index, present=None):
    """Per-example ``'sum'``/``'mean'`` of the unreduced class-index
    ``loss`` (0 at ignored and non-real positions): torch's ``'mean'``
    divides the sum by the summed weights of the non-ignored targets."""
    denom = None
    if reduction == "mean":
        w = _class_weights(td, real, weight, ignore_index, loss.dtype)
        denom = w.reshape(w.size(0), w.shape[1:].numel()).sum(1)
    return _per_example(loss, real, pos, reduction, denom, present)


def _on_real_positions(fn, xd, td, real, pos, out_dims, reduction, present, **kwargs):
    """The class loss ``fn`` on the real positions only: their class vectors
    (the input's dim 1) gathered into ``(n, C)`` rows, their targets into
    ``(n,)``.  Padding is never read (so never costs compute and gets zero
    gradient), and the rows' log-softmax runs on contiguous memory, where the
    padded ``(B, C, n)`` layout would first be copied.  The losses go back
    to their positions, 0 elsewhere, for 'none' and the per-example
    reductions alike."""
    rows = true_rows(real, td.shape)
    classes = xd.movedim(1, -1).reshape(-1, xd.size(1)).index_select(0, rows)
    out = fn(classes, td.reshape(-1).index_select(0, rows), reduction="none", **kwargs)
    out = scatter_rows(out, rows, td.numel()).view(td.shape)
    if reduction != "none":
        return _class_reduce(out, td, real, pos, reduction, kwargs.get("weight"),
                             kwargs["ignore_index"], present)
    return new(out, canon_mask(pos, out.shape, out_dims), out_dims)


def _as_mb(op):
    return op.mb if op.mb is not None else new(op.padded_data, None, op.dims)


@register(F.cross_entropy)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """``F.cross_entropy`` with the class dimension at dimension 1 (per
    example ``(1, C)`` / ``(1, C, n, ...)``); target class indices
    ``(1,)`` / ``(1, n, ...)`` or probabilities shaped like the input.
    ``'mean'``/``'sum'`` give one value per example (see the module doc)."""
    reduction = _reduction(reduction, size_average, reduce, "cross_entropy")
    return _class_loss("cross_entropy", F.cross_entropy, input, target, weight, ignore_index,
                       reduction, label_smoothing=label_smoothing)


def _nll(input, target, weight=None, ignore_index=-100, reduction="mean"):
    # (torch's nll_loss2d backward refuses a non-contiguous input: (N, C, d)
    # examples with no batch-of-one dimension arrive transposed)
    return F.nll_loss(input.contiguous(), target, weight, ignore_index=ignore_index,
                      reduction=reduction)


@register(F.nll_loss)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100,
             reduce=None, reduction="mean"):
    """``F.nll_loss``; layouts as for :func:`cross_entropy` (class indices)."""
    reduction = _reduction(reduction, size_average, reduce, "nll_loss")
    return _class_loss("nll_loss", _nll, input, target, weight, ignore_index, reduction)


# ------------------------------------------------------------------ elementwise losses
def _elementwise(opname, fn, operands, reduction, safe=(0.0, 0.0), weighted_mean_by=None,
                 always_safe=False):
    """``fn(*datas)`` gives the unreduced loss of the aligned ``operands``
    (input, target[, weight]).  ``safe`` gives the values non-real entries
    of input and target take before a batch reduction (and, for ops whose
    derivative is not finite everywhere, before any computation).
    ``weighted_mean_by``: index of an operand whose real sum divides the
    total for ``'mean'`` (torch's weighted mse/l1), else the count of real
    entries; both per example."""
    ops = [o for o in operands if o is not None]
    datas, mask, dims = align(ops, opname)
    shape = torch.broadcast_shapes(*[d.shape for d in datas if isinstance(d, torch.Tensor)])
    # a shared operand (leading 1) meets each example at its own size, as in
    # the per-example call: no broadcasting warning from torch's loss
    datas = [d.expand(shape) if isinstance(d, torch.Tensor) else d for d in datas]
    real = with_lanes(mask, len(shape))
    if reduction == "none" and not always_safe:
        return new(fn(*datas), mask, dims)
    if real is not None:
        fixed = []
        for i, d in enumerate(datas):
            if isinstance(d, torch.Tensor) and i < len(safe) and is_mb(ops[i]):
                d = torch.where(real, d, torch.full((), safe[i], dtype=d.dtype, device=d.device))
            fixed.append(d)
        datas = fixed
    loss = fn(*datas)
    if reduction == "none":
        return new(loss, mask, dims)
    if real is not None:
        loss = keep(real, loss, 0)
    if reduction == "batchmean":  # divides by the example's leading size, 1
        reduction = "sum"
    denom = None
    if reduction == "mean" and weighted_mean_by is not None:
        w = datas[weighted_mean_by].expand(shape)
        if real is not None:
            w = torch.where(real, w, torch.zeros((), dtype=w.dtype, device=w.device))
        denom = w.reshape(shape[0], -1).sum(1)
    return _per_example(loss, real, mask, reduction, denom, _presence(*ops))


def _check_weight_like_input(opname, input, weight):
    if weight is None or is_mb(weight):
        return
    ref = input.padded_data if is_mb(input) else input
    if tuple(weight.shape[1:]) != tuple(ref.shape[1:]) or (is_mb(input) and any(input.dims)):
        raise ValueError(
            f"{opname}: weight must have the input's size per example; with a MaskedBatch "
            f"input that has dynamic dims, give the weight as a MaskedBatch")


def _weighted_pointwise(opname, base):
    """mse_loss / l1_loss: unweighted by ``base``; torch's weighted form is
    ``sum(w * err) / sum(w)`` for ``'mean'``."""
    def rule(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
        reduction = _reduction(reduction, size_average, reduce, opname)
        if weight is None:
            return _elementwise(opname, lambda a, b: base(a, b, reduction="none"),
                                (input, target), reduction)
        _check_weight_like_input(opname, input, weight)
        return _elementwise(opname, lambda a, b, w: base(a, b, reduction="none") * w,
                            (input, target, weight), reduction, safe=(0.0, 0.0, 0.0),
                            weighted_mean_by=2)
    rule.__name__ = opname
    rule.__doc__ = (f"``F.{opname}``; ``'mean'``/``'sum'`` reduce over each example's real "
                    f"entries (weighted: sum(w*err)/sum(w) over them).")
    return rule


def _weight_dropped(depth=12):
    """Whether the nearest call of torch's ``F.l1_loss`` up the stack was
    given a ``weight``, which it does not pass on to __torch_function__
    overrides.  Only to refuse (the loss would be silently unweighted):
    the weight itself comes as an argument (``matchbox.functional.l1_loss``)."""
    code = getattr(F.l1_loss, "__code__", None)
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None or code is None:
            return False
        if frame.f_code is code:
            return frame.f_locals.get("weight") is not None
        frame = frame.f_back
    return False


mse_loss = register(F.mse_loss)(_weighted_pointwise("mse_loss", F.mse_loss))
_l1_rule = _weighted_pointwise("l1_loss", F.l1_loss)


@register(F.l1_loss)
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    # torch's F.l1_loss does not forward ``weight`` to __torch_function__
    # overrides: matchbox.functional.l1_loss passes it here itself, and a
    # weight given to torch's raises rather than a silently unweighted loss
    if weight is None and _weight_dropped():
        raise NotImplementedError(
            "torch.nn.functional.l1_loss(..., weight=w) does not pass weight on to matchbox "
            "(torch drops it before dispatch to MaskedBatch); call "
            "matchbox.functional.l1_loss(..., weight=w), which does")
    return _l1_rule(input, target, size_average, reduce, reduction, weight)


l1_loss.__doc__ = _l1_rule.__doc__


@register(F.smooth_l1_loss)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _reduction(reduction, size_average, reduce, "smooth_l1_loss")
    return _elementwise("smooth_l1_loss",
                        lambda a, b: F.smooth_l1_loss(a, b, reduction="none", beta=beta),
                        (input, target), reduction)


@register(F.huber_loss)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    reduction = _reduction(reduction, None, None, "huber_loss")
    if weight is None:
        return _elementwise("huber_loss",
                            lambda a, b: F.huber_loss(a, b, reduction="none", delta=delta),
                            (input, target), reduction)
    _check_weight_like_input("huber_loss", input, weight)
    # torch: mean(w * loss) over all entries
    return _elementwise("huber_loss",
                        lambda a, b, w: F.huber_loss(a, b, reduction="none", delta=delta) * w,
                        (input, target, weight), reduction, safe=(0.0, 0.0, 0.0))


@register(F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    reduction = _reduction(reduction, size_average, reduce, "binary_cross_entropy_with_logits")
    _no_mb("binary_cross_entropy_with_logits", pos_weight=pos_weight)

    def fn(a, b, w=None):
        return F.binary_cross_entropy_with_logits(a, b, w, reduction="none", pos_weight=pos_weight)
    ops = (input, target) if weight is None else (input, target, weight)
    return _elementwise("binary_cross_entropy_with_logits", fn, ops, reduction,
                        safe=(0.0, 0.0, 0.0))


@register(F.binary_cross_entropy)
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    reduction = _reduction(reduction, size_average, reduce, "binary_cross_entropy")

    def fn(a, b, w=None):
        return F.binary_cross_entropy(a, b, w, reduction="none")
    ops = (input, target) if weight is None else (input, target, weight)
    return _elementwise("binary_cross_entropy", fn, ops, reduction, safe=(0.5, 0.5, 0.0),
                        always_safe=True)


@register(F.kl_div)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``F.kl_div``; per example ``'batchmean'`` divides the real sum by the
    example's leading size, 1: it is the example's sum."""
    reduction = _reduction(reduction, size_average, reduce, "kl_div", extra=("batchmean",))
    return _elementwise("kl_div",
                        lambda a, b: F.kl_div(a, b, reduction="none", log_target=log_target),
                        (input, target), reduction, safe=(0.0, 0.0 if log_target else 1.0))


# ------------------------------------------------------------------ combining examples
# Batch objectives: called on what the per-example code returns, outside it.
def _real_sum(loss, opname):
    """(sum of the real entries of all examples, number of real entries,
    number of examples) of a MaskedBatch, or of a plain Tensor whose dim 0
    indexes examples (a 0-dim Tensor is one example)."""
    if is_mb(loss):
        refuse_absent(loss, f"matchbox.{opname}")
        data = loss.padded_data
        if loss._mask is None:
            return data.sum(), data.numel(), data.size(0)
        m = loss._mask.expand(data.shape)
        return keep(m, data, 0).sum(), m.sum().to(data.dtype), data.size(0)
    if isinstance(loss, torch.Tensor):
        return loss.sum(), loss.numel(), 1 if loss.dim() == 0 else loss.size(0)
    raise TypeError(f"{opname}: expected a MaskedBatch or Tensor of losses, got {type(loss).__name__}")


def example_sum(loss):
    """The sum over examples of each example's loss (of its real entries, if
    the loss has per-example dims): the scalar that ``loss.backward()``
    backpropagates, and what a loop over single examples accumulates.
    ``loss`` is what the per-example code returns on a batch (a MaskedBatch),
    or a plain Tensor whose dim 0 indexes examples."""
    return _real_sum(loss, "example_sum")[0]


def example_mean(loss):
    """The mean over examples of each example's loss: ``example_sum(loss)``
    divided by the number of examples (the batch size), as ``'mean'`` over a
    batch of fixed-size examples means.  Give it per-example scalars (e.g.
    each example's ``reduction='mean'`` loss) for the mean of the
    examples' means."""
    total, _, n = _real_sum(loss, "example_mean")
    return total / n


def token_mean(loss, counts=None):
    """The mean over all real tokens of the batch: the total loss over the
    real entries of all examples divided by their number, which is what
    hand-written padded code usually computes (``loss.masked_fill(pad,
    0).sum() / real.sum()``).

    ``loss`` is either the per-token losses (e.g. ``reduction='none'``; each
    real entry is one token), or, with ``counts``, per-example sums (e.g. a
    step loop that adds ``reduction='sum'`` losses): then the total is
    divided by the sum of ``counts``, the number of tokens of each example
    (a MaskedBatch such as ``x.size_as_tensor(1)``, a Tensor or a number)."""
    total, n, _ = _real_sum(loss, "token_mean")
    if counts is not None:
        n = counts if isinstance(counts, (int, float)) else _real_sum(counts, "token_mean")[0]
        if isinstance(n, torch.Tensor):
            n = n.to(total.dtype)
    return total / n
