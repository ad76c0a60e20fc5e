"""F.embedding_bag / nn.EmbeddingBag: one bag per example (its real
indices, static or dynamic), batched vs per-example, values and gradients;
garbage indices in the padding must not matter."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test
from _padding import poison

LENGTHS = {"mixed": [1, 4, 2, 3], "one": [1, 1, 1], "equal": [3, 3, 3], "static": None}


def bags(lengths, seed=0):
    """Index batches (1, n) per example, with out-of-range garbage in the padding."""
    g = torch.Generator().manual_seed(seed)
    if lengths is None:
        return MaskedBatch.fromlist([torch.randint(0, 10, (1, 4), generator=g) for _ in range(3)], (False,))
    b = MaskedBatch.fromlist([torch.randint(0, 10, (1, n), generator=g) for n in lengths], (True,))
    return poison(b, 10 ** 6) if b.padded else b


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_module(lengths, mode, padding_idx):
    bag = nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx).double()
    idx = bags(LENGTHS[lengths])
    out = mb_test(bag, idx)
    assert out.dims == (False,)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_embedding_bag_per_sample_weights(lengths):
    bag = nn.EmbeddingBag(10, 3, mode="sum").double()
    idx = bags(LENGTHS[lengths], seed=1)
    w = MaskedBatch.fromlist([torch.randn(e.shape, dtype=torch.float64) for e in idx.examples()],
                             idx.dims)
    mb_test(lambda i, w: bag(i, per_sample_weights=poison(w)), idx, w, params=list(bag.parameters()))


def test_embedding_bag_functional_shared_weight():
    mb_test(lambda i, w: F.embedding_bag(i, w, mode="mean"), bags([2, 5, 1]), (10, 4),
            dtype=torch.float64)


@pytest.mark.parametrize("call, exc, match", [
    (lambda i: F.embedding_bag(i, torch.randn(10, 3), torch.tensor([0])), ValueError, "no offsets"),
    (lambda i: F.embedding_bag(i.unsqueeze(1), torch.randn(10, 3)), ValueError, "2-D examples"),
    (lambda i: F.embedding_bag(i, torch.randn(10, 3), per_sample_weights=i.float()),
     NotImplementedError, "mode='sum'"),
])
def test_errors(call, exc, match):
    idx = mb_rand(3, (True, 4), lengths="mixed", dtype=torch.long)
    with pytest.raises(exc, match=match):
        call(idx)
