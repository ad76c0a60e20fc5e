"""Per-example Python values: what ``x.size(d)``, ``x.shape``, ``len(x)``,
``x.item()``, ``int(x)``, ``float(x)`` and ``bool(x)`` give in code that
``@batch`` rewrote (the pass in transform/python_values.py calls these).

On a plain Tensor or any other object they are the Python builtins and
methods.  On a :class:`~matchbox.MaskedBatch` they give each example its
own value: a *per-example scalar*, a MaskedBatch holding one 0-dim value
per example (storage ``(B,)``, dims ``()``, no batch-of-one dimension),
which arithmetic, comparisons, ``range``, indexing and conditions take.
A size of a static dimension stays an int.  (``x.size(d)`` and
``x.shape`` are the MaskedBatch methods' per-example sizes; outside
``@batch`` ``len()``, ``.item()``, ``int()``, ``float()`` and ``bool()``
raise, naming ``size_as_tensor`` or ``@matchbox.batch``.)
"""
import builtins
import math

import torch

from ..._sizes import per_example
from ...core import MaskedBatch
from ...ops.steps import Steps
from .list_items import list_len
from .lists import is_per_lane
from .select import example_shape


def size(x, *args, **kwargs):
    """``x.size(d)``: of a dynamic dimension, each example's own size;
    ``x.size()`` with a dynamic dimension, an ExampleShape of those sizes
    (the MaskedBatch method gives them, matchbox/_sizes.py)."""
    return x.size(*args, **kwargs)


def shape(x):
    """``x.shape`` (see ``size``)."""
    return x.shape


def len_(x):
    """``len(x)``: of a per-example list or the steps of ``x.unbind(d)``,
    each example's own length; of a MaskedBatch whose dimension 0 is
    dynamic, each example's own size."""
    if type(x) is list:
        return list_len(x)
    if type(x) is Steps:
        return x.lengths()
    if type(x) is not MaskedBatch:
        return builtins.len(x)
    if x.dim() == 0:
        raise TypeError("len() of a 0-d tensor")
    return x.size(0)


def _one_value(x, what):
    """``x``'s single value per example, as a per-example scalar (the
    examples must each hold exactly one element)."""
    shape = x._data.shape[1:]
    if math.prod(shape) != 1:
        raise ValueError(
            f"{what} needs one value per example, but each example has shape "
            f"{example_shape(x)}; reduce it first (x.sum(), x.max(), x[0, -1]) or index "
            f"one element")
    B = x._data.size(0)
    mask = None if x._mask is None else x._mask.reshape(B)
    return per_example(x.padded_data.reshape(B), mask)


def item(x):
    """``x.item()``: each example's own number (detached, as a Python
    number has no gradient)."""
    if type(x) is not MaskedBatch:
        return x.item()
    out = _one_value(x.detach(), "x.item()")
    return out


def int_(x, *args):
    """``int(x)``: each example's own int (truncated toward zero)."""
    if args or type(x) is not MaskedBatch:
        return builtins.int(x, *args)
    v = _one_value(x.detach(), "int(x)")
    data = v._data
    if data.is_floating_point():
        data = data.trunc()
    return per_example(data.long(), v._mask)


def float_(x):
    """``float(x)``: each example's own float (a floating value keeps its
    dtype, so it mixes with tensors as a Python float does)."""
    if type(x) is not MaskedBatch:
        return builtins.float(x)
    v = _one_value(x.detach(), "float(x)")
    data = v._data
    if not data.is_floating_point():
        data = data.to(torch.get_default_dtype())
    return per_example(data, v._mask)


def bool_(x):
    """``bool(x)``: each example's own truth value; of a per-example list,
    whether each example's list is not empty."""
    if type(x) is list and is_per_lane(x):
        return list_len(x) > 0
    if type(x) is not MaskedBatch:
        return builtins.bool(x)
    if math.prod(x._data.shape[1:]) != 1:
        raise RuntimeError(
            "bool(x): Boolean value of a per-example Tensor with more than one value is "
            "ambiguous; reduce it with .any() or .all()")
    v = _one_value(x.detach(), "bool(x)")
    return per_example(v._data != 0, v._mask)
