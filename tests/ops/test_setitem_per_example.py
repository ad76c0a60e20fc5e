"""x[:, i] = v with one int i per example (the shift-reduce parser's
stack[:, sp] = bp): one scatter (ops/indexing.py ``_put_at``), and the
cases it leaves to the general ``put``."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.ops import indexing
from matchbox.test_utils import mb_rand, mb_test

MODES = ("mixed", "one", "equal")
B = 4


def _store(x, i, v):
    y = x * 1
    y[:, i] = v
    return y


def _index(x, seed=0):
    g = torch.Generator().manual_seed(seed)
    return MaskedBatch.fromlist([torch.randint(-n, n, (1,), generator=g)
                                 for n in x._lengths(1).tolist()], ())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", ["row", "one per example", "number", "row per example"])
def test_store_at_per_example_index(mode, value):
    x = mb_rand(B, (True, 5), (False, 3), lengths=mode, dtype=torch.float64,
                generator=torch.Generator().manual_seed(1))
    i = _index(x)
    v = {"row": (B, (False, 3)), "one per example": (B, ()), "number": None,
         "row per example": (B, (False, 1), (False, 3))}[value]
    if v is None:
        mb_test(lambda x, i: _store(x, i, 2.5), x, i, dtype=torch.float64)
        v = 2.5
    else:
        v = mb_rand(*v, dtype=torch.float64)
        mb_test(_store, x, i, v, dtype=torch.float64)
    assert indexing._put_at(x, (slice(None), i), v) is not None  # one scatter


def test_store_of_ints_and_bools():
    words = MaskedBatch.fromlist([torch.zeros(1, n, dtype=torch.long) for n in (3, 1, 4)], (True,))
    sp = MaskedBatch(torch.tensor([2, 0, -1]), None, ())
    stack = words * 1
    stack[:, sp] = sp + 7
    assert [e.tolist() for e in stack.examples()] == [[[0, 0, 9]], [[7]], [[0, 0, 0, 6]]]
    seen = words == 1
    seen[:, sp] = True
    assert [e.tolist() for e in seen.examples()] == [[[False, False, True]], [[True]],
                                                     [[False, False, False, True]]]


def test_store_in_active_lanes_only():
    x = MaskedBatch.fromlist([torch.zeros(1, n, 2) for n in (1, 3, 2)], (True, False))
    i = MaskedBatch(torch.tensor([0, 9, -1]), None, ())  # lane 1 is dormant: never checked
    v = MaskedBatch(torch.ones(3, 2, requires_grad=True), None, (False,))
    with lanes(torch.tensor([True, False, True])):
        x[:, i] = v * 2
    assert [e.tolist() for e in x.examples()] == [[[[2, 2]]], [[[0, 0]] * 3], [[[0, 0], [2, 2]]]]
    x.padded_data.sum().backward()
    assert v.padded_data.grad.tolist() == [[2, 2], [0, 0], [2, 2]]
    with pytest.raises(IndexError, match="example 1, which has size 3"):
        x[:, i] = v


def test_store_under_batch_control_flow():
    """A per-example loop pushing onto a per-example stack, as the parser does."""
    @matchbox.batch
    def f(x, k):
        out = x * 0
        sp = (k * 0).long()
        for j in range(x.size(1)):
            if x[:, j].sum(-1) > 0:
                out[:, sp] = x[:, j] * (j + 1)
                sp = sp + 1
        return out
    mb_test(f, (B, (True, 6), (False, 2)), (B, ()), dtype=torch.float64)


@pytest.mark.parametrize("case", ["dynamic value", "several per example", "dynamic rows",
                                  "plain tensor", "empty example"])
def test_general_store_where_one_scatter_does_not_apply(case):
    """These go through ``put``, and still store per example."""
    g = torch.Generator().manual_seed(2)
    x = mb_rand(B, (True, 5), (False, 3), dtype=torch.float64, generator=g)
    i, v = _index(x), mb_rand(B, (False, 1), (False, 3), dtype=torch.float64, generator=g)
    if case == "dynamic value":
        v = mb_rand(B, (False, 1), (True, 3), lengths="equal", dtype=torch.float64, generator=g)
    elif case == "several per example":
        i = MaskedBatch.fromlist([torch.zeros(1, 2, dtype=torch.long)] * B, (False,))
        v = mb_rand(B, (False, 2), (False, 3), dtype=torch.float64, generator=g)
    elif case == "dynamic rows":
        x = mb_rand(B, (True, 5), (True, 3), dtype=torch.float64, generator=g)
        i = _index(x)
        assert indexing._put_at(x, (slice(None), i), x.narrow(1, 0, 1)) is None
        mb_test(lambda x, i: _store(x, i, x.narrow(1, 0, 1) * 2), x, i, dtype=torch.float64)
        return
    elif case == "plain tensor":
        v = torch.randn(1, 1, 3, dtype=torch.float64, generator=g)
    elif case == "empty example":
        x = MaskedBatch.fromlist([torch.randn(1, n, 3, dtype=torch.float64) for n in (2, 0)],
                                 (True, False))
        i = MaskedBatch(torch.tensor([1, 0]), None, ())
        v = MaskedBatch(torch.ones(2, 3, dtype=torch.float64), None, (False,))
        with lanes(torch.tensor([True, False])):
            assert indexing._put_at(x, (slice(None), i), v) is None
            x[:, i] = v
        assert x.examples()[0][0, 1].tolist() == [1, 1, 1]
        return
    assert indexing._put_at(x, (slice(None), i), v) is None
    mb_test(_store, x, i, v, dtype=torch.float64)
