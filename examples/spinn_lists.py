"""The Matchbox talk's shift-reduce parser, with Python lists as the buffer
and the stack, for ONE sentence of word strings.

What it shows: the loop from the talk, as written there:

    for transition in transitions:
        if transition == SHIFT:
            stack.append(buffer.pop())
        elif transition == REDUCE:
            stack.append(compose(stack.pop(), stack.pop()))

A sentence is a Python list of word strings and its transitions a Python
list of ``SHIFT`` / ``REDUCE``.  ``buffer = list(words)``; SHIFT takes the
next word off the front of the buffer and pushes its leaf state (embedding
looked up through the ``w2i`` dict); REDUCE pops the top two stack entries
and pushes their Tree-LSTM composition.  The entry left on the stack encodes
the whole tree and is classified.

Under ``@matchbox.batch`` the same code runs on a batch of sentences with
different lengths and tree shapes; the only change is how the batch is built
(``matchbox.objects(...)``): each sentence iterates its own transitions,
pops its own buffer and keeps its own stack.  ``examples/spinn.py`` is the
same model with the stack kept in a tensor.

Synthetic task (as ``examples/spinn.py``; its word id for ``w`` is
``W2I[w]``): evaluate an arithmetic expression tree.  Leaves are digit
words (two synonyms per digit, 0..4); an inner node's value is
``(left - right) mod 5``, so the model must follow the bracketing.  Five
classes, chance 20%.

Run:  python -m examples.spinn_lists [--steps 60] [--batch-size 64] [--seed 0] [--threads 1]
"""
import random

import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from examples.common import run_main, train_loop

SHIFT, REDUCE = 0, 1
DIGITS = 5
WORDS = [["zero", "nil"], ["one", "uno"], ["two", "deux"], ["three", "tres"], ["four", "vier"]]
W2I = {w: d + DIGITS * k for d, synonyms in enumerate(WORDS) for k, w in enumerate(synonyms)}
VALUE = {w: d for d, synonyms in enumerate(WORDS) for w in synonyms}


def combine(a, b):
    """The value of an inner node whose children have values a and b."""
    return (a - b) % DIGITS


class SPINN(nn.Module):
    """Shift-reduce Tree-LSTM encoder with a classifier on the root."""

    def __init__(self, w2i=W2I, dim=32, hidden=64, classes=DIGITS):
        super().__init__()
        self.w2i = w2i
        self.embed = nn.Embedding(len(w2i), dim)
        self.leaf = nn.Linear(dim, 2 * hidden)              # word -> (h, c)
        self.compose = nn.Linear(2 * hidden, 5 * hidden)    # i, f_left, f_right, o, u
        self.out = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, classes))

    def shift(self, word):
        """The stack entry [h, c] (1, 2 * hidden) of a word string."""
        h, c = self.leaf(self.embed(torch.tensor([self.w2i[word]]))).chunk(2, -1)
        return torch.cat([torch.tanh(h), c], -1)

    def reduce(self, right, left):
        """Binary Tree-LSTM composition of the two top stack entries, popped
        right first (each [h, c])."""
        hl, cl = left.chunk(2, -1)
        hr, cr = right.chunk(2, -1)
        i, fl, fr, o, u = self.compose(torch.cat([hl, hr], -1)).chunk(5, -1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], -1)

    @matchbox.batch
    def forward(self, words, transitions):
        """Class scores (1, classes) of one sentence: a list of n word
        strings and its 2n - 1 transitions."""
        buffer = list(words)
        stack = []
        for transition in transitions:
            if transition == SHIFT:
                stack.append(self.shift(buffer.pop(0)))
            elif transition == REDUCE:
                stack.append(self.reduce(stack.pop(), stack.pop()))
        root, _ = stack.pop().chunk(2, -1)
        return self.out(root)

    @matchbox.batch
    def loss(self, words, transitions, value):
        """Cross entropy (1,) of the expression's value, an int."""
        return F.cross_entropy(self(words, transitions), torch.tensor([value]), reduction="none")


# ------------------------------------------------------------------ data
def random_expression(rng, n_leaves):
    """One expression with ``n_leaves`` digits: (words, transitions, value),
    a list of word strings, a list of 2n - 1 transitions in post-order, an int."""
    words, transitions = [], []

    def build(n):
        if n == 1:
            words.append(rng.choice(rng.choice(WORDS)))
            transitions.append(SHIFT)
            return VALUE[words[-1]]
        m = rng.randint(1, n - 1)
        a, b = build(m), build(n - m)
        transitions.append(REDUCE)
        return combine(a, b)

    value = build(n_leaves)
    return words, transitions, value


def make_data(count, max_leaves=6, seed=0):
    """``count`` random expressions of 1..max_leaves digits (seeded)."""
    rng = random.Random(seed)
    return [random_expression(rng, rng.randint(1, max_leaves)) for _ in range(count)]


def make_batch(examples):
    """A list of (words, transitions, value) -> three batches of per-example objects."""
    return tuple(matchbox.objects(list(parts)) for parts in zip(*examples))


# ------------------------------------------------------------------ training
def main(steps=60, batch_size=64, max_leaves=6, lr=0.01, seed=0, eval_size=256):
    torch.manual_seed(seed)
    model = SPINN()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    test = make_data(eval_size, max_leaves, seed + 1)
    words, transitions, values = make_batch(test)
    base = max([v for _, _, v in test].count(d) for d in range(DIGITS)) / eval_size

    def evaluate():
        with torch.no_grad():
            loss = matchbox.example_mean(model.loss(words, transitions, values)).item()
            guesses = [int(s.argmax()) for s in model(words, transitions).examples()]
            acc = sum(g == v for g, (_, _, v) in zip(guesses, test)) / eval_size
        return loss, acc

    start_loss, start_acc = evaluate()

    def loss_of(step):
        batch = make_batch(make_data(batch_size, max_leaves, seed * 1000 + 7 + step))
        return matchbox.example_mean(model.loss(*batch))
    _, seconds = train_loop(opt, range(steps), loss_of)
    end_loss, end_acc = evaluate()
    print(f"final: loss {end_loss:.3f} (start {start_loss:.3f}), root accuracy {100 * end_acc:.1f}% "
          f"(start {100 * start_acc:.1f}%, majority value {100 * base:.1f}%), {batch_size} expressions/batch, "
          f"{seconds:.1f} s")
    return {"loss": end_loss, "start_loss": start_loss, "accuracy": end_acc,
            "start_accuracy": start_acc, "majority": base, "seconds": seconds}


if __name__ == "__main__":
    run_main(main, __doc__, steps=60, batch_size=64, max_leaves=6, seed=0)
