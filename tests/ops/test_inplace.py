"""In-place ops (SPEC section 3): the same batch changes, per example as an
in-place op changes one example's Tensor, only in the active lanes under
@batch; gradients as per example; autograd's version checks still fire."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from matchbox import MaskedBatch, batch
from matchbox.ops import pointwise
from matchbox.ops._registry import RULES
from matchbox.ops.inplace import INPLACE
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

T = torch.Tensor
LENGTHS = ("mixed", "one", "equal")
SPECS = {
    "dynamic": (4, (True, 5), (False, 3)),
    "static": (3, (False, 2), (False, 3)),
    "two_dynamic": (3, (True, 4), (True, 3)),
}


def _pos(y):
    return y.abs_().add_(0.5)


# name -> the in-place call on y (a non-leaf copy of the input)
UNARY = {
    "tanh_": lambda y: y.tanh_(), "sigmoid_": lambda y: y.sigmoid_(), "exp_": lambda y: y.exp_(),
    "neg_": lambda y: y.neg_(), "relu_": lambda y: y.relu_(), "abs_": lambda y: y.abs_(),
    "sin_": lambda y: y.sin_(), "log_": lambda y: _pos(y).log_(), "sqrt_": lambda y: _pos(y).sqrt_(),
    "reciprocal_": lambda y: _pos(y).reciprocal_(), "square_": lambda y: y.square_(),
    "clamp_": lambda y: y.clamp_(-0.5, 0.5), "clamp_min_": lambda y: y.clamp_(min=0.1),
    "clip_": lambda y: y.clip_(max=0.2), "pow_": lambda y: y.pow_(2), "mul_scalar": lambda y: y.mul_(3),
    "add_scalar_alpha": lambda y: y.add_(1.5, alpha=2), "div_scalar": lambda y: y.div_(4),
    "sub_scalar": lambda y: y.sub_(1), "masked_fill_": lambda y: y.masked_fill_(y > 0, 0.25),
    "nan_to_num_": lambda y: y.nan_to_num_(), "tril_": lambda y: y.tril_(), "cumsum_": lambda y: y.cumsum_(-1),
    "torch.relu_": torch.relu_, "torch.sigmoid_": torch.sigmoid_, "torch.exp_": torch.exp_,
    "torch.tanh_": torch.tanh_, "torch.clamp_": lambda y: torch.clamp_(y, min=-0.2),
    "F.elu_": F.elu_, "F.leaky_relu_": lambda y: F.leaky_relu_(y, 0.1), "F.hardtanh_": F.hardtanh_,
    "F.threshold_": lambda y: F.threshold_(y, 0.1, 2.0), "F.celu_": F.celu_, "F.selu_": F.selu_,
    "iadd": lambda y: y.__iadd__(2), "imul": lambda y: y.__imul__(-2),
    "relu_inplace": lambda y: F.relu(y, inplace=True),
    "silu_inplace": lambda y: F.silu(y, inplace=True),
    "leaky_relu_inplace": lambda y: F.leaky_relu(y, 0.2, inplace=True),
    "hardtanh_inplace": lambda y: F.hardtanh(y, -0.3, 0.3, True),
    "zero_": lambda y: y.zero_(), "fill_": lambda y: y.fill_(0.7),
    "chain": lambda y: y.mul_(2).add_(1).tanh_(),
}


def _in_place(op):
    """``op`` applied in place to a copy of x, checked to return that copy."""
    def f(x):
        y = x * 1.0
        out = op(y)
        assert out is y
        return y * 1.0  # never a tensor that is also an output's base
    return f


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_in_place(name, spec, lengths):
    mb_test(_in_place(UNARY[name]), SPECS[spec], lengths=lengths, dtype=torch.float64)


BINARY = {
    "add_": lambda y, z: y.add_(z), "add_alpha": lambda y, z: y.add_(z, alpha=-2),
    "sub_": lambda y, z: y.sub_(z), "mul_": lambda y, z: y.mul_(z),
    "div_": lambda y, z: y.div_(z.abs() + 0.5), "pow_": lambda y, z: _pos(y).pow_(z),
    "lerp_": lambda y, z: y.lerp_(z, 0.3), "addcmul_": lambda y, z: y.addcmul_(z, z, value=0.5),
    "atan2_": lambda y, z: y.atan2_(z), "hypot_": lambda y, z: y.hypot_(z),
    "clamp_tensor": lambda y, z: y.clamp_(min=z), "maximum_via_where": lambda y, z: y.copy_(torch.where(y > z, y, z)),
    "masked_fill_mb": lambda y, z: y.masked_fill_(z > 0, -1.0), "copy_": lambda y, z: y.copy_(z * 2),
    "iadd": lambda y, z: y.__iadd__(z), "isub": lambda y, z: y.__isub__(z),
    "imul": lambda y, z: y.__imul__(z), "itruediv": lambda y, z: y.__itruediv__(z.abs() + 1),
}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", BINARY)
def test_binary_in_place_two_batches(name, spec, lengths):
    op = BINARY[name]

    def f(x, z):
        y = x * 1.0
        assert op(y, z) is y
        return y * 1.0
    mb_test(f, SPECS[spec], SPECS[spec], lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("name", ["add_", "mul_", "div_", "lerp_", "copy_", "clamp_tensor", "iadd"])
@pytest.mark.parametrize("other", [(3,), (1, 3), (1, 1, 3), ()])
def test_binary_in_place_against_a_shared_tensor(name, other):
    op = BINARY[name]

    def f(x, w):
        y = x * 1.0
        op(y, w)
        return y * 1.0
    mb_test(f, SPECS["dynamic"], other, lengths="mixed", dtype=torch.float64)


def test_operands_of_lower_rank_broadcast_into_the_batch():
    def f(x, s):
        y = x * 1.0
        y.mul_(s).add_(s)
        y -= s
        return y * 1.0
    mb_test(f, (4, (True, 5), (False, 3)), (4, (False, 3)), lengths="mixed", dtype=torch.float64)
    mb_test(f, (4, (True, 5), (False, 3)), (4, (False, 1)), lengths="mixed", dtype=torch.float64)
    mb_test(f, (4, (True, 5), (False, 3)), (4, (True, 5), (False, 1)), lengths="mixed",
            dtype=torch.float64)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_parameter_written_into_a_batch_gets_its_gradient(lengths):
    """fill_ with a 0-dim Tensor, copy_ and add_ of a parameter: each
    example's real entries count, padding does not."""
    w = torch.randn((), dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def f(x):
        y = x * 1.0
        y.fill_(w)
        y.add_(v).mul_(x)
        z = x * 1.0
        z.copy_(v)
        return y + z
    mb_test(f, SPECS["dynamic"], lengths=lengths, dtype=torch.float64, params=[w, v])


def test_in_place_changes_the_same_batch_and_its_storage():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (1, 3, 2)], (True, False))
    y = x * 1.0
    data, mask = y.padded_data, y._mask
    view = y.padded_data[:, :, :2]
    alias = y.contiguous()   # shares y's storage, as Tensor.contiguous does
    y += 1
    assert y.padded_data is data and y._mask is mask and y.dims == (True, False)
    assert torch.equal(view, data[:, :, :2]) and torch.equal(alias.padded_data, data)
    for a, b in zip(y.examples(), x.examples()):
        torch.testing.assert_close(a, b + 1)


def test_in_place_voids_the_known_zero_padding_and_the_gathered_rows():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (1, 3, 2)], (True, False))
    alias = x.contiguous()
    assert x._zero and alias._zero
    x.add_(1)                                   # the padding is 1 now
    assert not x._zero and not alias._zero
    for a, b in zip(x.sum(1).examples(), [e.sum(1) for e in x.examples()]):
        torch.testing.assert_close(a, b)
    x.zero_()
    assert x._zero and float(x.padded_data.abs().sum()) == 0
    lin = nn.Linear(3, 2)
    y = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (1, 3, 2)], (True, False))
    before = lin(y)                              # gathers (and keeps) y's real rows on CPU
    y.mul_(2)
    after = lin(y)
    for a, b, e in zip(before.examples(), after.examples(), y.examples()):
        torch.testing.assert_close(b, lin(e))
        assert not torch.allclose(a, b)


def test_garbage_padding_stays_out_of_values_and_gradients():
    xs = [torch.randn(1, n, 3, dtype=torch.float64, requires_grad=True) for n in (1, 4, 2)]
    x = poison(MaskedBatch.fromlist(xs, (True, False)))
    y = x * 1.0
    y.log_().add_(x).sqrt_()       # NaN everywhere in the padding
    y.mul_(2).backward()
    want = [torch.autograd.grad((2 * (e.log() + e).sqrt()).nansum(), e)[0] for e in xs]
    for e, g in zip(xs, want):
        torch.testing.assert_close(e.grad.nan_to_num(), g.nan_to_num())


# ------------------------------------------------------------------ autograd's checks
def test_changing_a_tensor_saved_for_backward_still_raises():
    x = MaskedBatch.fromlist([torch.randn(1, n, requires_grad=True) for n in (1, 3)], (True,))
    y = x.exp()                     # exp saves its output
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    y = x * 1.0
    y.mul_(y)                       # as for one Tensor: mul saved y, then y changed
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_in_place_on_a_leaf_that_requires_grad_raises_but_not_under_no_grad():
    x = MaskedBatch.fromlist([torch.randn(1, n) for n in (1, 3)], (True,)).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    with torch.no_grad():
        x.mul_(2)
        x.zero_()
    assert not x.padded_data.detach().any() and x.requires_grad


# ------------------------------------------------------------------ refusals
def test_what_cannot_happen_in_place_raises_as_for_one_example():
    x = MaskedBatch.fromlist([torch.randn(1, n, 1) for n in (1, 3)], (True, False))
    s = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (1, 3)], (True, False))
    with pytest.raises(RuntimeError, match="cannot change an example's shape"):
        x.add_(s)                   # (1, n, 1) += (1, n, 4)
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.long().add_(0.5)
    with pytest.raises(NotImplementedError, match="plain Tensor in place"):
        torch.zeros(1, 3, 1).add_(x)
    other = MaskedBatch.fromlist([torch.randn(1, n, 1) for n in (2, 3)], (True, False))
    with pytest.raises(ValueError, match="lengths differ"):
        x.mul_(other)


def test_an_operand_that_holds_no_value_for_an_example_is_refused():
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    h = x.new_zeros(1, 2)
    h.add_(x.unbind(1)[0])          # every example has step 0
    with pytest.raises(ValueError, match="holds no value for example 0"):
        h.add_(list(x.unbind(1))[2])    # the padded steps: example 0 has no step 2


def test_integer_and_bool_results_in_place():
    x = MaskedBatch.fromlist([torch.arange(n).view(1, n) for n in (1, 3)], (True,))
    y = x * 1
    y.mul_(3).remainder_(2)
    assert [e.tolist() for e in y.examples()] == [[[0]], [[0, 1, 0]]]
    z = x.float()
    z.gt_(0.5)                      # a comparison written as 0./1. into a float batch
    assert z.dtype == torch.float32 and [e.tolist() for e in z.examples()] == [[[0.]], [[0., 1., 1.]]]


def test_a_batch_whose_storage_is_one_shared_row_gets_storage_of_its_own():
    x = MaskedBatch.fromlist([torch.randn(1, 3) for _ in range(4)], (False,))
    t = torch.ones(1, 3)
    x.data = t                      # every example reads the same row of t
    x.add_(torch.arange(3.))
    assert torch.equal(t, torch.ones(1, 3))
    assert all(torch.equal(e, torch.tensor([[1., 2., 3.]])) for e in x.examples())


# ------------------------------------------------------------------ shape-changing in-place ops
def test_shape_changing_in_place_ops_take_the_rules_mask_and_dims():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (1, 3, 2)], (True, False))
    y = x * 1.0
    assert y.unsqueeze_(1) is y and y.dims == (False, True, False)
    y.squeeze_(1).transpose_(1, 2)
    assert y.dims == (False, True)
    for a, b in zip(y.examples(), x.examples()):
        torch.testing.assert_close(a, b.transpose(1, 2))


# ------------------------------------------------------------------ index_put_ / scatter_ / index_add_
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_index_put(accumulate, lengths):
    """Repeated indices: the last write wins, or with accumulate, they add."""
    mb_test(lambda x, v: _ip(x, v, accumulate), (4, (True, 5), (False, 3)), (3,),
            lengths=lengths, dtype=torch.float64)
    mb_test(lambda x, v: _ip(x, v, accumulate), (4, (True, 5), (False, 3)), (4, (False, 3)),
            lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: _ip_mask(x, accumulate), (4, (True, 5), (False, 3)), lengths=lengths,
            dtype=torch.float64)


def _ip(x, v, accumulate):
    y = x * 1.0
    # rows 0, its own last row, and 0 again of each example (1, n, 3)
    y.index_put_((torch.tensor([0]), torch.tensor([0, -1, 0])), v, accumulate)
    return y * 1.0


def _ip_mask(x, accumulate):
    y = x * 1.0
    y.index_put_((y > 0,), torch.tensor(0.5, dtype=y.dtype), accumulate)
    return y * 1.0


def test_index_put_with_a_per_example_index():
    x = MaskedBatch.fromlist([torch.zeros(1, n) for n in (2, 4, 3)], (True,))
    idx = MaskedBatch.fromlist([torch.tensor([k]) for k in (1, 3, 0)], ())
    x.index_put_((torch.tensor([0]), idx), torch.tensor(1.0))
    assert [e.tolist() for e in x.examples()] == [[[0, 1]], [[0, 0, 0, 1]], [[1, 0, 0]]]


@pytest.mark.parametrize("op", ["scatter_", "scatter_add_", "index_add_", "index_copy_",
                                "index_fill_"])
def test_index_family_in_place_follows_its_out_of_place_rule(op):
    outplace = getattr(T, op[:-1])
    if outplace not in RULES:
        pytest.skip(f"Tensor.{op[:-1]} has no rule yet")
    assert getattr(T, op) in RULES and INPLACE[getattr(T, op)] is outplace
    idx = torch.tensor([[0, 2]])
    calls = {
        "scatter_": lambda y, z: y.scatter_(2, idx.view(1, 1, 2).expand(1, 1, 2), z[:, :1, :2]),
        "scatter_add_": lambda y, z: y.scatter_add_(2, idx.view(1, 1, 2), z[:, :1, :2]),
        "index_add_": lambda y, z: y.index_add_(2, idx.view(2), z[:, :, :2]),
        "index_copy_": lambda y, z: y.index_copy_(2, idx.view(2), z[:, :, :2]),
        "index_fill_": lambda y, z: y.index_fill_(2, idx.view(2), -1.0),
    }

    def f(x, z):
        y = x * 1.0
        calls[op](y, z)
        return y * 1.0
    mb_test(f, (3, (True, 4), (False, 3)), (3, (True, 4), (False, 3)), lengths="mixed",
            dtype=torch.float64)


# ------------------------------------------------------------------ modules with inplace=True
MODULES = {
    "ReLU": lambda: nn.ReLU(inplace=True), "ReLU6": lambda: nn.ReLU6(inplace=True),
    "LeakyReLU": lambda: nn.LeakyReLU(0.2, inplace=True), "ELU": lambda: nn.ELU(inplace=True),
    "Hardtanh": lambda: nn.Hardtanh(-0.5, 0.5, inplace=True), "SiLU": lambda: nn.SiLU(inplace=True),
    "Threshold": lambda: nn.Threshold(0.1, 20.0, inplace=True), "SELU": lambda: nn.SELU(inplace=True),
    "Dropout_eval": lambda: nn.Dropout(0.5, inplace=True).eval(),
}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", MODULES)
def test_modules_with_inplace_true(name, lengths):
    m = MODULES[name]().double()

    def f(x):
        y = x * 1.0
        assert m(y) is y
        return y * 1.0
    mb_test(f, SPECS["dynamic"], lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("drop", [nn.Dropout(0.5, inplace=True), nn.Dropout1d(0.5, inplace=True),
                                  lambda y: F.alpha_dropout(y, 0.5, True, inplace=True)],
                         ids=["Dropout", "Dropout1d", "alpha_dropout"])
def test_dropout_inplace_in_training_changes_the_batch_itself(drop):
    x = MaskedBatch.fromlist([torch.rand(1, n, 4) + 1 for n in (1, 5, 3)], (True, False))
    y = x * 1.0
    data = y.padded_data
    assert drop(y) is y and y.padded_data is data
    assert not torch.equal(data, x.padded_data)


# ------------------------------------------------------------------ under @batch
@batch
def branches(x, w):
    y = x * w
    if y.sum() > 0:
        y.mul_(2)
        y.add_(x)
        y += w
    else:
        y.masked_fill_(y < -1, 0.0)
        y.clamp_(max=0.5)
        y.exp_()
    return y


@batch
def nested_and_modules(x):
    y = x * 1.0
    relu = nn.ReLU(inplace=True)
    if x.sum() > 0:
        if x.max() > 1:
            y.zero_()
            y.add_(x * x)
        relu(y)
    elif x.sum() < -1:
        y.sub_(x.sum(-1, keepdim=True))
        F.leaky_relu_(y, 0.3)
    else:
        y.fill_(3.0)
    return y * x


@batch
def a_while_loop(x):
    y = x * 1.0
    n = x.sum(-1).sum(-1)            # each example's own count
    while n > 0:
        y.mul_(0.5).add_(x)
        n = n - 3
    return y


@batch
def log_in_a_branch(x):
    y = x * 1.0
    if x.sum() > 0:
        y.log_()                     # NaN in the examples that skip it, never reaches them
    return y


@pytest.mark.parametrize("lengths", LENGTHS)
def test_in_place_in_a_per_example_branch_changes_only_its_examples(lengths):
    mb_test(branches, (8, (True, 4), (False, 3)), (3,), lengths=lengths, dtype=torch.float64, seed=1)
    mb_test(nested_and_modules, (8, (True, 4), (False, 3)), lengths=lengths, dtype=torch.float64,
            seed=2)
    mb_test(a_while_loop, (8, (True, 4), (False, 3)), lengths=lengths, dtype=torch.float64, seed=3)
    mb_test(log_in_a_branch, (8, (True, 4), (False, 3)), lengths=lengths, dtype=torch.float64,
            seed=4)


@pytest.mark.parametrize("B", [1, 6])
def test_dormant_lanes_keep_their_values(B):
    x = MaskedBatch.fromlist([torch.full((1, 2), float(k % 3 - 1)) for k in range(B)], (False,))
    y = x * 1.0
    before = y.padded_data.clone()

    @batch
    def bump(x, y):
        if x.sum() > 0:
            y.add_(10)
            y.copy_(y * 2)
        return y

    assert bump(x, y) is y
    for k, e in enumerate(y.examples()):
        want = (before[k:k + 1] + 10) * 2 if k % 3 == 2 else before[k:k + 1]
        assert torch.equal(e, want)


@batch
def fresh_noise(x):
    y = x * 1.0
    if x.sum() > 0:
        y.normal_()
    return y


def test_random_fills_only_in_active_lanes():
    x = MaskedBatch.fromlist([torch.full((1, 3), float(k % 2)) for k in range(6)], (False,))
    y = fresh_noise(x)
    for k, e in enumerate(y.examples()):
        assert torch.equal(e, torch.zeros(1, 3)) != (k % 2 == 1)


def test_shape_changing_in_place_under_a_branch_raises():
    @batch
    def grow(x):
        y = x * 1.0
        if x.sum() > 0:
            y.unsqueeze_(1)
        return y

    x = MaskedBatch.fromlist([torch.ones(1, 2), -torch.ones(1, 2)], (False,))
    with pytest.raises(NotImplementedError, match="x = x.unsqueeze"):
        grow(x)


@batch
def every_example_runs_it(x, z):
    y = x * 1.0
    y += z                          # every lane active: in place, as in PyTorch
    y *= 2
    h = x.new(x.size(0), 3).zero_()  # the original Matchbox's initial state
    h += y.sum(1)
    return h


@pytest.mark.parametrize("lengths", LENGTHS)
def test_augmented_assignment_where_every_example_runs_it(lengths):
    mb_test(every_example_runs_it, (5, (True, 4), (False, 3)), (5, (True, 4), (False, 3)),
            lengths=lengths, dtype=torch.float64)


@batch(compact=1.0)
def compacted(x):
    y = x * 1.0
    n = x.sum(-1)
    while n > 0:
        y.mul_(0.5)
        n = n - 1
    return y


@batch(compact=1.0)
def compacted_function_form(x):
    y = x * 1.0
    n = x.sum(-1)
    while n > 0:
        torch.relu_(y)
        n = n - 1
    return y


def test_in_place_method_on_a_local_keeps_its_loop_uncompacted():
    """A compacted loop reads a copy of its live lanes, where the change
    would be lost: a loop that calls an in-place method on a local runs
    uncompacted."""
    mb_test(compacted, (4, (False, 2)), dtype=torch.float64)


def test_other_in_place_changes_in_a_compacted_loop_raise():
    x = MaskedBatch.fromlist([torch.full((1, 2), float(k)) for k in range(4)], (False,))
    with pytest.raises(RuntimeError, match="changed in place"):
        compacted_function_form(x)


def _through_a_view(x):
    y = x * 1.0
    v = y[:, 1:2]                   # per example a view of row 1 (empty for length 1)
    v.mul_(3).sub_(1)
    y[:, :1].add_(2)
    return y * 1.0


@pytest.mark.parametrize("lengths", LENGTHS)
def test_in_place_through_a_view_changes_the_viewed_rows_only(lengths):
    """A slice of a dynamic dim views every later position in the padded
    data; only its real entries (those of the slice per example) change."""
    mb_test(_through_a_view, (6, (True, 4), (False, 3)), lengths=lengths, dtype=torch.float64)


@batch
def subscript_augmented(x, z):
    y = x * 1.0
    if x.sum() > 0:
        y[:, 0] += z[:, 0]
        y[:, -1] *= 3
    y[:, 1:2] -= 1
    return y


@pytest.mark.parametrize("lengths", LENGTHS)
def test_augmented_assignment_to_a_subscript(lengths):
    mb_test(subscript_augmented, (6, (True, 4), (False, 3)), (6, (True, 4), (False, 3)),
            lengths=lengths, dtype=torch.float64, seed=5)


# ------------------------------------------------------------------ coverage
def test_every_pointwise_rule_has_its_in_place_forms():
    names = (pointwise.UNARY + list(pointwise.UNARY_SAFE) + pointwise.BINARY
             + list(pointwise.BINARY_SAFE) + pointwise.ACTIVATIONS + ["clamp", "clip", "masked_fill"])
    missing = []
    for n in names:
        for ns, g in ((T, getattr(T, n + "_", None)), (torch, getattr(torch, n + "_", None)),
                      (F, getattr(F, n + "_", None))):
            out = getattr(ns, n, None)
            if g is not None and out in RULES and g not in RULES:
                missing.append(f"{ns.__name__}.{n}_")
    assert not missing
    for g in (T.zero_, T.fill_, T.copy_, T.index_put_, T.add_, T.relu_, torch.relu_, F.elu_,
              T.__iadd__, T.masked_fill_, T.sigmoid_, T.clamp_):
        assert g in RULES
