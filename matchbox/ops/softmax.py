"""softmax and log_softmax over a per-example dim.

Along a dynamic dim the normalisation sees real entries only: non-real
entries get ``-inf`` first, and afterwards are set to 0, so a row with no
real entry (padding only, or a dormant lane) yields 0, never NaN.  Along a
static dim the op is applied as is; along each example's batch-of-one
dimension (size 1, as torch's implicit dim picks for a 3-D example) it is
applied over that size-1 dim.  mask and dims are the input's.
"""
import math

import torch
import torch.nn.functional as F

from ._registry import keep, new, norm_dim, real_mask, register, uncut

T = torch.Tensor


def implicit_dim(ndim):
    """The dim ``F.softmax(x)`` / ``log_softmax`` / ``softmin`` with no
    ``dim`` pick for an example with ``ndim`` dims (torch's legacy rule,
    ``F._get_softmax_dim``): read on each example's own shape, wherever its
    batch-of-one dimension sits (ops/placement.py resolves it there for
    examples that do not hold it at 0)."""
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_rule(name, fn):
    def rule(input, dim=None, _stacklevel=3, dtype=None):
        x = input
        if isinstance(_stacklevel, torch.dtype):  # torch.softmax(x, dim, dtype) positionally
            dtype = _stacklevel
        if dim is None:  # (x holds its batch-of-one dimension at 0: x.dim() is the example's)
            dim = implicit_dim(x.dim())
        d = norm_dim(x, dim, name, allow_batch=True)
        if d == 0:  # over each example's batch-of-one dimension, a dim of size 1
            return new(fn(x.padded_data.unsqueeze(1), 1, dtype=dtype).squeeze(1), x._mask, x.dims)
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
    return torch.softmax(-input, implicit_dim(input.dim()) if dim is None else dim, dtype=dtype)
