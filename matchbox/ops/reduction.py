"""Reductions: sum, mean, std, var, max, min, prod, logsumexp, argmax, any, ...

A reduction over per-example dims ``d`` (``None`` = all of them: one value
per example, data ``(B,)``) sees real entries only: when a reduced dim is
dynamic, non-real entries first get the op's identity (0 for sum, -inf for
max, 1 for prod, ...), and mean/var/std divide by the true count.  Result
mask: the input mask reduced with ``any`` over ``d`` (real wherever the
example has entries); dims: ``d`` removed (static size 1 with keepdim).
Reducing over dim 0 (the batch) raises.
"""
import math

import torch
import torch.nn.functional as F

from ..core import batch_advice, derived, mask_from_lengths
from ._registry import (is_mb, lengths_presence, neutralize, new, norm_dim, real_mask, register,
                        register_distinct)

T = torch.Tensor
_INF = float("inf")


def _fill_value(value, dtype):
    """``value`` in ``dtype``; +-inf become the extreme values of an integer or bool dtype."""
    if dtype == torch.bool:
        return value > 0 if math.isinf(value) else bool(value)
    if not (dtype.is_floating_point or dtype.is_complex) and math.isinf(value):
        info = torch.iinfo(dtype)
        return info.max if value > 0 else info.min
    return value


class _Reduction:
    """The shared bookkeeping of one reduction of MaskedBatch ``x`` over ``dim``.

    ``data`` is what to hand the torch op (neutralized with ``fill`` where a
    dynamic dim is reduced; flattened to ``(B, N)`` for ``dim=None``);
    ``dim``/``keepdim`` are the arguments to pass with it; ``wrap(out)``
    turns the op's output into the result MaskedBatch.
    """

    def __init__(self, x, dim, keepdim, op, fill=None):
        self.x, self.op, self.user_keepdim = x, op, bool(keepdim)
        many = isinstance(dim, (tuple, list))
        self.full = dim is None or many and len(dim) == 0
        try:
            if self.full:
                ds = tuple(range(1, x._data.dim()))
            elif many:
                ds = tuple(sorted({norm_dim(x, int(d)) for d in dim}))
            else:
                ds = (norm_dim(x, int(dim)),)
        except ValueError as e:
            raise ValueError(f"{op}: {e}") from None
        self.ds = ds
        # examples of length 0 along a reduced dim (only where some example
        # is empty: x._present is set): present, with torch's answer for an
        # empty tensor, and every other dim keeps its size
        self.empty = None
        if x._present is not None:
            zero = [x._lengths(d) == 0 for d in ds if x.dims[d - 1]]
            if zero:
                self.empty = torch.stack(zero).any(0) & x._present
        m = real_mask(x)
        self.masked = m is not None and (x.dims[ds[0] - 1] if len(ds) == 1 else
                                         any(x.dims[d - 1] for d in ds))
        if self.masked and fill is not None:
            data = neutralize(x, _fill_value(fill, x._data.dtype), m)
        else:
            data = x.padded_data
        if self.full:
            # one value per example: reduce a flat (B, N) view over dim 1
            B = data.size(0)
            self.padded_data = data.reshape(B, data.shape[1:].numel())
            self.m = None if m is None else m.expand_as(x.padded_data).reshape(B, x.padded_data.shape[1:].numel())
            self.dim, self.keepdim, self.rd = 1, False, (1,)
        else:
            self.padded_data, self.m = data, m
            self.dim = ds if many else ds[0]
            self.keepdim, self.rd = self.user_keepdim, ds

    def count(self, keepdim=None, dtype=None):
        """Real entries per result position (a Tensor when masked, else an int)."""
        keepdim = self.keepdim if keepdim is None else keepdim
        static = 1
        for d in self.rd:
            if self.m is None or self.m.size(d) == 1:
                static *= self.padded_data.size(d)
        if not self.masked:
            return static
        c = self.m.sum(dim=self.rd, keepdim=keepdim) * static
        return c.to(dtype or self.padded_data.dtype)

    def wrap(self, out):
        x = self.x
        if self.full and self.user_keepdim:
            out = out.reshape((x._data.size(0),) + (1,) * (x._data.dim() - 1))
        mask, ds, keepdim = x._mask, self.ds, self.user_keepdim
        if mask is not None and ds:
            mask = derived(mask, ("any", ds, keepdim), T.any, ds, keepdim)
        if len(ds) == 1:
            d = ds[0]
            dims = x.dims[:d - 1] + (False,) * keepdim + x.dims[d:]
        elif keepdim:
            dims = tuple(False if i + 1 in ds else d for i, d in enumerate(x.dims))
        else:
            dims = tuple(d for i, d in enumerate(x.dims) if i + 1 not in ds)
        if self.empty is not None:
            return self._kept_sizes(out, dims)
        return new(out, mask, dims)

    def _kept_sizes(self, out, dims):
        """The result where an example is empty along a reduced dim: its
        mask from the sizes of the kept dynamic dims (an example empty
        along a reduced dim has a value, an empty one along a kept dim
        stays empty), in the examples that hold a value."""
        x = self.x
        lengths, new_d = {}, 0
        for i in range(1, x.padded_data.dim()):
            if i in self.ds and not self.user_keepdim:
                continue
            new_d += 1
            if x.dims[i - 1] and i not in self.ds:
                lengths[new_d] = x._lengths(i)
        present = x._present
        mask = mask_from_lengths(lengths, out.shape, dims)
        lanes = present.view((-1,) + (1,) * (out.dim() - 1))
        mask = lanes.expand((out.size(0),) + (1,) * (out.dim() - 1)) if mask is None else mask & lanes
        keep, sizes = lengths_presence(lengths, x)
        return new(out, mask, dims, present=keep, sizes=sizes)

    def refuse_empty(self):
        """torch raises for max/min/argmax of an empty tensor: so do we,
        naming the examples."""
        if self.empty is not None and bool(self.empty.any()):
            raise ValueError(
                f"{self.op}: examples {self.empty.nonzero().flatten().tolist()} have length 0 "
                f"along the reduced dimension {list(self.ds)}, and {self.op} of an empty "
                f"tensor has no value (torch raises for one example too); guard it, e.g. "
                f"with a per-example `if`" + batch_advice(" under @matchbox.batch", "")
                + ", or use amax with a default")

    def nan_where_empty(self, v):
        """``v`` with NaN for the examples that are empty along the reduced
        dims (mean, var and std of an empty tensor are NaN in torch)."""
        if self.empty is None:
            return v
        e = self.empty.view((-1,) + (1,) * (v.dim() - 1))
        return torch.where(e, torch.full((), float("nan"), dtype=v.dtype, device=v.device), v)


def _no_out(op, out):
    if out is not None:
        raise NotImplementedError(f"{op}: the out= argument is not supported on a MaskedBatch")


# ------------------------------------------------------------------ simple reductions
def _simple(fn, fill, name, has_keepdim=True, needs_dim=False):
    """A rule for ``fn(input, dim, keepdim, **kwargs)`` whose result only
    needs non-real entries set to ``fill``."""
    def rule(input, dim=None, keepdim=False, *, out=None, **kwargs):
        _no_out(name, out)
        if needs_dim and dim is None:
            raise TypeError(f"{name}() missing 1 required positional argument: 'dim'")
        r = _Reduction(input, dim, keepdim, name, fill)
        if name in ("amax", "amin"):
            r.refuse_empty()
        if has_keepdim:
            kwargs["keepdim"] = r.keepdim
        return r.wrap(fn(r.padded_data, r.dim, **kwargs))
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` over real entries only (non-real entries count as {fill})."
    return rule


SIMPLE = {  # name: identity of the op
    "sum": 0, "nansum": 0, "prod": 1, "logsumexp": -_INF, "amax": -_INF, "amin": _INF,
    "any": False, "all": True,
}
for _name, _fill in SIMPLE.items():
    register(getattr(torch, _name), getattr(T, _name))(
        _simple(getattr(torch, _name), _fill, _name, needs_dim=_name == "logsumexp"))

register(torch.count_nonzero, T.count_nonzero)(
    _simple(torch.count_nonzero, 0, "count_nonzero", has_keepdim=False))


@register(torch.mean, T.mean)
def mean(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Mean over real entries: divides by the true count."""
    _no_out("mean", out)
    r = _Reduction(input, dim, keepdim, "mean", 0)
    if not r.masked or not (dtype or r.padded_data.dtype).is_floating_point:
        return r.wrap(torch.mean(r.padded_data, r.dim, keepdim=r.keepdim, dtype=dtype))
    s = torch.sum(r.padded_data, r.dim, keepdim=r.keepdim, dtype=dtype)
    return r.wrap(r.nan_where_empty(s / r.count(dtype=s.dtype).clamp_min(1)))


# ------------------------------------------------------------------ var / std
def _var_args(op, args, kwargs):
    """(dim, correction, keepdim) from torch.var's overloads."""
    args, kwargs = list(args), dict(kwargs)
    dim, unbiased = kwargs.pop("dim", None), kwargs.pop("unbiased", None)
    correction, keepdim = kwargs.pop("correction", None), kwargs.pop("keepdim", False)
    _no_out(op, kwargs.pop("out", None))
    if kwargs:
        raise TypeError(f"{op}: unexpected arguments {sorted(kwargs)}")
    if args and isinstance(args[0], bool):
        unbiased = args.pop(0)
    elif args:
        dim = args.pop(0)
        if args:
            unbiased = args.pop(0)
        if args:
            keepdim = args.pop(0)
    if correction is None:
        correction = 1 if unbiased is None else int(bool(unbiased))
    return dim, correction, keepdim


def _sqrt(v):
    """sqrt with torch.std's gradient convention: zero gradient where the value is 0."""
    pos = v > 0
    return torch.where(pos, torch.where(pos, v, 1.0).sqrt(), v * 0)  # NaN (too few entries) stays


def _var_family(fn, root, with_mean):
    """A rule for torch.var/std/var_mean/std_mean over real entries, dividing
    by the true count minus ``correction``."""
    name = fn.__name__

    def rule(input, *args, **kwargs):
        dim, correction, keepdim = _var_args(name, args, kwargs)
        r = _Reduction(input, dim, keepdim, name, 0)
        if not r.masked:
            out = fn(r.padded_data, r.dim, correction=correction, keepdim=r.keepdim)
            return tuple(map(r.wrap, out)) if with_mean else r.wrap(out)
        mean_k = r.padded_data.sum(r.rd, keepdim=True) / r.count(keepdim=True).clamp_min(1)
        dev = torch.where(r.m, r.padded_data - mean_k, 0.0)
        ss = (dev * dev).sum(r.rd, keepdim=r.keepdim)
        count = r.count()
        # padding-only positions divide by 1 rather than by a non-positive count
        v = ss / torch.where(count > 0, count - correction, torch.ones_like(count))
        v = r.wrap(r.nan_where_empty(_sqrt(v) if root else v))
        if not with_mean:
            return v
        return v, r.wrap(mean_k if r.keepdim else mean_k.squeeze(r.rd))
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` over real entries (``correction``/``unbiased`` use the true count)."
    return rule


register(torch.var, T.var)(_var_family(torch.var, False, False))
register(torch.std, T.std)(_var_family(torch.std, True, False))
register(torch.var_mean)(_var_family(torch.var_mean, False, True))
register(torch.std_mean)(_var_family(torch.std_mean, True, True))


# ------------------------------------------------------------------ max / min
def _max_min(name, fill, binary):
    fn = getattr(torch, name)
    result_type = getattr(torch.return_types, name)

    def rule(input, dim=None, keepdim=False, *, other=None, out=None):
        _no_out(name, out)
        if other is not None or isinstance(dim, T) or is_mb(dim) or not is_mb(input):
            # torch.max(a, b): the elementwise maximum
            return binary(input, dim if other is None else other)
        r = _Reduction(input, dim, keepdim, name, fill)
        r.refuse_empty()
        if dim is None:
            return r.wrap(fn(r.padded_data, 1).values)
        values, indices = fn(r.padded_data, r.dim, r.keepdim)
        return result_type((r.wrap(values), r.wrap(indices)))
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = (f"``{name}`` over real entries; with ``dim`` returns (values, indices) "
                    f"as torch does.")
    return rule


register(torch.max, T.max)(_max_min("max", -_INF, torch.maximum))
register(torch.min, T.min)(_max_min("min", _INF, torch.minimum))


def _example_flat_index(x, idx):
    """Turn flat indices into each example's padded data (``idx`` (B,)) into
    flat indices into that example's true shape ``(1, l_1, ..., l_k)``."""
    out = torch.zeros_like(idx)
    stride = torch.ones_like(idx)
    rem = idx
    for d in range(x.padded_data.dim() - 1, 0, -1):
        coord = rem % x.padded_data.size(d)
        rem = rem // x.padded_data.size(d)
        out = out + coord * stride
        stride = stride * x._lengths(d)
    return out


def _arg(name, fill):
    fn = getattr(torch, name)

    def rule(input, dim=None, keepdim=False):
        r = _Reduction(input, dim, keepdim, name, fill)
        r.refuse_empty()
        idx = fn(r.padded_data, r.dim, keepdim=r.keepdim)
        if dim is None and input._mask is not None:
            idx = _example_flat_index(input, idx)
        return r.wrap(idx)
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = (f"``{name}`` over real entries; without ``dim`` the index is into each "
                    f"example's own flattened shape.")
    return rule


register(torch.argmax, T.argmax)(_arg("argmax", -_INF))
register(torch.argmin, T.argmin)(_arg("argmin", _INF))


# ------------------------------------------------------------------ norms
def _vector_norm(op, fn, input, p, dim, keepdim, kwargs):
    if p is None:
        p = 2
    # zero padding changes no sum of |x|^p and no nonzero singular value (so
    # no nuclear norm); min-|x| style norms (p < 0) must not see it
    r = _Reduction(input, dim, keepdim, op, _INF if not isinstance(p, str) and p < 0 else 0.0)
    return r.wrap(fn(r.padded_data, p, r.dim, r.keepdim, **kwargs))


@register(torch.norm, T.norm)
def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """``torch.norm`` over real entries: vector norms, 'fro', and 'nuc' over
    two dims of each example (with no ``dim``: its two dims, see
    ops/placement.py).  Where an example is rank-deficient the nuclear norm
    has no gradient, only subgradients, and the batch may pick another."""
    _no_out("norm", out)
    kwargs = {} if dtype is None else {"dtype": dtype}
    return _vector_norm("norm", torch.norm, input, p, dim, keepdim, kwargs)


@register(torch.linalg.vector_norm)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.vector_norm`` over real entries."""
    _no_out("vector_norm", out)
    return _vector_norm("vector_norm", torch.linalg.vector_norm, x, ord, dim, keepdim,
                        {"dtype": dtype})


# ------------------------------------------------------------------ composites
@register(F.normalize)
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``x / max(||x||_p, eps)`` with the norm over real entries of ``dim``."""
    _no_out("normalize", out)
    return input / input.norm(p, dim, keepdim=True).clamp_min(eps)


@register_distinct(F.cosine_similarity, torch.cosine_similarity)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Each side divided by its norm (at least ``eps``), then summed over the
    real entries of ``dim`` (ATen's formula)."""
    n1 = torch.linalg.vector_norm(x1, 2, dim, keepdim=True).clamp_min(eps)
    n2 = torch.linalg.vector_norm(x2, 2, dim, keepdim=True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)
