"""The bench variants whose model keeps its state in Python (issue 29): the
Tree-LSTM over ``Tree`` objects and the parser with list stack and buffer
compute the per-example loss and gradients of their tensor-state models, on
each example alone and batched, and the runner's table shows their ratios."""
import random

import pytest
import torch

from bench import harness, run
from bench.tasks import parser, treelstm

TASKS = {"treelstm": (treelstm, "objects"), "parser": (parser, "list")}


def variants(name, B, *kinds):
    mod, kind = TASKS[name]
    built = mod.build(batch_size=B, size="small", seed=B)
    assert {f"per_example_{kind}", f"matchbox_{kind}"} <= set(built)
    return {k.format(kind): built[k.format(kind)] for k in ("per_example",) + kinds}


@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("name", TASKS)
def test_per_example_loop_of_the_python_state_model_agrees(name, B):
    mod = TASKS[name][0]
    vs = variants(name, B, "per_example_{}")
    harness.check(vs, mod.TRAINS)
    assert torch.isfinite(harness.step(vs["per_example"], mod.TRAINS))


@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("name", TASKS)
def test_batched_python_state_model_agrees_and_trains(name, B):
    mod = TASKS[name][0]
    vs = variants(name, B, "per_example_{}", "matchbox_{}")
    harness.check(vs, mod.TRAINS)
    for kind, v in vs.items():
        before = [p.detach().clone() for p in v.model.parameters()]
        assert torch.isfinite(harness.step(v, mod.TRAINS)), kind
        assert any(not torch.equal(a, p) for a, p in zip(before, v.model.parameters())), kind


@pytest.mark.parametrize("name", TASKS)
def test_check_catches_a_wrong_python_state_model(name):
    mod = TASKS[name][0]
    vs = variants(name, 2, "per_example_{}")
    with torch.no_grad():
        vs["per_example_" + TASKS[name][1]].model.out.bias[0] += 1.0     # one class's score
    with pytest.raises(AssertionError, match="per_example_"):
        harness.check(vs, mod.TRAINS)


def test_objects_are_the_tensor_trees():
    for tree in treelstm.make_trees(5, seed=2):
        root = treelstm.as_objects(tree)
        left, right, word, label = tree
        nodes = root.nodes()           # preorder, as the tensors
        assert [n.idx for n in nodes] == list(range(left.size(1)))
        assert [n.label for n in nodes] == label[0].tolist()
        assert [n.num_children for n in nodes] == [0 if l < 0 else 2 for l in left[0].tolist()]
        assert [n.word for n in nodes if not n.children] == word[0][left[0] < 0].tolist()


def test_list_oracle_is_the_tensor_oracle():
    """On random parser states, the costs and validity counted over lists
    are the tensor oracle's, where the transition is valid."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        heads = parser.random_heads(rng, n) + [n]
        stack = rng.sample(range(n), rng.randint(0, n))
        bp = rng.randint(max(stack, default=-1) + 1, n)
        buffer = list(range(bp, n + 1))
        cost, valid = parser.list_oracle(heads, stack, buffer, "cpu")
        sp, position = len(stack), torch.arange(n + 1)[None]
        padded = torch.tensor([stack + [0] * (n + 1 - sp)])
        in_stack = torch.zeros(1, n + 1, dtype=torch.bool)
        in_stack[0, stack] = True
        t = lambda v: torch.tensor([v])
        want_cost, want_valid = parser.oracle(torch.tensor([heads]), in_stack, position, t(sp), t(bp), t(n),
                                              padded[:, sp - 1], padded[:, sp - 2])
        assert torch.equal(valid, want_valid)
        assert torch.equal(cost[valid], want_cost[valid])


def test_table_shows_the_python_state_ratios():
    records = [dict(task="treelstm", size="small", batch_size=4, variant=k, seconds=s)
               for k, s in (("per_example", 8.0), ("matchbox", 1.0), ("hand", 1.0),
                            ("per_example_objects", 6.0), ("matchbox_objects", 1.5))]
    head, _, row = run.table(records).splitlines()
    cells = dict(zip(head.split(" | "), row.split(" | ")))
    assert cells["py-state mb / matchbox"] == "1.50"
    assert cells["its per-example / py-state mb |"] == "4.00 |"
