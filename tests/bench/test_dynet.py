"""The DyNet variants of the autobatching paper's four tasks
(bench/dynet_tasks), autobatching off and on: built from the task's torch
model, each computes the per-example loop's loss, one loss per sentence;
a training step moves its loss as torch's SGD step moves the per-example
loop's; and the runner times them beside the PyTorch variants.  Skipped
where DyNet is not installed (pip install -e ".[dynet]")."""
import json

import pytest

pytest.importorskip("dynet")

from bench import harness, run  # noqa: E402
from bench.dynet_tasks import dy  # noqa: E402
from bench.tasks import bilstm, char_tagger, parser, treelstm  # noqa: E402

TASKS = {m.NAME: m for m in (bilstm, char_tagger, treelstm, parser)}
KINDS = ["dynet_noauto", "dynet_auto"]


def _per_example(mod, **kw):
    return mod.build(size="small", **kw)["per_example"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", TASKS)
def test_loss_is_the_per_example_loss_one_per_sentence(name, kind):
    mod = TASKS[name]
    v = mod.build_dynet(batch_size=4, size="small", seed=4)[kind]
    harness.check({"per_example": _per_example(mod, batch_size=4, seed=4), kind: v}, mod.TRAINS)
    training = v.step.__self__
    dy.renew_cg(autobatching=training.autobatching)
    assert len(training.model.losses(training.data)) == 4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", TASKS)
def test_a_step_trains_like_torch_sgd(name, kind):
    # same learning rate, no clipping: the loss after one step moves as the
    # per-example loop's does (torch's LSTMCell has two biases that both
    # move, DyNet's one: a percent or so apart on the LSTM tasks)
    mod = TASKS[name]
    ref = _per_example(mod, batch_size=3, seed=2)
    torch_losses = [float(harness.step(ref, mod.TRAINS)) for _ in range(2)]
    v = mod.build_dynet(batch_size=3, size="small", seed=2)[kind]
    losses = [harness.step(v, mod.TRAINS) for _ in range(2)]
    assert losses[0] == pytest.approx(torch_losses[0], rel=1e-5)
    assert losses[1] - losses[0] == pytest.approx(torch_losses[1] - torch_losses[0], rel=0.05)
    assert losses[1] < losses[0]


def test_runner_times_dynet_beside_torch(tmp_path):
    kinds = ["per_example", "matchbox"] + KINDS
    records = run.main(["--tasks", "treelstm", "--batch-size", "2", "--repeats", "1",
                        "--kinds", *kinds, "--out", str(tmp_path)])
    assert [r["variant"] for r in records] == kinds
    for r in records:
        assert r["examples_per_second"] == pytest.approx(2 / r["seconds"])
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert {json.loads(line)["variant"] for line in lines} == set(kinds)
    table = (tmp_path / "table.md").read_text()
    assert "| treelstm | small | 2 |" in table and "matchbox / dynet_auto" in table
