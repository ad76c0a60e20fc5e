"""The bench's synthetic data: at the paper size, sentence lengths like
WikiNER's and trees like the Sentiment Treebank's (the DyNet benchmark's
data); the small size as before; one-word sentences in every variant; and
the runner's choice of DyNet variants without DyNet."""
import random
import statistics

import pytest

from bench import data, harness, run
from bench.tasks import bilstm, char_tagger, parser, treelstm


def test_paper_sentences_have_wikiner_lengths():
    ns = data.sentence_lengths(4000, "paper", seed=1)
    assert 22 < statistics.mean(ns) < 24 and 12 < statistics.pstdev(ns) < 14.5
    assert min(ns) >= 1 and max(ns) <= 144 and max(ns) > 70      # a long right tail
    assert 19 <= statistics.median(ns) <= 22


def test_small_sentences_are_as_before():
    assert data.sentence_lengths(64, "small", 3) == data.lengths(64, mean=24, spread=11, low=2,
                                                                 high=80, seed=3)


@pytest.mark.parametrize("mod", [bilstm, char_tagger, parser])
def test_tasks_take_the_lengths_of_their_size(mod):
    sentences = mod.setup(16, "paper", seed=2)[1]
    extra = 1 if mod is parser else 0                               # the parser's ROOT
    assert [s[0].size(1) - extra for s in sentences] == data.sentence_lengths(16, "paper", 2)


def _depth(tree):
    return treelstm.heights(tree[0][0].tolist(), tree[1][0].tolist())[0]


def test_paper_trees_are_like_the_sentiment_treebank():
    trees = treelstm.make_trees(2000, seed=1, size="paper")
    leaves = [int((t[0] < 0).sum()) for t in trees]
    assert 18 < statistics.mean(leaves) < 20.5 and min(leaves) >= 2 and max(leaves) <= 52
    depths = [_depth(t) for t in trees]
    assert 9 < statistics.mean(depths) < 10.7                         # SST: 9.8
    uniform = [_depth(t) for t in treelstm.make_trees(2000, seed=1)]  # the small size's bracketing
    assert statistics.mean(uniform) < 8


def test_sst_split_keeps_both_sides():
    rng = random.Random(0)
    for n in range(2, 40):
        assert all(1 <= data.sst_split(rng, n) <= n - 1 for _ in range(50))


@pytest.mark.parametrize("mod", [bilstm, char_tagger, parser])
def test_one_word_sentences_in_every_variant(mod, monkeypatch):
    monkeypatch.setitem(data.SENTENCES, "small", dict(mean=2, spread=1, low=1, high=3))
    assert min(s[0].size(1) for s in mod.setup(6, seed=3)[1]) == 1 + (mod is parser)
    variants = {k: v for k, v in mod.build(batch_size=6, seed=3).items() if "compiled" not in k}
    harness.check(variants, mod.TRAINS)


def test_dynet_variants_only_where_they_can_run():
    assert not run.with_dynet(bilstm, None, "cuda")              # all kinds: only those that run
    assert not run.with_dynet(bilstm, ["matchbox"], "cpu")
    assert not run.with_dynet(run.importlib.import_module("bench.tasks.decode"), None, "cpu")
    with pytest.raises(SystemExit, match="dynet_auto needs DyNet"):
        run.with_dynet(bilstm, ["hand", "dynet_auto"], "cuda")
