"""BiLSTM sequence tagger, written for one sentence and trained on batches.

The standard autobatching benchmark task (Neubig et al. 2017, "On-the-fly
operation batching in dynamic computation graphs"): embed the words, run a
forward and a backward ``nn.LSTMCell`` over them (stacked ``layers`` deep),
concatenate the two directions at every word, score the tags with an MLP and
take the per-word cross entropy.  The model reads ONE sentence, word ids of
shape ``(1, n)``, with plain Python loops over its words; matchbox runs it on
a batch of sentences of different lengths.

matchbox features shown: ``@matchbox.batch`` ``for`` loops over
``x.unbind(1)`` and over ``reversed(x.unbind(1))`` (each step runs only for
the sentences that have that word), list accumulation ``out.append(h)`` +
``F.stack(out, 1)`` building a dynamic dimension, ``nn.LSTMCell`` /
``nn.Embedding`` / ``nn.Linear`` on MaskedBatch, ``F.cat`` along a static
dim, and ``F.cross_entropy`` per word, trained on the mean over all real
words of the batch (``matchbox.token_mean``).
Written with ``@matchbox.batch(compact=1.0)`` instead, each step runs on the
sentences that have that word only (``bench/tasks/bilstm.py`` times both).

The synthetic task: every word belongs to one of a few hidden classes, and
a word's tag is a fixed random function of the classes of the previous
word, the word itself and the next word, so the tagger needs both
directions of context.

Run:  python -m examples.bilstm_tagger [--steps 100 --batch-size 32 --hidden 64 --layers 1]
"""
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from examples.common import run_main, train_loop


@matchbox.batch
def run_forward(cell, xs):
    """An LSTM over the steps of ``xs`` (1, n, d), first to last: (1, n, hidden)."""
    h = c = xs.batch_zeros(cell.hidden_size)
    out = []
    for x in xs.unbind(1):
        h, c = cell(x, (h, c))
        out.append(h)
    return F.stack(out, 1)


@matchbox.batch
def run_backward(cell, xs):
    """An LSTM over the steps of ``xs`` (1, n, d), last to first; the
    outputs are put back in word order: (1, n, hidden)."""
    h = c = xs.batch_zeros(cell.hidden_size)
    out = []
    for x in reversed(xs.unbind(1)):
        h, c = cell(x, (h, c))
        out.append(h)
    # out[k] is each sentence's own k-th step from its end (appends are
    # recorded per example), so the reversed list is in word order
    return F.stack(out[::-1], 1)


class BiLSTM(nn.Module):
    """``layers`` stacked bidirectional LSTMs made of ``nn.LSTMCell`` loops:
    (1, n, input_size) -> (1, n, 2 * hidden)."""

    def __init__(self, input_size, hidden, layers=1):
        super().__init__()
        sizes = [input_size] + [2 * hidden] * (layers - 1)
        self.fwd = nn.ModuleList(nn.LSTMCell(s, hidden) for s in sizes)
        self.bwd = nn.ModuleList(nn.LSTMCell(s, hidden) for s in sizes)

    def forward(self, xs):
        for fwd, bwd in zip(self.fwd, self.bwd):
            xs = F.cat([run_forward(fwd, xs), run_backward(bwd, xs)], 2)
        return xs


class Tagger(nn.Module):
    """Word ids (1, n) -> tag scores (1, n, tags)."""

    def __init__(self, vocab, tags, embed=32, hidden=64, layers=1):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.bilstm = BiLSTM(embed, hidden, layers)
        self.mlp = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, tags))

    def forward(self, words):
        return self.mlp(self.bilstm(self.embed(words)))

    def loss(self, words, tags, reduction="mean"):
        """Cross entropy of every word's tag: ``'mean'`` over the sentence's
        words (one value per sentence), ``'none'`` per word (1, n)."""
        return F.cross_entropy(self(words).transpose(1, 2), tags, reduction=reduction)


# ------------------------------------------------------------------ data
class Grammar:
    """The synthetic tagging task: ``vocab`` words in ``classes`` hidden
    classes; the tag of word t is ``table[class(t-1), class(t), class(t+1)]``
    (a sentence boundary counts as an extra class)."""

    def __init__(self, vocab=100, classes=3, tags=5, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.vocab, self.tags = vocab, tags
        self.word_class = torch.randint(0, classes, (vocab,), generator=g)
        self.table = torch.randint(0, tags, (classes + 1, classes, classes + 1), generator=g)
        self.boundary = classes

    def tag(self, words):
        """Tags (n,) of a sentence of word ids (n,)."""
        c = self.word_class[words]
        edge = torch.tensor([self.boundary])
        prev, nxt = torch.cat([edge, c[:-1]]), torch.cat([c[1:], edge])
        return self.table[prev, c, nxt]


def make_data(count, grammar=None, min_len=3, max_len=12, seed=0):
    """``count`` seeded sentences: a list of (words (1, n), tags (1, n))."""
    grammar = grammar or Grammar()
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(count):
        n = int(torch.randint(min_len, max_len + 1, (), generator=g))
        words = torch.randint(0, grammar.vocab, (n,), generator=g)
        data.append((words[None], grammar.tag(words)[None]))
    return data


def make_batch(examples, device=None):
    """A list of (words, tags) -> MaskedBatch words and tags (dynamic n)."""
    words, tags = zip(*examples)
    return tuple(MaskedBatch.fromlist([t.to(device) for t in ts], dims=(True,)) for ts in (words, tags))


def accuracy(model, batches, select=None):
    """Fraction of real words tagged right over batches ``(*inputs, tags)``;
    ``select(*inputs)`` (a bool MaskedBatch like the tags) picks which words
    count (default: all)."""
    right = total = 0
    with torch.no_grad():
        for *inputs, tags in batches:
            hit = model(*inputs).argmax(-1) == tags
            real = hit.mask if select is None else hit.mask & select(*inputs).padded_data
            right += int(hit.padded_data[real].sum())
            total += int(real.sum())
    return right / max(total, 1)


def majority(examples):
    """The share of the most frequent tag among the words of ``examples``
    (tuples ending with the tags): the accuracy of always guessing it."""
    tags = torch.cat([ex[-1].reshape(-1) for ex in examples])
    return torch.bincount(tags).max().item() / tags.numel()


def train(model, batches, lr):
    """One pass of Adam over ``batches`` of ``(*inputs, tags)`` with
    ``model.loss``, minimizing the mean over all real words of a batch;
    returns (losses, seconds)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return train_loop(opt, batches, lambda batch: matchbox.token_mean(model.loss(*batch, reduction="none")))


def summary(losses, seconds, **metrics):
    """Metrics dict: mean loss of the first and last five steps, time, extras."""
    def avg(xs):
        return sum(xs) / len(xs)
    return dict(loss=avg(losses[-5:]), start_loss=avg(losses[:5]), seconds=seconds,
                steps=len(losses), **metrics)


def batches_of(examples, size, device=None, batcher=None):
    """``examples`` cut into batches of ``size`` by ``batcher`` (default
    :func:`make_batch`)."""
    batcher = batcher or make_batch
    return [batcher(examples[i:i + size], device) for i in range(0, len(examples), size)]


# ------------------------------------------------------------------ training
def main(steps=100, batch_size=32, embed=32, hidden=64, layers=1, lr=2e-2, seed=0, device=None):
    """Train on ``steps`` fresh batches, then tag 128 held-out sentences."""
    torch.manual_seed(seed)
    grammar = Grammar(seed=seed)
    train_set = make_data(steps * batch_size, grammar, seed=seed + 1)
    test_set = make_data(128, grammar, seed=seed + 2)
    model = Tagger(grammar.vocab, grammar.tags, embed, hidden, layers).to(device)
    losses, seconds = train(model, batches_of(train_set, batch_size, device), lr)
    m = summary(losses, seconds, accuracy=accuracy(model, batches_of(test_set, 64, device)),
                majority=majority(test_set))
    print(f"final: loss {m['loss']:.3f} (start {m['start_loss']:.3f}), tag accuracy "
          f"{100 * m['accuracy']:.1f}% (majority tag {100 * m['majority']:.1f}%), "
          f"{batch_size} sentences/batch, {seconds:.1f} s")
    return m


if __name__ == "__main__":
    run_main(main, __doc__, steps=100, batch_size=32, embed=32, hidden=64, layers=1, lr=2e-2,
             seed=0, device=None)
