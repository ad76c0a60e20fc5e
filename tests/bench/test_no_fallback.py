"""No benchmark's hot path goes through the general fallback
(matchbox/ops/fallback.py, issue 30): every op each matchbox variant runs
(forward and backward, a training step) and every op ``python -m bench ops``
times has a rule of its own."""
import inspect

import pytest
import torch

from bench import harness, ops, run
from matchbox.ops.fallback import recording

SHORT = 10  # the transformer and decode tasks' length cap, as in their tests


def _build(task):
    mod = __import__(f"bench.tasks.{task}", fromlist=["build"])
    kw = {"batch_size": 3, "size": "small", "seed": 1}
    params = inspect.signature(mod.build).parameters
    if "max_len" in params:
        kw["max_len"] = SHORT
    if "compiled" in params:
        kw["compiled"] = False
    return mod, {k: v for k, v in mod.build(**kw).items() if k.startswith("matchbox")
                 and "compiled" not in k}


@pytest.mark.parametrize("task", run.TASKS)
def test_no_bench_task_runs_an_op_through_the_fallback(task):
    mod, variants = _build(task)
    assert variants, f"{task} has no matchbox variant"
    for name, v in variants.items():
        with recording() as log:
            out = harness.step(v, mod.TRAINS)
        assert out is not None
        assert not log, f"{task} / {name} runs ops through the general fallback: {log}"


def test_no_op_of_the_ops_benchmark_runs_through_the_fallback():
    with recording() as log:
        rows = ops.measure(B=3, n=4, d=8, number=1)
    assert rows and not log, log


def test_recording_sees_the_fallback():
    """The check above can fail: an op with no rule is recorded."""
    from matchbox import MaskedBatch
    x = MaskedBatch.fromlist([torch.randn(1, 4), torch.randn(1, 4)])
    with recording() as log:
        torch.special.erfcx(x)
    assert log == [("torch.special.erfcx", "vmap")]
