"""A batch of Python objects, one per example (SPEC 4b), and back."""
import torch

from .core import MaskedBatch
from .transform.runtime.pyvalues import PerExample, _scalar, held_by

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
    MaskedBatch's ``examples()``, a list the function built per example
    (``decoded_words.append(w)`` under per-example control flow: each
    example's own items)."""
    if type(value) is PerExample:
        return list(value._mb_values)
    if isinstance(value, MaskedBatch):
        return value.examples()
    if type(value) in (list, tuple):
        items = [examples(v) if type(v) is PerExample or isinstance(v, MaskedBatch) else None
                 for v in value]
        B = next((len(c) for c in items if c is not None), None)
        if B is not None:
            held = [h if h is None else h.tolist() for h in map(held_by, value)]
            return [type(value)(v if c is None else c[b] for v, c, h in zip(value, items, held)
                                if h is None or h[b]) for b in range(B)]
    raise TypeError(f"matchbox.examples takes what a @batch function returned for a batch "
                    f"(a PerExample, a MaskedBatch, a list of them), got "
                    f"{type(value).__name__} (one value for every example)")
