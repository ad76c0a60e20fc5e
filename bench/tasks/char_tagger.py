"""BiLSTM tagger with a character BiLSTM over rare words
(examples/char_tagger.py), the autobatching paper's "BiLSTM w/ char" task:
forward + backward + SGD step on a batch of sentences.

Every word of a sentence takes the per-word branch ``if rare:`` of
``CharTagger.embed_words``: a rare word is spelled out by a character
BiLSTM (``CharTagger.spell``, a loop over its letters), a frequent word is
a row of the embedding table.  Variants:

- ``per_example``: the example-level ``CharTagger`` on each sentence alone;
- ``matchbox``: the same module, unchanged, on MaskedBatches of sentences
  (two dynamic dims for the letters: words and letters); its loop over
  words runs once over every (sentence, word) pair, so the rare words of
  the whole batch are spelled together, as the hand-written variant does;
- ``hand``: what an expert writes for the same module: every rare word of
  every sentence gathered into one padded ``(R, C)`` letter batch and spelled
  by one masked character BiLSTM, its vectors scattered into the padded
  ``(B, T, embed)`` word embeddings, then the padded word BiLSTM of
  ``bench/tasks/bilstm.py``.  Which words are rare and where they go is
  index bookkeeping done once when the batch is built, as the padding is.

Data: sentence lengths as in ``bilstm`` (``bench.data``: WikiNER's at the
paper size); 1000 frequent words with fixed spellings (3..12 letters, mean
5); each word is rare with probability ``RARE`` (the paper does not give the
share: DyNet's benchmark spells the words seen fewer than 5 times in
training), and a rare word has a fresh spelling of 3..16 letters (mean 8).
Tags are random (the cost of a step does not depend on them).

Sizes: ``paper`` is Appendix C's: 1 layer, word embeddings and word LSTMs
of 256 each way, character embeddings 64, character LSTMs 128 each way;
``small`` fits a laptop CPU (32/64 word, 16/32 char, as the example).
"""
import torch
import torch.nn.functional as TF

from bench.data import lengths, sentence_lengths
from bench.harness import Variant, fresh
from bench.tasks.bilstm import _direction
from examples.char_tagger import BLANK, CharTagger, make_batch
from matchbox import example_sum

NAME = "char_tagger"
TRAINS = True
FREQUENT, TAGS, RARE = 1000, 20, 0.1
SIZES = {"small": dict(embed=32, char_embed=16, char_hidden=32, hidden=64, layers=1),
         "paper": dict(embed=256, char_embed=64, char_hidden=128, hidden=256, layers=1)}


def _spellings(count, mean, spread, low, high, g):
    ns = lengths(count, mean=mean, spread=spread, low=low, high=high,
                 seed=int(torch.randint(0, 2**31 - 1, (), generator=g)))
    return [torch.randint(1, 27, (n,), generator=g).tolist() for n in ns]


def make_sentences(batch_size, seed=0, rare=RARE, size="small"):
    """``batch_size`` sentences in the example's format: word ids (1, n)
    (``FREQUENT`` marks a rare word), letters (1, n, c) blank-padded to the
    sentence's longest word, tags (1, n); ``bench.data``'s lengths for ``size``."""
    g = torch.Generator().manual_seed(seed)
    frequent = _spellings(FREQUENT, 5, 2, 3, 12, g)
    out = []
    for n in sentence_lengths(batch_size, size, seed):
        is_rare = (torch.rand(n, generator=g) < rare).tolist()
        rares = iter(_spellings(sum(is_rare) or 1, 8, 3, 3, 16, g))
        ids = [FREQUENT if r else int(torch.randint(0, FREQUENT, (), generator=g)) for r in is_rare]
        spell = [next(rares) if r else frequent[w] for w, r in zip(ids, is_rare)]
        width = max(map(len, spell))
        letters = torch.tensor([s + [BLANK] * (width - len(s)) for s in spell])
        out.append((torch.tensor(ids)[None], letters[None],
                    torch.randint(0, TAGS, (n,), generator=g)[None]))
    return out


class Padded:
    """The batch as an expert pads it: words / tags / real (B, T); the rare
    words' letters (R, C) with real (R, C), and their flat positions (R,)
    in the (B * T) word grid."""

    def __init__(self, sentences, device):
        B, T = len(sentences), max(w.size(1) for w, _, _ in sentences)
        self.words = torch.zeros(B, T, dtype=torch.long)
        self.tags = torch.zeros(B, T, dtype=torch.long)
        self.real = torch.zeros(B, T, dtype=torch.bool)
        rare_letters, where = [], []
        for b, (w, letters, t) in enumerate(sentences):
            n = w.size(1)
            self.words[b, :n], self.tags[b, :n], self.real[b, :n] = w[0], t[0], True
            for i in range(n):
                if int(w[0, i]) >= FREQUENT:
                    row = letters[0, i]
                    rare_letters.append(row[row != BLANK])
                    where.append(b * T + i)
        C = max((len(r) for r in rare_letters), default=1)
        self.letters = torch.zeros(len(rare_letters), C, dtype=torch.long)
        for r, row in enumerate(rare_letters):
            self.letters[r, :len(row)] = row
        self.letters_real = self.letters != BLANK
        self.where = torch.tensor(where, dtype=torch.long)
        for name in ("words", "tags", "real", "letters", "letters_real", "where"):
            setattr(self, name, getattr(self, name).to(device))


def hand_loss(model, p):
    """The summed per-word loss of the batch ``p`` (a :class:`Padded`)."""
    B, T = p.words.shape
    emb = model.embed(p.words.clamp(max=model.frequent - 1))             # (B, T, E)
    if p.where.numel():
        xs = model.char_embed(p.letters)                                 # (R, C, ce)
        h = _direction(model.char_fwd, xs, p.letters_real, False)[:, -1]  # state after the last letter
        hb = _direction(model.char_bwd, xs, p.letters_real, True)[:, 0]
        spelled = torch.tanh(model.char_out(torch.cat([h, hb], 1)))       # (R, E)
        emb = emb.reshape(B * T, -1).index_copy(0, p.where, spelled).view(B, T, -1)
    xs = emb
    for fwd, bwd in zip(model.bilstm.fwd, model.bilstm.bwd):
        xs = torch.cat([_direction(fwd, xs, p.real, False), _direction(bwd, xs, p.real, True)], 2)
    loss = TF.cross_entropy(model.mlp(xs).transpose(1, 2), p.tags, reduction="none")
    return loss.masked_fill(~p.real, 0).sum()


def setup(batch_size, size="small", seed=0, rare=RARE):
    """The model (seeded initial weights) and ``make_sentences``."""
    torch.manual_seed(seed)
    model = CharTagger(FREQUENT, TAGS, **SIZES[size])
    return model, make_sentences(batch_size, seed, rare, size)


def build_dynet(batch_size=64, size="small", seed=0, rare=RARE):
    """DyNet's autobatching off and on (``bench/dynet_tasks``), same
    sentences and initial weights."""
    from bench.dynet_tasks import taggers, variants
    model, sentences = setup(batch_size, size, seed, rare)
    data = [(w[0].tolist(), [[c for c in row if c != BLANK] for row in letters[0].tolist()],
             t[0].tolist()) for w, letters, t in sentences]
    return variants(lambda pc: taggers.CharTagger(pc, model), data)


def build(batch_size=64, device="cpu", size="small", seed=0, rare=RARE):
    model, sentences = setup(batch_size, size, seed, rare)
    model = model.to(device)
    sentences = [tuple(x.to(device) for x in s) for s in sentences]

    per = fresh(model)
    def per_example():
        return sum(per.loss(w, c, t, reduction="sum") for w, c, t in sentences)

    mb = fresh(model)
    words, letters, tags = make_batch(sentences, device)
    def matchbox():
        return example_sum(mb.loss(words, letters, tags, reduction="sum"))

    hand = fresh(model)
    padded = Padded(sentences, device)
    def hand_written():
        return hand_loss(hand, padded)

    return {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
            "matchbox": Variant(matchbox, mb)}
