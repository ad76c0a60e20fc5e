"""SPINN-style shift-reduce composition (Bowman et al. 2016) for ONE sentence.

What it shows: a model driven by each example's own transition sequence.
``SPINN.forward`` reads one sentence of ``n`` word ids and its ``2n - 1``
SHIFT/REDUCE transitions, and runs a stack machine on plain tensors: the
buffer is the embedded words with a pointer, the stack a ``(1, depth, 2h)``
tensor (Tree-LSTM ``h`` and ``c`` side by side) with a pointer.  SHIFT moves
the next word onto the stack; REDUCE pops the top two entries and pushes
their Tree-LSTM composition.  The entry left at the bottom of the stack
encodes the whole tree and is classified.  Under ``@matchbox.batch`` the same
code runs on a batch of sentences with different lengths and tree shapes:
each example takes the SHIFT or the REDUCE branch at each step as its own
transitions say, and stops when its transitions run out.

Synthetic task: evaluate an arithmetic expression tree.  Leaves are digits
0..4 (each digit has two synonymous word ids); an inner node's value is
``(left - right) mod 5``, which depends on the bracketing, so the model must
follow the tree.  Five classes, chance 20%.

matchbox features exercised: ``@matchbox.batch`` with a ``for`` over a
dynamic dimension (``transitions.unbind(1)``) and an ``if``/``else`` on a
per-example condition inside it; reads and writes at per-example pointer
positions (``stack[:, sp - 1]``, ``stack[:, sp] = ...``); ``batch_zeros``;
embedding, linear, chunk, cat; cross_entropy per expression, averaged over the
batch with ``matchbox.example_mean``.

Run:  python -m examples.spinn [--steps 60] [--batch-size 64] [--seed 0] [--threads 1]
"""
import random

import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from examples.common import run_main, train_loop
from matchbox import MaskedBatch

SHIFT, REDUCE = 0, 1
DIGITS = 5
VOCAB = 2 * DIGITS     # word id w means the digit w % DIGITS


def combine(a, b):
    """The value of an inner node whose children have values a and b."""
    return (a - b) % DIGITS


class SPINN(nn.Module):
    """Shift-reduce Tree-LSTM encoder with a classifier on the root."""

    def __init__(self, vocab=VOCAB, dim=32, hidden=64, classes=DIGITS, max_depth=16):
        super().__init__()
        self.hidden, self.max_depth = hidden, max_depth
        self.embed = nn.Embedding(vocab, dim)
        self.leaf = nn.Linear(dim, 2 * hidden)              # word -> (h, c)
        self.compose = nn.Linear(2 * hidden, 5 * hidden)    # i, f_left, f_right, o, u
        self.out = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, classes))

    def reduce(self, left, right):
        """Binary Tree-LSTM composition of two stack entries (each [h, c])."""
        hl, cl = left.chunk(2, -1)
        hr, cr = right.chunk(2, -1)
        i, fl, fr, o, u = self.compose(torch.cat([hl, hr], -1)).chunk(5, -1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], -1)

    @matchbox.batch
    def forward(self, words, transitions):
        """Class scores (1, classes) for one sentence (1, n) and its transitions (1, 2n - 1)."""
        h, c = self.leaf(self.embed(words)).chunk(2, -1)
        buffer = torch.cat([torch.tanh(h), c], -1)          # (1, n, 2 * hidden)
        stack = buffer.batch_zeros(self.max_depth, 2 * self.hidden)
        bp = words.batch_zeros()                            # next word in the buffer, (1,)
        sp = words.batch_zeros()                            # number of stack entries, (1,)
        for t in transitions.unbind(1):
            if t == SHIFT:
                stack[:, sp] = buffer[:, bp]
                bp = bp + 1
                sp = sp + 1
            else:
                stack[:, sp - 2] = self.reduce(stack[:, sp - 2], stack[:, sp - 1])
                sp = sp - 1
        root, _ = stack[:, 0].chunk(2, -1)                  # (1, hidden)
        return self.out(root)


# ------------------------------------------------------------------ data
def random_expression(rng, n_leaves):
    """One expression with ``n_leaves`` digits: (words (1, n), transitions
    (1, 2n - 1), value (1,)) as long tensors; transitions in post-order."""
    words, transitions = [], []

    def build(n):
        if n == 1:
            words.append(rng.randrange(VOCAB))
            transitions.append(SHIFT)
            return words[-1] % DIGITS
        m = rng.randint(1, n - 1)
        a, b = build(m), build(n - m)
        transitions.append(REDUCE)
        return combine(a, b)

    value = build(n_leaves)
    return torch.tensor([words]), torch.tensor([transitions]), torch.tensor([value])


def make_data(count, max_leaves=6, seed=0):
    """``count`` random expressions of 1..max_leaves digits (seeded)."""
    rng = random.Random(seed)
    return [random_expression(rng, rng.randint(1, max_leaves)) for _ in range(count)]


def make_batch(examples):
    """A list of (words, transitions, value) -> three MaskedBatches."""
    words, transitions, values = zip(*examples)
    return (MaskedBatch.fromlist(list(words), dims=(True,)),
            MaskedBatch.fromlist(list(transitions), dims=(True,)),
            MaskedBatch.fromlist(list(values), dims=()))


# ------------------------------------------------------------------ training
def main(steps=60, batch_size=64, max_leaves=6, lr=0.01, seed=0, eval_size=256):
    torch.manual_seed(seed)
    model = SPINN(max_depth=max_leaves)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    test = make_data(eval_size, max_leaves, seed + 1)
    test_words, test_trans, test_values = make_batch(test)
    base = torch.cat([value for _, _, value in test]).bincount().max().item() / eval_size

    def evaluate():
        with torch.no_grad():
            logits = model(test_words, test_trans)
            loss = matchbox.example_mean(F.cross_entropy(logits, test_values)).item()
            acc = (logits.argmax(-1) == test_values).padded_data.double().mean().item()
        return loss, acc

    start_loss, start_acc = evaluate()

    def loss_of(step):
        words, trans, values = make_batch(make_data(batch_size, max_leaves, seed * 1000 + 7 + step))
        return matchbox.example_mean(F.cross_entropy(model(words, trans), values))
    _, seconds = train_loop(opt, range(steps), loss_of)
    end_loss, end_acc = evaluate()
    print(f"final: loss {end_loss:.3f} (start {start_loss:.3f}), root accuracy {100 * end_acc:.1f}% "
          f"(start {100 * start_acc:.1f}%, majority value {100 * base:.1f}%), {batch_size} expressions/batch, "
          f"{seconds:.1f} s")
    return {"loss": end_loss, "start_loss": start_loss, "accuracy": end_acc,
            "start_accuracy": start_acc, "majority": base, "seconds": seconds}


if __name__ == "__main__":
    run_main(main, __doc__, steps=60, batch_size=64, max_leaves=6, seed=0)
