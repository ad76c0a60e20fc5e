"""Boolean-mask indexing: ``x[mask]`` and ``torch.masked_select``.

Per example ``x[mask]``, with ``mask`` a bool value shaped like the first
``k`` dims of ``x``, is ``(N, *x.shape[k:])``: the rows where ``mask`` is
True, in row-major order.  ``N`` differs between examples, so it is a
dynamic dim (as ``nonzero`` gives; an example with no True entry is empty).
Only real entries count.  The rows are gathered, so gradients flow back to
them and nowhere else.  ``ops/placement.py`` (``Index``) hands the rule
operands read with no batch-of-one dimension and labels the result.
"""
import math

import torch

from ._registry import fail_if, is_mb, keep, lengths_presence, new, register_distinct
from .shape import gather_line

__all__ = ["select_rows", "masked_select"]

T = torch.Tensor


def _narrowed(t, sizes):
    """``t`` cut to ``sizes`` along dims 1.. (where it is longer)."""
    for j, n in enumerate(sizes, 1):
        if t.size(j) > n:
            t = t.narrow(j, 0, n)
    return t


def select_rows(x, mask, op="x[mask]"):
    """Per example ``x[mask]``: ``x`` a MaskedBatch and ``mask`` a bool
    MaskedBatch or a plain Tensor (shared by every example), neither with a
    batch-of-one dimension (storage dim ``j + 1`` is each example's dim ``j``)."""
    B, k, n = x.padded_data.size(0), mask.dim(), x.dim()
    if not 0 < k <= n:
        raise IndexError(f"{op}: a mask with {k} dimensions indexes examples with {n}")
    if not is_mb(mask):
        mask = new(mask.to(x.device).expand((B,) + tuple(mask.shape)), None, (False,) * k, bdim=None)
    for j in range(1, k + 1):  # per example the mask has the shape of x's first k dims
        lx, lm = x._lengths(j), mask._lengths(j)
        fail_if(lx != lm, lambda b: IndexError(
            f"{op}: the shape of the mask [{int(lm[b[0]])}] at index {j - 1} does not match the "
            f"shape of the indexed tensor [{int(lx[b[0]])}] at index {j - 1} (example {b[0]})"),
            f"{op}: the shape of the mask does not match the indexed tensor's")
    lead = [min(x.padded_data.size(j), mask.padded_data.size(j)) for j in range(1, k + 1)]
    sel = _narrowed(mask.padded_data, lead)
    if mask._mask is not None:
        sel = sel & _narrowed(mask._mask, lead)
    if x._mask is not None:
        real = _narrowed(x._mask, lead)
        sel = sel & (real.flatten(k + 1).any(-1) if n > k else real)
    P = math.prod(lead)
    sel = sel.expand([B] + lead).reshape(B, P)
    counts = sel.sum(1)
    N = int(counts.max()) if B else 0
    # the True positions first, each example's in row-major order
    order = torch.sort(sel.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :N]
    rows = _narrowed(x.padded_data, lead)
    rest = tuple(rows.shape[k + 1:])
    data = gather_line(rows.reshape((B, P) + rest).contiguous(), 1, order)
    held = (torch.arange(N, device=counts.device) < counts[:, None]).view((B, N) + (1,) * len(rest))
    dims = (True,) + x.dims[k:]
    out_mask = held
    if any(x.dims[k:]) and x._mask is not None:  # a row's own sizes along dynamic dims after k
        m = _narrowed(x._mask, lead)
        m = m.expand([B] + lead + list(m.shape[k + 1:])).reshape((B, P) + tuple(m.shape[k + 1:]))
        out_mask = held & gather_line(m.contiguous(), 1, order)
    present, sizes = lengths_presence({1: counts}, x)
    return new(keep(held, data, 0), out_mask, dims, zero=True, bdim=None, present=present,
               sizes=sizes)


@register_distinct(torch.masked_select, T.masked_select)
def masked_select(input, mask):
    """``torch.masked_select`` per example: ``input`` and ``mask`` broadcast
    to one shape, then the entries under True, 1-D (a dynamic dim)."""
    full = torch.where(mask, input, input)
    return full[torch.logical_and(mask, torch.ones_like(full, dtype=torch.bool))]
