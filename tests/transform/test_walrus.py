"""A walrus in a test that ``@batch`` runs as a thunk (the right operand of
``and`` / ``or``, a branch of ``a if c else b``) binds the function's
variable, as in the undecorated function, on a plain Tensor and per example
on a batch (issue 27 item 9: it bound the thunk's own variable, a
``NameError`` even on a plain Tensor)."""
import pytest
import torch

import matchbox
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")


def scan(x):
    """The issue's loop: each example stops at its own first value <= -1."""
    i = 0
    v = x[:, 0] * 0
    while i < x.size(1) and (v := x[:, i]) > -1:
        i += 1
    return v * 2 + i


def accumulate(x):
    i = 0
    total = x[:, 0] * 0
    while i < x.size(1) and (v := x[:, i]).sum() > -1.5:
        total = total + v * v
        i += 1
    return total


def in_an_if_test(x):
    y = x.sum(1)
    if y.sum() > 0 and (m := x.max(1).values) > 0.5:
        y = y + m * 3
    if y.sum() < 0 or (z := y * 2).sum() > 1:
        y = y - 1
    else:
        y = y + z
    return y


def in_a_conditional_expression(x):
    y = x.sum(1)
    y = y * 2 if y.sum() > 0 else (w := y * 3) + w * w
    z = (u := y * 2) if y.sum() < 1 else (u := y - 1)
    return y + z * u


def in_an_assigned_value(x):
    """Not a thunk, but the same slip: a walrus in an assignment's value in
    a branch bound every example (a silently wrong ``v``)."""
    v = x * 0
    if x.sum() > 0:
        y = (v := x * 2) + 1
        v = v + y
    return v


FUNCTIONS = [scan, accumulate, in_an_if_test, in_a_conditional_expression, in_an_assigned_value]


@pytest.mark.parametrize("f", FUNCTIONS)
def test_on_a_plain_tensor_as_undecorated(f):
    torch.manual_seed(0)
    for _ in range(5):
        x = torch.randn(1, 5)
        torch.testing.assert_close(matchbox.batch(f)(x), f(x))


@pytest.mark.parametrize("f", FUNCTIONS)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_per_example(f, lengths):
    mb_test(matchbox.batch(f), (8, (True, 6)), lengths=lengths, dtype=torch.float64)


def test_a_compacted_loop_binds_it_in_its_live_lanes():
    mb_test(matchbox.batch(accumulate, compact=1.0), (8, (True, 6)), dtype=torch.float64)
