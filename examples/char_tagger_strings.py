"""BiLSTM tagger with a character BiLSTM for rare words, over sentences of
word STRINGS, written the way the public per-sentence code writes it.

The DyNet benchmark's "BiLSTM w/ char" task (Neubig et al. 2017), in the
style of the PyTorch tagging tutorial: a sentence is a Python list of word
strings, the tags a list of tag strings; the vocabularies are dicts (``w2i``,
``c2i``, ``t2i``) and the training counts a ``collections.Counter``.  A word
seen more than 5 times gets its own embedding (``w2i.get(w, UNK)``); any other
word is spelled: its characters, between two ``<*>`` markers, go through a
bidirectional ``nn.LSTM`` whose two final states make its vector.  The word
vectors then go through a bidirectional ``nn.LSTM`` (sequence-first, viewed
as ``(len(sentence), 1, -1)``) and an MLP scores the tags; the loss is summed
over the sentence's words.

Under ``@matchbox.batch`` the same code runs on a batch of sentences; the only
change is how the batch is built (``matchbox.objects(sentences)``): the
``for w in sentence`` loop, the ``counts[w] > 5`` test, the dict lookups and
the spelling of each rare word happen per sentence, for every sentence of
the batch at once.

Synthetic task: each word has a hidden class, marked by its ending (e.g.
``-ing``); the tag depends on the classes of the word and of the word before
it.  Rare words are made up fresh, so only their spelling tells their class;
the final line reports accuracy on rare words separately.

Run:  python -m examples.char_tagger_strings [--steps 40 --batch-size 16 --rare 0.3]
"""
import random
import string
from collections import Counter

import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from examples.common import run_main, train_loop

UNK_WORD, PAD_CHAR = "_UNK_", "<*>"
SUFFIXES = ["ing", "ed", "ly", "ous"]           # the classes' endings
TAGS = ["DET", "NOUN", "VERB", "ADJ", "ADV"]


def prepare_sequence(seq, to_ix):
    """A list of strings -> their ids (len(seq),)."""
    idxs = [to_ix[w] for w in seq]
    return torch.tensor(idxs, dtype=torch.long)


class CharTagger(nn.Module):
    """Word strings -> tag scores (len(sentence), tags)."""

    def __init__(self, w2i, c2i, t2i, counts, wdim=32, cdim=16, hidden=32, mlp=32):
        super().__init__()
        self.w2i, self.c2i, self.t2i, self.counts = w2i, c2i, t2i, counts
        self.word_embeddings = nn.Embedding(len(w2i), wdim)
        self.char_embeddings = nn.Embedding(len(c2i), cdim)
        self.char_lstm = nn.LSTM(cdim, wdim // 2, bidirectional=True)
        self.lstm = nn.LSTM(wdim, hidden, bidirectional=True)
        self.hidden2tag = nn.Sequential(nn.Linear(2 * hidden, mlp), nn.Tanh(),
                                        nn.Linear(mlp, len(t2i)))

    def word_rep(self, w):
        """A word's vector (1, wdim): its own row if it is frequent, else spelled."""
        if self.counts[w] > 5:
            return self.word_embeddings(torch.tensor([self.w2i.get(w, self.w2i[UNK_WORD])]))
        chars = [PAD_CHAR] + [c for c in w] + [PAD_CHAR]
        char_embeds = self.char_embeddings(prepare_sequence(chars, self.c2i))
        _, (h, _) = self.char_lstm(char_embeds.view(len(chars), 1, -1))
        return h.view(1, -1)                    # final forward and backward states

    @matchbox.batch
    def forward(self, sentence):
        embeds = torch.cat([self.word_rep(w) for w in sentence])
        lstm_out, _ = self.lstm(embeds.view(len(sentence), 1, -1))
        return self.hidden2tag(lstm_out.view(len(sentence), -1))

    @matchbox.batch
    def loss(self, sentence, tags):
        """The sentence's tag cross entropy, summed over its words."""
        return F.cross_entropy(self(sentence), prepare_sequence(tags, self.t2i), reduction="sum")


# ------------------------------------------------------------------ data
class Language:
    """``frequent`` words with fixed spellings, each of a class marked by its
    ending; rare words are fresh stems with a class ending.  The tag of a
    word is ``table[class(previous word)][class(word)]`` (class -1: the start)."""

    def __init__(self, frequent=40, seed=0):
        self.rng = random.Random(seed)
        self.words = {}
        while len(self.words) < frequent:
            cls = self.rng.randrange(len(SUFFIXES))
            self.words[self._stem() + SUFFIXES[cls]] = cls
        self.table = [[self.rng.choice(TAGS) for _ in SUFFIXES] for _ in range(len(SUFFIXES) + 1)]

    def _stem(self, rng=None):
        rng = rng or self.rng
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 4)))

    def sentence(self, n, rare, rng):
        """(words, tags) of a random sentence of ``n`` words, each made up
        fresh (rare) with probability ``rare``."""
        words, tags, prev = [], [], -1
        for _ in range(n):
            if rng.random() < rare:
                cls = rng.randrange(len(SUFFIXES))
                w = self._stem(rng) + SUFFIXES[cls]
            else:
                w = rng.choice(sorted(self.words))
                cls = self.words[w]
            words.append(w)
            tags.append(self.table[prev][cls])
            prev = cls
        return words, tags


def make_data(count, language, rare=0.3, min_len=1, max_len=10, seed=0):
    """``count`` seeded sentences: a list of (words, tags), lists of strings."""
    rng = random.Random(seed)
    return [language.sentence(rng.randint(min_len, max_len), rare, rng) for _ in range(count)]


def vocabularies(train):
    """``w2i``, ``c2i``, ``t2i`` dicts and the word ``Counter`` of a corpus."""
    counts = Counter(w for words, _ in train for w in words)
    w2i = {w: i for i, w in enumerate(sorted(counts) + [UNK_WORD])}
    c2i = {c: i for i, c in enumerate([PAD_CHAR] + list(string.ascii_lowercase))}
    t2i = {t: i for i, t in enumerate(TAGS)}
    return w2i, c2i, t2i, counts


def make_batch(examples):
    """A list of (words, tags) -> the sentences and their tags, per-example objects."""
    sentences, tags = zip(*examples)
    return matchbox.objects(list(sentences)), matchbox.objects(list(tags))


# ------------------------------------------------------------------ training
def accuracy(model, examples, rare_only=False):
    """Fraction of words tagged right (``rare_only``: of words seen <= 5 times)."""
    right = total = 0
    with torch.no_grad():
        scores = model(make_batch(examples)[0]).examples()
        for (words, gold), s in zip(examples, scores):
            for w, g, t in zip(words, gold, s.argmax(1).tolist()):
                if not rare_only or model.counts[w] <= 5:
                    right, total = right + (model.t2i[g] == t), total + 1
    return right / max(total, 1)


def main(steps=40, batch_size=16, rare=0.3, lr=2e-2, seed=0):
    torch.manual_seed(seed)
    language = Language(seed=seed)
    train = make_data(steps * batch_size, language, rare, seed=seed + 1)
    test = make_data(64, language, rare, seed=seed + 2)
    model = CharTagger(*vocabularies(train))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    batches = [train[i:i + batch_size] for i in range(0, len(train), batch_size)]

    def loss_of(batch):
        words = sum(len(ws) for ws, _ in batch)
        return matchbox.example_sum(model.loss(*make_batch(batch))) / words
    losses, seconds = train_loop(opt, batches, loss_of)
    m = dict(loss=sum(losses[-5:]) / 5, start_loss=sum(losses[:5]) / 5, seconds=seconds,
             steps=len(losses), accuracy=accuracy(model, test),
             rare_accuracy=accuracy(model, test, rare_only=True))
    print(f"final: loss {m['loss']:.3f} (start {m['start_loss']:.3f}), tag accuracy "
          f"{100 * m['accuracy']:.1f}%, on rare words {100 * m['rare_accuracy']:.1f}%, "
          f"{batch_size} sentences/batch, {seconds:.1f} s")
    return m


if __name__ == "__main__":
    run_main(main, __doc__, steps=40, batch_size=16, rare=0.3, lr=2e-2, seed=0)
