"""The n_expansions research snippet: a per-example `while unconnected > 1`
loop under @batch, around static config `if`s; batched values and gradients
equal per-example runs, each example leaves the loop after its own number
of steps, and `main` trains."""
import math

import pytest
import torch

from examples.n_expansions import Config, NExpansions, main, make_data, batch_examples
from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test
from tests.test_seed_multihead import expected_expansions  # the talk's count, in plain Python

CONFIGS = [Config(features=4, hidden=6), Config(features=4, hidden=6, attend=False, use_gate=False)]


def _model(config):
    model = NExpansions(config).double()
    with torch.no_grad():  # a scorer that says "double merge" for some examples, not all
        model.scorer.weight.normal_(0, 2.0)
        model.scorer.bias.zero_()
    return model


@pytest.mark.parametrize("config", CONFIGS, ids=["attend+gate", "mean+plain"])
@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("B", [1, 5])
def test_batched_equals_per_example(config, lengths, B):
    model = _model(config)
    pred, n = mb_test(model, (B, (True, 7), (False, 4)), lengths=lengths, dtype=torch.float64)
    counts = n.padded_data.tolist() if isinstance(n, MaskedBatch) else [n] * B
    if lengths == "one":
        assert counts == [0] * B  # one node: already connected, the loop never runs
    if lengths == "mixed" and B > 1:
        assert counts[0] == 0 and counts[-1] > 0  # trip counts differ per example


def test_trip_count_follows_the_scorer():
    """Per example the loop runs k-1 steps when every step connects one node,
    fewer when the scorer asks for double merges."""
    model = _model(CONFIGS[1])
    nodes = [torch.randn(1, k, 4, dtype=torch.float64) for k in (1, 2, 5, 9)]
    batch = MaskedBatch.fromlist(nodes, (True, False))
    with torch.no_grad():
        model.scorer.bias.fill_(-100.0)  # p = 0: one node per step
        assert model(batch)[1].padded_data.tolist() == [0, 1, 4, 8]
        model.scorer.bias.fill_(100.0)   # p = 1: two nodes per step while two are left
        assert model(batch)[1].padded_data.tolist() == [0, 1, 2, 4]


@pytest.mark.parametrize("mode", ["sparse", "dense", "medium"])
@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_talks_calc_n_expansions(mode, lengths):
    """The talk's snippet, verbatim, on each example's node count: the batch
    gives each example's own count (its loop runs its own number of steps)."""
    model = NExpansions(Config(features=4, hidden=6, n_expansions_mode=mode, n_relations=3))
    nodes = mb_rand(6, (True, 12), (False, 4), lengths=lengths)
    counts = mb_test(model.calc_n_expansions, nodes.size_as_tensor(1))
    k = nodes.size_as_tensor(1).padded_data.tolist()
    assert counts.padded_data.tolist() == [expected_expansions(mode, 3, n) for n in k]


def test_batch_examples_layout():
    data = make_data(count=3, features=4, max_nodes=5, seed=1)
    nodes, target = batch_examples(data)
    assert nodes.dims == (True, False) and target.dims == (False,)
    assert all(torch.equal(a, b) for a, b in zip(nodes.examples(), [d[0] for d in data]))


def test_main_trains():
    metrics = main(steps=12, batch_size=8, lr=1e-2)
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["loss"] < metrics["start_loss"]
    assert 0 < metrics["mean_expansions"] < 12
    assert 1 <= metrics["heuristic_expansions"] < 12
