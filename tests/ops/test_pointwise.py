"""Pointwise rules: one op table, one checker (mb_test), values and gradients."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from matchbox import MaskedBatch
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

LENGTHS = ("mixed", "one", "equal")
SPECS = {
    "dynamic": (4, (True, 5), (False, 3)),
    "static": (3, (False, 2), (False, 3)),
    "two_dynamic": (3, (True, 4), (True, 3)),
}

# name -> (function, input domain): "pos" shifts inputs into (0.5, inf)
UNARY = {
    "tanh": (torch.tanh, None), "exp": (torch.exp, None), "neg": (lambda x: -x, None),
    "abs_method": (lambda x: x.abs(), None), "sigmoid": (torch.sigmoid, None),
    "sin": (lambda x: x.sin(), None), "relu": (torch.relu, None),
    "log": (torch.log, "pos"), "sqrt": (lambda x: x.sqrt(), "pos"),
    "rsqrt": (torch.rsqrt, "pos"), "reciprocal": (lambda x: x.reciprocal(), "pos"),
    "log1p": (torch.log1p, "pos"), "square": (torch.square, None), "erf": (torch.erf, None),
    "pow_scalar": (lambda x: x ** 2, None), "rpow": (lambda x: 2 ** x, None),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), None), "clamp_min": (lambda x: torch.clamp(x, min=0.1), None),
    "float_cast": (lambda x: x.float().double(), None),
    "masked_fill": (lambda x: x.masked_fill(x > 0, 0.25), None),
    "where_scalar": (lambda x: torch.where(x > 0, x, 0.0), None),
    "gelu": (F.gelu, None), "silu": (F.silu, None), "elu": (F.elu, None),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), None), "softplus": (F.softplus, None),
    "hardtanh": (F.hardtanh, None), "logsigmoid": (F.logsigmoid, None),
}

BINARY = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "div": lambda x, y: x / (y.abs() + 0.5), "torch_add_alpha": lambda x, y: torch.add(x, y, alpha=2),
    "maximum": torch.maximum, "atan2": torch.atan2, "where": lambda x, y: torch.where(x > y, x, y),
    "rsub_tensor_first": lambda x, y: 1.0 - x * y, "pow": lambda x, y: (x.abs() + 0.5) ** y,
    "lerp": lambda x, y: torch.lerp(x, y, 0.3),
}


def _domain(f, domain):
    if domain == "pos":
        return lambda x: f(x.abs() + 0.5)
    return f


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, spec, lengths):
    f, domain = UNARY[name]
    mb_test(_domain(f, domain), SPECS[spec], lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", BINARY)
def test_binary_two_batches(name, spec, lengths):
    mb_test(BINARY[name], SPECS[spec], SPECS[spec], lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("other", [(False, 1), (False, 3)])
@pytest.mark.parametrize("name", BINARY)
def test_binary_beside_per_example_static(name, other, lengths):
    """A batch with a dynamic dim beside a per-example value of size 1
    there (a parser's ``position >= bp[:, None]``), in both orders."""
    small = (4, (False, 1), other)
    mb_test(BINARY[name], SPECS["dynamic"], small, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x, y: BINARY[name](y, x), SPECS["dynamic"], small, lengths=lengths,
            dtype=torch.float64)


def test_static_size_meets_dynamic_dim():
    """A per-example static size beside a dynamic dim must match every
    example's size there: it raises where one differs."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 5)], (True, False))
    full = MaskedBatch.fromlist([torch.randn(1, 5, 3) for _ in range(2)], (False, False))
    with pytest.raises(ValueError, match="static size 5"):
        x + full
    with pytest.raises(ValueError, match="static size 5"):
        full * x


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("other", [(3,), (1, 3), (1, 1, 3), (1, 1, 1)])
def test_binary_against_plain_tensor(name, other):
    """Tensors and Parameters broadcast as they do against one example."""
    mb_test(BINARY[name], SPECS["dynamic"], other, lengths="mixed", dtype=torch.float64)
    mb_test(lambda x, y: BINARY[name](y, x), SPECS["dynamic"], other, lengths="mixed", dtype=torch.float64)


@pytest.mark.parametrize("rows", [3, 4])
def test_a_plain_tensor_is_shared_never_one_row_per_example(rows):
    """``(v - protos)`` with ``protos`` of shape (B, d): per example the
    result would be (B, d) with no leading 1, whatever B is; it is never
    read as one row per example because its size happens to be B."""
    v = MaskedBatch.fromlist([torch.randn(1, 5) for _ in range(4)], (False,))
    protos = torch.randn(rows, 5)
    with pytest.raises(ValueError, match=r"plain Tensor of shape \(%d, 5\) is shared" % rows):
        ((v - protos) ** 2).sum(-1)
    shared = protos[:1]   # a leading 1: every example uses the same row
    mb_test(lambda x: ((x - shared) ** 2).sum(-1), (4, (False, 5)))


@pytest.mark.parametrize("number", [2, 0.5, -3.0])
def test_binary_against_numbers(number):
    f = lambda x: (x + number) * number - number / (x.abs() + 1) + (number - x) / number  # noqa: E731
    mb_test(f, SPECS["dynamic"], lengths="mixed", dtype=torch.float64)


def test_broadcast_between_batches_of_different_rank():
    """(1, n, 3) against a per-example (1, 3) or (1, n, 1) value."""
    mb_test(lambda x, y: x * y, (4, (True, 5), (False, 3)), (4, (False, 3)), lengths="mixed", dtype=torch.float64)
    mb_test(lambda x, y: x - y, (4, (True, 5), (False, 3)), (4, (True, 5), (False, 1)),
            lengths="mixed", dtype=torch.float64)
    mb_test(lambda x, s: x / (s.abs() + 1), (4, (True, 5), (False, 3)), (4, (False, 1)),
            lengths="mixed", dtype=torch.float64)


def test_comparisons_and_logical():
    fs = [lambda x, y: x > y, lambda x, y: x <= y, lambda x, y: x == x, lambda x, y: x != y,
          lambda x, y: (x > 0) & (y > 0), lambda x, y: (x > 0) | (y < 0), lambda x, y: ~(x > y),
          lambda x, y: torch.logical_xor(x > 0, y > 0)]
    for f in fs:
        out = mb_test(f, SPECS["dynamic"], SPECS["dynamic"], lengths="mixed", grad=False)
        assert out.dtype == torch.bool


def test_mask_and_dims_follow_the_table():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4)], (True, False))
    y = MaskedBatch.fromlist([torch.randn(1, 3) for _ in (2, 4)], (False,))
    z = x + y
    assert z.dims == (True, False) and torch.equal(z.mask, x.mask)
    assert (x.tanh()).mask is x.mask  # unary: no mask work at all


def test_equal_masks_made_apart_combine_into_one():
    """A parser's words and gold heads, each from its own fromlist: their
    masks are equal, not one Tensor; an op on both keeps one of them (the
    caches rules keep on a mask then hit), and the values are each
    example's own."""
    lens = (3, 1, 5)
    words = [torch.randint(0, 4, (1, n)) for n in lens]
    heads = [torch.randint(0, 4, (1, n)) for n in lens]
    w, h = (MaskedBatch.fromlist(v, (True,)) for v in (words, heads))
    assert w._mask is not h._mask
    out = (w == 1) & (h >= 2)
    assert out._mask is w._mask
    for got, a, b in zip(out.examples(), words, heads):
        assert torch.equal(got, (a == 1) & (b >= 2))
    assert ((w * 0 + h) - w).mask is w._mask  # (a Tensor the same through several ops)


def test_different_lengths_are_refused():
    x = MaskedBatch.fromlist([torch.randn(1, n) for n in (2, 4)], (True,))
    y = MaskedBatch.fromlist([torch.randn(1, n) for n in (3, 4)], (True,))
    with pytest.raises(ValueError, match="lengths differ"):
        x + y
    s = MaskedBatch.fromlist([torch.randn(1, 4) for _ in (2, 4)], (False,))
    with pytest.raises(ValueError, match="static size 4"):
        x * s


def test_padding_nan_never_reaches_real_gradients():
    """log/sqrt/div of padding zeros must not put NaN into real gradients."""
    data = torch.rand(3, 4, dtype=torch.float64) + 0.5
    data[0, 2:] = 0.0
    data[1, 1:] = -1.0
    data.requires_grad_()
    x = MaskedBatch.from_padded(data, [2, 1, 4])
    y = (x.log() + x.sqrt() + 1 / x + x ** 0.5).to_padded(0.0).sum()
    y.backward()
    assert torch.isfinite(data.grad).all()
    assert torch.equal(data.grad[0, 2:], torch.zeros(2, dtype=torch.float64))


# a parameter w broadcast over every position of x
PARAM_OPS = {
    "mul": lambda x, w: x * w, "add_tanh": lambda x, w: torch.tanh(x + w),
    "rsub_sigmoid": lambda x, w: torch.sigmoid(w - x), "div": lambda x, w: x / (w.abs() + 1),
    "addcmul": lambda x, w: torch.addcmul(x, x, w), "lerp": lambda x, w: torch.lerp(x, 2 * x, w.sigmoid()),
}


@pytest.mark.parametrize("lengths", [(2, 4, 1), (3, 3, 3), (1,)], ids=["mixed", "equal", "one"])
@pytest.mark.parametrize("name", PARAM_OPS)
def test_nan_padding_never_reaches_a_broadcast_parameter(name, lengths):
    """A parameter's gradient sums over the padding it broadcasts over
    (``x * w`` gives ``w`` the sum of ``g * x``, and ``0 * NaN`` is NaN), so
    garbage padding is set to 0 first."""
    f = PARAM_OPS[name]
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    xs = [torch.randn(1, n, 3, dtype=torch.float64, requires_grad=True) for n in lengths]
    want = torch.autograd.grad(sum(f(x, w).sum() for x in xs), [w] + xs)
    x = poison(MaskedBatch.fromlist(xs, (True, False)))
    got = torch.autograd.grad(f(x, w).sum(1).padded_data.sum(), [w] + xs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 5), n=st.integers(1, 6), k=st.integers(1, 3),
       dyn=st.booleans(), op=st.sampled_from(sorted(BINARY)), seed=st.integers(0, 2**16))
def test_property_binary(B, n, k, dyn, op, seed):
    torch.manual_seed(seed)
    spec = (B, (dyn, n), (False, k))
    mb_test(BINARY[op], spec, spec, dtype=torch.float64)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 5), n=st.integers(1, 6), dyn=st.booleans(),
       op=st.sampled_from(sorted(UNARY)), seed=st.integers(0, 2**16))
def test_property_unary(B, n, dyn, op, seed):
    torch.manual_seed(seed)
    f, domain = UNARY[op]
    mb_test(_domain(f, domain), (B, (dyn, n), (True, 3)), dtype=torch.float64)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [0, -1, 1])
def test_tril_triu_in_each_examples_own_coordinates(op, diagonal, lengths):
    f = lambda x: getattr(torch, op)(x, diagonal)
    mb_test(f, (3, (True, 4), (True, 4)), lengths=lengths, dtype=torch.float64)
    mb_test(f, (3, (True, 4)), lengths=lengths, dtype=torch.float64)  # (1, n) matrices
    mb_test(lambda x: getattr(x, op)(diagonal), (2, (False, 2), (True, 3), (False, 3)),
            lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("op", [torch.clone, lambda x: x.clone(), torch.detach])
def test_clone_and_detach(op, lengths):
    mb_test(lambda x: op(x) * 2, (3, (True, 4)), lengths=lengths, dtype=torch.float64,
            grad=op is not torch.detach)


def test_dtype_queries():
    from matchbox.test_utils import mb_rand
    x = mb_rand(2, (True, 3))
    assert x.is_floating_point() and not x.is_complex() and x.element_size() == 4
    assert x.get_device() == -1


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("fn", [torch.zeros_like, torch.ones_like,
                                lambda x: torch.full_like(x, 3.0)])
def test_like_factories_keep_mask_and_dims(fn, lengths):
    mb_test(lambda x: fn(x) + x, (3, (True, 4), (False, 2)), lengths=lengths,
            dtype=torch.float64)
    from matchbox.test_utils import mb_rand
    x = mb_rand(3, (True, 4))
    y = torch.empty_like(x)
    assert y.dims == x.dims and y.padded_data.shape == x.padded_data.shape


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_polygamma_method_and_function(lengths):
    """``x.polygamma(n)`` is ``torch.polygamma(n, x)`` (the arguments swap)."""
    mb_test(lambda x: (x.abs() + 0.5).polygamma(2), (3, (True, 4)), lengths=lengths,
            dtype=torch.float64)
    mb_test(lambda x: torch.polygamma(1, x.abs() + 0.5), (3, (True, 4)), lengths=lengths,
            dtype=torch.float64)


@pytest.mark.parametrize("swap", [False, True])
def test_same_lengths_different_padding(swap):
    """Two dynamic operands whose examples have the same lengths but whose
    padded sizes differ (slices of one chart, x[i, i + 1:j] + x[i + 1:j, j]):
    the longer padding is cut, whichever comes first.  Before: 'Attempting
    to broadcast a dimension of length 3' when the first was the shorter."""
    a = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 1)], (True,))
    b = MaskedBatch.from_padded(torch.randn(2, 3), torch.tensor([2, 1]))
    x, y = (b, a) if swap else (a, b)
    out = x + y
    for e, xa, ya in zip(out.examples(), x.examples(), y.examples()):
        torch.testing.assert_close(e, xa + ya)
