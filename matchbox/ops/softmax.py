"""softmax and log_softmax over a per-example dim.

Along a dynamic dim the normalisation sees real entries only: non-real
entries get ``-inf`` first, and afterwards are set to 0, so a row with no
real entry (padding only, or a dormant lane) yields 0, never NaN.  Along a
static dim the op is applied as is.  mask and dims are the input's.
"""
import math

import torch
import torch.nn.functional as F

from ._registry import keep, new, norm_dim, real_mask, register, uncut

T = torch.Tensor


def _softmax_rule(name, fn):
    def rule(input, dim=None, _stacklevel=3, dtype=None):
        x = input
        if isinstance(_stacklevel, torch.dtype):  # torch.softmax(x, dim, dtype) positionally
            dtype = _stacklevel
        if dim is None:  # F.softmax's legacy implicit dim, from the per-example ndim
            dim = 0 if x.padded_data.dim() in (0, 1, 3) else 1
        try:
            d = norm_dim(x, dim)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        m = real_mask(x)
        if m is None or not x.dims[d - 1]:
            return new(fn(x.padded_data, d, dtype=dtype), x._mask, x.dims)
        data = uncut(x) if dtype is None else uncut(x).to(dtype)  # (only real entries are read)
        out = fn(keep(m, data, -math.inf), d)
        return new(keep(m, out, 0.0), x._mask, x.dims, zero=True)
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"``{name}`` normalised over the real entries of ``dim``."
    return rule


register(torch.softmax, T.softmax, F.softmax, torch.special.softmax)(
    _softmax_rule("softmax", torch.softmax))
register(torch.log_softmax, T.log_softmax, F.log_softmax, torch.special.log_softmax)(
    _softmax_rule("log_softmax", torch.log_softmax))


@register(F.softmin)
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-x)`` over real entries only."""
    if dim is None:
        raise TypeError("softmin on a MaskedBatch needs dim=... (the implicit dim is deprecated)")
    return torch.softmax(-input, dim, dtype=dtype)
