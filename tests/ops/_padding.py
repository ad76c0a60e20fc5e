"""Helpers shared by the op tests."""
import torch

from matchbox import MaskedBatch


def poison(x, value=float("nan")):
    """Put garbage in a batch's padding (a no-op for one example), so a rule
    that forgets to neutralize padding fails its test."""
    if isinstance(x, MaskedBatch) and x._mask is not None:
        return MaskedBatch._new(torch.where(x._mask, x.padded_data, value), x._mask, x.dims,
                                bdim=x.batch_dim, present=x._present, sizes=x._sizes)
    return x


def lift(y):
    """A per-example scalar (0-dim) becomes shape (1,), matching a batch's
    examples; batched results pass through unchanged."""
    z = torch.zeros(1, dtype=y.dtype)
    return y | z if y.dtype == torch.bool else y + z
