"""Rules built from other rules: F.normalize, F.cosine_similarity,
F.softmin, F.one_hot — batched vs per-example, padding poisoned."""
import pytest
import torch
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

from _padding import poison

MODES = ("mixed", "one", "equal")


@pytest.mark.parametrize("lengths", MODES)
@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("p", [2.0, 1.0])
def test_normalize(p, dim, lengths):
    mb_test(lambda x: F.normalize(poison(x, 7.0), p=p, dim=dim), (3, (True, 5), (False, 3)),
            lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
@pytest.mark.parametrize("dim", [1, -1])
def test_cosine_similarity(dim, lengths):
    mb_test(lambda a, b: F.cosine_similarity(poison(a, 7.0), poison(b, -3.0), dim=dim),
            (3, (True, 5), (False, 4)), (3, (True, 5), (False, 4)),
            lengths=lengths, dtype=torch.float64)
    mb_test(lambda a, w: torch.cosine_similarity(poison(a, 7.0), w, dim=-1),
            (3, (True, 5), (False, 4)), (1, 1, 4), lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_softmin(lengths):
    mb_test(lambda x: F.softmin(poison(x, float("inf")), dim=1), (3, (True, 5), (False, 2)),
            lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_one_hot(lengths):
    rows = [torch.randint(0, 4, (1, n)) for n in ((1, 5, 3) if lengths == "mixed"
                                                   else (1, 1, 1) if lengths == "one"
                                                   else (3, 3, 3))]
    x = poison(MaskedBatch.fromlist(rows, dims=(True,)), 99)
    out = F.one_hot(x, 4)
    assert out.dims == (True, False)
    for got, row in zip(out.examples(), rows):
        assert torch.equal(got, F.one_hot(row, 4))


def test_one_hot_needs_num_classes():
    x = MaskedBatch.fromlist([torch.tensor([[1, 2]]), torch.tensor([[0]])], dims=(True,))
    with pytest.raises(ValueError, match="num_classes"):
        F.one_hot(x)
