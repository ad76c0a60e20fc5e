"""Indexing: x[...] (per-example negative indices and slices), per-example
index batches, gather, index_select, narrow, select and x[...] = v."""
import operator

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_rand, mb_test

MODES = ("mixed", "one", "equal")
B = 4
DYN = (B, (True, 5), (False, 3))             # (1, n, 3)
STAT = (B, (False, 4), (False, 3))           # (1, 4, 3)
DYN2 = (B, (True, 4), (True, 3), (False, 2))  # (1, n, m, 2)
LAST = (B, (False, 2), (True, 5))            # (1, 2, n)

GETITEM = {
    "int_static": (lambda x: x[:, 2], STAT),
    "int_static_neg": (lambda x: x[:, -1, 1], STAT),
    "int_dyn_first": (lambda x: x[:, 0], DYN),
    "int_dyn_last": (lambda x: x[:, -1], DYN),
    "int_dyn_last_inner": (lambda x: x[:, :, -1], DYN2),
    "int_dyn_last_lastdim": (lambda x: x[..., -1], LAST),
    "int_feature": (lambda x: x[..., 1], DYN),
    "slice_drop_last": (lambda x: x[:, :-1], DYN),
    "slice_drop_first": (lambda x: x[:, 1:], DYN),
    "slice_tail": (lambda x: x[:, -2:], DYN),
    "slice_neg_both": (lambda x: x[:, -3:-1], DYN),
    "slice_step": (lambda x: x[:, ::2], DYN),
    "slice_step_neg_start": (lambda x: x[:, -4::3], DYN),
    "slice_head": (lambda x: x[:, :2], DYN),
    "slice_static": (lambda x: x[:, 1:3, :-1], STAT),
    "slice_two_dyn": (lambda x: x[:, :3, -2:], DYN2),
    "slice_lastdim": (lambda x: x[:, :, -3:], LAST),
    "none": (lambda x: x[:, None], DYN),
    "none_lead": (lambda x: x[None], DYN),
    "none_lead_int": (lambda x: x[None, 0, -1], DYN),
    "ellipsis_none": (lambda x: x[..., None, :], DYN2),
    "select": (lambda x: x.select(1, -1), DYN),
    "select_torch": (lambda x: torch.select(x, 2, 0), DYN),
    "shared_tensor_static": (lambda x: x[:, :, torch.tensor([2, 0, -1])], DYN),
    "shared_tensor_dyn": (lambda x: x[:, torch.tensor([0, -1])], DYN),
    "index_select_static": (lambda x: x.index_select(2, torch.tensor([1, 1, 0])), DYN),
    "index_select_dyn": (lambda x: torch.index_select(x, 1, torch.tensor([0])), DYN),
    "narrow_static": (lambda x: x.narrow(2, 1, 2), DYN),
    "chain": (lambda x: x[:, -3:][:, -1], DYN),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(GETITEM))
def test_getitem(name, mode):
    f, spec = GETITEM[name]
    mb_test(f, spec, lengths=mode, dtype=torch.float64, seed=2)


def _batch(mode, spec=DYN, seed=0):
    return mb_rand(*spec, lengths=mode, dtype=torch.float64,
                   generator=torch.Generator().manual_seed(seed))


def _index_batch(x, dim=1, k=None, negative=True, seed=0):
    """Per-example valid indices into dim ``dim`` of ``x``: one per example
    (data (B,)), or ``k`` per example (data (B, k))."""
    g = torch.Generator().manual_seed(seed)
    lens = x._lengths(dim).tolist()
    out = []
    for n in lens:
        lo = -n if negative else 0
        out.append(torch.randint(lo, n, (1,) if k is None else (1, k), generator=g))
    return MaskedBatch.fromlist(out, () if k is None else (False,))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dim,spec", [(1, DYN), (2, DYN), (1, STAT), (2, DYN2)])
def test_per_example_index(mode, dim, spec):
    x = _batch(mode, spec)
    idx = _index_batch(x, dim)
    sl = (slice(None),) * dim
    y = mb_test(lambda x, i: x[sl + (i,)], x, idx, dtype=torch.float64)
    assert y.padded_data.size(dim) == 1
    mb_test(lambda x, i: x[sl + (i,)].squeeze(dim), x, idx, dtype=torch.float64)
    mb_test(lambda x, i: x.index_select(dim, i), x, _index_batch(x, dim, negative=False),
            dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_per_example_index_several(mode):
    x = _batch(mode)
    idx = _index_batch(x, 1, k=3)
    mb_test(lambda x, i: x[:, i], x, idx, dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_index_with_size_as_tensor(mode):
    # the last element of each example, via its size: x[:, n - 1]
    mb_test(lambda x: x[:, x.size_as_tensor(1) - 1], DYN, lengths=mode, dtype=torch.float64)


def test_shared_table_indexed_per_example():
    table = torch.randn(7, 3, dtype=torch.float64)
    idx = MaskedBatch.fromlist([torch.tensor([[1, 6, -1]]), torch.tensor([[2]])], (True,))
    mb_test(lambda t, i: t[i], table, idx, dtype=torch.float64)
    mb_test(lambda t, i: t[i, 1:], table, idx, dtype=torch.float64)


def test_shared_table_indexed_per_example_through_calls():
    """table.__getitem__(idx), operator.getitem: before, __len__ read the
    caller's bytecode to see a subscript, and these have none."""
    table = torch.randn(7, 3, dtype=torch.float64)
    idx = MaskedBatch.fromlist([torch.tensor([[1, 6, -1]]), torch.tensor([[2]])], (True,))
    mb_test(lambda t, i: operator.getitem(t, i), table, idx, dtype=torch.float64)
    mb_test(lambda t, i: t.__getitem__(i), table, idx, dtype=torch.float64)


def test_len_is_the_per_example_size_but_an_index_has_none():
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 3)], (False,))
    assert len(x) == 1 and len(x[0]) == 3
    with pytest.raises(TypeError, match="x.size"):
        len(x.long())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dim", [1, 2])
def test_gather(mode, dim):
    x = _batch(mode, DYN, seed=3)
    lens = x._lengths(1).tolist()
    g = torch.Generator().manual_seed(1)
    size = (lambda n: n) if dim == 1 else (lambda n: 3)
    idx = MaskedBatch.fromlist(
        [torch.randint(0, size(n), (1, n, 2), generator=g) for n in lens], (True, False))
    mb_test(lambda x, i: x.gather(dim, i), x, idx, dtype=torch.float64)
    mb_test(lambda x, i: torch.gather(x, dim, i), x, idx, dtype=torch.float64)


def test_gather_shared_index():
    mb_test(lambda x: x.gather(2, torch.tensor([[[2, 0]]]).expand(1, 2, 2)),
            (B, (False, 3), (False, 3)), dtype=torch.float64)


# ------------------------------------------------------------------ setitem
def _assign(i):
    def f(x, v):
        y = x * 1
        y[:, i] = v
        return y
    return f


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("i", [0, -1, slice(-2, None)])
def test_setitem_dynamic(mode, i):
    v_spec = (B, (False, 3)) if not isinstance(i, slice) else (B, (False, 1), (False, 3))
    mb_test(_assign(i), DYN, v_spec, lengths=mode, dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_setitem_static_and_shared_value(mode):
    mb_test(_assign(2), STAT, (1, 3), lengths=mode, dtype=torch.float64)
    mb_test(lambda x: _assign(1)(x, 5.0), STAT, lengths=mode, dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_setitem_per_example_index(mode):
    x = _batch(mode)
    idx = _index_batch(x, 1)
    v = mb_rand(B, (False, 1), (False, 3), dtype=torch.float64)
    mb_test(lambda x, i, v: _assign(i)(x, v), x, idx, v, dtype=torch.float64)


def test_setitem_writes_only_active_lanes():
    x = MaskedBatch.fromlist([torch.zeros(1, n, 2) for n in (1, 3, 2)], (True, False))
    v = MaskedBatch(torch.ones(3, 2), None, (False,))
    with lanes(torch.tensor([True, False, True])):
        x[:, -1] = v
    assert x.examples()[0].tolist() == [[[1, 1]]]
    assert x.examples()[1].tolist() == [[[0, 0]] * 3]
    assert x.examples()[2].tolist() == [[[0, 0], [1, 1]]]


def test_setitem_into_plain_tensor_raises():
    t = torch.zeros(1, 3)
    v = mb_rand(2, (False, 3))
    with pytest.raises(NotImplementedError, match="shared"):
        t[:, 0:3] = v


# ------------------------------------------------------------------ dormant lanes and errors
def test_out_of_range_only_for_real_active_lanes():
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    # padding of the index batch holds garbage
    idx = MaskedBatch(torch.tensor([[0, 99], [2, -7]]), torch.tensor([[True, False], [True, True]]),
                      (True,))
    with pytest.raises(IndexError, match="example 1"):
        x[:, idx]
    idx = MaskedBatch(torch.tensor([[0, 99], [2, -3]]), torch.tensor([[True, False], [True, True]]),
                      (True,))
    y = x[:, idx]
    assert torch.equal(y.examples()[1], x.examples()[1][:, [[2, 0]]])
    # a dormant lane may index out of range
    idx = MaskedBatch(torch.tensor([1, 2]), None, ())
    with pytest.raises(IndexError, match="out of range"):
        x[:, idx]
    with lanes(torch.tensor([False, True])):
        y = x[:, idx]
        x[:, -2]
        x[:, 2]
    assert torch.equal(y.examples()[1], x.examples()[1][:, [2]])
    with pytest.raises(IndexError, match="example 0"):
        x[:, 1]
    with pytest.raises(IndexError, match="example 0"):
        x[:, -2]


def test_dormant_lane_gets_zero_gradient():
    data = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    x = MaskedBatch.from_padded(data, torch.tensor([1, 3]))
    idx = MaskedBatch(torch.tensor([5, -1]), None, ())
    with lanes(torch.tensor([False, True])):
        y = x[:, idx]
    y.padded_data.sum().backward()
    assert data.grad[0].abs().sum() == 0
    assert data.grad[1, 2].tolist() == [1.0, 1.0]
    assert y.padded_data[0].abs().sum() == 0
    flat = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)  # one entry per position
    with lanes(torch.tensor([False, True])):
        z = MaskedBatch.from_padded(flat, torch.tensor([1, 3]))[:, idx]
    (z.padded_data * 2).sum().backward()
    assert z.padded_data[0].tolist() == [0.0] and z.padded_data[1].tolist() == [flat[1, 2].item()]
    assert flat.grad.tolist() == [[0.0] * 3, [0.0, 0.0, 2.0]]



def test_kept_bounds_follow_the_lanes_and_the_op():
    """The bounds of x[:, idx] are kept on x's mask; which lanes are checked
    and whether negative indices count from the end are not."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 4)], (True, False))
    idx = MaskedBatch(torch.tensor([3, 3]), None, ())
    with lanes(torch.tensor([False, True])):
        assert torch.equal(x[:, idx].examples()[1], x.examples()[1][:, [3]])
    with lanes(torch.tensor([True, True])):
        with pytest.raises(IndexError, match="example 0, which has size 2"):
            x[:, idx]
    with pytest.raises(IndexError, match="example 0"):
        x[:, idx]
    neg = MaskedBatch(torch.tensor([-1, -4]), None, ())
    assert [e[0, 0].tolist() for e in x[:, neg].examples()] == [
        x.examples()[0][0, 1].tolist(), x.examples()[1][0, 0].tolist()]
    with pytest.raises(IndexError, match="out of range"):
        torch.index_select(x, 1, neg)  # no negative indices there, as in torch
    # a changed mask (same object, changed in place) is read again
    x._mask[0, 1] = False
    with pytest.raises(IndexError, match="example 0, which has size 1"):
        x[:, MaskedBatch(torch.tensor([1, 0]), None, ())]


def test_index_examples_with_no_value_or_empty():
    """An example that holds no value (a rule's result whose mask marks
    nothing real there) is not checked and gives 0; one of length 0
    (present) raises, as alone."""
    data = torch.randn(3, 3, 2, requires_grad=True)
    mask = torch.tensor([[True, True, False], [False] * 3, [True] * 3]).unsqueeze(2)
    x = MaskedBatch._new(data, mask, (True, False))
    y = x[:, MaskedBatch(torch.tensor([1, 7, -1]), None, ())]
    assert torch.equal(y.padded_data[1], torch.zeros(1, 2)) and not y.mask[1].any()
    assert torch.equal(y.padded_data[2], data[2, 2:3])
    y.padded_data.sum().backward()
    assert data.grad[1].abs().sum() == 0
    empty = MaskedBatch.fromlist([torch.randn(1, 2, 2), torch.randn(1, 0, 2)], (True, False))
    with pytest.raises(IndexError, match="example 1, which has size 0"):
        empty[:, MaskedBatch(torch.tensor([0, 0]), None, ())]


def test_index_leaves_the_read_cut_pending():
    """x[:, idx] of a value @batch read under the lanes active now reads only
    the active lanes, so it makes no gradient cut (a where over all of x)."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 2, requires_grad=True) for n in (2, 4)],
                             (True, False))
    active = torch.tensor([False, True])
    with lanes(active):
        r = MaskedBatch._read(x, active)
        r[:, MaskedBatch(torch.tensor([0, 3]), None, ())]
        assert r._cut is active


def test_one_index_per_example_and_what_takes_the_general_path():
    """x[:, i] with one int per example (data (B,)), also one that some
    examples do not hold (a lane mask) or a 0-dim int per example (an item
    of a per-example list), takes a short path; an index of another dtype,
    the general one (the results are the per-example ones either way)."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 4, 3)], (True, False))
    for dtype in (torch.long, torch.int32):
        i = MaskedBatch(torch.tensor([1, -4, 0], dtype=dtype), None, ())
        y = x[:, i]
        assert y._mask is None and y.dims == (False, False)
        assert all(torch.equal(e, xe[:, [k]]) for e, xe, k in zip(y.examples(), x.examples(), (1, -4, 0)))
    some = MaskedBatch(torch.tensor([1, 99, 0]), torch.tensor([True, False, True]), ())
    y = x[:, some]  # example 1 has no index: no value, no check
    assert y.mask.reshape(-1).tolist() == [True, False, True]
    scalar = MaskedBatch._new(torch.tensor([1, 99, -1]), torch.tensor([True, False, True]), (),
                              bdim=None)
    y = x[:, scalar]  # an int per example drops the dim, as x[:, 1] does
    assert y.dims == (False,) and y.mask.reshape(-1).tolist() == [True, False, True]
    assert torch.equal(y.padded_data[1], torch.zeros(2))
    for k, e, xe in zip((0, 2), (y.padded_data[0], y.padded_data[2]), (x.examples()[0], x.examples()[2])):
        assert torch.equal(e, xe[0, (1, -1)[k // 2]])
    with pytest.raises(IndexError, match="integers"):
        x[:, MaskedBatch(torch.tensor([1.0, 0.0, 0.0]), None, ())]
    assert x.squeeze(2) is not x  # nothing to squeeze: a new batch all the same

ERRORS = [
    (lambda x: x[1:], IndexError, "batch-of-one"),
    (lambda x: x[:, ::-1], ValueError, "flip"),
    (lambda x: x[:, x.padded_data[:, :, 0] > 0], NotImplementedError, "where"),
    (lambda x: x[:, :, :, 0], IndexError, "too many"),
    (lambda x: x[:, 7], IndexError, "out of range"),
    (lambda x: x[:, :, 5], IndexError, "out of range"),
    (lambda x: x[:, torch.tensor([0]), torch.tensor([1])], NotImplementedError, "one"),
    (lambda x: torch.masked_select(x, x.padded_data > 0), ValueError, "shared by every example"),
    (lambda x: x[x.padded_data > 0], IndexError, "shape of the mask"),
    (lambda x: x.narrow(1, 1, 2), IndexError, "example 0"),
    (lambda x: x.index_select(1, torch.tensor([-1])), IndexError, "out of range"),
    (lambda x: x.gather(2, torch.zeros(1, 2, 2, dtype=torch.long)), ValueError, "larger"),
    (lambda x: x.gather(1, torch.full((1, 1, 2), 1)), IndexError, "example 0"),
]


@pytest.mark.parametrize("f,exc,match", ERRORS)
def test_errors(f, exc, match):
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    with pytest.raises(exc, match=match):
        f(x)


@pytest.mark.parametrize("ks", [(2, 0, 3), (1, 1, 1), (3, 3, 3)])
def test_index_select_a_vector_per_example(ks):
    """index (k,) per example (k dynamic, 0 included), examples (n, c) with
    no batch-of-one dim (the DyNet char tagger's rare words' letters)."""
    g = torch.Generator().manual_seed(0)
    ns = (4, 2, 5)
    idx = MaskedBatch.fromlist([torch.randint(0, n, (k,), generator=g) for n, k in zip(ns, ks)],
                               (True,), None)
    x = MaskedBatch.fromlist([torch.randn(n, 1 + n % 3, generator=g, dtype=torch.float64)
                              for n in ns], (True, True), None)
    out = mb_test(lambda x, i: x.index_select(0, i), x, idx, dtype=torch.float64)
    assert [tuple(e.shape) for e in out.examples()] == [(k, 1 + n % 3) for n, k in zip(ns, ks)]


# ------------------------------------------------------------------ a shared table at per-example points
_TABLE = torch.randn(5, 4, 3, dtype=torch.float64, requires_grad=True)


def _ints(values):
    return MaskedBatch.fromlist([torch.tensor(v) for v in values], batch_dim=None)


@pytest.mark.parametrize("read", [
    lambda i, j: _TABLE[i, j],            # transitions[tags[i + 1], tags[i]]
    lambda i, j: _TABLE[2, j],            # an int beside a per-example int
    lambda i, j: _TABLE[i, :, j % 3],     # apart: torch puts the examples' dim first
    lambda i, j: _TABLE[:, j, i % 3],
    lambda i, j: _TABLE[..., i % 3],
    lambda i, j: _TABLE[i, -1 - j],       # negative per example
])
def test_a_shared_table_read_at_per_example_ints(read):
    mb_test(read, _ints([0, 4, 2, 1]), _ints([3, 0, 1, 2]), params=[_TABLE])


def test_a_shared_table_read_out_of_range_names_the_example():
    with pytest.raises(IndexError, match="example 1"):
        _TABLE[_ints([0, 4]), _ints([1, 9])]


@matchbox.batch
def _path_score(tags):                           # tags: (n,) ints, per-example n
    score = _TABLE[0, 0, 0] * 0
    for i in range(tags.size(0) - 1):
        score = score + _TABLE[tags[i + 1], tags[i]].sum()
    return score


def test_a_shared_table_read_at_per_example_ints_in_a_loop():
    """(the examples past their end hold no index: masked)"""
    tags = MaskedBatch.fromlist([torch.tensor(v) for v in ([0, 1, 2, 3], [4], [2, 2], [1, 0, 3])],
                                (True,), batch_dim=None)
    mb_test(_path_score, tags, params=[_TABLE])
