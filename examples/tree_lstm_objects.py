"""Child-sum Tree-LSTM (Tai et al. 2015) over Python tree objects, written the
way the public per-tree code writes it.

What it shows: per-example code whose structure lives in plain Python objects.
A sentence's dependency tree is a ``Tree`` object per word: its position
``idx`` in the sentence, its gold ``label``, a list of ``children`` and
``num_children``.  ``ChildSumTreeLSTM.forward(tree, inputs)`` recurses over
``tree.children`` first, stacks the children's ``(c, h)`` states with
``torch.cat`` (a leaf gets zeros), calls ``node_forward(inputs, child_c,
child_h)`` and writes the result on the node: ``tree.state = (c, h)``.  The
sentiment head then walks every node of the tree (``tree.nodes()``), reads
each node's stored state back and classifies it; the loss is summed over the
nodes.  Sentences are ``(n,)`` word-id tensors without a batch-of-one
dimension, as in the public code (``inputs[tree.idx]`` is one word's vector).

Under ``@matchbox.batch`` the same code runs on a batch of trees of different
shapes: the only change is how the batch is built
(``matchbox.objects(trees)`` next to ``MaskedBatch.fromlist(sentences)``):
each tree's ``children`` are iterated per tree, each node's ``state`` is that
tree's own, and the recursion runs for all trees at once.

Synthetic task: each word has a sentiment value in -2..2 (``word % 5 - 2``);
a node's label is the sign of the sum of the values of the words in its
subtree (negative, neutral, positive), so inner nodes need composition.

Run:  python -m examples.tree_lstm_objects [--steps 30] [--batch-size 32] [--seed 0] [--threads 1]
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


class Tree:
    """One word of a dependency tree: its position ``idx`` in the sentence,
    its gold ``label``, its dependents ``children``; the model sets ``state``."""

    def __init__(self, idx, label=None):
        self.idx = idx
        self.label = label
        self.parent = None
        self.num_children = 0
        self.children = []
        self.state = None

    def add_child(self, child):
        child.parent = self
        self.num_children += 1
        self.children.append(child)

    def nodes(self):
        """Every node of the subtree, this one first (preorder)."""
        out = [self]
        for child in self.children:
            out += child.nodes()
        return out

    def size(self):
        return len(self.nodes())


class ChildSumTreeLSTM(nn.Module):
    """Child-sum Tree-LSTM: a node's gates see the sum of its children's
    ``h``; each child gets its own forget gate."""

    def __init__(self, in_dim, mem_dim):
        super().__init__()
        self.in_dim, self.mem_dim = in_dim, mem_dim
        self.ioux = nn.Linear(in_dim, 3 * mem_dim)
        self.iouh = nn.Linear(mem_dim, 3 * mem_dim)
        self.fx = nn.Linear(in_dim, mem_dim)
        self.fh = nn.Linear(mem_dim, mem_dim)

    def node_forward(self, inputs, child_c, child_h):
        """One node: its word vector (in_dim,) and its children's states
        (k, mem_dim) -> its own (c, h), each (1, mem_dim)."""
        child_h_sum = torch.sum(child_h, dim=0, keepdim=True)
        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        f = torch.sigmoid(self.fh(child_h) + self.fx(inputs).repeat(len(child_h), 1))
        fc = torch.mul(f, child_c)
        c = torch.mul(i, u) + torch.sum(fc, dim=0, keepdim=True)
        h = torch.mul(o, torch.tanh(c))
        return c, h

    @matchbox.batch
    def forward(self, tree, inputs):
        """States of every node of ``tree`` (children first), written on the
        nodes; returns the root's.  ``inputs``: the sentence's word vectors (n, in_dim)."""
        for idx in range(tree.num_children):
            self.forward(tree.children[idx], inputs)
        if tree.num_children == 0:
            child_c = inputs[0].new_zeros(1, self.mem_dim)
            child_h = inputs[0].new_zeros(1, self.mem_dim)
        else:
            child_c, child_h = zip(*[child.state for child in tree.children])
            child_c, child_h = torch.cat(child_c, dim=0), torch.cat(child_h, dim=0)
        tree.state = self.node_forward(inputs[tree.idx], child_c, child_h)
        return tree.state


class SentimentTreeLSTM(nn.Module):
    """Word embeddings, the child-sum Tree-LSTM, and a classifier on every node."""

    def __init__(self, vocab=VOCAB, in_dim=32, mem_dim=48, classes=CLASSES):
        super().__init__()
        self.emb = nn.Embedding(vocab, in_dim)
        self.treelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.out = nn.Linear(mem_dim, classes)

    @matchbox.batch
    def forward(self, tree, sentence):
        """Summed loss over the nodes of one tree, and how many nodes were
        classified right; ``sentence`` holds the word ids (n,)."""
        self.treelstm(tree, self.emb(sentence))
        nodes = tree.nodes()
        logits = self.out(torch.cat([node.state[1] for node in nodes], dim=0))
        labels = torch.tensor([node.label for node in nodes], device=logits.device)
        loss = F.cross_entropy(logits, labels, reduction="sum")
        correct = (logits.argmax(1) == labels).sum()
        return loss, correct


# ------------------------------------------------------------------ data
def random_tree(rng, n):
    """A sentence of ``n`` random word ids (n,) and a random dependency tree
    over its positions (a ``Tree`` per word, the root returned), labelled."""
    words = [rng.randrange(VOCAB) for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    nodes = {k: Tree(k) for k in order}
    for j, k in enumerate(order[1:], 1):
        nodes[order[rng.randrange(j)]].add_child(nodes[k])
    root = nodes[order[0]]
    for node in root.nodes():
        total = sum(word_value(words[d.idx]) for d in node.nodes())
        node.label = (total > 0) - (total < 0) + 1
    return root, torch.tensor(words)


def make_data(count, max_words=10, seed=0):
    """``count`` seeded (tree, sentence) pairs of 1..max_words words."""
    rng = random.Random(seed)
    return [random_tree(rng, rng.randint(1, max_words)) for _ in range(count)]


def make_batch(examples):
    """A list of (tree, sentence) -> the trees as per-example objects and
    the sentences as a MaskedBatch (no batch-of-one dimension)."""
    trees, sentences = zip(*examples)
    return matchbox.objects(list(trees)), MaskedBatch.fromlist(list(sentences), dims=(True,),
                                                                batch_dim=None)


# ------------------------------------------------------------------ training
def node_metrics(model, examples):
    """Mean loss per node and fraction of nodes classified right, over a batch of trees."""
    loss, correct = model(*make_batch(examples))
    nodes = sum(tree.size() for tree, _ in examples)
    return matchbox.example_sum(loss) / nodes, matchbox.example_sum(correct) / nodes


def majority_rate(examples):
    """Accuracy of always answering the most frequent node label (the baseline)."""
    labels = torch.tensor([node.label for tree, _ in examples for node in tree.nodes()])
    return labels.bincount().max().item() / labels.numel()


def main(steps=30, batch_size=32, max_words=10, lr=0.02, seed=0, eval_size=256):
    torch.manual_seed(seed)
    model = SentimentTreeLSTM()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    test = make_data(eval_size, max_words, seed + 1)

    def evaluate():
        with torch.no_grad():
            return [v.item() for v in node_metrics(model, test)]

    start_loss, start_acc = evaluate()

    def loss_of(step):
        return node_metrics(model, make_data(batch_size, max_words, seed * 1000 + 7 + step))[0]
    _, seconds = train_loop(opt, range(steps), loss_of)
    end_loss, end_acc = evaluate()
    base = majority_rate(test)
    print(f"final: node loss {end_loss:.3f} (start {start_loss:.3f}), node accuracy "
          f"{100 * end_acc:.1f}% (start {100 * start_acc:.1f}%, majority label {100 * base:.1f}%), "
          f"{batch_size} trees/batch, {seconds:.1f} s")
    return {"loss": end_loss, "start_loss": start_loss, "accuracy": end_acc,
            "start_accuracy": start_acc, "majority": base, "seconds": seconds}


if __name__ == "__main__":
    run_main(main, __doc__, steps=30, batch_size=32, max_words=10, seed=0)
