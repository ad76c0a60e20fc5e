"""Windowed ops along dynamic dims: conv, conv_transpose, pooling, pad.

Each example is ``(1, C, *spatial)``; the channel dim is static, the spatial
dims may be dynamic.  A rule runs ONE torch call on the padded data after
neutralizing non-real entries with the value the per-example op sees beyond
an example's end (0 for conv and avg pool, -inf for max pool).  Every
example's real data is a prefix, so each output position that is real for an
example reads exactly what the per-example op reads.  The output lengths
follow the op's arithmetic from each example's own input length; the result
mask marks exactly those, and output entries outside it are set to 0 with
``where`` so that no cotangent reaching them can flow into real inputs or
weights.  An example whose output would be empty raises, as the per-example
op would.

Adaptive pooling has per-example bins (they depend on each example's own
length), so it builds the bins explicitly; ``F.pad`` (also what
``nn.Conv1d(padding_mode='reflect' | 'replicate' | 'circular')`` calls) maps
every output position to its source position per example with ``gather``.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.utils import _ntuple

from .._lanes import active_lanes
from ._registry import fail_if, is_mb, neutralize, new, register, register_distinct, with_lanes

__all__ = ["conv", "conv_transpose", "max_pool", "avg_pool", "adaptive_avg_pool",
           "adaptive_max_pool", "pad", "box_mask"]


# ------------------------------------------------------------------ shared
def _zero(x):
    return torch.zeros((), dtype=x.dtype, device=x.device)


def _lowest(dtype):
    return -float("inf") if dtype.is_floating_point else torch.iinfo(dtype).min


_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _check_input(x, nsp, op, channels=True, params=()):
    """``x`` must be a MaskedBatch of examples ``(1, C, *spatial)`` (``nsp``
    spatial dims; pools also accept ``(1, *spatial)``) with a static C."""
    if not is_mb(x) or any(is_mb(p) for p in params):
        raise NotImplementedError(
            f"{op}: matchbox supports a MaskedBatch only as the input; per-example weights, "
            f"biases or other arguments are not supported")
    n = x.padded_data.dim() - 1
    ok = (nsp + 1,) if channels else (nsp, nsp + 1)
    if n not in ok:
        raise ValueError(
            f"{op}: each example must be (1, C, {_SPATIAL[nsp]}): channels and {nsp} spatial "
            f"dim(s) after its leading 1; got examples with {n} dims after the leading 1 "
            f"(dims {x.dims})")
    if n == nsp + 1 and x.dims[0]:
        raise ValueError(f"{op}: the channel dimension (dimension 1) is dynamic; it must be static")


def _lengths(x, nsp):
    """Per spatial dim (the last ``nsp``): per-example lengths ``(B,)``, or None if static."""
    n = x.padded_data.dim()
    return [x._lengths(d) if x.dims[d - 1] else None for d in range(n - nsp, n)]


def box_mask(shape, dims, lens):
    """The canonical mask of data ``shape`` whose real region per example is
    the box given by ``lens`` (one ``(B,)`` length tensor, or None for
    "all of it", per trailing dim).  None when no length is given."""
    B, n = shape[0], len(shape) - 1
    mask = None
    for i, ln in enumerate(lens):
        if ln is None:
            continue
        d = n - len(lens) + i + 1
        size = shape[d] if dims[d - 1] else 1
        view = [B] + [1] * n
        view[d] = size
        m = (torch.arange(size, device=ln.device) < ln[:, None]).view(view)
        mask = m if mask is None else mask & m
    if mask is None:
        return None
    return mask.expand([B] + [s if dyn else 1 for s, dyn in zip(shape[1:], dims)])


_SHORT = ("the per-example op fails too (input smaller than the kernel): pad the examples or "
          "use a smaller kernel")


def _check_sizes(op, lens, outs, why=_SHORT):
    """Raise if an active example gets an empty output along a spatial dim,
    as the per-example op would; called before torch runs, which would
    otherwise fail (or not) on the padded size instead of the example's."""
    for i, (ln, out) in enumerate(zip(lens, outs)):
        if out is None:
            continue
        fail_if(with_lanes(out < 1, 1), lambda b: ValueError(
            f"{op}: example {b[0]} has size {int(ln[b])} along spatial dim {i}, which gives "
            f"an empty output (size {int(out[b])}); {why}"),
            f"{op}: an example gives an empty output along spatial dim {i}; {why}")


def _finish(x, out, outs, dims=None):
    """Wrap ``out`` (spatial dims last) with the box mask of the per-example
    output lengths ``outs`` and set its non-real entries to 0."""
    dims = tuple(x.dims) if dims is None else dims
    mask = None if x._mask is None else box_mask(out.shape, dims, outs)
    if mask is not None:
        out = torch.where(mask, out, _zero(out))
    return new(out, mask, dims)


def _window_len(L, k, s, p, d, ceil=False):
    """Output length of a conv/pool window along one dim (torch's arithmetic)."""
    span = L + 2 * p - d * (k - 1) - 1
    if ceil:
        out = torch.div(span + s - 1, s, rounding_mode="floor") + 1
        return torch.where((out - 1) * s >= L + p, out - 1, out)
    return torch.div(span, s, rounding_mode="floor") + 1


# ------------------------------------------------------------------ conv
def _conv_rule(f, nsp, op):
    tup = _ntuple(nsp)

    def rule(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        _check_input(input, nsp, op, params=(weight, bias))
        k, s, d = tuple(weight.shape[2:]), tup(stride), tup(dilation)
        p = (0,) * nsp if isinstance(padding, str) else tup(padding)
        lens = _lengths(input, nsp)
        outs = [None if L is None else
                (L if padding == "same" else _window_len(L, k[i], s[i], p[i], d[i]))
                for i, L in enumerate(lens)]
        _check_sizes(op, lens, outs)
        out = f(neutralize(input, 0), weight, bias, stride, padding, dilation, groups)
        return _finish(input, out, outs)
    rule.__name__ = op
    rule.__doc__ = (f"``F.{op}`` / ``nn.Conv{nsp}d`` along dynamic spatial dims: zero padding, "
                    f"stride, dilation, groups, bias, ``padding='same'/'valid'`` per example.")
    return rule


conv = {n: register(f)(_conv_rule(f, n, f"conv{n}d"))
        for n, f in ((1, torch.conv1d), (2, torch.conv2d), (3, torch.conv3d))}


def _conv_transpose_rule(f, nsp, op):
    tup = _ntuple(nsp)

    def rule(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
             dilation=1):
        _check_input(input, nsp, op, params=(weight, bias))
        k, s, p = tuple(weight.shape[2:]), tup(stride), tup(padding)
        extra, d = tup(output_padding), tup(dilation)
        lens = _lengths(input, nsp)
        outs = [None if L is None else
                (L - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + extra[i] + 1
                for i, L in enumerate(lens)]
        _check_sizes(op, lens, outs)
        out = f(neutralize(input, 0), weight, bias, stride, padding, output_padding, groups,
                dilation)
        return _finish(input, out, outs)
    rule.__name__ = op
    rule.__doc__ = f"``F.{op}`` / ``nn.ConvTranspose{nsp}d`` along dynamic spatial dims."
    return rule


conv_transpose = {n: register(f)(_conv_transpose_rule(f, n, f"conv_transpose{n}d"))
                  for n, f in ((1, torch.conv_transpose1d), (2, torch.conv_transpose2d))}


# ------------------------------------------------------------------ max pool
def _pool_args(nsp, kernel_size, stride, padding, dilation=1):
    tup = _ntuple(nsp)
    k = tup(kernel_size)
    empty = stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0)
    s = k if empty else tup(stride)  # torch's default stride is the kernel size
    return k, s, tup(padding), tup(dilation)


def _max_pool(nsp, op, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
              return_indices=False):
    """``F.max_pool{1,2}d`` along dynamic dims: padding is -inf, so it never
    wins; ``return_indices`` gives indices in each example's own layout."""
    _check_input(input, nsp, op, channels=False)
    k, s, p, d = _pool_args(nsp, kernel_size, stride, padding, dilation)
    lens = _lengths(input, nsp)
    outs = [None if L is None else _window_len(L, k[i], s[i], p[i], d[i], ceil_mode)
            for i, L in enumerate(lens)]
    _check_sizes(op, lens, outs)
    pool = F.max_pool1d_with_indices if nsp == 1 else F.max_pool2d_with_indices
    data = neutralize(input, _lowest(input.dtype))
    out, idx = pool(data, k, s, p, d, ceil_mode, True)
    res = _finish(input, out, outs)
    if not return_indices:
        return res
    if nsp == 2 and lens[1] is not None:
        # flat index h * W + w: re-flatten with each example's own width
        W = data.size(-1)
        own = lens[1].view([-1] + [1] * (idx.dim() - 1))
        idx = idx // W * own + idx % W
    return res, new(torch.where(res._mask, idx, 0) if res._mask is not None else idx,
                    res._mask, res.dims)


def _pool_rules(nsp, with_indices_funcs, plain_funcs):
    op = f"max_pool{nsp}d"

    def max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 return_indices=False):
        return _max_pool(nsp, op, input, kernel_size, stride, padding, dilation, ceil_mode,
                         return_indices)

    def max_pool_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                              ceil_mode=False, return_indices=True):
        return _max_pool(nsp, op, input, kernel_size, stride, padding, dilation, ceil_mode, True)
    max_pool.__doc__ = max_pool_with_indices.__doc__ = _max_pool.__doc__
    register_distinct(*plain_funcs)(max_pool)
    register_distinct(*with_indices_funcs)(max_pool_with_indices)
    return max_pool


max_pool = {
    1: _pool_rules(1, (F.max_pool1d_with_indices, torch.max_pool1d_with_indices),
                   (F.max_pool1d, torch.max_pool1d)),
    2: _pool_rules(2, (F.max_pool2d_with_indices, torch._C._nn.max_pool2d_with_indices),
                   (F.max_pool2d, torch.max_pool2d)),
}


# ------------------------------------------------------------------ avg pool
def _window_count(L, n_out, k, s, p, include_pad):
    """``(B, n_out)`` number of window entries the per-example avg pool divides
    by: entries inside ``[-p, L + p)`` (count_include_pad) or ``[0, L)``."""
    start = torch.arange(n_out, device=L.device) * s - p
    lo, hi = (-p, L[:, None] + p) if include_pad else (0, L[:, None])
    end = torch.minimum(start + k, torch.as_tensor(hi))
    return (end - start.clamp(min=lo)).clamp(min=1)


def _avg_pool(nsp, op, input, kernel_size, stride=None, padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    """``F.avg_pool{1,2}d`` along dynamic dims: sums over the zero-neutralized
    data, divided per window by what the per-example pool divides by."""
    _check_input(input, nsp, op, channels=False)
    k, s, p, _ = _pool_args(nsp, kernel_size, stride, padding)
    lens = _lengths(input, nsp)
    outs = [None if L is None else _window_len(L, k[i], s[i], p[i], 1, ceil_mode)
            for i, L in enumerate(lens)]
    _check_sizes(op, lens, outs)
    data = neutralize(input, 0)
    if nsp == 1:
        total = F.avg_pool2d(data.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, ceil_mode,
                             True, 1).squeeze(-2)
    else:
        total = F.avg_pool2d(data, k, s, p, ceil_mode, True, 1)
    if divisor_override:
        out = total / divisor_override
    else:
        B = data.size(0)
        div = None
        for i in range(nsp):
            L = lens[i] if lens[i] is not None else torch.full(
                (B,), data.size(data.dim() - nsp + i), device=data.device)
            c = _window_count(L, total.size(total.dim() - nsp + i), k[i], s[i], p[i],
                              count_include_pad)
            c = c.view([B] + [1] * (total.dim() - 1 - nsp + i) + [c.size(1)] + [1] * (nsp - 1 - i))
            div = c if div is None else div * c
        out = total / div.to(total.dtype)
    return _finish(input, out, outs)


def _avg1(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(1, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad)


def _avg2(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
          divisor_override=None):
    return _avg_pool(2, "avg_pool2d", input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


_avg1.__doc__ = _avg2.__doc__ = _avg_pool.__doc__
avg_pool = {1: register_distinct(F.avg_pool1d, torch.avg_pool1d)(_avg1),
            2: register_distinct(F.avg_pool2d, torch._C._nn.avg_pool2d)(_avg2)}


# ------------------------------------------------------------------ adaptive pool
def _bins(L, n, size):
    """``(B, size, n)`` bool: input position j lies in output bin i, for
    each example's own length L (torch's bins: floor(i L / O) to ceil((i+1) L / O))."""
    i = torch.arange(size, device=L.device)[None]
    start = torch.div(i * L[:, None], size, rounding_mode="floor")
    end = -torch.div(-(i + 1) * L[:, None], size, rounding_mode="floor")
    j = torch.arange(n, device=L.device)
    return (j >= start[..., None]) & (j < end[..., None])


def _adaptive(nsp, op, input, output_size, data, reduce_dim):
    """Pool each spatial dim that gets an output size with ``reduce_dim(data,
    d, member)``, last dim first (adaptive pooling is separable: a box bin is
    a bin of bins).  Returns the result MaskedBatch and ``{d: argument}``
    from ``reduce_dim``; pooled dims become static."""
    _check_input(input, nsp, op, channels=False)
    sizes = _ntuple(nsp)(output_size)
    n, B = data.dim(), data.size(0)
    lens = _lengths(input, nsp)
    _check_sizes(op, lens, lens)
    dims, outs, extra = list(input.dims), list(lens), {}
    for i in reversed(range(nsp)):
        if sizes[i] is None:
            continue
        d = n - nsp + i
        L = lens[i] if lens[i] is not None else torch.full((B,), data.size(d), device=data.device)
        data, extra[d] = reduce_dim(data, d, _bins(L, data.size(d), sizes[i]))
        dims[d - 1], outs[i] = False, None
    return _finish(input, data, outs, tuple(dims)), extra


def _member_view(member, ndim, d):
    """``member`` (B, O, n) shaped to broadcast against data of ``ndim`` dims
    with the bin axis at ``d`` and the input axis at ``d + 1``."""
    B, O, n = member.shape
    return member.view([B] + [1] * (d - 1) + [O, n] + [1] * (ndim - 2 - d))


def _avg_bins(x, d, member):
    w = member.to(x.dtype)
    w = w / w.sum(-1, keepdim=True).clamp(min=1)
    x = x.unsqueeze(d)
    return (x * _member_view(w, x.dim(), d)).sum(d + 1), None


def _max_bins(x, d, member):
    x = x.unsqueeze(d)
    low = torch.as_tensor(_lowest(x.dtype), dtype=x.dtype, device=x.device)
    return torch.where(_member_view(member, x.dim(), d), x, low).max(d + 1)


def _adaptive_avg(nsp, op):
    def rule(input, output_size):
        """``F.adaptive_avg_pool{1,2}d`` along dynamic dims: each example's
        bins follow its own length, so the result of a pooled dim is static."""
        out, _ = _adaptive(nsp, op, input, output_size, neutralize(input, 0), _avg_bins)
        return out
    rule.__name__ = op
    return rule


def _adaptive_max(nsp, op, input, output_size, return_indices):
    """``F.adaptive_max_pool{1,2}d`` along dynamic dims: max over each
    example's own bins; indices are flat positions in each example's own
    spatial layout."""
    res, arg = _adaptive(nsp, op, input, output_size, input.padded_data, _max_bins)
    if not return_indices:
        return res
    out, n = res.padded_data, input.padded_data.dim()

    def coord(d):  # position along d of every output entry
        if d in arg:
            return arg[d]
        view = [1] * out.dim()
        view[d] = out.size(d)
        return torch.arange(out.size(d), device=out.device).view(view).expand(out.shape)
    idx = coord(n - 1)
    if nsp == 2:
        h = coord(n - 2)
        if n - 2 in arg and n - 1 in arg:
            idx = torch.gather(idx, n - 2, h)  # the column chosen in the row h picked
        W = input._lengths(n - 1)
        idx = h * W.view([-1] + [1] * (out.dim() - 1)) + idx
    if res._mask is not None:
        idx = torch.where(res._mask, idx, 0)
    return res, new(idx, res._mask, res.dims)


def _adaptive_max_rules(nsp, plain_funcs, with_indices_funcs):
    op = f"adaptive_max_pool{nsp}d"

    def rule(input, output_size, return_indices=False):
        return _adaptive_max(nsp, op, input, output_size, return_indices)

    def with_indices(input, output_size, return_indices=True):
        return _adaptive_max(nsp, op, input, output_size, True)
    rule.__doc__ = with_indices.__doc__ = _adaptive_max.__doc__
    register_distinct(*with_indices_funcs)(with_indices)
    return register_distinct(*plain_funcs)(rule)


adaptive_avg_pool = {
    1: register_distinct(F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d)(
        _adaptive_avg(1, "adaptive_avg_pool1d")),
    2: register_distinct(F.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d)(
        _adaptive_avg(2, "adaptive_avg_pool2d")),
}
adaptive_max_pool = {
    1: _adaptive_max_rules(1, (F.adaptive_max_pool1d,),
                           (F.adaptive_max_pool1d_with_indices, torch.adaptive_max_pool1d)),
    2: _adaptive_max_rules(2, (F.adaptive_max_pool2d,),
                           (F.adaptive_max_pool2d_with_indices, torch._C._nn.adaptive_max_pool2d)),
}


# ------------------------------------------------------------------ pad
def _source(j, L, lo, mode):
    """Per example ``(B, n)``: the input position output position ``j`` of a
    dim padded by ``lo`` in front reads, and whether it reads one at all."""
    i = j[None] - lo
    L = L[:, None]
    if mode == "reflect":
        i = torch.where(i < 0, -i, i)
        i = torch.where(i >= L, 2 * (L - 1) - i, i)
    elif mode == "replicate":
        i = torch.minimum(i.clamp(min=0), L - 1)
    elif mode == "circular":
        i = torch.remainder(i, L.clamp(min=1))
    valid = (i >= 0) & (i < L)
    return torch.where(valid, i, 0), valid


@register_distinct(F.pad, torch._C._nn.pad)
def pad(input, pad, mode="constant", value=None):
    """``F.pad`` per example: along a dynamic dim the padding after an
    example goes after its own end, and reflect / replicate / circular read
    from its own boundary (this is what ``nn.Conv{1,2}d(padding_mode=...)``
    calls).  Built with ``gather`` from each output position's source."""
    if not is_mb(input):
        raise NotImplementedError("pad: matchbox supports a MaskedBatch only as the input")
    pad, n = list(pad), input.padded_data.dim()
    if len(pad) % 2 or len(pad) // 2 > n - 1:
        if len(pad) % 2 == 0 and len(pad) // 2 == n:
            raise ValueError(
                f"pad: padding {tuple(pad)} covers dimension 0, each example's leading 1 (the "
                f"batch dimension of the MaskedBatch); pad per-example dimensions >= 1 only")
        raise ValueError(f"pad: padding length {len(pad)} must be even and at most 2 * "
                         f"{n - 1} for examples with {n - 1} dims after the leading 1")
    lens = [input._lengths(d) for d in range(1, n)]
    lanes = active_lanes()
    shape = [1] + [int((L if lanes is None else L[lanes]).min()) if L.numel() else 0
                   for L in lens]
    if len(lens[0]) and (lanes is None or bool(lanes.any())):
        # torch's own checks on the smallest example (its errors are monotone in size)
        F.pad(torch.empty(shape, device="meta"), tuple(pad), mode, value)
    data, B = input.padded_data, input.padded_data.size(0)
    fill = 0 if value is None else value
    for k in range(len(pad) // 2):
        d, lo, hi = n - 1 - k, pad[2 * k], pad[2 * k + 1]
        if lo == 0 and hi == 0:
            continue
        size = data.size(d) + lo + hi
        src, valid = _source(torch.arange(max(size, 0), device=data.device), lens[d - 1], lo, mode)
        view = [B] + [1] * (n - 1)
        view[d] = src.size(1)
        shape = list(data.shape)
        shape[d] = src.size(1)
        data = torch.gather(data, d, src.view(view).expand(shape))
        if mode == "constant":
            data = torch.where(valid.view(view), data, torch.as_tensor(
                fill, dtype=data.dtype, device=data.device))
        lens[d - 1] = lens[d - 1] + lo + hi
    outs = [L if dyn else None for L, dyn in zip(lens, input.dims)]
    _check_sizes("pad", [input._lengths(d) for d in range(1, n)], outs,
                 "a MaskedBatch cannot hold an example that is empty along a dynamic dim")
    return _finish(input, data, outs)
