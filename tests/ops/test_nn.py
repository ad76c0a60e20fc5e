"""nn rules: linear, embedding, dropout, layer_norm, rms_norm, glu.

Batched vs per-example (values, input and parameter gradients) via mb_test,
plus NaN hygiene: padding that holds inf/NaN must not reach parameter
gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test

# every test runs with real rows gathered (CPU) and with all rows masked (GPU)
pytestmark = pytest.mark.usefixtures("row_strategy")

LENGTHS = ("mixed", "one", "equal")
FEATURE_SPECS = {
    "dynamic": (4, (True, 5), (False, 3)),
    "static": (3, (False, 4), (False, 3)),
    "two_dynamic": (3, (True, 4), (True, 3), (False, 3)),
    "features_only": (4, (False, 3)),
}


def _nan_batch(lengths, feat, fill=float("nan"), dtype=torch.float64, seed=0):
    """A MaskedBatch (B, max_len, feat) whose padding holds ``fill``, and
    its per-example Tensors."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    data = torch.full((len(lengths), T, feat), fill, dtype=dtype)
    for b, n in enumerate(lengths):
        data[b, :n] = torch.randn(n, feat, generator=g, dtype=dtype)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None])[:, :, None]
    return data, mask


def _per_example_grads(module, data, lengths, f=None):
    """Parameter grads of sum(f(module(x_b))) over examples run alone."""
    f = f or (lambda y: y)
    module.zero_grad()
    total = 0
    for b, n in enumerate(lengths):
        y = f(module(data[b:b + 1, :n]))
        total = total + (y * torch.arange(y.numel(), dtype=y.dtype).view(y.shape).cos()).sum()
    total.backward()
    return {k: p.grad.clone() for k, p in module.named_parameters()}


def _batched_grads(module, batch, f=None):
    f = f or (lambda y: y)
    module.zero_grad()
    y = f(module(batch))
    total = 0
    for e in y.examples():
        total = total + (e * torch.arange(e.numel(), dtype=e.dtype).view(e.shape).cos()).sum()
    total.backward()
    return {k: p.grad.clone() for k, p in module.named_parameters()}


# ------------------------------------------------------------------ linear
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", FEATURE_SPECS)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_module(spec, lengths, bias):
    mb_test(nn.Linear(3, 2, bias=bias).double(), FEATURE_SPECS[spec], lengths=lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_functional_linear_shared_weight(lengths):
    mb_test(lambda x, w, b: F.linear(x, w, b), (4, (True, 5), (False, 3)), (2, 3), (2,),
            lengths=lengths, dtype=torch.float64)


def test_linear_dynamic_features_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 3)], (True,))
    with pytest.raises(ValueError, match="last dimension .* dynamic"):
        F.linear(x, torch.randn(2, 3))


def test_linear_keeps_mask_and_dims():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    y = nn.Linear(3, 5)(x)
    assert isinstance(y, MaskedBatch) and y.dims == (True, False)
    assert y.maxsize() == (1, 4, 5) and y.batch_size == 2
    assert [tuple(e.shape) for e in y.examples()] == [(1, 2, 5), (1, 4, 5)]


# ------------------------------------------------------------------ layer_norm / rms_norm
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", FEATURE_SPECS)
def test_layer_norm_module(spec, lengths):
    mb_test(nn.LayerNorm(3).double(), FEATURE_SPECS[spec], lengths=lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_layer_norm_two_static_dims(lengths):
    ln = nn.LayerNorm((2, 3)).double()
    with torch.no_grad():
        ln.weight.normal_(), ln.bias.normal_()
    mb_test(ln, (3, (True, 4), (False, 2), (False, 3)), lengths=lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_functional_layer_norm_no_affine(lengths):
    mb_test(lambda x: F.layer_norm(x, (3,), eps=1e-3), (4, (True, 5), (False, 3)),
            lengths=lengths, dtype=torch.float64)


@pytest.mark.skipif(not hasattr(nn, "RMSNorm"), reason="no nn.RMSNorm")
@pytest.mark.parametrize("lengths", LENGTHS)
def test_rms_norm_module(lengths):
    mb_test(nn.RMSNorm(3).double(), (4, (True, 5), (False, 3)), lengths=lengths)


def test_layer_norm_over_dynamic_dim_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    with pytest.raises(ValueError, match="dynamic"):
        F.layer_norm(x, (4, 3))
    y = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 4)], (True,))
    with pytest.raises(ValueError, match="normalized dimensions must be static"):
        nn.LayerNorm(4)(y)


def test_layer_norm_across_examples_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 3)], (False,))
    with pytest.raises(ValueError, match="leading"):
        F.layer_norm(x, (1, 3))


# ------------------------------------------------------------------ embedding
def _index_batch(lengths, num=10, seed=0, pad=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randint(0, num, (1, n), generator=g) for n in lengths]
    b = MaskedBatch.fromlist(xs, (True,))
    return b, xs


LENGTH_LISTS = {"mixed": [1, 4, 2, 3], "one": [1, 1, 1], "equal": [3, 3, 3]}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_module(lengths, padding_idx):
    idx, _ = _index_batch(LENGTH_LISTS[lengths])
    emb = nn.Embedding(10, 3, padding_idx=padding_idx).double()
    out = mb_test(emb, idx)
    assert out.dims == (True, False)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_embedding_static_and_2d(lengths):
    g = torch.Generator().manual_seed(1)
    # static: (1, 3) indices per example
    idx = MaskedBatch.fromlist([torch.randint(0, 7, (1, 3), generator=g) for _ in range(3)], (False,))
    mb_test(nn.Embedding(7, 2).double(), idx)
    # two dynamic dims
    ls = LENGTH_LISTS[lengths]
    xs = [torch.randint(0, 7, (1, n, max(1, 4 - n)), generator=g) for n in ls]
    idx2 = MaskedBatch.fromlist(xs, (True, True))
    mb_test(nn.Embedding(7, 2).double(), idx2)
    # functional form with a shared weight
    mb_test(lambda i, w: F.embedding(i, w), idx2, (7, 2), dtype=torch.float64)


def test_embedding_garbage_padding_indices():
    lengths = [1, 4, 2]
    idx, xs = _index_batch(lengths)
    data = idx.padded_data.clone()
    data[~idx.mask] = torch.tensor([999, -5, 10**9, 10, -1, 42])[: int((~idx.mask).sum())]
    garbage = MaskedBatch(data, idx.mask, (True,))
    emb = nn.Embedding(10, 3).double()
    got = _batched_grads(emb, garbage)
    want = _per_example_grads(emb, data, lengths)
    torch.testing.assert_close(got["weight"], want["weight"])
    out = emb(garbage)
    for e, x in zip(out.examples(), xs):
        torch.testing.assert_close(e, emb(x))


def test_embedding_out_of_range_real_index_raises():
    idx = MaskedBatch.fromlist([torch.tensor([[1, 2]]), torch.tensor([[3, 10, 4]])], (True,))
    with pytest.raises(IndexError, match="out of range"):
        nn.Embedding(10, 3)(idx)
    neg = MaskedBatch.fromlist([torch.tensor([[1, -1]]), torch.tensor([[3]])], (True,))
    with pytest.raises(IndexError):
        nn.Embedding(10, 3)(neg)


def test_embedding_dormant_lane_does_not_raise():
    idx = MaskedBatch.fromlist([torch.tensor([[1, 2]]), torch.tensor([[3, 99]])], (True,))
    emb = nn.Embedding(10, 3).double()
    with lanes(torch.tensor([True, False])):
        out = emb(idx)
    torch.testing.assert_close(out.examples()[0], emb(torch.tensor([[1, 2]])))
    assert torch.isfinite(out.padded_data).all()
    emb.zero_grad()
    out.padded_data.sum().backward()
    # only the active lane's rows get gradient
    rows = emb.weight.grad.abs().sum(1).nonzero().flatten().tolist()
    assert rows == [1, 2]


def test_embedding_max_norm_matches_per_example():
    lengths = [1, 4, 2]
    idx, xs = _index_batch(lengths)
    torch.manual_seed(3)
    e1 = nn.Embedding(10, 3, max_norm=0.5).double()
    e2 = nn.Embedding(10, 3, max_norm=0.5).double()
    e2.load_state_dict(e1.state_dict())
    ys = [e1(x) for x in xs]
    yb = e2(idx)
    for a, b in zip(ys, yb.examples()):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(e1.weight, e2.weight)


def test_embedding_errors():
    idx, _ = _index_batch([1, 2])
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq"):
        nn.Embedding(10, 3, scale_grad_by_freq=True)(idx)
    with pytest.raises(TypeError, match="integer"):
        F.embedding(idx.double(), torch.randn(10, 3))


# (rows, embedding_dim) dynamic per example; V_b = n + 1 >= 2 rows, D_b = n
TABLES = {"rows": (True, False), "cols": (False, True), "both": (True, True),
          "static": (False, False)}


def _own_ids(kind, ws, lengths, g):
    """Indices into each example's table ``ws[b]``, ``lengths[b]`` of them."""
    if kind == "shared":  # the same indices in every example's own table
        return torch.tensor([[0, 1, 1, 0]])
    shape = {"batch": lambda n: (1, n), "unbatched": lambda n: (n,), "scalar": lambda n: ()}[kind]
    ids = [torch.randint(0, w.size(0), shape(n), generator=g) for w, n in zip(ws, lengths)]
    bdim, dims = (0, (True,)) if kind == "batch" else (None, (True,) * len(shape(1)))
    return MaskedBatch.fromlist(ids, dims, bdim)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("ids", ["shared", "batch", "unbatched", "scalar"])
@pytest.mark.parametrize("padding_idx", [None, 1, -1])
def test_embedding_each_examples_own_table(lengths, table, ids, padding_idx):
    """``F.embedding(ids, weight)`` with a MaskedBatch weight: each example
    looks up its indices (its own, or shared plain ones) in its own
    ``(V, D)`` table, either size varying; a negative padding_idx counts from
    each table's end.  Before: AttributeError '_bdim' (issue 30)."""
    g = torch.Generator().manual_seed(5)
    rows, cols = TABLES[table]
    ls = LENGTH_LISTS[lengths]
    ws = [torch.randn(n + 1 if rows else 4, n if cols else 3, dtype=torch.float64, generator=g)
          for n in ls]
    mb_test(lambda i, w: F.embedding(i, w, padding_idx=padding_idx), _own_ids(ids, ws, ls, g),
            MaskedBatch.fromlist(ws, TABLES[table], None), dtype=torch.float64)


def test_embedding_own_table_errors():
    ws = MaskedBatch.fromlist([torch.randn(5, 2), torch.randn(3, 2)], (True, False), None)
    with pytest.raises(IndexError, match="index 3 out of range for example 1's table of 3 rows"):
        F.embedding(torch.tensor([0, 3]), ws)
    with pytest.raises(ValueError, match="padding_idx=4 is outside example 1's table"):
        F.embedding(torch.tensor([0, 1]), ws, padding_idx=4)
    with pytest.raises(NotImplementedError, match="max_norm and sparse=True need one shared table"):
        F.embedding(torch.tensor([0, 1]), ws, max_norm=1.0)


# ------------------------------------------------------------------ dropout
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", FEATURE_SPECS)
def test_dropout_eval_and_p0_are_identity(spec, lengths):
    mb_test(lambda x: F.dropout(x, 0.5, training=False), FEATURE_SPECS[spec], lengths=lengths,
            dtype=torch.float64)
    mb_test(nn.Dropout(0.5).eval(), FEATURE_SPECS[spec], lengths=lengths, dtype=torch.float64)
    mb_test(nn.Dropout(0.0), FEATURE_SPECS[spec], lengths=lengths, dtype=torch.float64)


def test_dropout_training():
    x = MaskedBatch.fromlist([torch.randn(1, n, 50, dtype=torch.float64) + 3 for n in (2, 7, 5)],
                             (True, False))
    x.requires_grad_()
    y = nn.Dropout(0.5)(x)
    assert y.dims == x.dims and y._mask is x._mask
    kept = y.padded_data != 0
    torch.testing.assert_close(y.padded_data[kept], 2 * x.padded_data[kept])
    frac = kept[x.mask.expand_as(kept)].double().mean().item()
    assert 0.35 < frac < 0.65
    y.padded_data.sum().backward()
    real = x.mask.expand_as(x.padded_data)
    torch.testing.assert_close(x.padded_data.grad[real], kept[real].double() * 2)
    # alpha dropout and dropout1d run on the data too
    assert F.alpha_dropout(x, 0.2, training=False).padded_data is not None
    z = F.dropout1d(MaskedBatch.fromlist([torch.ones(1, 4, n) for n in (2, 5)], (False, True)), 0.5)
    assert z.dims == (False, True)


# ------------------------------------------------------------------ glu
@pytest.mark.parametrize("lengths", LENGTHS)
def test_glu(lengths):
    mb_test(lambda x: F.glu(x), (4, (True, 5), (False, 6)), lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: F.glu(x, 1), (4, (False, 4), (True, 3)), lengths=lengths, dtype=torch.float64)


def test_glu_dynamic_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 4)], (True,))
    with pytest.raises(ValueError, match="dynamic"):
        F.glu(x)


# ------------------------------------------------------------------ NaN hygiene
@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("which", ["linear", "layer_norm", "linear_then_layer_norm"])
def test_nan_padding_gives_clean_param_grads(which, fill):
    lengths = [1, 4, 2, 3]
    torch.manual_seed(0)
    module = {
        "linear": lambda: nn.Linear(3, 2),
        "layer_norm": lambda: nn.LayerNorm(3),
        "linear_then_layer_norm": lambda: nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.LayerNorm(3)),
    }[which]().double()
    for p in module.parameters():
        with torch.no_grad():
            p.normal_()
    data, mask = _nan_batch(lengths, 3, fill)
    x = MaskedBatch(data.clone().requires_grad_(), mask, (True, False))
    got = _batched_grads(module, x)
    want = _per_example_grads(module, data, lengths)
    for k in want:
        assert torch.isfinite(got[k]).all(), k
        torch.testing.assert_close(got[k], want[k])
    # the input's gradient is finite, and exactly zero on padding
    g = x.padded_data.grad
    assert torch.isfinite(g).all()
    assert (g[~mask.expand_as(g)] == 0).all()


def test_nan_padding_embedding_then_linear():
    lengths = [2, 1, 3]
    idx, xs = _index_batch(lengths)
    data = idx.padded_data.clone()
    data[~idx.mask] = -7
    idx = MaskedBatch(data, idx.mask, (True,))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 3), nn.LayerNorm(3), nn.Linear(3, 2)).double()
    got = _batched_grads(model, idx)
    want = _per_example_grads(model, data, lengths)
    for k in want:
        assert torch.isfinite(got[k]).all(), k
        torch.testing.assert_close(got[k], want[k])


def test_plain_tensors_unchanged():
    x = torch.randn(1, 4, 3)
    lin = nn.Linear(3, 2)
    assert isinstance(lin(x), torch.Tensor)
    torch.testing.assert_close(nn.LayerNorm(3)(x), F.layer_norm(x, (3,)))


_W = torch.randn(3, 3, dtype=torch.float64)
CUT_OPS = {
    "linear (real rows)": lambda x: F.linear(x, _W),
    "layer_norm (real rows)": lambda x: F.layer_norm(x, (3,)),
    "matmul (neutralize)": lambda x: x @ _W,
}


@pytest.mark.usefixtures("row_strategy")
@pytest.mark.parametrize("op", CUT_OPS.values(), ids=CUT_OPS.keys())
def test_rules_that_skip_the_cut_of_a_read_still_cut(op):
    """Rules that read only real entries use @batch's read without its
    gradient cut when it was made under the lanes active now, since they
    never read the cut lanes; under other lanes the cut is made.  Either
    way the cut lane gets no gradient."""
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    cut = torch.tensor([True, False])
    for active in (None, torch.tensor([True, True]), cut):
        read = MaskedBatch._read(MaskedBatch(x, None, (False,)), cut)
        with lanes(active):
            out = op(read)
        g, = torch.autograd.grad((out.padded_data * torch.arange(1.0, 4.0)).sum(), x)
        assert torch.equal(g[1], torch.zeros(3)) and bool((g[0] != 0).any())
