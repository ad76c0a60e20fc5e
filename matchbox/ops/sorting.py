"""Sorting and order statistics: sort, argsort, topk, kthvalue, median.

Along a static dim these are the torch ops on the data.  Along a dynamic
dim every non-real entry first becomes a value that a *stable* sort puts
after all real ones (NaN ascending, since torch sorts NaN last; the
dtype's minimum descending), so each example's real entries come first,
in the order its own sort gives, and the result keeps the input's mask.
topk/kthvalue pick a fixed k for every example, so they check k against
each real, active example's length (torch raises for k past the end);
median picks each example's own middle index.
"""
import torch

from ._registry import fail_if, new, norm_dim, real_mask, register_distinct, with_lanes
from .reduction import _Reduction, _fill_value

T = torch.Tensor


def _last_fill(dtype, descending):
    """A value that sorts after every real entry under a stable sort."""
    if dtype.is_floating_point and not descending:
        return float("nan")
    return _fill_value(float("-inf") if descending else float("inf"), dtype)


def _sorted(x, dim, descending, op):
    """(values, indices) of a stable sort of MaskedBatch ``x`` along ``dim``,
    real entries first in each example; and the normalized dim."""
    d = norm_dim(x, dim, op)
    data, m = x.padded_data, real_mask(x)
    dynamic = x.dims[d - 1]
    if dynamic and m is not None:
        data = torch.where(m, data, _last_fill(data.dtype, descending))
    values, indices = torch.sort(data, dim=d, descending=descending, stable=True)
    return values, indices, d


def _check_k(x, d, k, op):
    """Every real, active example must have at least ``k`` entries along ``d``."""
    n = x.padded_data.size(d)
    if not 1 <= k <= n:
        raise RuntimeError(f"{op}: k={k} is out of range for dimension {d} of size {n}")
    if not x.dims[d - 1]:
        return
    lengths = x._lengths(d)
    fail_if(with_lanes(lengths < k, 1), lambda b: RuntimeError(
        f"{op}: k={k} is out of range for example {b[0]}, which has only {int(lengths[b])} "
        f"entries along dynamic dimension {d}; every example needs at least k"),
        f"{op}: k={k} is out of range for an example along dynamic dimension {d}")


@register_distinct(torch.sort, T.sort)
def sort(input, dim=-1, descending=False, stable=False, *, out=None):
    """Each example's real entries sorted; padding stays after them."""
    if out is not None:
        raise NotImplementedError("sort: out= is not supported on a MaskedBatch")
    values, indices, _ = _sorted(input, dim, descending, "sort")
    return torch.return_types.sort((new(values, input._mask, input.dims),
                                    new(indices, input._mask, input.dims)))


@register_distinct(torch.argsort, T.argsort)
def argsort(input, dim=-1, descending=False, stable=False):
    """Indices that sort each example's real entries."""
    _, indices, _ = _sorted(input, dim, descending, "argsort")
    return new(indices, input._mask, input.dims)


@register_distinct(torch.topk, T.topk)
def topk(input, k, dim=-1, largest=True, sorted=True, *, out=None):
    """The k largest (smallest) real entries of each example, in order; the
    result's ``dim`` is static with size k."""
    if out is not None:
        raise NotImplementedError("topk: out= is not supported on a MaskedBatch")
    d = norm_dim(input, dim, "topk")
    _check_k(input, d, k, "topk")
    values, indices, d = _sorted(input, d, largest, "topk")
    wrap = _Reduction(input, d, True, "topk").wrap  # dim d: static, size k
    return torch.return_types.topk((wrap(values.narrow(d, 0, k)), wrap(indices.narrow(d, 0, k))))


def _pick(input, d, position, keepdim, result_type):
    """The ascending-sorted entry at per-example ``position`` ((B,) longs)
    along ``d``, with its index, as ``result_type``."""
    values, indices, d = _sorted(input, d, False, result_type.__name__)
    shape = [1] * values.dim()
    shape[0] = values.size(0)
    index = position.view(shape).expand(*values.shape[:d], 1, *values.shape[d + 1:])
    v, i = values.gather(d, index), indices.gather(d, index)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    wrap = _Reduction(input, d, keepdim, result_type.__name__).wrap
    return result_type((wrap(v), wrap(i)))


@register_distinct(torch.kthvalue, T.kthvalue)
def kthvalue(input, k, dim=-1, keepdim=False, *, out=None):
    """The k-th smallest real entry of each example along ``dim``."""
    d = norm_dim(input, dim, "kthvalue")
    _check_k(input, d, k, "kthvalue")
    position = torch.full((input.padded_data.size(0),), k - 1, dtype=torch.long,
                          device=input.padded_data.device)
    return _pick(input, d, position, keepdim, torch.return_types.kthvalue)


@register_distinct(torch.median, T.median)
def median(input, dim=None, keepdim=False, *, out=None):
    """Each example's lower median along ``dim`` (torch's convention)."""
    if dim is None:
        raise NotImplementedError(
            "median over all of an example's entries is not supported on a MaskedBatch; "
            "pass dim=..., e.g. x.flatten(1).median(1) for examples with one dynamic dim")
    d = norm_dim(input, dim, "median")
    if input.dims[d - 1]:
        position = (input._lengths(d) - 1).clamp_min(0) // 2
    else:
        position = torch.full((input.padded_data.size(0),), (input.padded_data.size(d) - 1) // 2,
                              dtype=torch.long, device=input.padded_data.device)
    return _pick(input, d, position, keepdim, torch.return_types.median)
