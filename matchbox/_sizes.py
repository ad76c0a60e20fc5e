"""Per-example sizes (SPEC section 2): what ``x.size()`` and ``x.shape``
give for a MaskedBatch whose examples differ in size.

A size of a dynamic dimension is a per-example int (a MaskedBatch of one
int per example): arithmetic, comparisons, indexing and torch's size
arguments (``torch.zeros(n, h)``) take it per example; where one Python
int is needed (``range``, ``int()``, an ``if``) it raises, naming
``size_as_tensor``, unless ``@batch`` rewrote the code (then each example
runs with its own).  A whole shape is an :class:`ExampleShape`.
"""
import torch

__all__ = ["ExampleShape", "per_example"]


def per_example(values, mask=None):
    """A per-example scalar holding ``values`` (a Tensor ``(B,)``): one
    0-dim value per example (storage ``(B,)``, no batch-of-one dimension)."""
    from .core import MaskedBatch
    return MaskedBatch._new(values, mask, (), bdim=None)


class ExampleShape(tuple):
    """``x.size()`` of a batch whose examples differ in size: one entry per
    dimension, an int where every example has the same size, a per-example
    int where they differ.  It compares (``==``, ``!=``) per example, also
    with a plain tuple of such entries, as torch's own checks build them
    (``if hx.size() != expected_hidden_size: raise``): the answer is a plain
    bool where it is the same for every example (so such a check runs as
    for one example), else a per-example bool."""
    __slots__ = ()

    def __eq__(self, other):
        return _compare(self, other, True)

    def __ne__(self, other):
        return _compare(self, other, False)

    __hash__ = tuple.__hash__

    def numel(self):
        raise ValueError(
            "numel() of a shape whose examples differ in size has no single value; use "
            "x.size_as_tensor(d) for per-example sizes or x.maxsize() for the padded shape")

    def __repr__(self):
        return "ExampleShape([" + ", ".join(
            str(s) if isinstance(s, int) else f"per example {s.padded_data.tolist()}"
            for s in self) + "])"


def _compare(a, b, eq):
    if not isinstance(b, (tuple, list)):
        return NotImplemented
    if len(a) != len(b):
        return not eq
    same = None  # (B,) bool Tensor: the examples whose sizes agree so far
    for u, v in zip(a, b):
        if isinstance(u, int) and isinstance(v, int):
            if u != v:
                return not eq
            continue
        agree = torch.as_tensor(_values(u) == _values(v))
        same = agree if same is None else same & agree
    if same is None or bool(same.all()):
        return eq
    if not bool(same.any()):
        return not eq
    return per_example(same if eq else ~same)


def _values(s):
    """A per-example int's values ``(B,)``; an int as it is."""
    return s if isinstance(s, int) else s.padded_data
