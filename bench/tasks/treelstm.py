"""Binary Tree-LSTM training step (examples/tree_lstm.py): forward +
backward + SGD step on a batch of sentence trees, every node classified.

Trees are the example's own format (per-tree ``(1, n)`` left / right / word /
label tensors in preorder) from its generator: at the paper size with the
Sentiment Treebank's leaf counts and depths (``bench.data``: mean 19 leaves,
mostly right-branching), at the small size with 2..50 leaves (gamma around
20) and uniformly random bracketings.  Variants:

- ``per_example``: the recursive example-level model on each tree alone;
- ``matchbox``: the same recursion under plain ``@matchbox.batch`` on a
  MaskedBatch of trees: the two recursive calls on a node's children run
  as one call (merged by default: ``encode`` has no effects that merging
  could reorder), so the recursion runs one call per depth, not one per
  path;
- ``per_example_objects`` / ``matchbox_objects``: the same model written
  over ``Tree`` objects (``examples/tree_lstm_objects.py``), the way the
  DyNet benchmark's ``treenn.py`` writes it: recursion over
  ``tree.children``, each node's ``(h, c)`` written on the node, then a
  loss over every node reading the states back; on each tree alone, and
  under ``@matchbox.batch`` on ``matchbox.objects(trees)``;
- ``hand``: what an expert writes for the same module: level-by-level
  batching.  Every node gets a height (leaves 0, else 1 + the taller child);
  all leaves of all trees go through one batched leaf cell, then all nodes of
  height 1 through one batched composition, and so on; children's states are
  gathered with ``index_select`` from a node table built up with ``torch.cat``
  (no in-place writes).  The schedule (heights, gather indices) is index
  bookkeeping done once when the batch is built, as the padding is for the
  other tasks; the timed step is only tensor work.

Sizes: ``small`` fits a laptop CPU (32-dim embeddings, 64 hidden); ``paper``
uses the autobatching paper's BiLSTM sizes, as ``bilstm`` does (128-dim
embeddings, 256 hidden; Tai et al. used 300 / 150 on SST).  The vocabulary is
the example's synthetic one (20 words), so the embedding is small.
"""
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as TF

import matchbox
from bench.data import sst_split, tree_leaves
from bench.harness import Variant, fresh
from examples.tree_lstm import TreeLSTM, make_batch, random_tree
from examples.tree_lstm_objects import Tree
from matchbox import example_sum

NAME = "treelstm"
TRAINS = True
SIZES = {"small": dict(dim=32, hidden=64), "paper": dict(dim=128, hidden=256)}


@dataclass
class Schedule:
    """A batch of trees as levels: ``words`` of the leaves (level 0),
    ``children[k]`` the (left, right) rows of level k + 1's children in the
    node table (levels 0..k concatenated), ``labels`` in table order."""
    words: torch.Tensor
    children: list
    labels: torch.Tensor


def heights(left, right):
    """Height of every node of one tree (lists in preorder: children come
    after their parent, so a reverse sweep sees children first)."""
    h = [0] * len(left)
    for k in reversed(range(len(left))):
        if left[k] >= 0:
            h[k] = 1 + max(h[left[k]], h[right[k]])
    return h


def schedule(trees, device):
    """Level-by-level plan for a list of trees (see ``Schedule``)."""
    nodes = []  # (height, tree, node) over every node of every tree
    for t, (left, right, _, _) in enumerate(trees):
        nodes += [(h, t, k) for k, h in enumerate(heights(left[0].tolist(), right[0].tolist()))]
    nodes.sort()
    row = {(t, k): r for r, (_, t, k) in enumerate(nodes)}
    levels = {}
    for h, t, k in nodes:
        levels.setdefault(h, []).append((t, k))
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)
    words = as_long([int(trees[t][2][0, k]) for t, k in levels[0]])
    children = [tuple(as_long([row[t, int(trees[t][side][0, k])] for t, k in levels[h]])
                      for side in (0, 1))
                for h in range(1, len(levels))]
    labels = as_long([int(trees[t][3][0, k]) for _, t, k in nodes])
    return Schedule(words, children, labels)


def hand_loss(model, plan):
    """The summed node loss of a batch of trees, one batched cell call per
    level, with the model's own leaf and composition cells."""
    h, c = model.leaf_state(plan.words)
    for left, right in plan.children:
        h2, c2 = model.node_state(h.index_select(0, left), c.index_select(0, left),
                                  h.index_select(0, right), c.index_select(0, right))
        h, c = torch.cat([h, h2]), torch.cat([c, c2])
    return TF.cross_entropy(model.out(h), plan.labels, reduction="sum")


def make_trees(batch_size, seed=0, size="small"):
    """``batch_size`` random trees with ``bench.data``'s leaf counts for
    ``size``; bracketed like the Sentiment Treebank at the paper size,
    uniformly at random at the small one."""
    rng = random.Random(seed)
    split = sst_split if size == "paper" else None
    return [random_tree(rng, n, split) for n in tree_leaves(batch_size, size, seed)]


def setup(batch_size, size="small", seed=0):
    """The model (seeded initial weights) and ``make_trees``."""
    torch.manual_seed(seed)
    return TreeLSTM(**SIZES[size]), make_trees(batch_size, seed, size)


def build_dynet(batch_size=64, size="small", seed=0):
    """DyNet's autobatching off and on (``bench/dynet_tasks``), same trees
    and initial weights."""
    from bench.dynet_tasks import treelstm, variants
    model, trees = setup(batch_size, size, seed)
    data = [tuple(part[0].tolist() for part in tree) for tree in trees]
    return variants(lambda pc: treelstm.TreeLSTM(pc, model), data)


def build(batch_size=64, device="cpu", size="small", seed=0):
    model, trees = setup(batch_size, size, seed)
    model = model.to(device)
    trees = [tuple(x.to(device) for x in tree) for tree in trees]

    per = fresh(model)
    def per_example():
        return sum(per(*tree)[0].sum() for tree in trees)

    mb = fresh(model)
    batch = make_batch(trees)
    def matchbox():
        return example_sum(mb(*batch)[0])

    hand = fresh(model)
    plan = schedule(trees, device)
    def hand_written():
        return hand_loss(hand, plan)

    return {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
            "matchbox": Variant(matchbox, mb), **object_variants(model, trees)}


# ------------------------------------------------------------------ tree objects
class ObjectTreeLSTM(TreeLSTM):
    """The binary Tree-LSTM over ``Tree`` objects (a leaf's word id on
    ``tree.word``), with the cells and classifier of :class:`TreeLSTM`."""

    @matchbox.batch
    def encode_tree(self, tree):
        """(h, c) of every node, written on the nodes; returns the root's."""
        if tree.num_children == 0:
            tree.state = self.leaf_state(torch.tensor([tree.word], device=self.out.weight.device))
        else:
            hl, cl = self.encode_tree(tree.children[0])
            hr, cr = self.encode_tree(tree.children[1])
            tree.state = self.node_state(hl, cl, hr, cr)
        return tree.state

    @matchbox.batch
    def forward(self, tree):
        """Summed node loss and number of nodes classified right, of one tree."""
        self.encode_tree(tree)
        nodes = tree.nodes()
        logits = self.out(torch.cat([node.state[0] for node in nodes]))
        labels = torch.tensor([node.label for node in nodes], device=logits.device)
        loss = TF.cross_entropy(logits, labels, reduction="sum")
        return loss, (logits.argmax(1) == labels).sum()


def as_objects(tree):
    """A tree's (left, right, word, label) tensors as linked ``Tree`` objects."""
    left, right, word, label = (t[0].tolist() for t in tree)

    def build(k):
        node = Tree(k, label[k])
        if left[k] < 0:
            node.word = word[k]
        else:
            node.add_child(build(left[k]))
            node.add_child(build(right[k]))
        return node
    return build(0)


def object_variants(model, trees):
    """``per_example_objects`` and ``matchbox_objects``: :class:`ObjectTreeLSTM`
    with ``model``'s weights on each tree alone / on the batch of trees."""
    def objects_model():
        m = ObjectTreeLSTM(dim=model.embed.embedding_dim, hidden=model.out.in_features)
        m = m.to(model.out.weight.device)
        m.load_state_dict(model.state_dict())
        return m

    per, each = objects_model(), [as_objects(t) for t in trees]
    def per_example_objects():
        return sum(per(tree)[0] for tree in each)

    mb, batch = objects_model(), [as_objects(t) for t in trees]
    def matchbox_objects():             # wrapping the list is part of the step
        return example_sum(mb(matchbox.objects(batch))[0])

    return {"per_example_objects": Variant(per_example_objects, per),
            "matchbox_objects": Variant(matchbox_objects, mb)}
