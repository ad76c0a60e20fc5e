"""The original Matchbox's argument specs (SPEC section 6): ``(4, ())`` is
one value of shape (1,) per example, as in its control-flow tests."""
import pytest
import torch

from matchbox import batch
from matchbox.test_utils import mb_rand, mb_test


@batch
def while_loop(x):
    while x > 0:
        x = x - 1
    return x


@batch
def if_else(x):
    if x > 0:
        x = x * 2
    else:
        x = x - 3
    return x


@pytest.mark.parametrize("f", [while_loop, if_else])
@pytest.mark.parametrize("B", [1, 4, 7])
def test_original_control_flow_tests(f, B):
    mb_test(f, (B, ()))


def test_a_spec_with_no_dims_is_one_value_per_example():
    x = mb_rand(4, ())
    assert x.batch_size == 4 and x.dims == ()
    assert [e.shape for e in x.examples()] == [(1,)] * 4
    assert mb_rand((3, ())).batch_size == 3
