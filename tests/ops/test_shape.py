"""Shape ops: batched vs per-example (values and gradients), and errors."""
import pytest
import torch

import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_rand, mb_test

MODES = ("mixed", "one", "equal")
B = 4
DYN = (B, (True, 5), (False, 6))            # (1, n, 6)
STAT = (B, (False, 4), (False, 6))          # (1, 4, 6)
DYN2 = (B, (True, 4), (True, 3), (False, 2))  # (1, n, m, 2), n and m independent
LAST = (B, (False, 3), (True, 5))           # (1, 3, n)
ONE = (B, (True, 5), (False, 1))            # (1, n, 1)

# name -> (function, specs); every function runs per example and batched
CASES = {
    "transpose": (lambda x: x.transpose(1, 2), [DYN]),
    "transpose_neg": (lambda x: torch.transpose(x, -1, -2), [DYN2]),
    "swapaxes": (lambda x: x.swapaxes(1, 3), [DYN2]),
    "permute": (lambda x: x.permute(0, 3, 1, 2), [DYN2]),
    "movedim": (lambda x: x.movedim(1, -1), [DYN2]),
    "mT": (lambda x: x.mT, [DYN]),
    "unsqueeze": (lambda x: x.unsqueeze(1), [DYN]),
    "unsqueeze_last": (lambda x: torch.unsqueeze(x, -1), [DYN]),
    "unsqueeze0": (lambda x: x.unsqueeze(0), [DYN]),
    "squeeze_static": (lambda x: x.squeeze(2), [ONE]),
    "squeeze_noop": (lambda x: x.squeeze(2), [DYN]),
    "flatten_dyn_first": (lambda x: x.flatten(1), [DYN]),
    "flatten_dyn_last": (lambda x: x.flatten(1), [LAST]),
    "flatten_two_dyn": (lambda x: torch.flatten(x, 1, 2), [DYN2]),
    "flatten_all": (lambda x: x.flatten(1, -1), [DYN2]),
    "flatten_static": (lambda x: x.flatten(1), [STAT]),
    "view_static": (lambda x: x.view(1, 2, 12), [STAT]),
    "view_dyn_minus1": (lambda x: x.view(1, -1, 2, 3), [DYN]),
    "view_dyn_maxsize": (lambda x: x.view(1, x.maxsize(1), 3, 2), [DYN]),
    "reshape_dyn": (lambda x: x.reshape(1, 1, -1, 6, 1), [DYN]),
    "reshape_two_dyn": (lambda x: x.reshape(1, x.maxsize(1), x.maxsize(2), 2, 1), [DYN2]),
    "view_tuple": (lambda x: x.transpose(1, 2).reshape((1, 2, 3, x.maxsize(1))), [DYN]),
    "expand": (lambda x: x.expand(1, -1, 4), [ONE]),
    "expand_lead": (lambda x: x.expand(1, 2, -1, 3), [ONE]),
    "expand_as": (lambda x, y: x.expand_as(y), [ONE, DYN]),
    "repeat_static": (lambda x: x.repeat(1, 1, 2), [DYN]),
    "repeat_dyn": (lambda x: x.repeat(1, 3, 1), [DYN]),
    "repeat_lead": (lambda x: x.repeat(1, 2, 1, 1), [DYN]),
    "split_static": (lambda x: x.split(4, 2), [DYN]),
    "split_sections": (lambda x: torch.split(x, [1, 5], dim=-1), [DYN]),
    "chunk_static": (lambda x: x.chunk(3, 2), [DYN]),
    "unbind_static": (lambda x: x.unbind(2), [DYN]),
    "cat_dyn": (lambda x, y: torch.cat([x, y * 2, x], 1), [DYN, DYN]),
    "cat_dyn_other": (lambda x, y: torch.cat([x, y], 1), [DYN, (B, (True, 3), (False, 6))]),
    "cat_static": (lambda x, y: torch.cat((x, y), -1), [DYN, (B, (True, 5), (False, 2))]),
    "cat_shared": (lambda x, t: torch.cat([t, x], 1), [DYN, (1, 2, 6)]),
    "F_cat": (lambda x: F.cat([x, x.tanh()], 2), [DYN2]),
    "stack": (lambda x, y: torch.stack([x, y], 1), [DYN, 0]),
    "stack_last": (lambda x, y: F.stack([x, y, x], -1), [DYN2, 0]),
    "stack_dynamic": (lambda x, y: F.stack([x, y], 2, dynamic=True), [DYN, 0]),
    "flip_dyn": (lambda x: x.flip(1), [DYN]),
    "flip_static": (lambda x: torch.flip(x, [2]), [DYN]),
    "flip_all": (lambda x: x.flip(1, 2, 3), [DYN2]),
    "cumsum_dyn": (lambda x: x.cumsum(1), [DYN]),
    "cumsum_static": (lambda x: torch.cumsum(x, 2), [DYN]),
    "cumsum_0": (lambda x: x.cumsum(0), [DYN]),
    "cumprod_dyn": (lambda x: x.cumprod(-1), [LAST]),
    "split_dim": (lambda x: x.split_dim(2, 3), [DYN]),
    "split_dim_neg": (lambda x: x.split_dim(-1, 2).transpose(1, 2), [DYN]),
    "join_dims": (lambda x: x.join_dims(1, 2), [DYN]),
    "join_dims_rev": (lambda x: x.join_dims(2, 1), [DYN]),
    "join_dims_far": (lambda x: x.join_dims(1, 3), [DYN2]),
    "join_dims_dyn_second": (lambda x: x.join_dims(3, 1), [DYN2]),
    "split_join": (lambda x: x.split_dim(2, 2).join_dims(2, 3), [DYN]),
    # join_dims(0, d): d folded into the batch-of-one dim, n lanes per example
    "join_dims_0": (lambda x: x.split_dim(-1, 3).join_dims(0, -1), [DYN]),
    "join_dims_0_dyn": (lambda x: x.join_dims(0, 1), [DYN]),
    "join_dims_into_dyn": (lambda x: x.join_dims(1, 0), [DYN]),
    "join_dims_0_twice": (lambda x: x.split_dim(-1, 2).join_dims(0, -1).join_dims(0, -1), [DYN]),
    "lanes_roundtrip": (lambda x: x.split_dim(-1, 3).join_dims(0, -1).tanh()
                        .split_dim(0, 3).join_dims(-1, 1), [DYN]),
    "lanes_split_part": (lambda x: x.split_dim(-1, 3).join_dims(0, -1).split_dim(0, 1), [DYN]),
    "lanes_reduce": (lambda x: x.split_dim(-1, 2).join_dims(0, -1).sum(0), [DYN]),
    "lanes_mean_all": (lambda x: x.split_dim(-1, 2).join_dims(0, -1).mean(), [DYN]),
    "lanes_softmax0": (lambda x: x.split_dim(-1, 3).join_dims(0, -1).softmax(0), [DYN]),
    "lanes_per_lane_tensor": (lambda x: x.split_dim(-1, 3).join_dims(0, -1)
                              * torch.arange(1., 4., dtype=x.dtype).view(3, 1, 1), [DYN]),
    "lanes_meet_example": (lambda x, y: x.split_dim(-1, 3).join_dims(0, -1) + y,
                           [DYN, (B, (True, 5), (False, 1))]),
    "lanes_matmul": (lambda x: (lambda h: h @ h.transpose(1, 2))(x.split_dim(-1, 3).join_dims(0, -1)),
                     [DYN]),
    "lanes_causal": (lambda x: (lambda h: (h @ h.transpose(1, 2)).causal_mask(2, 1).softmax(-1))(
        x.split_dim(-1, 2).join_dims(0, -1)), [DYN]),
    "unflatten": (lambda x: x.unflatten(2, (2, 3)), [DYN]),
    "view_as": (lambda x, y: x.view_as(y), [DYN, 0]),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_op(name, mode):
    f, specs = CASES[name]
    mb_test(f, *specs, lengths=mode, dtype=torch.float64, seed=1)


# ---- ops whose output count depends on a dynamic dim: equal lengths only
@pytest.mark.parametrize("f", [lambda x: x.unbind(1), lambda x: x.split(2, 1),
                               lambda x: x.narrow(1, 1, 2)])
def test_dynamic_pieces_equal_lengths(f):
    mb_test(f, DYN, lengths="equal", dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_narrow_dynamic(mode):
    y = mb_test(lambda x: x.narrow(1, 0, 1), DYN, lengths=mode, dtype=torch.float64)
    assert y.dims == (False, False)
    mb_test(lambda x: torch.narrow(x, 1, -1, 1), DYN, lengths=mode, dtype=torch.float64)


def test_squeeze_dynamic_all_ones():
    y = mb_test(lambda x: x.squeeze(1), DYN, lengths="one", dtype=torch.float64)
    assert y.dims == (False,)


def test_unbind_dynamic_marks_lanes():
    xs = [torch.randn(1, n, 3) for n in (1, 3, 2)]
    x = MaskedBatch.fromlist(xs, (True, False))
    parts = x.unbind(1)
    assert len(parts) == 3
    for i, p in enumerate(parts):
        assert p.dims == (False,) and p.mask.shape == (3, 1)
        assert p.mask[:, 0].tolist() == [i < n for n in (1, 3, 2)]
        for b, xe in enumerate(xs):
            if i < xe.size(1):
                assert torch.equal(p.padded_data[b], xe[0, i])


def test_split_dynamic_marks_lanes():
    xs = [torch.randn(1, n, 2) for n in (1, 5, 3)]
    x = MaskedBatch.fromlist(xs, (True, False))
    parts = x.split(2, 1)
    assert len(parts) == 3
    for i, p in enumerate(parts):
        for b, xe in enumerate(xs):
            want = xe[:, 2 * i:2 * i + 2]
            if want.size(1):
                assert torch.equal(p.examples()[b], want)
            else:
                assert not p.mask[b].any()


def _lane_batch(values, present):
    """One (B, 3) element per step, absent in lanes where present is False."""
    data = torch.stack(values)
    return MaskedBatch(data, torch.tensor(present).view(-1, 1), (False,))


@pytest.mark.parametrize("pattern", [
    [[1, 1, 1], [1, 0, 1], [1, 0, 0]],   # lanes leave a loop one by one
    [[1, 1, 1], [0, 1, 1], [1, 1, 0]],   # an absent step before a present one
])
def test_stack_infers_dynamic_and_compacts(pattern):
    B, K = 3, len(pattern)
    vals = torch.randn(K, B, 3, dtype=torch.float64, requires_grad=True)
    elems = [_lane_batch(list(vals[k]), [bool(v) for v in pattern[k]]) for k in range(K)]
    out = F.stack(elems, 1)
    assert out.dims == (True, False)
    ex = out.examples()
    for b in range(B):
        want = torch.stack([vals[k, b] for k in range(K) if pattern[k][b]]).unsqueeze(0)
        assert torch.equal(ex[b], want)
    out.to_padded(0).sum().backward()
    mask = torch.tensor(pattern, dtype=torch.float64).unsqueeze(-1).expand(K, B, 3)
    assert torch.equal(vals.grad, mask)


def test_cat_with_a_value_an_example_lacks_leaves_it_no_value():
    """``torch.cat([steps[2], y], -1)`` (the padded step: ``steps =
    list(x.unbind(1))``): for an example shorter than
    3, the per-example code raises, so that example holds no value (any
    later use of it raises) rather than ``y`` alone."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    y = MaskedBatch.fromlist([torch.randn(1, 2) for _ in range(2)])
    out = torch.cat([list(x.unbind(1))[2], y], -1)
    assert out.dims == (False,)
    with pytest.raises(ValueError, match=r"examples \[1\] of this batch hold no value"):
        out.examples()


@pytest.mark.parametrize("lengths", [(2, 4, 1), (3, 3), (1,)])
def test_cat_of_unbind_steps(lengths):
    xs = [torch.randn(1, n, 3, dtype=torch.float64, requires_grad=True) for n in lengths]
    out = torch.cat(MaskedBatch.fromlist(xs, (True, False)).unbind(1), 1)
    want = [torch.cat(x.unbind(1), 1) for x in xs]
    for e, w in zip(out.examples(), want):
        assert torch.equal(e, w)
    got = torch.autograd.grad(sum((e * e).sum() for e in out.examples()), xs)
    for g, x in zip(got, xs):
        assert torch.equal(g, 2 * x)


def test_stack_same_lanes_is_static():
    x = mb_rand(3, (True, 4), (False, 2))
    out = F.stack([x, x + 1], 1)
    assert out.dims == (False, True, False)
    out = F.stack([x, x + 1], 1, dynamic=False)
    assert out.dims == (False, True, False)


PADDING_SENSITIVE = [lambda x: torch.cat([x, x], 1), lambda x: x.cumsum(1),
                     lambda x: x.cumprod(1), lambda x: x.flip(1),
                     lambda x: x.transpose(1, 2).flatten(1), lambda x: x.repeat(1, 2, 1),
                     lambda x: x[:, -2:], lambda x: x[:, -1]]


@pytest.mark.parametrize("f", PADDING_SENSITIVE)
def test_nan_padding_does_not_reach_real_entries(f):
    data = torch.randn(3, 4, 2, dtype=torch.float64)
    lengths = torch.tensor([2, 1, 4])

    def grad(d):
        leaf = d.clone().requires_grad_()
        x = MaskedBatch.from_padded(leaf, lengths)
        y = f(x).tanh()
        y.to_padded(0).sum().backward()
        return y.to_padded(0), leaf.grad, x.mask.expand_as(d)

    clean_y, clean_g, real = grad(data)
    data[0, 2:] = float("nan")
    data[1, 1:] = float("inf")
    y, g, _ = grad(data)
    # NaN/inf padding (and the NaN gradients tanh gives it) never reaches real entries
    assert torch.equal(y, clean_y)
    assert torch.equal(g[real], clean_g[real])


def test_plain_tensor_helpers():
    x = torch.randn(1, 4, 6)
    # the original Matchbox's meaning: size s becomes (s // n, n), n fastest
    assert x.split_dim(2, 3).shape == (1, 4, 2, 3)
    assert torch.equal(x.split_dim(2, 3), x.view(1, 4, 2, 3))
    assert torch.equal(x.split_dim(-1, 2)[..., 1], x[..., 1::2])
    assert torch.equal(x.join_dims(1, 2), x.reshape(1, 24))
    assert torch.equal(x.join_dims(2, 1), x.transpose(1, 2).reshape(1, 24))
    # join_dims(0, d) folds d into dim 0; split_dim(0, n) undoes it
    heads = x.split_dim(-1, 3).join_dims(0, -1)
    assert heads.shape == (3, 4, 2)
    assert all(torch.equal(heads[h], x[0, :, h::3]) for h in range(3))
    back = heads.split_dim(0, 3)
    assert back.shape == (1, 3, 4, 2)
    assert torch.equal(back.join_dims(-1, 1), x)
    assert torch.equal(F.stack([x, x], 1), torch.stack([x, x], 1))
    assert torch.equal(F.cat([x, x], 1), torch.cat([x, x], 1))


ERRORS = [
    (lambda x: x.view(1, -1), ValueError, "dynamic"),
    (lambda x: x.view(1, 2, -1), ValueError, "dynamic"),
    (lambda x: x.view(1, 5, 7), ValueError, "does not fit"),
    (lambda x: x.t(), ValueError, "transpose"),
    (lambda x: x.split([1, 1], 1), ValueError, "dynamic"),
    (lambda x: x.split_dim(1, 2), ValueError, "dynamic"),
    (lambda x: x.split_dim(2, 4), ValueError, "divisible"),
    (lambda x: x.unflatten(1, (1, -1)), ValueError, "dynamic"),
    (lambda x: torch.cat([x, torch.randn(2, 3, 6)], 1), ValueError, "leading 1"),
    (lambda x: x.expand(1, 5, 6), ValueError, "dynamic"),
    (lambda x: x.join_dims(1, 1), ValueError, "two different dims"),
    (lambda x: x.split_dim(0, 2), ValueError, "divisible"),
    (lambda x: x.join_dims(0, 1).split_dim(0, 2), ValueError, "dynamic"),
    (lambda x: x.split_dim(5, 2), IndexError, "out of range"),
    (lambda x: x.transpose(1, 5), IndexError, "out of range"),
]


@pytest.mark.parametrize("f,exc,match", ERRORS)
def test_errors(f, exc, match):
    x = MaskedBatch.fromlist([torch.randn(1, n, 6) for n in (1, 3)], (True, False))
    with pytest.raises(exc, match=match):
        f(x)


def test_squeeze_mixed_lengths_error():
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    with pytest.raises(ValueError, match="some examples but"):
        x.squeeze(1)


def test_cat_length_mismatch_error():
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    y = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 3)], (True, False))
    with pytest.raises(ValueError, match="sizes differ"):
        torch.cat([x, y], 2)


def test_cat_dormant_lane_is_not_checked():
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    # lane 1 holds no value (MaskedBatch(...) would read it as a length-0 example)
    y = MaskedBatch._new(x.padded_data.clone(), x.mask & torch.tensor([True, False]).view(2, 1, 1),
                         (True, False))
    out = torch.cat([x, y], 2)
    assert torch.equal(out.examples()[0], torch.cat([x.examples()[0]] * 2, 2))
    with lanes(torch.tensor([True, False])):
        torch.stack([x, y], 1)


# ---- join_dims(0, d): each example becomes n lanes; split_dim(0, n) undoes it
def test_join_dims_0_lanes_layout():
    xs = [torch.randn(1, n, 6) for n in (1, 4, 2)]
    x = MaskedBatch.fromlist(xs, (True, False))
    h = x.split_dim(-1, 3).join_dims(0, -1)
    # per example (3, n, 2): dim 0 holds the lanes, no batch-of-one dimension
    assert h.batch_size == 3 and h.batch_dim is None and h.dims == (False, True, False)
    assert h.size(0) == 3 and h.maxsize() == (3, 4, 2)
    for e, xe in zip(h.examples(), xs):
        assert torch.equal(e, torch.stack([xe[0, :, k::3] for k in range(3)]))
    # the storage is the B * n lanes, example-major, each (1, n, 2)
    lanes = h.padded_data.reshape(9, 4, 2)
    for b, xe in enumerate(xs):
        for k in range(3):
            n = xe.size(1)
            assert torch.equal(lanes[3 * b + k, :n], xe[0, :, k::3])
    back = h.split_dim(0, 3)
    assert back.batch_dim == 0 and back.maxsize() == (1, 3, 4, 2)
    assert all(torch.equal(a, b) for a, b in zip(back.join_dims(-1, 1).examples(), xs))


@pytest.mark.parametrize("mode", MODES)
def test_lanes_under_batch(mode):
    """A value with n lanes per example takes part in @batch control flow:
    the per-example loop runs on the examples, all lanes of each."""
    import matchbox

    @matchbox.batch
    def f(x):
        h = x.split_dim(-1, 2).join_dims(0, -1)
        while h.sum() > 0:
            h = h - 1
        return h.split_dim(0, 2).join_dims(-1, 1)
    mb_test(f, DYN, lengths=mode, dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_lanes_in_branches_lists_and_loops(mode):
    """Lanes in a per-example if/else, a for over a dynamic dim and a list
    stacked back: each example's n lanes move together."""
    import matchbox

    @matchbox.batch
    def f(x):
        h = x.split_dim(-1, 2).join_dims(0, -1)   # (2, n, 3)
        if h.sum() > 0:
            h = h * 2
        else:
            h = h.tanh()
        out = []
        acc = h[:, 0] * 0                          # (2, 3)
        for step in h.unbind(1):
            acc = acc + step
            out.append(acc)
        return F.stack(out, 1).split_dim(0, 2).join_dims(-1, 1), acc
    mb_test(f, DYN, lengths=mode, dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("causal", [False, True])
def test_lanes_scaled_dot_product_attention(mode, causal):
    def f(q, k):
        q, k = (x.split_dim(-1, 3).join_dims(0, -1) for x in (q, k))
        o = F.scaled_dot_product_attention(q, k, k, is_causal=causal)
        return o.split_dim(0, 3).join_dims(-1, 1)
    k_spec = DYN if causal else (B, (True, 3), (False, 6))
    mb_test(f, DYN, 0 if causal else k_spec, lengths=mode, dtype=torch.float64)
