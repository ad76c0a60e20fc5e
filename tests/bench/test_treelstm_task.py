"""The treelstm benchmark task: per-example, matchbox and the level-by-level
hand variant compute the same summed node loss and gradients, each trains a
step, and the check rejects a hand variant that is wrong in value or only in
gradient."""
import pytest
import torch

from bench import harness
from bench.tasks import treelstm
from examples.tree_lstm import TreeLSTM


def tensor_variants(**kw):
    """The variants over tensor trees (those over Tree objects: test_python_state_variants.py)."""
    return {k: v for k, v in treelstm.build(size="small", **kw).items() if not k.endswith("_objects")}


def test_heights_of_a_known_tree():
    # node 0 = (leaf 1, node 2 = (leaf 3, leaf 4)), preorder
    assert treelstm.heights([1, -1, 3, -1, -1], [2, -1, 4, -1, -1]) == [2, 0, 1, 0, 0]


def test_schedule_covers_every_node_once_children_first():
    trees = treelstm.make_trees(5, seed=1)
    plan = treelstm.schedule(trees, "cpu")
    n_leaves = sum(int((t[0] < 0).sum()) for t in trees)
    assert plan.words.numel() == n_leaves
    done = n_leaves
    for left, right in plan.children:  # level k's children come from levels < k
        assert int(left.max()) < done and int(right.max()) < done
        done += left.numel()
    assert done == plan.labels.numel() == sum(t[0].size(1) for t in trees)
    assert sorted(plan.labels.tolist()) == sorted(torch.cat([t[3][0] for t in trees]).tolist())


def test_tree_sizes_are_sentence_like():
    leaves = [int((t[0] < 0).sum()) for t in treelstm.make_trees(64)]
    assert min(leaves) >= 2 and max(leaves) <= 50 and len(set(leaves)) > 10


@pytest.mark.parametrize("B", [1, 3])
def test_variants_agree_and_train(B):
    variants = tensor_variants(batch_size=B, seed=B)
    assert set(variants) == {"per_example", "matchbox", "hand"}
    harness.check(variants, treelstm.TRAINS)
    for name, v in variants.items():
        before = v.model.compose.weight.detach().clone()
        loss = harness.step(v, treelstm.TRAINS)
        assert torch.isfinite(loss), name
        assert not torch.equal(before, v.model.compose.weight), name


def test_check_rejects_a_wrong_value():
    variants = tensor_variants(batch_size=3)
    with torch.no_grad():
        variants["hand"].model.out.bias[0] += 1.0  # every node's logits
    with pytest.raises(AssertionError, match="hand computes different outputs"):
        harness.check(variants, treelstm.TRAINS)


def test_check_rejects_a_wrong_gradient_with_the_right_loss():
    variants = tensor_variants(batch_size=3)
    hand = variants["hand"].model
    # same forward, but no gradient flows into the left child's cell state
    hand.node_state = lambda hl, cl, hr, cr: TreeLSTM.node_state(hand, hl, cl.detach(), hr, cr)
    with pytest.raises(AssertionError, match="hand: gradient of"):
        harness.check(variants, treelstm.TRAINS)
