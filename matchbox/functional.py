"""A drop-in superset of ``torch.nn.functional`` for example-level code.

Everything in ``torch.nn.functional`` is here under the same name (it works
on MaskedBatch through dispatch), plus the functions example-level code
needs that live elsewhere in torch: ``stack``, ``cat``, ``split_dim``,
``join_dims``, ``causal_mask`` and friends.
"""
import torch
import torch.nn.functional as _F
from torch.nn.functional import *  # noqa: F401,F403

from .ops.helpers import HELPERS as _HELPERS
from .ops.shape import stack, cat  # noqa: F401

globals().update(_HELPERS)
unbind = torch.unbind
split = torch.split
chunk = torch.chunk
where = torch.where
tanh = torch.tanh
sigmoid = torch.sigmoid


def __getattr__(name):
    return getattr(_F, name)
