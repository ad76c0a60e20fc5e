"""torch.autograd.grad / backward in per-example code (ops/autograd.py): a
gradient penalty (gradients with respect to the per-example input, kept
with create_graph=True and trained through), meta-learning (each example's
own gradient of the weights every example shares), grad_outputs, and
backward's sum over examples, each batched vs per example in values and
gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

MODES = ("mixed", "one", "equal")
DYN = (3, (True, 5), (False, 4))


class Penalty(nn.Module):
    """A critic's output plus the squared norm of its gradient with respect
    to the input (WGAN-GP style), per example."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        score = torch.tanh(self.lin(x)).sum()
        g, = torch.autograd.grad(score, x, create_graph=True)
        return score + (g ** 2).sum(), g


class InnerStep(nn.Module):
    """One MAML-style inner step per example: each example's gradient of
    its loss with respect to the shared weights, then the loss with the
    adapted weights (gradients flow through the inner step)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        inner = (self.lin(x) ** 2).mean()
        gw, gb = torch.autograd.grad(inner, (self.lin.weight, self.lin.bias), create_graph=True)
        w, b = self.lin.weight - 0.1 * gw, self.lin.bias - 0.1 * gb
        return (torch.tanh(x @ w.mT + b) ** 2).sum(), gw


@pytest.mark.parametrize("lengths", MODES)
def test_gradient_penalty(lengths):
    mb_test(Penalty().double(), DYN, lengths=lengths)
    mb_test(Penalty().double(), DYN, lengths=lengths, batch_dim=None)


@pytest.mark.parametrize("lengths", MODES)
def test_per_example_gradients_of_shared_weights(lengths):
    out = mb_test(InnerStep().double(), DYN, lengths=lengths)
    assert out[1].batch_dim is None and out[1].maxsize() == (3, 4)


@pytest.mark.parametrize("lengths", MODES)
def test_grad_outputs_and_several_outputs(lengths):
    def f(x, y):
        h = x * y.sum()
        k = torch.tanh(x).mean(1)
        gx, gy = torch.autograd.grad((h, k), (x, y), grad_outputs=(torch.ones_like(h), k.detach()),
                                     create_graph=True)
        return gx * 2, gy
    mb_test(f, DYN, (3, (False, 2)), lengths=lengths, dtype=torch.float64)


def test_grad_with_a_shared_tensor_output_and_unused_inputs():
    """A value combined over the examples (example_sum) differentiates as it
    is: each example gets its share; allow_unused gives None as per example."""
    xs = [torch.randn(1, n, 2, dtype=torch.float64, requires_grad=True) for n in (1, 3)]
    x = MaskedBatch.fromlist([t.detach().clone().requires_grad_() for t in xs], (True, False))
    z = MaskedBatch.fromlist([torch.randn(1, 2, dtype=torch.float64, requires_grad=True)] * 2)
    total = matchbox.example_sum((x ** 3).sum())
    g, unused = torch.autograd.grad(total, [x, z], allow_unused=True)
    assert unused is None
    for got, t in zip(g.examples(), xs):
        assert torch.allclose(got, 3 * t.detach() ** 2)


def test_implicit_grad_outputs_need_one_number_per_example():
    x = MaskedBatch.fromlist([torch.randn(1, 3, requires_grad=True) for _ in range(2)])
    with pytest.raises(RuntimeError, match="scalar outputs"):
        torch.autograd.grad(x * 2, x)


class _Probe:
    """An object torch hands to ``__torch_function__``, to see whether this
    torch's autograd.backward dispatches at all (2.10's does not)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return "dispatched"


def _backward_dispatches():
    try:
        return torch.autograd.backward([_Probe()]) == "dispatched"
    except Exception:
        return False


@pytest.mark.skipif(not _backward_dispatches(),
                    reason="this torch's autograd.backward does not dispatch __torch_function__")
def test_backward_accumulates_the_sum_over_examples():
    torch.manual_seed(0)
    lin = nn.Linear(3, 2).double()
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (2, 5, 1)]
    for x in xs:
        torch.autograd.backward(F.softplus(lin(x)).sum())
    want = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    batch = MaskedBatch.fromlist(xs, (True, False)).requires_grad_()
    torch.autograd.backward([F.softplus(lin(batch)).sum(1).sum(1)],
                            inputs=list(lin.parameters()) + [batch])
    for p, w in zip(lin.parameters(), want):
        assert torch.allclose(p.grad, w)
    assert batch.grad is not None and batch.grad.dims == (True, False)


class _Twice(torch.autograd.Function):
    """2x, with a backward that reads a Python number (vmap cannot batch it)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * (2.0 if float(g.detach().abs().sum()) >= 0 else 0.0)


def test_per_example_gradients_where_vmap_cannot_run_the_backward():
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def f(x):
        gw, = torch.autograd.grad(((x * _Twice.apply(w)) ** 2).sum(), w)
        return gw

    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (2, 4, 1)]
    got = f(MaskedBatch.fromlist(xs, (True, False)))
    for g, x in zip(got.examples(), xs):
        assert torch.allclose(g, f(x))
