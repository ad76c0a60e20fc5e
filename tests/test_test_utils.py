"""mb_test itself: it must catch wrong values and wrong gradients."""
import pytest
import torch
import torch.nn as nn

from matchbox import MaskedBatch
from matchbox.test_utils import mb_assert, mb_rand, mb_test


def test_mb_rand_shapes_and_shared_lengths():
    b = mb_rand(5, (True, 4), (False, 3))
    assert isinstance(b, MaskedBatch) and b.dims == (True, False) and b.batch_size == 5
    assert all(1 <= e.size(1) <= 4 and e.size(2) == 3 for e in b.examples())
    assert mb_rand(2, 3).shape == (2, 3)
    sq = mb_rand(4, (True, 3), (True, 3))
    assert all(e.size(1) == e.size(2) for e in sq.examples())
    one = mb_rand(3, (True, 4), lengths="one")
    assert [e.size(1) for e in one.examples()] == [1, 1, 1]


def test_catches_wrong_values_naming_example():
    f = lambda x: x * (2 if isinstance(x, MaskedBatch) else 1)  # noqa: E731
    with pytest.raises(AssertionError, match=r"output, example 0: worst error"):
        mb_test(f, (3, (True, 4)))


def test_catches_wrong_input_gradients():
    def f(x):
        if isinstance(x, MaskedBatch):  # same values, doubled gradient
            return x + (x - x.detach())
        return x
    with pytest.raises(AssertionError, match="gradient of argument 0, example"):
        mb_test(f, (3, (True, 4)))
    mb_test(f, (3, (True, 4)), grad=False)


def test_catches_wrong_parameter_gradients():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4))

        def forward(self, x):
            w = self.w * 3 - 2 * self.w.detach() if isinstance(x, MaskedBatch) else self.w
            return x * w
    with pytest.raises(AssertionError, match="gradient of parameter w"):
        mb_test(M(), (3, (False, 4)))


def test_shared_tensor_and_reused_argument():
    mb_test(lambda x, w, y: x * w + y, (3, (True, 4), (False, 2)), (2,), 0)
    with pytest.raises(AssertionError, match="gradient of shared argument 1"):
        mb_test(lambda x, w: x * (w if not isinstance(x, MaskedBatch) else w * 2 - w.detach()),
                (3, (True, 4), (False, 2)), (2,))


def test_tuple_outputs_and_shape_mismatch():
    mb_test(lambda x: (x.exp(), [x * 2]), (3, (True, 4)))
    with pytest.raises(AssertionError, match=r"output\[1\], example 0: shape"):
        mb_test(lambda x: (x, x.padded_data[:, :1] if isinstance(x, MaskedBatch) else x), (3, (True, 4)),
                lengths="equal")


def test_mb_assert_original_form():
    xs = [torch.randn(1, n) for n in (2, 3)]
    mb_assert(torch.tanh, [xs], [MaskedBatch.fromlist(xs, (True,))], 2)


def test_mb_assert_shared_argument_is_passed_unchanged():
    """A non-list argument is shared by every example (the original
    Matchbox's convention), not indexed per example."""
    xs = [torch.randn(1, n, 3) for n in (2, 4, 1)]
    W = torch.randn(3, 5)  # indexing it per example would give a (5,) row
    mb_assert(lambda x, w: x @ w, [xs, W], [MaskedBatch.fromlist(xs, (True, False)), W], 3)
    mb_assert(lambda x, k: x * k, [xs, 2.0], [MaskedBatch.fromlist(xs, (True, False)), 2.0], 3)


def test_mb_test_checks_per_example_losses():
    """A loss reduced inside per-example code is one value per example:
    mb_test compares each example's value and gradients."""
    lin = nn.Linear(3, 4).double()
    f = lambda x: nn.functional.mse_loss(lin(x), lin(x).detach() * 0.5)  # noqa: E731
    out = mb_test(f, (3, (True, 4), (False, 3)), dtype=torch.float64)
    assert isinstance(out, MaskedBatch) and out.dims == ()


def test_mb_test_rejects_a_batch_combined_loss_with_advice():
    from matchbox import example_mean
    with pytest.raises(AssertionError, match="combined over the batch"):
        mb_test(lambda x: example_mean(x.sum()) if isinstance(x, MaskedBatch) else x.sum(),
                (3, (True, 4)))
