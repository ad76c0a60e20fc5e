"""The tagger over word strings: frequent words are looked up, rare and
unknown ones spelled; batched (only the batch construction changed) it
equals its per-sentence loop, values and gradients, with sentence lengths
mixed (length 1 included) and rare and frequent words at the same position
in different sentences."""
import math
import random

import pytest
import torch

from examples import char_tagger_strings as ex
from tests.examples._loop import assert_batch_equals_loop

def setup(lengths, seed=0, rare=0.4):
    """A small model whose counts come from a corpus, and test sentences of ``lengths``."""
    language = ex.Language(frequent=8, seed=seed)
    corpus = ex.make_data(40, language, rare=0.0, seed=seed + 1)
    torch.manual_seed(seed)
    model = ex.CharTagger(*ex.vocabularies(corpus), wdim=4, cdim=3, hidden=3, mlp=4).double()
    rng = random.Random(seed + 2)
    return model, [language.sentence(n, rare, rng) for n in lengths]


def test_frequent_words_are_looked_up_and_rare_ones_spelled():
    model, _ = setup([1])
    frequent = next(w for w, n in model.counts.items() if n > 5)
    row = model.word_embeddings.weight[model.w2i[frequent]]
    torch.testing.assert_close(model.word_rep(frequent), row[None])
    for w in ("qqing", "x"):            # never seen: spelled, '<*>' on both sides
        chars = model.char_embeddings(torch.tensor([0] + [model.c2i[c] for c in w] + [0]))
        _, (h, _) = model.char_lstm(chars[:, None])
        torch.testing.assert_close(model.word_rep(w), torch.cat([h[0], h[1]], 1))
        assert model.counts[w] == 0 and w not in model.w2i


def test_tags_follow_the_classes():
    language = ex.Language(seed=1)
    words, tags = language.sentence(30, 0.5, random.Random(0))
    prev = -1
    for w, t in zip(words, tags):
        cls = next(k for k, s in enumerate(ex.SUFFIXES) if w.endswith(s))
        assert t == language.table[prev][cls]
        prev = cls


def test_one_sentence_loss_sums_its_words():
    model, data = setup([4])
    words, tags = data[0]
    scores = model(words)
    each = [torch.nn.functional.cross_entropy(scores[i:i + 1], torch.tensor([model.t2i[t]]))
            for i, t in enumerate(tags)]
    torch.testing.assert_close(model.loss(words, tags), sum(each))


@pytest.mark.parametrize("lengths", ([1, 4, 2, 6], [1, 1, 1], [3, 3, 3], [5]))
def test_batch_equals_per_sentence_loop(lengths):
    model, data = setup(lengths)
    if len(lengths) > 1:   # a position rare in one sentence and frequent in another
        rare = [[model.counts[w] <= 5 for w in words] for words, _ in data]
        assert any(len({r[i] for r in rare if i < len(r)}) == 2 for i in range(max(lengths)))
    assert_batch_equals_loop(model, model.loss, data, ex.make_batch(data))
    assert_batch_equals_loop(model, model, [d[:1] for d in data], ex.make_batch(data)[:1])


def test_a_batch_of_16_equals_the_loop():
    """Enough sentences and rare words for gathered branches to kick in."""
    model, data = setup([1 + k % 7 for k in range(16)], seed=3)
    assert_batch_equals_loop(model, model.loss, data, ex.make_batch(data))


def test_main_runs_and_learns():
    m = ex.main(steps=16, batch_size=8, lr=3e-2)
    assert all(math.isfinite(m[k]) for k in ("loss", "start_loss", "accuracy", "rare_accuracy"))
    assert m["loss"] < m["start_loss"]
