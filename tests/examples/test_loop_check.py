"""The loop-vs-batch check of tests/examples/_loop.py can fail: on a wrong
value and on a wrong gradient (checked with the tensor-indexed Tree-LSTM,
which batches today)."""
import random

import pytest
import torch

from examples import tree_lstm
from matchbox import MaskedBatch
from tests.examples._loop import assert_batch_equals_loop


def setup():
    torch.manual_seed(0)
    model = tree_lstm.TreeLSTM(dim=6, hidden=5).double()
    rng = random.Random(0)
    data = [tree_lstm.random_tree(rng, n) for n in (1, 4, 3)]
    return model, data


def test_passes_when_batch_equals_loop():
    model, data = setup()
    assert_batch_equals_loop(model, model, data, tree_lstm.make_batch(data))


def test_fails_on_a_wrong_value():
    model, data = setup()
    with pytest.raises(AssertionError, match="output 0 of example 0"):
        assert_batch_equals_loop(model, model, data, tree_lstm.make_batch(data[::-1]))


def test_fails_on_a_wrong_gradient():
    model, data = setup()
    bias = model.out.bias

    def f(*tree):
        loss, correct = model(*tree)
        if isinstance(tree[0], MaskedBatch):    # adds 0, and 1 to the bias's gradient
            loss = loss + (bias.sum() - bias.sum().detach())
        return loss, correct
    with pytest.raises(AssertionError, match="gradient of out.bias"):
        assert_batch_equals_loop(model, f, data, tree_lstm.make_batch(data))
