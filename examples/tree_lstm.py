"""Binary Tree-LSTM (Tai et al. 2015) written as recursion over ONE tree.

What it shows: a model whose computation follows each example's own tree.
``TreeLSTM.encode`` is plain recursive Python for one tree: if the node is a
leaf it embeds the leaf's word, else it recurses on the left and right
children and composes their states with the binary Tree-LSTM cell.  Every
node is classified, and the per-node losses are summed over the tree.
Under ``@matchbox.batch`` the same code runs on a batch of differently shaped
trees: each recursive call runs for the lanes (trees) whose node at that
point is not a leaf.

How a tree is one example: per-example tensors indexed by node id (preorder,
root = node 0), each ``(1, n)`` with its own number of nodes ``n``:
``left`` / ``right`` (child ids; -1 at a leaf), ``word`` (word id at a leaf)
and ``label`` (the node's class).  A batch of trees is four MaskedBatches
with one dynamic dimension; the recursion takes a node index, a ``(1,)``
long tensor per example.

Synthetic task: each word has a sentiment value in -2..2 (``word % 5 - 2``);
a node's label is the sign of the sum of its span's values (negative,
neutral, positive), so inner nodes need composition, not just lookup.

matchbox features exercised: ``@matchbox.batch`` on methods with recursion
(calls run for the lanes active at the call), ``if``/``else`` on a
per-example condition, multiple return values, indexing by a per-example
index (``x[:, i]``), embedding, linear, chunk, cross_entropy with
``reduction='none'``, argmax, and gradients through all of it.
The calls on a node's two children run as one call (``@batch`` merges
sibling recursive calls when the function has no side effects that merging
could reorder), so the recursion runs one call per depth instead of one per
path (``bench/tasks/treelstm.py`` times it).

Run:  python -m examples.tree_lstm [--steps 30] [--batch-size 32] [--seed 0] [--threads 1]
"""
import random

import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from examples.common import run_main, train_loop
from matchbox import MaskedBatch

VOCAB, CLASSES = 20, 3


def word_value(word):
    """The sentiment value (-2..2) of a word id."""
    return word % 5 - 2


class TreeLSTM(nn.Module):
    """Binary Tree-LSTM with a classifier at every node."""

    def __init__(self, vocab=VOCAB, dim=32, hidden=48, classes=CLASSES):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.leaf = nn.Linear(dim, 3 * hidden)        # input, output, update gates
        self.compose = nn.Linear(2 * hidden, 5 * hidden)  # i, f_left, f_right, o, u
        self.out = nn.Linear(hidden, classes)

    def leaf_state(self, word):
        """Leaf cell (an LSTM step with no children) for word ids (1,)."""
        i, o, u = self.leaf(self.embed(word)).chunk(3, -1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c

    def node_state(self, hl, cl, hr, cr):
        """Binary Tree-LSTM composition: a forget gate per child."""
        i, fl, fr, o, u = self.compose(torch.cat([hl, hr], -1)).chunk(5, -1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    @matchbox.batch
    def encode(self, left, right, word, label, i):
        """States of node ``i`` and the summed loss / correct count of its subtree."""
        if left[:, i][:, 0] < 0:                      # a leaf
            h, c = self.leaf_state(word[:, i][:, 0])
            loss = 0.0
            correct = 0.0
        else:
            hl, cl, loss_l, correct_l = self.encode(left, right, word, label, left[:, i][:, 0])
            hr, cr, loss_r, correct_r = self.encode(left, right, word, label, right[:, i][:, 0])
            h, c = self.node_state(hl, cl, hr, cr)
            loss = loss_l + loss_r
            correct = correct_l + correct_r
        logits = self.out(h)                           # (1, classes)
        target = label[:, i][:, 0]                     # (1,)
        loss = loss + F.cross_entropy(logits, target, reduction="none")
        correct = correct + (logits.argmax(-1) == target).to(logits.dtype)
        return h, c, loss, correct

    def forward(self, left, right, word, label):
        """Summed node loss (1,) and number of correctly classified nodes (1,) of one tree."""
        root = left.batch_zeros()                      # node 0, a (1,) long index
        _, _, loss, correct = self.encode(left, right, word, label, root)
        return loss, correct


# ------------------------------------------------------------------ data
def random_tree(rng, n_leaves, split=None):
    """One tree with ``n_leaves`` random words as (left, right, word, label),
    each a (1, 2 * n_leaves - 1) long tensor in preorder.  ``split(rng, n)``
    gives how many of a node's n leaves go left (default: uniform)."""
    left, right, word, label = [], [], [], []

    def build(n):
        k = len(left)
        left.append(-1), right.append(-1), word.append(0), label.append(0)
        if n == 1:
            word[k] = rng.randrange(VOCAB)
            total = word_value(word[k])
        else:
            m = split(rng, n) if split else rng.randint(1, n - 1)
            left[k], sl = build(m)
            right[k], sr = build(n - m)
            total = sl + sr
        label[k] = (total > 0) - (total < 0) + 1
        return k, total

    build(n_leaves)
    return tuple(torch.tensor([v]) for v in (left, right, word, label))


def make_data(count, max_leaves=7, seed=0):
    """``count`` random trees of 1..max_leaves leaves (seeded)."""
    rng = random.Random(seed)
    return [random_tree(rng, rng.randint(1, max_leaves)) for _ in range(count)]


def make_batch(trees):
    """A list of trees -> (left, right, word, label) MaskedBatches over node ids."""
    return tuple(MaskedBatch.fromlist(list(parts), dims=(True,)) for parts in zip(*trees))


# ------------------------------------------------------------------ training
def node_metrics(model, batch):
    """Mean loss per node and fraction of nodes classified right, over a batch of trees."""
    loss, correct = model(*batch)                       # per tree: sums over its nodes
    nodes = batch[0].size_as_tensor(1)                   # per tree: its number of nodes
    return matchbox.token_mean(loss, nodes), matchbox.token_mean(correct, nodes)


def majority_rate(trees):
    """Accuracy of always answering the most frequent node label (the baseline)."""
    labels = torch.cat([t[3][0] for t in trees])
    return labels.bincount().max().item() / labels.numel()


def main(steps=30, batch_size=32, max_leaves=7, lr=0.02, seed=0, eval_size=256):
    torch.manual_seed(seed)
    model = TreeLSTM()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    test_trees = make_data(eval_size, max_leaves, seed + 1)
    test = make_batch(test_trees)

    def evaluate():
        with torch.no_grad():
            return [v.item() for v in node_metrics(model, test)]

    start_loss, start_acc = evaluate()

    def loss_of(step):
        return node_metrics(model, make_batch(make_data(batch_size, max_leaves, seed * 1000 + 7 + step)))[0]
    _, seconds = train_loop(opt, range(steps), loss_of)
    end_loss, end_acc = evaluate()
    base = majority_rate(test_trees)
    print(f"final: node loss {end_loss:.3f} (start {start_loss:.3f}), node accuracy "
          f"{100 * end_acc:.1f}% (start {100 * start_acc:.1f}%, majority label {100 * base:.1f}%), "
          f"{batch_size} trees/batch, {seconds:.1f} s")
    return {"loss": end_loss, "start_loss": start_loss, "accuracy": end_acc,
            "start_accuracy": start_acc, "majority": base, "seconds": seconds}


if __name__ == "__main__":
    run_main(main, __doc__, steps=30, batch_size=32, max_leaves=7, seed=0)
