"""matchbox.data: collate gives the batches MaskedBatch.fromlist gives, for
Tensor, tuple, dict and nested examples, through a DataLoader too; the
bucketing sampler covers every index once, in batches of similar lengths,
deterministically with a seed."""
from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader

import matchbox
from matchbox import MaskedBatch
from matchbox.data import BucketBatchSampler, collate


def same(a, b):
    """Two MaskedBatches hold the same examples with the same dims."""
    assert isinstance(a, MaskedBatch) and isinstance(b, MaskedBatch)
    assert a.dims == b.dims
    ea, eb = a.examples(), b.examples()
    assert len(ea) == len(eb) and all(torch.equal(x, y) for x, y in zip(ea, eb))


def sentences(lengths, d=3):
    return [torch.randn(1, n, d) for n in lengths]


@pytest.mark.parametrize("lengths", [[3, 1, 5], [4, 4], [2]])
def test_tensor_examples_equal_fromlist(lengths):
    xs = sentences(lengths)
    same(collate(xs), MaskedBatch.fromlist(xs))
    same(collate(dims=(True, False))(xs), MaskedBatch.fromlist(xs, (True, False)))


def test_equal_sizes_infer_static_unless_dims_given():
    xs = sentences([4, 4])
    assert collate(xs).dims == (False, False)
    assert collate(xs, dims=(True, False)).dims == (True, False)


def test_tuple_examples_with_per_field_dims():
    xs = sentences([3, 1, 5])
    ys = [torch.randint(0, 5, (1, x.size(1))) for x in xs]
    labels = [torch.tensor([i]) for i in range(3)]
    out = collate(list(zip(xs, ys, labels)), dims=((True, False), None, ()))
    assert isinstance(out, tuple) and len(out) == 3
    same(out[0], MaskedBatch.fromlist(xs, (True, False)))
    same(out[1], MaskedBatch.fromlist(ys, (True,)))
    same(out[2], MaskedBatch.fromlist(labels, ()))
    lists = collate([[x, y] for x, y in zip(xs, ys)])
    assert isinstance(lists, list) and len(lists) == 2


def test_dict_and_nested_examples():
    xs = sentences([2, 6])
    examples = [{"x": x, "meta": {"len": x.size(1), "name": f"s{i}"}} for i, x in enumerate(xs)]
    out = collate(examples, dims={"x": (True, False)})
    assert set(out) == {"x", "meta"}
    same(out["x"], MaskedBatch.fromlist(xs, (True, False)))
    assert torch.equal(out["meta"]["len"], torch.tensor([2, 6]))   # as default_collate
    assert out["meta"]["name"] == ["s0", "s1"]


def test_namedtuple_examples_keep_their_type():
    Pair = namedtuple("Pair", "x y")
    xs = sentences([2, 3])
    out = collate([Pair(x, 7) for x in xs])
    assert isinstance(out, Pair) and torch.equal(out.y, torch.tensor([7, 7]))
    same(out.x, MaskedBatch.fromlist(xs))


def test_items_without_the_leading_one():
    xs = [torch.randint(0, 9, (n,)) for n in (3, 1, 5)]
    out = collate(xs, leading_one=False, dims=(True,))
    same(out, MaskedBatch.fromlist([x.unsqueeze(0) for x in xs], (True,)))
    labels = collate([torch.tensor(3), torch.tensor(4)], leading_one=False)
    assert labels.dims == () and labels.padded_data.tolist() == [3, 4]


def test_errors_name_the_field():
    xs = [torch.randn(3, 2), torch.randn(4, 2)]
    with pytest.raises(ValueError, match=r"example 0 has shape \(3, 2\).*leading_one=False"):
        collate(xs)
    with pytest.raises(ValueError, match=r"cannot collate field \['x'\].*declared static"):
        collate([{"x": x.unsqueeze(0)} for x in xs], dims={"x": (False, False)})
    with pytest.raises(ValueError, match=r"dims names fields \['y'\]"):
        collate([{"x": xs[0][None]}], dims={"y": (True,)})
    with pytest.raises(ValueError, match=r"one per field"):
        collate([(xs[0][None], xs[0][None])], dims=((True, False),))
    with pytest.raises(ValueError, match=r"every example needs the same structure"):
        collate([(xs[0][None],), xs[1][None]])
    with pytest.raises(ValueError, match=r"dims given for field \[1\].*ints"):
        collate([(xs[0][None], 1)], dims=(None, (True,)))


def test_dataloader_with_bucketing():
    lengths = [1, 7, 3, 3, 5, 2, 6, 4, 2, 7, 1]
    data = [(torch.randn(1, n, 2), torch.tensor([i])) for i, n in enumerate(lengths)]
    sampler = BucketBatchSampler(lengths, batch_size=4, seed=0)
    loader = DataLoader(data, batch_sampler=sampler,
                        collate_fn=matchbox.data.collate(dims=((True, False), ())))
    seen = []
    for x, idx in loader:
        ids = idx.padded_data.reshape(-1).tolist()
        seen += ids
        same(x, MaskedBatch.fromlist([data[i][0] for i in ids], (True, False)))
    assert sorted(seen) == list(range(len(lengths)))


@pytest.mark.parametrize("n,batch_size,drop_last", [(103, 8, False), (103, 8, True), (16, 4, False),
                                                     (3, 5, False), (3, 5, True), (1, 1, False)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_covers_every_index_once(n, batch_size, drop_last, shuffle):
    lengths = torch.randint(1, 40, (n,))
    sampler = BucketBatchSampler(lengths, batch_size, shuffle=shuffle, drop_last=drop_last, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    flat = [i for b in batches for i in b]
    assert len(flat) == len(set(flat))
    if drop_last:
        assert all(len(b) == batch_size for b in batches)
        assert len(flat) == n - n % batch_size
    else:
        assert sorted(flat) == list(range(n))
        assert all(len(b) == batch_size for b in batches if len(b) != n % batch_size)
        assert sum(len(b) < batch_size for b in batches) == (1 if n % batch_size else 0)


def test_sampler_groups_similar_lengths():
    lengths = torch.randint(1, 200, (400,))
    spread = lambda batches: sum(int(lengths[b].max() - lengths[b].min()) for b in batches) / len(batches)
    bucketed = spread(list(BucketBatchSampler(lengths, 16, seed=0, pool_size=400)))
    shuffled = spread(list(torch.randperm(400).split(16)))
    assert bucketed < 10 < 100 < shuffled
    pooled = spread(list(BucketBatchSampler(lengths, 16, seed=0, pool_size=80)))
    assert pooled < shuffled / 3
    ordered = list(BucketBatchSampler(lengths, 16, shuffle=False))
    firsts = [int(lengths[b].min()) for b in ordered]
    assert firsts == sorted(firsts)


def test_sampler_is_deterministic_with_a_seed():
    lengths = torch.randint(1, 30, (50,))
    a = BucketBatchSampler(lengths, 4, seed=7)
    assert list(a) == list(BucketBatchSampler(lengths, 4, seed=7))
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first                           # a new epoch, a new order
    assert list(BucketBatchSampler(lengths, 4, seed=8)) != first
    torch.manual_seed(0)
    unseeded = list(BucketBatchSampler(lengths, 4))
    torch.manual_seed(0)
    assert list(BucketBatchSampler(lengths, 4)) == unseeded   # follows torch's global seed


def test_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        BucketBatchSampler([1, 2], 0)
    with pytest.raises(ValueError, match="lengths must be integers"):
        BucketBatchSampler([1.5, 2.0], 2)
