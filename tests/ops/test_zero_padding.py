"""Known-zero padding (``MaskedBatch._zero``) and the masking kernels.

A rule that skips re-masking because its input's padding is known to be 0
gives wrong numbers if the flag lies, so every rule and op that claims it
is checked here: whenever ``_zero`` is set, every entry outside the mask
is exactly 0, even when the inputs' padding held NaN.  ``keep`` and
``on_real_rows`` are checked against ``torch.where``, gradients included."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox.functional as MF
from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.ops._registry import keep, neutralize, on_real_rows
from matchbox.ops.pointwise import ZERO_AT_ZERO

pytestmark = pytest.mark.usefixtures("row_strategy")

LENGTHS = [3, 1, 4, 2]


def zero_padded(feat=4, lengths=LENGTHS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return MaskedBatch.fromlist([torch.randn(1, n, feat, generator=g) for n in lengths], dims=(True, False))


def nan_padded(feat=4, lengths=LENGTHS, seed=0):
    x = zero_padded(feat, lengths, seed)
    data = x.padded_data.masked_fill(~x.mask, float("nan"))
    return MaskedBatch(data, x.mask, x.dims)  # (from_padded would clean the padding)


def assert_zero_padding(out):
    assert out._zero, "expected the rule to mark its padding as zero"
    assert out._mask is not None
    pad = ~out._mask.expand_as(out.padded_data)
    assert pad.any()
    assert (out.padded_data[pad] == 0).all(), out.padded_data[pad]


def test_sources():
    assert zero_padded()._zero
    assert not nan_padded()._zero
    assert_zero_padding(zero_padded())


@pytest.mark.parametrize("make", [
    lambda x: nn.Linear(4, 3)(x),
    lambda x: nn.LayerNorm(4)(x),
    lambda x: F.rms_norm(x, (4,)),
    lambda x: x @ torch.randn(4, 2),
    lambda x: x @ x.transpose(1, 2),
    lambda x: F.softmax(x.transpose(1, 2), dim=2),
    lambda x: F.scaled_dot_product_attention(x.unsqueeze(1), x.unsqueeze(1), x.unsqueeze(1)).squeeze(1),
    lambda x: F.prelu(x.transpose(1, 2), torch.tensor([0.1])),
], ids=["linear", "layer_norm", "rms_norm", "matmul", "matmul_dynamic", "softmax", "sdpa", "prelu"])
def test_rules_zero_their_padding(make):
    torch.manual_seed(0)
    assert_zero_padding(make(nan_padded()))


def test_embedding_zeroes_its_padding():
    ids = MaskedBatch.from_padded(torch.randint(0, 7, (4, 5)).masked_fill(
        torch.arange(5) >= torch.tensor(LENGTHS)[:, None], 99), torch.tensor(LENGTHS))
    assert_zero_padding(nn.Embedding(7, 3)(ids))


@pytest.mark.parametrize("cell", [nn.LSTMCell(4, 3), nn.GRUCell(4, 3), nn.RNNCell(4, 3)],
                         ids=["lstm", "gru", "rnn"])
@pytest.mark.parametrize("under_lanes", [False, True])
def test_cells_zero_their_padding(cell, under_lanes):
    step = list(nan_padded().unbind(1))[2]  # examples of length <= 2 have no step 2
    if under_lanes:
        with lanes(torch.tensor([True, False, True, True])):
            out = cell(step)
    else:
        out = cell(step)
    for o in out if isinstance(out, tuple) else (out,):
        assert_zero_padding(o)


FUNCS = {name: getattr(torch, name, None) or getattr(F, name) for name in ZERO_AT_ZERO}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_zero_at_zero_functions_keep_it(name):
    x = zero_padded()
    assert_zero_padding(FUNCS[name](x))
    assert not FUNCS[name](nan_padded())._zero


@pytest.mark.parametrize("make", [
    lambda x: x + x, lambda x: x - 2 * x, lambda x: x * x, lambda x: x / 3.0, lambda x: -x,
    lambda x: 0.5 * x, lambda x: F.dropout(x, 0.5), lambda x: x.transpose(1, 2),
    lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(-1).squeeze(-1), lambda x: x.split_dim(2, 2),
    lambda x: x.split_dim(2, 2).join_dims(2, 3), lambda x: x.view(1, -1, 2, 2),
    lambda x: x.float(), lambda x: x.detach(), lambda x: x.contiguous(), lambda x: F.relu(x),
])
def test_ops_that_keep_zero_padding(make):
    assert_zero_padding(make(zero_padded()))


@pytest.mark.parametrize("make", [
    lambda x: x + 1, lambda x: x + torch.ones(4), lambda x: x * torch.ones(4),
    lambda x: x * math.inf, lambda x: x / 0.0, lambda x: torch.exp(x), torch.sigmoid,
    torch.cos, lambda x: x + nan_padded(), lambda x: x * nan_padded(), lambda x: 1 / x,
    lambda x: F.softmax(x, dim=2), lambda x: x.clamp(min=1.0),
])
def test_ops_that_do_not_keep_it(make):
    assert not make(zero_padded())._zero


def test_neutralize_is_free_only_when_nothing_needs_masking():
    x = zero_padded()
    assert neutralize(x, 0) is x.padded_data
    assert neutralize(x, 1.0) is not x.padded_data
    with lanes(torch.tensor([True, False, True, True])):
        out = neutralize(x, 0)
    assert out is not x.padded_data and (out[1] == 0).all()


# ------------------------------------------------------------------ kernels
@pytest.mark.parametrize("data_shape,mask_shape", [
    ((4, 5, 6), (4, 5, 1)),      # rows: index_fill on CPU
    ((4, 3, 5, 6), (4, 1, 5, 1)),  # rows after broadcasting leading dims
    ((4, 5, 6), (4, 1, 1)),      # lanes
    ((4, 5, 6), (4, 5, 6)),      # per entry: where
    ((4, 3, 5, 5), (4, 1, 5, 5)),  # broadcast in the middle: where
    ((4, 5), (4, 5)),
])
def test_keep_is_where_with_exact_zero_gradient(data_shape, mask_shape):
    g = torch.Generator().manual_seed(0)
    m = torch.rand(mask_shape, generator=g) > 0.4
    data = torch.randn(data_shape, generator=g, dtype=torch.float64)
    data = data.masked_fill(~m, float("nan")).requires_grad_()
    out = keep(m, data, -2.5)
    ref = torch.where(m, data.detach(), torch.tensor(-2.5, dtype=torch.float64))
    assert torch.equal(out, ref)
    cot = torch.randn(data_shape, generator=g, dtype=torch.float64)
    (out * cot).sum().backward()
    assert torch.equal(data.grad, torch.where(m, cot, 0.0))


def test_on_real_rows_reads_real_rows_only():
    g = torch.Generator().manual_seed(0)
    m = torch.rand(4, 5, 1, generator=g) > 0.4
    data = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    data = data.masked_fill(~m, float("nan")).requires_grad_()
    w = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    out = on_real_rows(MaskedBatch(data), m, lambda rows: rows @ w.t())
    ref = torch.where(m, data.detach().nan_to_num() @ w.detach().t(), 0.0)
    assert torch.equal(out, ref)
    out.sum().backward()
    assert torch.isfinite(w.grad).all() and torch.isfinite(data.grad).all()
    assert (data.grad[~m.expand_as(data)] == 0).all()


def test_gathered_rows_follow_changes_of_the_data(row_strategy):
    x = zero_padded()
    lin = nn.Linear(4, 2)
    before = lin(x)
    assert (x._rows is not None) == (row_strategy == "gather")  # kept for the next op on x
    x[:, 0] = x[:, 0] + 1.0  # replaces x.padded_data
    after = lin(x)
    x.padded_data.mul_(2)  # in place
    doubled = lin(x)
    want = [lin(e) for e in x.examples()]
    assert all(torch.allclose(a, b) for a, b in zip(doubled.examples(), want))
    assert not torch.allclose(before.padded_data, after.padded_data) and not torch.allclose(after.padded_data, doubled.padded_data)


def test_a_reused_input_gets_gradients_every_time():
    """An input that requires grad is used in several forward passes, one
    of them under no_grad: each backward reaches it."""
    x = zero_padded()
    x.requires_grad_()
    lin = nn.Linear(4, 2)
    grads = []
    for grad_mode in (True, False, True, True):
        with torch.set_grad_enabled(grad_mode):
            out = lin(x)
        if grad_mode:
            x.padded_data.grad = None
            sum(e.sum() for e in out.examples()).backward()
            grads.append(x.padded_data.grad.clone())
    assert all(torch.equal(g, grads[0]) for g in grads) and grads[0].abs().sum() > 0


def test_changing_the_data_voids_the_promise():
    x = zero_padded()
    x.padded_data.add_(1.0)               # padding is 1 now
    assert not x._zero
    y = zero_padded()
    y.padded_data = y.padded_data + 1.0          # another tensor
    assert not y._zero
    x, k = zero_padded(), zero_padded(seed=1)
    x.padded_data.add_(1.0)
    k.padded_data.add_(1.0)
    # the contraction over the dynamic dim must not see the padding
    got = (x.transpose(1, 2) @ k).examples()
    want = [a.transpose(1, 2) @ b for a, b in zip(x.examples(), k.examples())]
    assert all(torch.allclose(g, w) for g, w in zip(got, want))
