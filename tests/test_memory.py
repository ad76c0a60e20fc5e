"""Repeated @batch calls keep nothing alive: every tensor a call makes
(lanes, masks, the values derived from them and cached on them) is freed
with the call.  Caches kept as attributes of a Tensor must not hold a view
of that Tensor: the view holds its base from C++, a cycle Python's
collector cannot see, so each call's lanes would leak."""
import gc

import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.core import derived

lin = torch.nn.Linear(3, 3)


@matchbox.batch
def _while(x):
    h = x
    while h.sum() < 5:
        h = h * 1.5 + h.abs() + 0.1
    return h


@matchbox.batch
def _for_lists(x):
    out = []
    h = x[:, 0] * 0
    for t in x.unbind(1):
        h = torch.tanh(lin(t) + h)
        if h.sum() > 0:
            h = h * 0.5
        out.append(h)
    return F.stack(out, 1).sum(1) + x[:, -1] + torch.softmax(x, 1).sum(1)


@matchbox.batch
def _depth(x, n):
    if n > 0:
        return _depth(x * 0.5, n - 1) + _depth(torch.tanh(x), n - 1)
    return x


def test_values_derived_from_a_mask_are_freed_with_it():
    before = _tensors()
    for _ in range(3):
        mask = torch.arange(4) < torch.tensor([[1], [4], [2]])
        derived(mask, ("test select", 1, 0), torch.Tensor.select, 1, 0)
    del mask
    assert _tensors() == before


def _tensors():
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


@pytest.mark.parametrize("case", ["while", "for", "recursion"])
def test_calls_leave_no_tensor_alive(case):
    g = torch.Generator().manual_seed(0)
    xs = [torch.rand(1, 1 + k % 4, 3, generator=g) * (k + 1) for k in range(8)]
    x = MaskedBatch.fromlist(xs, dims=(True, False))
    x.padded_data.requires_grad_()
    n = MaskedBatch.fromlist([torch.tensor([k % 3]) for k in range(8)])
    s = MaskedBatch.fromlist([torch.rand(1, 3, generator=g) * (k + 1) for k in range(8)])
    s.padded_data.requires_grad_()
    run = {"while": lambda: _while(s), "for": lambda: _for_lists(x),
           "recursion": lambda: _depth(x.sum(1), n)}[case]

    def step():
        run().padded_data.sum().backward()

    step()
    before = _tensors()
    for _ in range(5):
        step()
    assert _tensors() == before
