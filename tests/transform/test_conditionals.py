"""if / elif / else and conditional expressions under @batch: batched runs
equal per-example runs, values and gradients."""
import pytest
import torch

import matchbox
from matchbox import batch
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")
SCALAR = (6, (False, 1))
SEQ = (6, (True, 4), (False, 3))


@batch
def if_else(x):
    if x > 0:
        y = x * 2
    else:
        y = x - 1
    return y


@batch
def if_elif_else(x):
    y = x * 0
    if x > 1:
        y = x * 3
    elif x > 0:
        y = torch.tanh(x)
    elif x > -1:
        y = x * x
    else:
        y = -x
    return y + 1


@batch
def nested_two(x, z):
    if x > 0:
        if z > 0:
            y = x + z
        else:
            y = x - z
    else:
        y = x * z
    return y


@batch
def nested_three(x, z):
    y = x
    if x > -0.5:
        y = y + 1
        if z > 0:
            y = y * z
            if x + z > 0.5:
                y = torch.sigmoid(y)
            else:
                y = y - 2
        elif z < -1:
            y = y * 3
    return y


@batch
def with_static(x, flag=True, mode="a"):
    if flag:
        if x > 0:
            x = x * 2
        if mode == "a":
            x = x + 1
        elif mode == "b":
            x = x - 1
    if x > 1 and flag:
        x = x * x
    return x


@batch
def seq_condition(x):
    # condition from a reduction over a dynamic dimension
    if x.sum() > 0:
        h = torch.tanh(x) * 2
    else:
        h = x * x
    return h


@batch
def cond_expr(x, z):
    y = x * 2 if x > z else z - x
    return (y if y > 0.5 else y * y) + (1.0 if x > 0 else 2.0)


@batch
def logical_ops(x, z):
    if x > 0 and z > 0:
        y = x + z
    elif not (x > 0) or z < -0.5:
        y = x - z
    else:
        y = x * z
    return y


@batch
def undefined_in_one_branch(x):
    if x > 0:
        y = x * 2
    return x + 1


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f,specs", [
    (if_else, (SCALAR,)),
    (if_elif_else, (SCALAR,)),
    (nested_two, (SCALAR, SCALAR)),
    (nested_three, (SCALAR, SCALAR)),
    (with_static, (SCALAR,)),
    (cond_expr, (SCALAR, SCALAR)),
    (logical_ops, (SCALAR, SCALAR)),
    (undefined_in_one_branch, (SCALAR,)),
    (seq_condition, (SEQ,)),
])
def test_batched_equals_per_example(f, specs, lengths):
    mb_test(f, *specs, lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("flag,mode", [(True, "a"), (True, "b"), (False, "a")])
def test_static_arguments(flag, mode):
    mb_test(lambda x: with_static(x, flag, mode), SCALAR, dtype=torch.float64)


def test_plain_tensor_batch_size_one():
    x = torch.tensor([[0.5]])
    assert if_elif_else(x).item() == pytest.approx(torch.tanh(x).item() + 1)
    assert nested_three(x, torch.tensor([[2.0]])).item() == pytest.approx(torch.sigmoid(torch.tensor(3.0)).item())
    assert cond_expr(torch.tensor([[1.0]]), torch.tensor([[0.0]])).item() == pytest.approx(3.0)


@batch
def dormant_domain_errors(x):
    # each branch computes something undefined for the other branch's lanes
    if x > 0:
        y = torch.log(x) + torch.sqrt(x) + 1 / x
    else:
        y = torch.exp(x * 1000)  # overflows for positive x: only a dormant lane sees it
    return y


def test_dormant_lanes_are_inert():
    xs = torch.tensor([[[2.0]], [[-3.0]], [[0.5]], [[-0.1]]], dtype=torch.float64)
    mb_test(dormant_domain_errors, matchbox.MaskedBatch.fromlist(list(xs), (False,)),
            dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in xs]
    y = dormant_domain_errors(matchbox.MaskedBatch.fromlist(leaves, (False,)))
    assert torch.isfinite(y.padded_data).all()
    y.padded_data.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves)


def test_condition_evaluated_once():
    calls = []

    def probe(v):
        calls.append(1)
        return v

    @batch
    def f(x):
        if probe(x > 0):
            x = x + 1
        else:
            x = x - 1
        return x

    f(matchbox.test_utils.mb_rand(4, (False, 1)))
    assert len(calls) == 1


def test_branch_skipped_when_no_lane_active():
    ran = []

    def mark():
        ran.append(1)
        return 0

    @batch
    def f(x):
        if x > 100:
            x = x + mark()
        return x

    f(matchbox.test_utils.mb_rand(4, (False, 1)))
    assert not ran


def test_condition_with_many_values_per_example_raises():
    @batch
    def f(x):
        if x > 0:
            x = x + 1
        return x

    with pytest.raises(ValueError, match="one value per example"):
        f(matchbox.test_utils.mb_rand(3, (False, 2)))
