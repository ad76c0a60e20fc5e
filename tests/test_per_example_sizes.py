"""Size reads in per-example code mean, on a batch, what they mean for one
example (SPEC sections 1 and 2, issue 17): ``x.size(0)``, ``x.shape[0]`` and
``len(x)`` are 1 (each example's leading 1); ``x.batch_size`` counts the
examples."""
import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test

# (batch size, lengths): mixed sizes, all equal, and a batch of one
BATCHES = [(4, "mixed"), (4, "equal"), (1, "random")]
D = torch.float64


def mean_loss(x, y):                                  # x: (1, n, 3), y: (1, n)
    per_word = F.mse_loss(x.sum(-1), y, reduction="sum")
    return per_word / x.size(0) + len(y) * y.mean()


def flatten_head(x):                                  # x: (1, 3, 4)
    h = x.view(x.size(0), -1)                         # (1, 12)
    return h * (1 + x.shape[0]) / len(x)


def with_new_state(x):                                # x: (1, 3)
    h = x.new_zeros(x.size(0), 5) + 1
    c = torch.zeros(x.shape[0], 5, dtype=x.dtype)
    return torch.cat([x, h + c], 1) / x.size(0)


def loop_over_leading(x):                             # x: (1, n, 2)
    total = x.sum(1)
    for i in range(len(x)):
        total = total + x[i:i + 1].sum(1) * (i + 1)
    return total


@matchbox.batch
def grows_until(x):                                   # x: (1, 2), a per-example loop
    steps = x.new_zeros(x.size(0), 1)
    while (x * x).sum() < 4.0 * x.size(0):
        x = x * 1.5 + 0.1 * x.shape[0]
        steps = steps + len(x)
    return x, steps


class Pool(nn.Module):
    """A module reading its input's batch size the ordinary PyTorch way."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 2)

    def forward(self, x):                             # x: (1, n, 3)
        B = x.size(0)
        return self.lin(x).sum(1).view(B, -1) / B


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_loss_divided_by_size0(B, lengths):
    mb_test(mean_loss, (B, (True, 5), (False, 3)), (B, (True, 5)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_view_by_size0(B, lengths):
    mb_test(flatten_head, (B, (False, 3), (False, 4)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_new_zeros_of_size0(B, lengths):
    mb_test(with_new_state, (B, (False, 3)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_range_len(B, lengths):
    mb_test(loop_over_leading, (B, (True, 4), (False, 2)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_sizes_in_batch_loop(B, lengths):
    mb_test(grows_until, (B, (False, 2)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_module_reading_size0(B, lengths):
    mb_test(Pool().double(), (B, (True, 4), (False, 3)), lengths=lengths)


@pytest.mark.parametrize("layer", [nn.LSTM, nn.GRU])
def test_rnn_layers_build_their_own_state(layer):
    """nn.LSTM / nn.GRU read input.size(0) for their zero state: per example
    (L * D, 1, hidden), batched torch's layout (L * D, B, hidden)."""
    torch.manual_seed(0)
    rnn = layer(3, 2, batch_first=True, bidirectional=True).double()
    out = mb_test(lambda x: rnn(x)[0], (3, (True, 4), (False, 3)), lengths="mixed", dtype=D,
                  params=list(rnn.parameters()))
    assert out.batch_size == 3


def test_sizes_are_per_example():
    x = mb_rand(3, (False, 4), (False, 2))
    assert x.size(0) == 1 and x.shape[0] == 1 and len(x) == 1 and x.batch_size == 3
    assert x.size() == (1, 4, 2) and x.shape == (1, 4, 2) and x.size(-3) == 1
    assert x.numel() == 8 and x.nelement() == 8 and x.maxsize() == (1, 4, 2)
    dyn = mb_rand(3, (True, 4), (False, 2), lengths="mixed")
    assert dyn.size(0) == 1 and len(dyn) == 1 and dyn.batch_size == 3 and dyn.maxsize(0) == 1
    assert dyn.size(1).padded_data.tolist() == [1, 4, 4] == dyn.shape[1].padded_data.tolist()
    for read in (lambda: range(dyn.size(1)), lambda: dyn.shape.numel(), lambda: dyn.numel(),
                 lambda: dyn.nelement()):
        with pytest.raises((ValueError, TypeError), match="size_as_tensor"):
            read()


def test_new_constructors():
    x = mb_rand(3, (False, 4))
    z = x.new_zeros(x.size(0), 2)
    assert isinstance(z, MaskedBatch) and z.batch_size == 3 and z.size() == (1, 2)
    f = x.new_full((1, 2), 7.0)
    assert all(torch.equal(e, torch.full((1, 2), 7.0)) for e in f.examples())
    shared = x.new_ones(5, 2)                         # not per example: one shared Tensor
    assert type(shared) is torch.Tensor and shared.shape == (5, 2)


def scaled_by_new_tensor(x):                  # x: (1, 3)
    w = x.new_tensor([[0.5, 1.0, 2.0]])       # a leading 1: the same row in every example
    b = x.new_tensor([1.0, -1.0, 0.0])        # no leading 1: one shared Tensor
    return x * w + b


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_new_tensor_and_legacy_new(B, lengths):
    mb_test(scaled_by_new_tensor, (B, (False, 3)), lengths=lengths, dtype=D)
    x = mb_rand(B, (False, 3), dtype=D)
    assert [e.shape for e in x.new(1, 4).examples()] == [(1, 4)] * B
    assert x.new(x.size(0), x.size(-1)).batch_size == B      # the original's README RNN state
    assert torch.equal(x.new([2.0, 3.0]), torch.tensor([2.0, 3.0], dtype=D))
    assert type(x.new_tensor([1.0, 2.0])) is torch.Tensor and x.new_tensor([1.0]).batch_size == B


@matchbox.batch
def _made_with_sizes(x):
    n = x.size(1)
    h = torch.zeros(1, n)                   # (1, n): the batch-of-one dim, then n
    z = torch.ones((n, 2)) * 3              # (n, 2): no batch-of-one dim
    return h + x.sum(2), z.sum(0), torch.full((1, n), 2.0) * x.sum(2)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_constructors_with_a_per_example_size(lengths):
    mb_test(_made_with_sizes, (4, (True, 5), (False, 3)), lengths=lengths)
