"""BiLSTM tagger that spells out rare words with a character BiLSTM.

The second benchmark task of Neubig et al. 2017 ("BiLSTM w/ char"): a word
seen often enough has its own row in the embedding table; a rare word gets
its embedding from a character-level BiLSTM over its letters.  Written for
ONE sentence: word ids ``(1, n)`` (``id >= frequent`` marks a rare word)
and the sentence's letters ``(1, n, c)``: row i holds word i's letters,
followed by blanks (0) up to the longest word of the sentence, ``c``.
Both ``n`` and ``c`` vary from sentence to sentence.

matchbox features shown: two dynamic dims (words, letters); a per-word
``if rare: ... else: ...`` under ``@matchbox.batch`` inside a ``for`` over
``zip(words.unbind(1), letters.unbind(1))``; a call from that branch to
another ``@matchbox.batch`` method whose loops (forward and
``reversed(...)``) skip blanks with a per-letter ``if``, so the character
LSTMs see each word's own letters; ``nn.Embedding`` lookups in lanes whose
index is out of the table's range (dormant rare words) that must not raise;
``out.append(e)`` + ``F.stack``; and the word-level BiLSTM of
``examples.bilstm_tagger``.  The loop over words shares no state between
words, so ``@batch`` runs it once over every word of every sentence, and
the rare branch spells all rare words of the batch in one call (docs/batch.md,
"Loops whose steps share no state").

The synthetic task: each word has a hidden class, spelled out by a class
suffix (e.g. ``...qe`` for class 2); the tag depends on the classes of the
word and of the word before it.  Rare words are made up fresh for every sentence,
so only their spelling tells their class: the final line reports accuracy
on rare words separately.

Run:  python -m examples.char_tagger [--steps 40 --batch-size 16 --rare 0.3]
"""
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from examples.bilstm_tagger import BiLSTM, accuracy, batches_of, majority, summary, train
from examples.common import run_main

BLANK = 0  # letter id of "no letter" (after the end of a shorter word); letters are 1..26


class CharTagger(nn.Module):
    """Word ids (1, n) and letters (1, n, c) -> tag scores (1, n, tags)."""

    def __init__(self, frequent, tags, letters=27, embed=32, char_embed=16, char_hidden=32,
                 hidden=64, layers=1):
        super().__init__()
        self.frequent = frequent
        self.embed = nn.Embedding(frequent, embed)  # rows for the frequent words only
        self.char_embed = nn.Embedding(letters, char_embed)
        self.char_fwd = nn.LSTMCell(char_embed, char_hidden)
        self.char_bwd = nn.LSTMCell(char_embed, char_hidden)
        self.char_out = nn.Linear(2 * char_hidden, embed)
        self.bilstm = BiLSTM(embed, hidden, layers)
        self.mlp = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, tags))

    @matchbox.batch
    def spell(self, letters):
        """Embedding (1, embed) of a word from its letters (1, c), blanks skipped."""
        xs = self.char_embed(letters)
        h = c = xs.batch_zeros(self.char_fwd.hidden_size)
        for letter, x in zip(letters.unbind(1), xs.unbind(1)):
            if letter != BLANK:
                h, c = self.char_fwd(x, (h, c))
        hb = cb = xs.batch_zeros(self.char_bwd.hidden_size)
        for letter, x in zip(reversed(letters.unbind(1)), reversed(xs.unbind(1))):
            if letter != BLANK:
                hb, cb = self.char_bwd(x, (hb, cb))
        return torch.tanh(self.char_out(F.cat([h, hb], 1)))

    @matchbox.batch
    def embed_words(self, words, letters):
        """(1, n, embed): table rows for frequent words, spelled-out rare words."""
        out = []
        for word, spelling in zip(words.unbind(1), letters.unbind(1)):
            if word >= self.frequent:
                e = self.spell(spelling)
            else:
                e = self.embed(word)
            out.append(e)
        return F.stack(out, 1)

    def forward(self, words, letters):
        return self.mlp(self.bilstm(self.embed_words(words, letters)))

    def loss(self, words, letters, tags, reduction="mean"):
        """Cross entropy of every word's tag: ``'mean'`` over the sentence's
        words (one value per sentence), ``'none'`` per word (1, n)."""
        return F.cross_entropy(self(words, letters).transpose(1, 2), tags, reduction=reduction)


# ------------------------------------------------------------------ data
class Lexicon:
    """``frequent`` words with fixed spellings; words of class k end with
    suffix k; rare words are fresh stems with their class's suffix.  The tag
    of word t is ``table[class(t-1), class(t)]`` (class(-1): the start)."""

    def __init__(self, frequent=50, classes=4, tags=5, seed=0):
        self.g = torch.Generator().manual_seed(seed)
        self.frequent, self.classes, self.tags = frequent, classes, tags
        self.suffixes = [self._letters(2) for _ in range(classes)]
        self.word_class = torch.randint(0, classes, (frequent,), generator=self.g)
        self.spelling = [self._spell(int(k)) for k in self.word_class]
        self.table = torch.randint(0, tags, (classes + 1, classes), generator=self.g)

    def _letters(self, n):
        return torch.randint(1, 27, (n,), generator=self.g).tolist()

    def _spell(self, cls):
        return self._letters(int(torch.randint(1, 4, (), generator=self.g))) + self.suffixes[cls]

    def sentence(self, n, rare, g):
        """(word ids, letters, tags) of a random sentence of n words, each
        rare (a fresh spelling, id ``frequent``) with probability ``rare``."""
        ids, classes, spellings = [], [], []
        for _ in range(n):
            if float(torch.rand((), generator=g)) < rare:
                cls = int(torch.randint(0, self.classes, (), generator=g))
                stem = torch.randint(1, 27, (int(torch.randint(1, 4, (), generator=g)),), generator=g)
                ids.append(self.frequent), classes.append(cls)
                spellings.append(stem.tolist() + self.suffixes[cls])
            else:
                w = int(torch.randint(0, self.frequent, (), generator=g))
                ids.append(w), classes.append(int(self.word_class[w]))
                spellings.append(self.spelling[w])
        c = torch.tensor(classes)
        edge = torch.tensor([self.classes])
        tags = self.table[torch.cat([edge, c[:-1]]), c]
        width = max(len(s) for s in spellings)
        letters = torch.tensor([s + [BLANK] * (width - len(s)) for s in spellings])
        return torch.tensor(ids)[None], letters[None], tags[None]


def make_data(count, lexicon=None, rare=0.3, min_len=3, max_len=10, seed=0):
    """``count`` seeded sentences: a list of (words (1, n), letters (1, n, c), tags (1, n))."""
    lexicon = lexicon or Lexicon()
    g = torch.Generator().manual_seed(seed)
    return [lexicon.sentence(int(torch.randint(min_len, max_len + 1, (), generator=g)), rare, g)
            for _ in range(count)]


def make_batch(examples, device=None):
    """A list of (words, letters, tags) -> MaskedBatches (dynamic n, and c)."""
    words, letters, tags = ([t.to(device) for t in ts] for ts in zip(*examples))
    return (MaskedBatch.fromlist(words, dims=(True,)), MaskedBatch.fromlist(letters, dims=(True, True)),
            MaskedBatch.fromlist(tags, dims=(True,)))


# ------------------------------------------------------------------ training
def main(steps=40, batch_size=16, rare=0.3, embed=32, hidden=64, layers=1, lr=4e-2, seed=0,
         device=None):
    """Train on ``steps`` fresh batches, then tag 64 held-out sentences."""
    torch.manual_seed(seed)
    lexicon = Lexicon(seed=seed)
    train_set = make_data(steps * batch_size, lexicon, rare, seed=seed + 1)
    test_set = make_data(64, lexicon, rare, seed=seed + 2)
    model = CharTagger(lexicon.frequent, lexicon.tags, embed=embed, hidden=hidden,
                       layers=layers).to(device)
    losses, seconds = train(model, batches_of(train_set, batch_size, device, make_batch), lr)
    test = batches_of(test_set, 64, device, make_batch)
    m = summary(losses, seconds, accuracy=accuracy(model, test), majority=majority(test_set),
                rare_accuracy=accuracy(model, test, select=lambda w, _: w >= lexicon.frequent))
    print(f"final: loss {m['loss']:.3f} (start {m['start_loss']:.3f}), tag accuracy "
          f"{100 * m['accuracy']:.1f}%, on rare words {100 * m['rare_accuracy']:.1f}% "
          f"(majority tag {100 * m['majority']:.1f}%), {batch_size} sentences/batch, "
          f"{seconds:.1f} s")
    return m


if __name__ == "__main__":
    run_main(main, __doc__, steps=40, batch_size=16, rare=0.3, embed=32, hidden=64, layers=1,
             lr=4e-2, seed=0, device=None)
