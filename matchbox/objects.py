"""A batch of Python objects, one per example (SPEC 4b), and back."""
import torch

from .core import MaskedBatch
from .transform.runtime.pyvalues import PerExample, _scalar

__all__ = ["objects", "examples", "PerExample"]


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


def examples(value):
    """The examples' values of what a ``@batch`` function returned: a
    list with one entry per example (``matchbox.objects``'s inverse): a
    PerExample's Python values (the names a generator sampled), a
    MaskedBatch's ``examples()``; anything else is every example's."""
    if type(value) is PerExample:
        return list(value._mb_values)
    if isinstance(value, MaskedBatch):
        return value.examples()
    raise TypeError(f"matchbox.examples takes a PerExample or a MaskedBatch, got "
                    f"{type(value).__name__} (one value for every example)")
