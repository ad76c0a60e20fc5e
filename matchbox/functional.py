"""A drop-in superset of ``torch.nn.functional`` for example-level code.

Everything in ``torch.nn.functional`` is here under the same name (it works
on MaskedBatch through dispatch), plus the functions example-level code
needs that live elsewhere in torch: ``stack``, ``cat``, ``split_dim``,
``join_dims``, ``causal_mask`` and friends.
"""
import torch
import torch.nn.functional as _F
from torch.nn.functional import *  # noqa: F401,F403

from .core import RULES as _RULES, MaskedBatch as _MaskedBatch, dispatch as _dispatch
from .ops.helpers import HELPERS as _HELPERS
from .ops.shape import cat as _cat, stack as _stack

globals().update(_HELPERS)
unbind = torch.unbind
split = torch.split
chunk = torch.chunk
where = torch.where
tanh = torch.tanh
sigmoid = torch.sigmoid


def stack(sequence, dim=0, dynamic=None):
    return _dispatch(torch.stack, _RULES[torch.stack], (list(sequence), dim), {"dynamic": dynamic})


def cat(sequence, dim=0):
    return _dispatch(torch.cat, _RULES[torch.cat], (list(sequence), dim), {})


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """torch's ``F.l1_loss``, whose ``weight`` reaches matchbox's rule
    (torch's own does not pass it on to a MaskedBatch)."""
    if any(type(a) is _MaskedBatch for a in (input, target, weight)):
        return _dispatch(_F.l1_loss, _RULES[_F.l1_loss],
                         (input, target, size_average, reduce, reduction, weight), {})
    return _F.l1_loss(input, target, size_average, reduce, reduction,
                      **({} if weight is None else {"weight": weight}))


stack.__doc__, cat.__doc__ = _stack.__doc__, _cat.__doc__


def __getattr__(name):
    return getattr(_F, name)
