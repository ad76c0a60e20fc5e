"""The child-sum Tree-LSTM over tree objects: per tree it writes every node's
state and reads it back for the node losses; batched (only the batch
construction changed) it equals its per-tree loop, values and gradients, on
trees of mixed shapes and sizes, single nodes included."""
import copy
import math
import random

import pytest
import torch

from examples import tree_lstm_objects as ex
from matchbox.test_utils import draw_lengths
from tests.examples._loop import assert_batch_equals_loop

def small_model():
    torch.manual_seed(0)
    return ex.SentimentTreeLSTM(in_dim=6, mem_dim=5).double()


def trees(B, mode, seed, max_words=7):
    """B random (tree, sentence) pairs; "one": single nodes, "equal": the
    same number of words (different shapes), "mixed": first a single node,
    last the largest."""
    rng = random.Random(seed)
    sizes = draw_lengths(B, max_words, mode, torch.Generator().manual_seed(seed))
    return [ex.random_tree(rng, n) for n in sizes]


def chain_and_star(n):
    """Two trees over n words: a chain (one child each) and a star (the root has n - 1)."""
    words = torch.arange(n) % ex.VOCAB
    chain, star = [ex.Tree(k, label=k % 3) for k in range(n)], [ex.Tree(k, label=(k + 1) % 3) for k in range(n)]
    for k in range(1, n):
        chain[k - 1].add_child(chain[k])
        star[0].add_child(star[k])
    return [(chain[0], words), (star[0], words.flip(0))]


def test_states_are_written_on_every_node():
    model = small_model()
    tree, sentence = ex.random_tree(random.Random(1), 6)
    c, h = model.treelstm(tree, model.emb(sentence))
    assert tree.state[0] is c and tree.state[1] is h
    for node in tree.nodes():
        assert node.state[1].shape == (1, 5)
        if node.num_children == 0:      # a leaf's state is its own word's
            torch.testing.assert_close(node.state, model.treelstm.node_forward(
                model.emb(sentence)[node.idx], torch.zeros(1, 5).double(), torch.zeros(1, 5).double()))
    loss, correct = model(tree, sentence)
    assert loss.shape == () and 0 <= int(correct) <= 6


def test_labels_are_subtree_sentiment():
    tree, sentence = ex.random_tree(random.Random(3), 9)
    assert sorted(node.idx for node in tree.nodes()) == list(range(9))
    for node in tree.nodes():
        total = sum(ex.word_value(int(sentence[d.idx])) for d in node.nodes())
        assert node.label == (total > 0) - (total < 0) + 1
        assert node.num_children == len(node.children)
        assert all(child.parent is node for child in node.children)


@pytest.mark.parametrize("B", (1, 5))
@pytest.mark.parametrize("mode", ("mixed", "one", "equal"))
def test_batch_equals_per_tree_loop(mode, B):
    model = small_model()
    data = trees(B, mode, seed=B)
    assert_batch_equals_loop(model, model, data, ex.make_batch(copy.deepcopy(data)))


def test_a_batch_of_16_equals_the_loop():
    """Enough trees for gathered branches and compacted calls to kick in."""
    model = small_model()
    data = ex.make_data(16, max_words=9, seed=4)
    assert_batch_equals_loop(model, model, data, ex.make_batch(copy.deepcopy(data)))


def test_chains_stars_and_single_nodes_batched():
    model = small_model()
    data = chain_and_star(5) + trees(2, "one", seed=0) + chain_and_star(2)
    assert_batch_equals_loop(model, model, data, ex.make_batch(copy.deepcopy(data)))


def test_main_learns():
    m = ex.main(steps=4, batch_size=8, max_words=5, eval_size=16)
    assert all(math.isfinite(v) for v in m.values())
    assert m["loss"] < m["start_loss"]
