"""The Tree-LSTM example: the recursive per-tree model gives, on a batch of
differently shaped trees, each tree's own losses, counts and gradients."""
import math
import random
import types

import pytest
import torch

import matchbox
from examples import tree_lstm
from matchbox.test_utils import draw_lengths, mb_test


def trees(B, mode, seed, max_leaves=5):
    """B random trees; "one": single leaves, "equal": the same number of
    leaves (different shapes), "mixed": first a leaf, last the largest."""
    rng = random.Random(seed)
    sizes = draw_lengths(B, max_leaves, mode, torch.Generator().manual_seed(seed))
    return [tree_lstm.random_tree(rng, n) for n in sizes]


@pytest.mark.parametrize("B", (1, 5))
@pytest.mark.parametrize("mode", ("mixed", "one", "equal"))
def test_forward_matches_per_tree(mode, B):
    model = tree_lstm.TreeLSTM(dim=6, hidden=5).double()
    batch = tree_lstm.make_batch(trees(B, mode, seed=B))
    mb_test(model, *batch, seed=0)


def test_labels_are_span_sentiment():
    left, right, word, label = tree_lstm.random_tree(random.Random(3), 6)

    def total(k):
        if left[0, k] < 0:
            return tree_lstm.word_value(int(word[0, k]))
        return total(int(left[0, k])) + total(int(right[0, k]))

    assert left.shape == (1, 11)
    for k in range(11):
        t = total(k)
        assert int(label[0, k]) == (t > 0) - (t < 0) + 1


def test_main_learns():
    m = tree_lstm.main(steps=4, batch_size=8, max_leaves=4, eval_size=16)
    assert all(math.isfinite(v) for v in m.values())
    assert m["loss"] < m["start_loss"]


@pytest.mark.parametrize("B", (1, 5))
@pytest.mark.parametrize("mode", ("mixed", "one", "equal"))
def test_merged_calls_match_per_tree(mode, B):
    """@batch(merge_calls=True): the calls on a node's two children run as one."""
    model = tree_lstm.TreeLSTM(dim=6, hidden=5).double()
    model.encode = types.MethodType(
        matchbox.batch(tree_lstm.TreeLSTM.encode.__wrapped__, merge_calls=True), model)
    batch = tree_lstm.make_batch(trees(B, mode, seed=B + 1))
    mb_test(model, *batch, seed=0)
