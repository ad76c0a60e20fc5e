"""matchbox.vmap: functions written for one example with no batch
dimension (the torch.func.vmap convention), run on ragged examples with
per-example control flow; batched == per example, values and gradients."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import draw_lengths

D = torch.float64
torch.manual_seed(0)
W = torch.randn(4, 4, dtype=D, requires_grad=True)
U = torch.randn(4, 4, dtype=D, requires_grad=True)


def encode(sentence, scale):
    """(n, 4) -> (4,): an RNN that stops early where its state grows."""
    h = torch.zeros(4, dtype=D)
    steps = 0
    for word in sentence.unbind(0):
        h = torch.tanh(W @ word + U @ h) * scale
        steps = steps + 1
        if h.sum() > 1.5:
            break
    while h.norm() > 1:
        h = h / 2
    return h, sentence.mean(0) @ W


def countdown(x):
    """The seed's `while x > 0` on a scalar per example."""
    while x > 0:
        x = x - 1
    return x


def _grads(outs):
    loss = sum((o * (i + 1)).sum() for i, o in enumerate(outs))
    return torch.autograd.grad(loss, (W, U))


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_lists_of_examples(lengths):
    xs = [torch.randn(n, 4, dtype=D) for n in draw_lengths(5, 6, lengths)]
    hs, ms = matchbox.vmap(encode, in_dims=(0, None))(xs, 0.9)
    for h, m, x in zip(hs, ms, xs):
        rh, rm = encode(x, 0.9)
        torch.testing.assert_close(h, rh)
        torch.testing.assert_close(m, rm)
    got = _grads([h.sum() + m.sum() for h, m in zip(hs, ms)])
    want = _grads([sum(o.sum() for o in encode(x, 0.9)) for x in xs])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_padded_tensor_with_lengths():
    lengths = [3, 1, 5]
    padded = torch.randn(3, 5, 4, dtype=D)
    hs, ms = matchbox.vmap(encode, in_dims=(0, None), lengths=lengths)(padded, 1.0)
    assert hs.shape == (3, 4)
    for b, n in enumerate(lengths):
        rh, _ = encode(padded[b, :n], 1.0)
        torch.testing.assert_close(hs[b], rh)


def test_scalars_and_batches_in():
    xs = [torch.tensor(float(v)) for v in (3, 0, 7)]
    assert [float(v) for v in matchbox.vmap(countdown)(xs)] == [0.0, 0.0, 0.0]
    batch = MaskedBatch.fromlist([torch.randn(n, 4, dtype=D) for n in (2, 3)], batch_dim=None)
    hs, _ = matchbox.vmap(encode, in_dims=(0, None))(batch, 1.0)
    assert [tuple(h.shape) for h in hs] == [(4,), (4,)]


def test_errors():
    with pytest.raises(TypeError, match="in_dims=None for an argument every example shares"):
        matchbox.vmap(encode)(torch.randn(3, 4), 1.0)
    with pytest.raises(ValueError, match="different numbers of examples"):
        matchbox.vmap(lambda a, b: a + b)([torch.ones(2)], [torch.ones(2)] * 2)
