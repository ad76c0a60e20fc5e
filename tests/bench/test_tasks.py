"""The benchmark tasks compute the same numbers in every variant (the check
the runner does before timing), the check catches a variant that does not,
and the runner writes its table."""
import json

import pytest
import torch

from bench import harness, run

TASKS = ["bilstm", "n_expansions"]


def _built(mod, **kw):
    """The task's variants but the compiled ones (inductor takes minutes;
    tests/transform/test_compile.py compiles the tagger's loss with aot_eager)."""
    return {k: v for k, v in mod.build(size="small", **kw).items() if "compiled" not in k}


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("task", TASKS)
def test_variants_agree(task, batch_size):
    mod = __import__(f"bench.tasks.{task}", fromlist=["build"])
    variants = _built(mod, batch_size=batch_size, seed=batch_size)
    harness.check(variants, mod.TRAINS)
    for v in variants.values():
        assert torch.isfinite(harness.step(v, mod.TRAINS)).all()


@pytest.mark.parametrize("task", TASKS)
def test_check_catches_a_wrong_variant(task):
    mod = __import__(f"bench.tasks.{task}", fromlist=["build"])
    variants = _built(mod, batch_size=3)
    with torch.no_grad():
        next(variants["hand"].model.parameters()).add_(0.1)
    with pytest.raises(AssertionError, match="hand"):
        harness.check(variants, mod.TRAINS)


def test_runner_writes_results(tmp_path):
    records = run.main(["--tasks", "n_expansions", "--batch-size", "2", "--repeats", "1",
                        "--out", str(tmp_path)])
    kinds = {r["variant"] for r in records}
    assert {"per_example", "hand", "matchbox"} <= kinds
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(records) and json.loads(lines[0])["task"] == "n_expansions"
    table = (tmp_path / "table.md").read_text()
    assert "| n_expansions | small | 2 |" in table and "matchbox / hand" in table
