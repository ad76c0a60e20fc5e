"""What per-example code asks of a value's type: ``isinstance(x,
torch.Tensor)``, ``torch.is_tensor(x)``, ``torch.autograd.Variable(x)``, in
code that ``@batch`` rewrote (the pass in transform/python_values.py calls
these).

Per example ``x`` is a Tensor, so on a :class:`~matchbox.MaskedBatch` they
answer as on a Tensor: ``isinstance(x, cls)`` is what it is for a Tensor
(and still True for ``MaskedBatch``), ``torch.is_tensor(x)`` is True, and
``Variable(x)`` is, as in PyTorch, ``x.detach()`` (``requires_grad`` as
given).  On anything else they are the builtins and torch's functions.  A
per-example Python number (``x.item()``, ``x.size(d)`` of a dynamic dim) is
a MaskedBatch too, so it answers as a Tensor.  Outside ``@batch`` Python's
``isinstance`` and torch's ``Variable`` cannot be reached (see
docs/porting.md).
"""
import builtins
import warnings

import torch

from ...core import MaskedBatch

# a Tensor to ask isinstance about in a MaskedBatch's place (never changed):
# it answers as a Tensor does for classes, tuples and metaclass checks alike
_A_TENSOR = torch.empty(0)


def isinstance_(value, cls):
    """``isinstance(value, cls)``; a MaskedBatch answers as each example,
    a Tensor, would (and is still an instance of MaskedBatch)."""
    if builtins.isinstance(value, cls):
        return True
    return type(value) is MaskedBatch and builtins.isinstance(_A_TENSOR, cls)


def _variable(data, requires_grad=False, volatile=False):
    if volatile:
        warnings.warn("volatile was removed and now has no effect. Use `with torch.no_grad():` "
                      "instead.", stacklevel=3)
    return data.detach().requires_grad_(requires_grad)


def tensor_call(f, *args, **kwargs):
    """``f(*args, **kwargs)`` for a call named ``is_tensor`` or ``Variable``:
    on a MaskedBatch, ``torch.is_tensor`` is True and
    ``torch.autograd.Variable`` detaches it, as for a Tensor."""
    if args and type(args[0]) is MaskedBatch:
        if f is torch.is_tensor:
            return True
        if f is torch.autograd.Variable:
            return _variable(*args, **kwargs)
    return f(*args, **kwargs)
