"""Reads that per-example code makes of a value mean, on a batch, what they
mean for one example (SPEC sections 1 and 2, issue 17): ``x.data`` is
PyTorch's detached value, not the padded Tensor of all the examples
(``x.padded_data``)."""
import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test

# (batch size, lengths): mixed sizes, all equal, and a batch of one
BATCHES = [(4, "mixed"), (4, "equal"), (1, "random")]


class GreedyStep(nn.Module):
    """One step of a greedy decoder, as the PyTorch seq2seq tutorial writes it."""

    def __init__(self, hidden=6, vocab=5):
        super().__init__()
        torch.manual_seed(0)
        self.out, self.emb = nn.Linear(hidden, vocab), nn.Embedding(vocab, hidden)

    def forward(self, h):                            # h: (1, hidden)
        output = F.log_softmax(self.out(h), dim=1)   # (1, vocab)
        topv, topi = output.data.topk(1)             # (1, 1) each
        return self.emb(topi[:, 0]) * h + topv, topi


class GreedyDecoder(nn.Module):
    """Greedy decoding until a per-example end token, reading ``.data``."""

    def __init__(self, hidden=6, vocab=5):
        super().__init__()
        torch.manual_seed(1)
        self.out, self.emb = nn.Linear(hidden, vocab), nn.Embedding(vocab, hidden)
        self.cell = nn.GRUCell(hidden, hidden)

    @matchbox.batch
    def forward(self, h):
        inp, outs, steps = h * 0, [], 0
        while steps < 4:
            h = self.cell(inp, h)
            output = F.log_softmax(self.out(h), dim=1)
            outs.append(output)
            topv, topi = output.data.topk(1)
            ni = topi[:, 0]
            if ni == 0:
                break
            inp = self.emb(ni)
            steps += 1
        return F.stack(outs, 1)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_greedy_step_reads_data(B, lengths):
    mb_test(GreedyStep().double(), (B, (False, 6)), lengths=lengths)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_greedy_decoder_reads_data(B, lengths):
    mb_test(GreedyDecoder().double(), (B, (False, 6)), lengths=lengths)


def scaled_by_detached_max(h):                       # h: (1, n, d)
    return h / (1 + h.data.abs().max()) + h.data.sum(1, keepdim=True)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_data_read_in_arithmetic(B, lengths):
    mb_test(scaled_by_detached_max, (B, (True, 5), (False, 3)), lengths=lengths,
            dtype=torch.float64)


def test_data_is_a_detached_batch():
    x = mb_rand(3, (True, 4), (False, 2), lengths="mixed")
    x = MaskedBatch(x.padded_data.clone().requires_grad_(), x.mask, x.dims)
    d = x.data
    assert isinstance(d, MaskedBatch) and d.dims == x.dims and torch.equal(d.mask, x.mask)
    assert not d.requires_grad and x.requires_grad
    assert d.padded_data.data_ptr() == x.padded_data.data_ptr()  # shares storage
    for a, b in zip(d.examples(), x.examples()):
        assert torch.equal(a, b)


def test_index_zero_of_the_leading_one_is_each_examples_own_row():
    """The tutorials' ``topi[0][0]``: index 0 of the batch-of-one dimension
    is each example's own row (never example 0), then its top index."""
    def top(x):
        out = F.log_softmax(x, dim=1)
        topv, topi = out.data.topk(1)
        return topi[0][0], topv[0]
    for lengths in ("mixed", "one", "equal"):
        idx, val = mb_test(top, (3, (False, 5)), lengths=lengths, grad=False)
        assert idx.batch_dim is None and idx.dim() == 0 and val.dim() == 1


def test_data_setter_replaces_values_in_place():
    x = mb_rand(3, (True, 4), lengths="mixed", dtype=torch.float64)
    x = MaskedBatch(x.padded_data.clone().requires_grad_(), x.mask, x.dims)
    leaf, before = x.padded_data, x.examples()
    y = x * 2 + 1
    x.data = y.data
    assert x.padded_data is leaf and leaf.is_leaf and x.requires_grad
    for a, b in zip(x.examples(), before):
        torch.testing.assert_close(a, 2 * b.detach() + 1)
    x.data = torch.ones(1, 2, dtype=torch.float64)   # one example shared by all
    assert x.dims == (False,) and all(torch.equal(e, torch.ones(1, 2, dtype=torch.float64))
                                      for e in x.examples())
    with pytest.raises(ValueError, match="examples"):
        x.data = mb_rand(2, (False, 2)).data


@matchbox.batch
def _set_data_in_branch(x):
    if x.sum() > 0:
        x.data = (x * 2).data
    return x


def test_data_setter_refused_under_batch_control_flow():
    x = MaskedBatch.fromlist([torch.tensor([[1.0]]), torch.tensor([[-1.0]])], (False,))
    with pytest.raises(NotImplementedError, match="every example"):
        _set_data_in_branch(x)
