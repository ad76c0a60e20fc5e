"""The char-model tagger example: batched == per-example (values and
gradients) with rare and frequent words at the same position in different
sentences, blanks really skipped by the character LSTMs, and a quick run."""
import math

import pytest
import torch

from examples import char_tagger as ex
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test


def small_model(lexicon):
    return ex.CharTagger(lexicon.frequent, lexicon.tags, embed=4, char_embed=3, char_hidden=3,
                         hidden=3).double()


@pytest.mark.parametrize("mode,B", [("mixed", 4), ("one", 3), ("equal", 3), ("mixed", 1)])
def test_tagger_batched_equals_per_example(mode, B):
    lexicon = ex.Lexicon(frequent=8)
    g = torch.Generator().manual_seed(1)
    n = {"mixed": [1, 4, 2, 3], "one": [1] * B, "equal": [3] * B}[mode][:B]
    data = [lexicon.sentence(k, 0.5, g) for k in n]
    words, letters, tags = ex.make_batch(data)
    if B > 1:  # some position is rare in one sentence, frequent in another
        rare = (words.padded_data >= lexicon.frequent) & words.mask
        freq = (words.padded_data < lexicon.frequent) & words.mask
        assert bool((rare.any(0) & freq.any(0)).any())
    model = small_model(lexicon)
    mb_test(model, words, letters)
    mb_test(lambda w, l, t: model.loss(w, l, t, reduction="none"), words, letters, tags,
            params=list(model.parameters()))


@pytest.mark.parametrize("mode", ["mixed", "equal"])
def test_spell_batched_equals_per_example(mode):
    model = small_model(ex.Lexicon(frequent=8))
    widths = [1, 5, 3] if mode == "mixed" else [4, 4, 4]
    letters = MaskedBatch.fromlist([torch.randint(1, 27, (1, c)) for c in widths], dims=(True,))
    mb_test(model.spell, letters, params=list(model.parameters()))


def test_spell_skips_blanks():
    model = small_model(ex.Lexicon(frequent=8))
    word = torch.tensor([[5, 1, 20]])
    padded = torch.tensor([[5, 1, 20, ex.BLANK, ex.BLANK]])
    torch.testing.assert_close(model.spell(padded), model.spell(word))
    assert not torch.allclose(model.spell(word), model.spell(word[:, :2]))


def test_rare_words_are_spelled_and_frequent_words_looked_up():
    lexicon = ex.Lexicon(frequent=8)
    model = small_model(lexicon)
    words = torch.tensor([[3, lexicon.frequent]])
    letters = torch.tensor([[[4, 2, ex.BLANK], [7, 7, 9]]])
    e = model.embed_words(words, letters)
    torch.testing.assert_close(e[:, 0], model.embed(words[:, 0]))
    torch.testing.assert_close(e[:, 1], model.spell(letters[:, 1]))


def test_rare_words_end_with_their_class_suffix():
    lexicon = ex.Lexicon()
    g = torch.Generator().manual_seed(0)
    words, letters, _ = lexicon.sentence(20, 1.0, g)
    assert bool((words == lexicon.frequent).all())
    for row in letters[0].tolist():
        spelled = [x for x in row if x != ex.BLANK]
        assert spelled[-2:] in lexicon.suffixes


def test_main_runs_and_learns():
    m = ex.main(steps=12, batch_size=4, embed=8, hidden=8, lr=5e-2)
    for k in ("loss", "start_loss", "accuracy", "rare_accuracy", "seconds"):
        assert math.isfinite(m[k])
    assert m["steps"] == 12
    assert m["loss"] < m["start_loss"]


def test_rare_words_of_the_whole_batch_are_spelled_in_one_call(monkeypatch):
    """The loop over words runs once over every (sentence, word) pair, so
    the rare branch is one gathered call for all rare words of the batch
    (docs/batch.md); batched still equals per example."""
    from matchbox.transform.runtime import branch_compaction
    gathered = []
    init = branch_compaction.BranchCompaction.__init__

    def counting(self, *args):
        gathered.append(int(args[0].sum()))
        init(self, *args)
    monkeypatch.setattr(branch_compaction.BranchCompaction, "__init__", counting)
    lexicon = ex.Lexicon(frequent=8)
    g = torch.Generator().manual_seed(2)
    data = [lexicon.sentence(k, 0.15, g) for k in [3, 7, 5, 9, 4, 6, 8, 2, 7, 5]]
    words, letters, _ = ex.make_batch(data)
    rare = int(((words.padded_data >= lexicon.frequent) & words.mask).sum())
    model = small_model(lexicon)
    mb_test(model, words, letters)
    assert gathered and gathered[0] == rare
