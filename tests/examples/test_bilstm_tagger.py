"""The BiLSTM tagger example: batched == per-example (values and gradients),
the cell loops equal torch's own bidirectional nn.LSTM, and training learns."""
import math

import pytest
import torch
import torch.nn as nn

import matchbox
from examples import bilstm_tagger as ex
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test


def lengths_for(mode, B, longest=6):
    """Sentence lengths for a length mode: "mixed" has 1 and ``longest``."""
    if mode == "one":
        return [1] * B
    if mode == "equal":
        return [longest] * B
    return ([1, longest] + torch.randint(1, longest + 1, (B,)).tolist())[:B]


def sentences(mode, B, grammar):
    """MaskedBatches of word ids and tags with the lengths of ``mode``."""
    words = [torch.randint(0, grammar.vocab, (n,)) for n in lengths_for(mode, B)]
    return ex.make_batch([(w[None], grammar.tag(w)[None]) for w in words])


@pytest.mark.parametrize("mode,B", [("mixed", 5), ("one", 3), ("equal", 3), ("mixed", 1)])
def test_tagger_batched_equals_per_example(mode, B):
    grammar = ex.Grammar(vocab=20)
    model = ex.Tagger(grammar.vocab, grammar.tags, embed=5, hidden=4, layers=2).double()
    words, tags = sentences(mode, B, grammar)
    mb_test(model, words)
    mb_test(lambda w, t: model.loss(w, t, reduction="none"), words, tags,
            params=list(model.parameters()))


def test_mean_loss_is_the_mean_over_all_words():
    grammar = ex.Grammar(vocab=20)
    model = ex.Tagger(grammar.vocab, grammar.tags, embed=5, hidden=4).double()
    words, tags = sentences("mixed", 4, grammar)
    per_word = torch.cat([model.loss(w, t, reduction="none").reshape(-1)
                          for w, t in zip(words.examples(), tags.examples())])
    torch.testing.assert_close(matchbox.token_mean(model.loss(words, tags, reduction="none")),
                               per_word.mean())
    per_sentence = [model.loss(w, t) for w, t in zip(words.examples(), tags.examples())]
    torch.testing.assert_close(model.loss(words, tags).padded_data, torch.stack(per_sentence))


def test_cell_loops_equal_torch_bidirectional_lstm():
    """The forward/backward cell loops (incl. putting the backward outputs
    back in word order) compute what nn.LSTM(bidirectional=True) does."""
    bilstm = ex.BiLSTM(3, 4, layers=2).double()
    ref = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    with torch.no_grad():
        for k in range(2):
            for cell, sfx in ((bilstm.fwd[k], ""), (bilstm.bwd[k], "_reverse")):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(ref, f"{name}_l{k}{sfx}").copy_(getattr(cell, name))
    xs = torch.randn(1, 5, 3, dtype=torch.float64)
    torch.testing.assert_close(bilstm(xs), ref(xs)[0])
    batch = MaskedBatch.fromlist([xs, xs[:, :2]], dims=(True, False))
    out = bilstm(batch).examples()
    torch.testing.assert_close(out[1], ref(xs[:, :2])[0])


def test_tags_depend_on_both_neighbours():
    grammar = ex.Grammar()
    words = torch.randint(0, grammar.vocab, (30,))
    c = grammar.word_class[words].tolist()
    edge = grammar.boundary
    expected = [grammar.table[([edge] + c)[t], c[t], (c[1:] + [edge])[t]] for t in range(30)]
    assert grammar.tag(words).tolist() == [int(e) for e in expected]


def test_main_runs():
    m = ex.main(steps=6, batch_size=4, embed=8, hidden=8)
    assert all(math.isfinite(m[k]) for k in ("loss", "start_loss", "accuracy", "seconds"))
    assert m["steps"] == 6 and 0.0 <= m["accuracy"] <= 1.0


def test_training_fits_a_batch():
    grammar = ex.Grammar()
    batch = ex.batches_of(ex.make_data(8, grammar), 8)[0]
    model = ex.Tagger(grammar.vocab, grammar.tags, embed=16, hidden=16)
    losses, _ = ex.train(model, [batch] * 15, lr=3e-2)
    assert losses[-1] < 0.5 * losses[0]
