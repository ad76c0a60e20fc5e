"""Reduction rules: batched == per example (values and gradients), over
dynamic and static dims, negative dims, dim tuples, keepdim, no dim."""
import pytest
import torch

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test
from _padding import poison, lift

LENGTHS = ("mixed", "one", "equal")
SPECS = {
    "dyn_static": (4, (True, 5), (False, 3)),
    "static_dyn": (3, (False, 3), (True, 4)),
    "two_dyn": (3, (True, 4), (True, 3)),
    "static": (3, (False, 2), (False, 3)),
}
DIMS = {"1": 1, "-1": -1, "(1,2)": (1, 2), "none": None}
# lengths matter only where some dim is dynamic
CASES = [(s, n) for s in SPECS for n in (LENGTHS if s in ("dyn_static", "two_dyn") else ("mixed",))]
kw = dict(dtype=torch.float64)


def call(op, dim, keepdim):
    if dim is None:
        return lambda x: op(poison(x), dim=None, keepdim=True) if keepdim else lift(op(poison(x)))
    return lambda x: op(poison(x), dim, keepdim=keepdim)


# name -> (op, supports a dim tuple)
OPS = {
    "sum": (torch.sum, True), "mean": (torch.mean, True), "prod": (torch.prod, False),
    "logsumexp": (torch.logsumexp, True), "amax": (torch.amax, True), "max": (torch.max, False),
    "argmax": (torch.argmax, False), "any": (lambda x, *a, **k: torch.any(x > 0.5, *a, **k), True),
    "var": (lambda x, *a, **k: torch.var(x, *a, unbiased=False, **k), True),
    "std": (lambda x, *a, **k: x.std(*a, correction=0, **k), True),
    "norm": (lambda x, *a, **k: torch.norm(x, 2, *a, **k), True),
}
# method forms and the rest of the family: checked on one spec
VARIANTS = {
    "sum_method": (lambda x, *a, **k: x.sum(*a, **k), True),
    "mean_method": (lambda x, *a, **k: x.mean(*a, **k), True),
    "nansum": (torch.nansum, True), "prod_method": (lambda x, *a, **k: x.prod(*a, **k), False),
    "amin": (lambda x, *a, **k: x.amin(*a, **k), True),
    "min_method": (lambda x, *a, **k: x.min(*a, **k), False),
    "argmin": (lambda x, *a, **k: x.argmin(*a, **k), False),
    "all_method": (lambda x, *a, **k: (x > -1).all(*a, **k), True),
    "var_method": (lambda x, *a, **k: x.var(*a, correction=0, **k), True),
    "norm_p1": (lambda x, *a, **k: x.norm(1, *a, **k), True),
    "vector_norm_inf": (lambda x, *a, **k: torch.linalg.vector_norm(x, float("inf"), *a, **k), True),
    "vector_norm_3": (lambda x, *a, **k: torch.linalg.vector_norm(x, 3, *a, **k), True),
    "vector_norm_neg": (lambda x, *a, **k: torch.linalg.vector_norm(x, -2, *a, **k), True),
}
ALL = {**OPS, **VARIANTS}


def _skip(name, d, keepdim=False):
    if isinstance(d, tuple) and not ALL[name][1]:
        pytest.skip("torch takes one int dim here")
    if d is None and (name == "logsumexp" or (keepdim and ("max" in name or "min" in name
                                                           or "prod" in name))):
        pytest.skip("not a torch overload")


@pytest.mark.parametrize("spec,lengths", CASES)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("name", OPS)
def test_reduction(name, dim, spec, lengths):
    _skip(name, DIMS[dim])
    mb_test(call(OPS[name][0], DIMS[dim], False), SPECS[spec], lengths=lengths, **kw)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("name", VARIANTS)
def test_reduction_variants(name, dim, keepdim):
    _skip(name, DIMS[dim], keepdim)
    mb_test(call(VARIANTS[name][0], DIMS[dim], keepdim), SPECS["two_dyn"], lengths="mixed", **kw)


@pytest.mark.parametrize("spec", ["dyn_static", "two_dyn"])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("name", OPS)
def test_reduction_keepdim(name, dim, spec):
    _skip(name, DIMS[dim], True)
    mb_test(call(OPS[name][0], DIMS[dim], True), SPECS[spec], lengths="mixed", **kw)


def test_count_nonzero():
    for d in (1, -1, (1, 2)):
        mb_test(lambda x: torch.count_nonzero(poison(x, 1.0) > 0, d), SPECS["two_dyn"], lengths="mixed", **kw)
    mb_test(lambda x: lift(torch.count_nonzero(poison(x, 1.0) > 0)), SPECS["two_dyn"], lengths="mixed", **kw)


def test_sum_dtype_and_int_input():
    mb_test(lambda x: torch.sum(poison(x), 1, dtype=torch.float32), SPECS["dyn_static"],
            lengths="mixed", **kw)
    x = MaskedBatch.fromlist([torch.tensor([[3, 1]]), torch.tensor([[2, 5, 7]])], (True,))
    assert x.sum(1).padded_data.tolist() == [4, 14]
    assert x.max(1).values.padded_data.tolist() == [3, 7]
    assert x.min(1).values.padded_data.tolist() == [1, 2]
    assert x.prod(1).padded_data.tolist() == [3, 70]


@pytest.mark.parametrize("correction", [1, 2])
@pytest.mark.parametrize("fn", ["var", "std", "unbiased"])
def test_var_correction(fn, correction):
    # lengths >= 3 so that the corrected count stays positive
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 5, 4)]
    batch = MaskedBatch.fromlist(xs, (True, False))
    ops = {"var": lambda x: torch.var(poison(x), 1, correction=correction),
           "std": lambda x: poison(x).std(dim=(1, 2), keepdim=True, correction=correction),
           "unbiased": lambda x: torch.var(poison(x), 1, True, True)}
    mb_test(ops[fn], batch)


def test_var_mean_std_mean():
    mb_test(lambda x: torch.var_mean(poison(x), 1, correction=0), SPECS["two_dyn"], lengths="mixed", **kw)
    mb_test(lambda x: torch.std_mean(poison(x), -1, correction=0, keepdim=True), SPECS["two_dyn"],
            lengths="mixed", **kw)


def test_max_returns_named_pair():
    x = MaskedBatch.fromlist([torch.tensor([[1.0, 5.0]]), torch.tensor([[2.0, -1.0, 9.0]])], (True,))
    r = torch.max(x, 1)
    assert isinstance(r, torch.return_types.max)
    values, indices = r
    assert values.padded_data.tolist() == [5.0, 9.0] and indices.padded_data.tolist() == [1, 2]
    assert r.indices is indices and values.dims == ()


def test_max_min_binary_forms():
    mb_test(lambda x, y: torch.max(x, y), SPECS["two_dyn"], SPECS["two_dyn"], lengths="mixed", **kw)
    mb_test(lambda x, y: x.min(y), SPECS["dyn_static"], (3,), lengths="mixed", **kw)
    mb_test(lambda x, y: torch.max(x, other=y), SPECS["dyn_static"], (3,), lengths="mixed", **kw)


def test_full_reduction_layout():
    x = MaskedBatch.fromlist([torch.ones(1, 2, 3), torch.ones(1, 4, 3)], (True, False))
    s = x.sum()
    assert s.padded_data.shape == (2,) and s.dims == () and s.padded_data.tolist() == [6.0, 12.0]
    s = x.mean(keepdim=True, dim=None)
    assert s.padded_data.shape == (2, 1, 1) and s.dims == (False, False)
    assert torch.argmax(x).padded_data.tolist() == [0, 0]


def test_result_mask_and_dims():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 1)], (True, True))
    s = x.sum(2)
    assert s.dims == (True,) and s.mask.tolist() == [[True, True, False, False], [True] * 4]
    s = x.sum(1, keepdim=True)
    assert s.dims == (False, True) and s.mask.shape == (2, 1, 3)
    assert s.mask.tolist() == [[[True, True, True]], [[True, False, False]]]
    s = x.sum((1, 2))
    assert s.dims == () and s.padded_data.shape == (2,)


def test_argmax_flat_index_is_per_example():
    a = torch.tensor([[[0.0, 1.0], [2.0, 0.0]]])          # (1, 2, 2): max at flat 2
    b = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 0.0, 5.0]]])  # (1, 2, 3): max at flat 5
    x = MaskedBatch.fromlist([a, b], (False, True))
    assert torch.argmax(x).padded_data.tolist() == [2, 5]
    assert x.argmax(keepdim=True).padded_data.shape == (2, 1, 1)


def test_padding_only_rows_stay_finite():
    # example 1 has no entry at all along dim 1
    leaf = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    for f in (lambda x: x.mean(1), lambda x: x.std(1, correction=0), lambda x: x.norm(dim=1)):
        x = MaskedBatch.from_padded(leaf, torch.tensor([2, 0]), dim=1)
        y = f(poison(x))
        # the empty example gets torch's answer (mean and std of nothing: NaN)
        want = f(x.examples()[1])
        torch.testing.assert_close(y.padded_data[1:], want, equal_nan=True)
        assert torch.isfinite(y.padded_data[0]).all()
        leaf.grad = None
        y.padded_data.sum().backward()
        assert torch.isfinite(leaf.grad).all()


def test_dormant_lanes_do_not_leak():
    x = MaskedBatch.fromlist([torch.randn(1, n, dtype=torch.float64) for n in (3, 2)], (True,))
    x.padded_data.requires_grad_(True)
    with lanes(torch.tensor([True, False])):
        y = poison(x, float("inf")).std(1)
    assert torch.isfinite(y.padded_data[0]) and torch.isfinite(y.padded_data).all()
    y.padded_data.sum().backward()
    assert torch.isfinite(x.padded_data.grad).all() and (x.padded_data.grad[1] == 0).all()


@pytest.mark.parametrize("lengths", ["mixed", "equal"])
@pytest.mark.parametrize("f", [
    lambda x: x.sum(0), lambda x: torch.mean(x, (0, 1)), lambda x: x.max(0),
    lambda x: torch.argmax(x, -3), lambda x: x.norm(dim=0), lambda x: x.sum(0, keepdim=True),
    lambda x: torch.logsumexp(x, 0)])
def test_reduce_over_batch_dim(f, lengths):
    """A reduction over each example's leading 1 (``torch.sum(child_h, 0,
    keepdim=True)`` of a ``(1, d)`` state) reduces that size-1 dimension, as
    for one example (issue 29)."""
    mb_test(f, (3, (True, 4), (False, 3)), lengths=lengths, dtype=torch.float64)


def test_unsupported_arguments_raise():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 2), torch.randn(1, 4, 2)], (True, False))
    with pytest.raises(NotImplementedError, match="out="):
        torch.sum(x, 1, out=torch.empty(2))
    with pytest.raises(TypeError, match="dim"):
        torch.logsumexp(x)
    mb_test(lambda x: torch.norm(x, "nuc", dim=(1, 2), keepdim=True),
            MaskedBatch.fromlist([torch.randn(1, 3, 2, dtype=torch.float64)] * 2, (False, False)))


NUC_SHAPES = {"rows": ((True, 4), (False, 3)), "cols": ((False, 3), (True, 5)),
              "both": ((True, 4), (True, 5)), "static": ((False, 3), (False, 4))}


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("shape", NUC_SHAPES)
@pytest.mark.parametrize("f", [lambda x: torch.norm(x, "nuc"), lambda x: x.norm(p="nuc"),
                               lambda x: torch.norm(x, "nuc", dim=(0, 1), keepdim=True)])
def test_nuclear_norm_of_each_examples_matrix(f, shape, lengths):
    """``torch.norm(x, 'nuc')`` of (m, n) examples (no batch-of-one dim, as
    for vmap): each example's own matrix, its dynamic rows or columns
    zero-padded, which changes no nonzero singular value, nor the gradient
    on the real entries of a full-rank example; before, dim=None crashed
    inside torch (issue 30) and dynamic dims were refused."""
    mb_test(f, (3,) + NUC_SHAPES[shape], lengths=lengths, dtype=torch.float64, batch_dim=None)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_nuclear_norm_over_named_dynamic_dims(lengths):
    mb_test(lambda x: torch.norm(x, "nuc", dim=(1, 2)), (3, (True, 4), (False, 3)),
            lengths=lengths, dtype=torch.float64)


def test_nuclear_norm_of_more_than_a_matrix_is_refused():
    """(1, m, n) examples: torch's 'nuc' with no dim needs a 2-D example;
    the batch says so in matchbox's words, naming the dims to give."""
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    with pytest.raises(RuntimeError):
        torch.norm(x.examples()[0], "nuc")
    with pytest.raises(ValueError, match=r"'nuc' is a matrix norm over 2 dims.*dim=\(-2, -1\)"):
        torch.norm(x, "nuc")
