"""A batch of Python objects, one per example (SPEC 4b)."""
import torch

from .core import MaskedBatch
from .transform.runtime.pyvalues import PerExample, _scalar

__all__ = ["objects", "PerExample"]


def objects(items):
    """The examples' Python objects (parse trees, token lists, strings,
    dicts), as a value to pass to a ``@batch`` function beside its
    MaskedBatches: one object per example, in the order of the batch.

    Inside the function each example reads and changes its own object:
    attributes, items, ``len``, iteration (``for child in tree.children``),
    method calls, ``in``, string methods; a tensor stored on an object
    (``tree.state = h``) is that example's own and reads back per example,
    also in recursive calls, which run batched across examples and depths.
    Numbers give a per-example scalar (as ``x.size(d)`` does); tensors are
    refused (``MaskedBatch.fromlist`` batches them).  The examples must not
    share an object that the code stores into (give each its own copy)."""
    items = list(items)
    if not items:
        raise ValueError("matchbox.objects needs at least one example")
    if any(isinstance(v, (torch.Tensor, MaskedBatch)) for v in items):
        raise TypeError("matchbox.objects takes Python objects; batch tensors with "
                        "MaskedBatch.fromlist(examples, dims)")
    if all(type(v) in (bool, int, float) for v in items):
        return _scalar(items, items, None)   # (each example's own, even where all agree)
    return PerExample(items)
