"""sort, argsort, topk, kthvalue, median: batched vs per-example values and
gradients along static and dynamic dims; padding never sorts among real
entries; k past an example's end raises."""
import pytest
import torch

from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test

from _padding import poison

MODES = ("mixed", "one", "equal")
SPEC = ((4, (True, 6), (False, 3)), (1, (True, 6), (False, 3)))


@pytest.mark.parametrize("lengths", MODES)
@pytest.mark.parametrize("spec", SPEC)
@pytest.mark.parametrize("dim", [1, 2, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_values_and_indices(spec, dim, descending, lengths):
    mb_test(lambda x: torch.sort(x, dim, descending=descending).values, spec,
            lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: x.sort(dim=dim, descending=descending)[1], spec,
            lengths=lengths, dtype=torch.float64, grad=False)
    mb_test(lambda x: x.argsort(dim, descending=descending), spec,
            lengths=lengths, dtype=torch.float64, grad=False)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_with_poisoned_padding_inf_and_nan(descending):
    """Real +-inf and NaN entries keep their per-example places; padding of
    any value (here NaN / inf) never moves among them."""
    rows = [torch.tensor([[3.0, float("inf"), -1.0, float("nan")]]),
            torch.tensor([[float("-inf"), 2.0]]), torch.tensor([[5.0]])]
    for fill in (float("nan"), float("inf"), float("-inf"), 0.0):
        x = poison(MaskedBatch.fromlist(rows, dims=(True,)), fill)
        out = x.sort(1, descending=descending)
        for row, v, i in zip(rows, out.values.examples(), out.indices.examples()):
            ref = torch.sort(row, dim=1, descending=descending, stable=True)
            torch.testing.assert_close(v, ref.values, equal_nan=True)
            assert torch.equal(i, ref.indices)


@pytest.mark.parametrize("lengths", MODES)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_along_dynamic_and_static_dims(largest, lengths):
    k = 2 if lengths == "equal" else 1  # every example needs k entries along dim 1
    mb_test(lambda x: x.topk(k, 1, largest=largest).values, (3, (True, 5), (False, 3)),
            lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: torch.topk(x, 2, -1, largest=largest)[0], (3, (True, 5), (False, 3)),
            lengths=lengths, dtype=torch.float64)
    out = mb_test(lambda x: x.topk(1, 1, largest=largest)[1], (3, (True, 5)),
                  lengths=lengths, dtype=torch.float64, grad=False)
    assert out.dims == (False,)


def test_topk_k_past_an_example_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 4), torch.randn(1, 2)], dims=(True,))
    with pytest.raises(RuntimeError, match="k=3 is out of range.*only 2 entries"):
        x.topk(3, 1)
    with pytest.raises(RuntimeError, match="k=3"):
        torch.kthvalue(x, 3, 1)


def test_topk_checks_only_active_lanes():
    @batch
    def f(x, take):
        y = x.sum(1)
        if take:
            y = x.topk(3, 1).values.sum(1)
        return y

    x = MaskedBatch.fromlist([torch.randn(1, 4), torch.randn(1, 2)], dims=(True,))
    take = MaskedBatch.fromlist([torch.tensor([True]), torch.tensor([False])], dims=())
    out = f(x, take).examples()
    torch.testing.assert_close(out[0], x.examples()[0].topk(3, 1).values.sum(1))
    torch.testing.assert_close(out[1], x.examples()[1].sum(1))


@pytest.mark.parametrize("lengths", MODES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue_and_median(keepdim, lengths):
    spec = (4, (True, 7), (False, 2))
    mb_test(lambda x: x.kthvalue(1, 1, keepdim=keepdim).values, spec, lengths=lengths,
            dtype=torch.float64)
    mb_test(lambda x: torch.median(x, 1, keepdim=keepdim).values, spec, lengths=lengths,
            dtype=torch.float64)
    mb_test(lambda x: x.median(1, keepdim=keepdim)[1], spec, lengths=lengths,
            dtype=torch.float64, grad=False)
    mb_test(lambda x: x.median(-1, keepdim=keepdim)[0], spec, lengths=lengths,
            dtype=torch.float64)


def test_median_without_dim_raises_with_advice():
    x = MaskedBatch.fromlist([torch.randn(1, 4), torch.randn(1, 2)], dims=(True,))
    with pytest.raises(NotImplementedError, match="pass dim"):
        x.median()


def test_integer_sort_pads_last():
    rows = [torch.tensor([[3, 1, 2]]), torch.tensor([[7]])]
    x = MaskedBatch.fromlist(rows, dims=(True,))
    for desc in (False, True):
        got = x.sort(1, descending=desc).values.examples()
        assert [g.tolist() for g in got] == [r.sort(1, descending=desc).values.tolist()
                                             for r in rows]
