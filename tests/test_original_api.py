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


# ---------------------------------------------------------------- README RNN
# The original README's RNN: its initial state is made on the input with
# x.new(x.size(0), x.size(-1)).zero_() (later x.new_zeros(...)).  On a
# batch x.size(0) is each example's leading 1, so the state is (1, hidden)
# per example, as on one example.
class OldStyleRNN(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.cell = torch.nn.RNNCell(size, size)

    @batch
    def forward(self, x):
        h = x.new(x.size(0), x.size(-1)).zero_()
        for xt in x.unbind(1):
            h = self.cell(xt, h)
        return h


class NewZerosRNN(OldStyleRNN):
    @batch
    def forward(self, x):
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = self.cell(xt, h)
        return h


@pytest.mark.parametrize("cls", [OldStyleRNN, NewZerosRNN])
@pytest.mark.parametrize("spec", [(4, (True, 3), (False, 1)), (4, (True, 5), (False, 2)),
                                  (1, (True, 3), (False, 2)), (3, (False, 3), (False, 2))])
def test_readme_rnn_initial_state(cls, spec):
    mb_test(cls(spec[-1][1]).double(), spec, dtype=torch.float64)


@pytest.mark.parametrize("cls", [OldStyleRNN, NewZerosRNN])
def test_readme_rnn_on_one_plain_example(cls):
    model = cls(2)
    x = torch.randn(1, 4, 2)
    h = torch.zeros(1, 2)
    for xt in x.unbind(1):
        h = model.cell(xt, h)
    assert torch.allclose(model(x), h)


def test_new_zero_state_is_per_example_and_zero():
    x = mb_rand(3, (True, 4), (False, 5))
    h = x.new(x.size(0), x.size(-1)).zero_()
    assert h.batch_size == 3 and h.dims == (False,)
    assert all(e.shape == (1, 5) and not e.any() for e in h.examples())


# ------------------------------------------------------------- argument specs
@pytest.mark.parametrize("spec, shapes", [
    ((4, ()), [(1,)] * 4),                       # one value per example
    ((2, (), ()), [(1,)] * 2),                   # () entries are no dims
    ((3, (False, 2)), [(1, 2)] * 3),
    ((3, (0, 2), ()), [(1, 2)] * 3),             # dynamic given as 0/1
    ([2, [False, 3]], [(1, 3)] * 2),             # lists for tuples
])
def test_mb_rand_original_specs(spec, shapes):
    x = mb_rand(*spec) if isinstance(spec, tuple) else mb_rand(spec)
    assert [tuple(e.shape) for e in x.examples()] == shapes


def test_mb_rand_dynamic_sizes_stay_in_range():
    x = mb_rand(6, (True, 3), (1, 4))
    assert x.dims == (True, True)
    for e in x.examples():
        assert 1 <= e.size(1) <= 3 and 1 <= e.size(2) <= 4


def test_mb_test_original_argument_forms():
    """The original's mb_test forms: a batch spec, a shape tuple for a
    Tensor shared by all examples, an int reusing an earlier argument."""
    mb_test(lambda a, w: a @ w, (4, (True, 3), (False, 2)), (2, 5))
    mb_test(lambda a, b: a * b + a, (4, (True, 3), (False, 2)), 0)
    mb_test(lambda a, b: a * b, (4, ()), (4, ()))
    mb_test(lambda a, s: a * s, (4, (True, 3)), ())


@pytest.mark.parametrize("spec", [(4, (True,)), (4, (True, 3, 2)), (4, (True, "3")),
                                  ("4", (True, 3)), (4, (True, -1))])
def test_a_spec_mb_test_cannot_read_says_what_it_accepts(spec):
    with pytest.raises(ValueError, match=r"\(B, \(dynamic, size\)"):
        mb_test(lambda a: a, spec)
    with pytest.raises(ValueError, match=r"\(B, \(dynamic, size\)"):
        mb_rand(*spec)
