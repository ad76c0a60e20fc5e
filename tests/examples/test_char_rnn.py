"""The tutorial's CharRNN, unchanged, on sequence-first names: batched ==
per example (values and gradients), and the example's two trainings agree."""
import pytest
import torch
import torch.nn as nn

import matchbox
from matchbox.test_utils import mb_test
from examples import char_rnn


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_model_equals_per_example(lengths):
    torch.manual_seed(0)
    rnn = char_rnn.CharRNN(char_rnn.n_letters, 8, 4).double()
    out = mb_test(rnn, (5, (True, 7), (False, char_rnn.n_letters)), batch_dim=1,
                  lengths=lengths)
    assert out.batch_dim == 0 and out.shape == (1, 4)


def test_loss_on_a_minibatch_equals_the_tutorials_loop():
    torch.manual_seed(0)
    rnn = char_rnn.CharRNN(char_rnn.n_letters, 8, 4).double()
    chunk = [(y, x.double()) for y, x in char_rnn.make_names(9, seed=3)]
    assert len({x.size(0) for _, x in chunk}) > 1  # names of different lengths
    criterion = nn.NLLLoss()
    loop = sum(criterion(rnn(x), y) for y, x in chunk)
    grads = torch.autograd.grad(loop, list(rnn.parameters()))
    labels, names = char_rnn.batched(chunk)
    batch = matchbox.example_sum(criterion(rnn(names), labels))
    torch.testing.assert_close(batch, loop)
    for g, w in zip(torch.autograd.grad(batch, list(rnn.parameters())), grads):
        torch.testing.assert_close(g, w)


def test_main_runs_and_learns():
    res = char_rnn.main(steps=8, batch_size=16, hidden=16, every=100)
    assert res["max_difference"] < 1e-4 and res["accuracy"] > 0.4
