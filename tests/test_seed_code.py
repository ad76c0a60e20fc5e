"""The Matchbox talk's own code (../shared/seeds/003_0250e6e46337aca4.txt),
copied from its slides exactly, run under @batch on examples of different
sizes: each batched run equals the per-example runs (issue 20 item 1).
Each slide's block is a self-contained section of this file."""
import pytest
import torch
import torch.nn as nn

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test


# ---------------------------------------------------------------- the shift-reduce parser
# The slide "Batching in Deep Learning": per-example `if transition == SHIFT /
# elif transition == REDUCE` over a buffer and a stack that are plain Python
# lists, each example's own.
SHIFT, REDUCE = 0, 1
torch.manual_seed(0)
_COMPOSE = nn.Linear(6, 3).double()


def compose(left, right):
    return torch.tanh(_COMPOSE(torch.cat([left, right], -1)))


@matchbox.batch
def shift_reduce(words, transitions):                 # words: (1, n, 3); transitions: (2n - 1,)
    buffer = list(reversed(words.unbind(1)))
    stack = []
    # shift-reduce parsing
    for transition in transitions:
        if transition == SHIFT:
            stack.append(buffer.pop())
        elif transition == REDUCE:
            stack.append(compose(stack.pop(),
                                  stack.pop()))
    return stack.pop()


def _transitions(n, gen):
    """A random valid sequence of 2n - 1 transitions for n words."""
    out, on_stack, left = [], 0, n
    while left or on_stack > 1:
        if left and (on_stack < 2 or torch.rand((), generator=gen) < 0.5):
            out.append(SHIFT)
            left, on_stack = left - 1, on_stack + 1
        else:
            out.append(REDUCE)
            on_stack -= 1
    return torch.tensor(out)


@pytest.mark.parametrize("lengths", [[3, 1, 5, 2], [4, 4, 4], [1], [1, 1, 2]])
def test_shift_reduce_parser(lengths):
    gen = torch.Generator().manual_seed(sum(lengths))
    words = [torch.randn(1, n, 3, dtype=torch.float64, generator=gen).requires_grad_()
             for n in lengths]
    transitions = [_transitions(n, gen) for n in lengths]
    expected, grads = [], []
    for w, t in zip(words, transitions):
        y = shift_reduce(w, t)
        (g,) = torch.autograd.grad(y.sum(), w)
        expected.append(y)
        grads.append(g)
    batch = MaskedBatch.fromlist([w.detach() for w in words], (True, False)).requires_grad_()
    trans = MaskedBatch.fromlist(transitions, (True,), batch_dim=None)
    out = shift_reduce(batch, trans)
    out.backward()
    for i, (y, got) in enumerate(zip(expected, out.examples())):
        torch.testing.assert_close(got, y, msg=f"example {i}")
    for i, (g, got) in enumerate(zip(grads, batch.grad.examples())):
        torch.testing.assert_close(got, g, msg=f"gradient of example {i}")


# ---------------------------------------------------------------- for word in words
# The slides "Imperative Deep Learning": an RNN written for one sentence
# `words`, a (n, d) sequence with no batch dimension.
_RNN = nn.RNNCell(3, 4).double()


def rnn_unit(word, h):
    return _RNN(word, h)


@matchbox.batch
def run_rnn(words, h0):
    h = h0
    for word in words:
        h = rnn_unit(word, h)
    return h


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_for_word_in_words(lengths):
    mb_test(run_rnn, (4, (True, 5), (False, 3)), (4,), batch_dim=None, lengths=lengths,
            dtype=torch.float64, params=list(_RNN.parameters()))


# ---------------------------------------------------------------- while x > 0
# "x is a batch of scalars"
@matchbox.batch
def countdown(x):
    while x > 0:
        x = x - 1
    return x


def test_while_x_greater_than_zero():
    xs = [torch.tensor(float(v)) for v in (3, 0, 7, -2, 1)]
    out = countdown(MaskedBatch.fromlist(xs, batch_dim=None))
    assert [e.item() for e in out.examples()] == [countdown(x).item() for x in xs]


# ---------------------------------------------------------------- BiRNN
# The slide "How Matchbox Works", with `F` the library's functional module.
F = matchbox.functional


class BiRNN(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.fwd = nn.RNNCell(size, size)
        self.bwd = nn.RNNCell(size, size)

    @matchbox.batch
    def forward(self, x):
        h = h0 = x.batch_zeros(x.size(-1))
        fwd, bwd = [], []
        for xt in x.unbind(1):
            h = self.fwd(xt, h)
            fwd.append(h)
        fwd = F.stack(fwd, 1)
        h = h0
        for xt in reversed(x.unbind(1)):
            h = self.bwd(xt, h)
            bwd.append(h)
        bwd = F.stack(reversed(bwd), 1)
        return F.cat((fwd, bwd), 2)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_birnn(lengths):
    torch.manual_seed(0)
    mb_test(BiRNN(3).double(), (4, (True, 6), (False, 3)), lengths=lengths)
