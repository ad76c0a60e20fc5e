"""Normalization over dynamic dims: batch_norm, instance_norm, group_norm.

Each example is ``(1, C, *spatial)`` with a static channel dim; statistics
see real entries only (padding and dormant lanes are neutralized with
``where``, and outputs there are set to 0, so padding adds nothing to any
gradient).

- ``batch_norm`` in training mode is a batch-level statistic (SPEC section 3):
  mean and variance per channel over the real entries of all examples, i.e.
  over the concatenated examples; running stats update as for that
  concatenation (unbiased variance with n = number of real entries).  It is
  ONE ``F.batch_norm`` call on the real entries gathered into ``(N, C)``, so
  torch's own kernel computes values, gradients and running stats.  In eval
  mode the same call is per example (running stats only).
- ``instance_norm`` and ``group_norm`` are per example: statistics over each
  example's own real entries.  With ``use_input_stats`` and running stats,
  those update with the mean over examples of the per-example statistics, as
  ``F.instance_norm`` does for a batch.
"""
import torch
import torch.nn.functional as F

from ._registry import fail_if, is_mb, keep, new, real_mask, register, with_lanes

__all__ = ["batch_norm", "instance_norm", "group_norm"]


def _check(x, op, params, min_dims=1):
    if not is_mb(x) or any(is_mb(p) for p in params):
        raise NotImplementedError(
            f"{op}: matchbox supports a MaskedBatch only as the input; per-example running "
            f"stats, weights or biases are not supported")
    if x.padded_data.dim() < 1 + min_dims:
        raise ValueError(
            f"{op}: each example must be (1, C, ...) with a channel dimension after its "
            f"leading 1; got examples with {x.padded_data.dim() - 1} dims after the leading 1")
    if x.dims[0]:
        raise ValueError(f"{op}: the channel dimension (dimension 1) is dynamic; it must be static")


def _entry_mask(x, m):
    """``m`` (broadcasting against ``x.padded_data``) as a ``(B, *spatial)`` mask of
    real positions, the channel dim dropped."""
    return m.expand(x.padded_data.shape).select(1, 0)


# ------------------------------------------------------------------ batch norm
@register(F.batch_norm)
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """``F.batch_norm`` / ``nn.BatchNorm{1,2}d``: training statistics and
    running-stat updates over the real entries of the whole batch (as over the
    concatenated examples); eval mode per example."""
    _check(input, "batch_norm", (running_mean, running_var, weight, bias))
    if input.padded_data.size(0) == 0:  # no example: nothing to normalize or to count in the stats
        return new(input.padded_data.clone(), input._mask, input.dims)
    m = real_mask(input)
    if m is None:
        return new(F.batch_norm(input.padded_data, running_mean, running_var, weight, bias, training,
                                momentum, eps), input._mask, input.dims)
    pos = _entry_mask(input, m)
    rows = input.padded_data.movedim(1, -1)            # (B, *spatial, C)
    real = rows[pos]                             # (N, C): the concatenated real entries
    if training and real.size(0) <= 1:
        raise ValueError(
            f"batch_norm: expected more than 1 value per channel when training; the batch has "
            f"{real.size(0)} real entr{'y' if real.size(0) == 1 else 'ies'} per channel")
    out = F.batch_norm(real, running_mean, running_var, weight, bias, training, momentum, eps)
    out = rows.new_zeros(rows.shape).index_put((pos,), out).movedim(-1, 1)
    return new(out, input._mask, input.dims)


# ------------------------------------------------------------------ per-example stats
def _group_stats(x, m, groups, op):
    """Per example and group over real entries of ``x.padded_data`` (B, C, ...):
    returns ``(centered, mean, var, count)``: centered ``(B, G, C/G, ...)``
    (zero at non-real entries), mean and biased var ``(B, G)``, count ``(B, 1)``."""
    data = x.padded_data
    B, C = data.shape[:2]
    if C % groups:
        raise ValueError(f"{op}: {C} channels are not divisible into {groups} groups")
    g = data.reshape(B, groups, C // groups, *data.shape[2:])
    if m is None:
        mg, count = None, torch.full((B, 1), g[0, 0].numel(), dtype=data.dtype,
                                     device=data.device)
    else:
        mg = m.unsqueeze(1)  # channels of a group share the mask (static channel dim)
        count = mg.expand(g.shape).flatten(2).sum(-1)[:, :1].to(data.dtype)
    zero = torch.zeros((), dtype=data.dtype, device=data.device)

    def masked(t):
        return t if mg is None else torch.where(mg, t, zero)
    n = count.clamp(min=1)
    mean = masked(g).flatten(2).sum(-1) / n
    centered = masked(g - mean.view(B, groups, *[1] * (g.dim() - 2)))
    var = (centered * centered).flatten(2).sum(-1) / n
    return centered, mean, var, count


def _normalized(x, m, groups, eps, weight, bias, op):
    """Group-normalized ``x.padded_data`` with per-channel affine; non-real entries 0."""
    centered, mean, var, count = _group_stats(x, m, groups, op)
    B, G = var.shape
    y = centered * torch.rsqrt(var + eps).view(B, G, *[1] * (centered.dim() - 2))
    y = y.reshape(x.padded_data.shape)
    shape = [1, -1] + [1] * (y.dim() - 2)
    if weight is not None:
        y = y * weight.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    if m is not None:
        y = keep(m, y, 0)
    return y, mean, var, count


def _check_counts(count, op, what):
    """Raise (as per example) when an active example has at most 1 entry."""
    fail_if(with_lanes(count.squeeze(1) <= 1, 1), lambda b: ValueError(
        f"{op}: example {b[0]} has {int(count[b[0]])} {what}; expected more than 1 "
        f"(the per-example {op} raises too)"),
        f"{op}: an example has at most 1 of its {what}")


# ------------------------------------------------------------------ instance norm
@register(F.instance_norm)
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """``F.instance_norm`` / ``nn.InstanceNorm{1,2}d``: per example and
    channel over the example's real entries."""
    _check(input, "instance_norm", (running_mean, running_var, weight, bias), min_dims=2)
    if not use_input_stats:  # running stats only: an affine map per channel
        return batch_norm(input, running_mean, running_var, weight, bias, False, 0.0, eps)
    m = real_mask(input)
    if m is None:
        return new(F.instance_norm(input.padded_data, running_mean, running_var, weight, bias, True,
                                   momentum, eps), input._mask, input.dims)
    y, mean, var, count = _normalized(input, m, input.padded_data.size(1), eps, weight, bias,
                                      "instance_norm")
    _check_counts(count, "instance_norm", "spatial element(s) per channel")
    keep = m.flatten(1).any(1)  # examples with real entries (not dormant lanes)
    with torch.no_grad():
        unbiased = var * count / (count - 1).clamp(min=1)
        for stat, value in ((running_mean, mean), (running_var, unbiased)):
            if stat is not None and bool(keep.any()):
                stat.mul_(1 - momentum).add_(momentum * value[keep].mean(0))
    return new(y, input._mask, input.dims)


# ------------------------------------------------------------------ group norm
@register(F.group_norm)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """``F.group_norm`` / ``nn.GroupNorm``: per example and group over the
    example's real entries."""
    _check(input, "group_norm", (weight, bias))
    m = real_mask(input)
    if m is None:
        return new(F.group_norm(input.padded_data, num_groups, weight, bias, eps), input._mask,
                   input.dims)
    y = _normalized(input, m, num_groups, eps, weight, bias, "group_norm")[0]
    return new(y, input._mask, input.dims)
