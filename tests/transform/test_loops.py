"""while / for / break / continue under @batch: batched runs equal
per-example runs, values and gradients."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_rand, mb_test
from matchbox.transform import LoopLimitError

LENGTHS = ("mixed", "one", "equal")
SCALAR = (6, (False, 1))
SEQ = (6, (True, 5), (False, 3))


@batch
def while_loop(x):
    y = x
    while y < 2:
        y = y + 0.7 + torch.sigmoid(y)
    return y


@batch
def while_true_break(x):
    y = x
    n = 0
    while True:
        y = y * 1.3 + 0.2
        n += 1
        if y > 1.5:
            break
        if n >= 6:
            break
    return y * n


@batch
def while_else(x):
    y = x
    k = 0
    while k < 4:
        k += 1
        y = y + 0.5
        if y > 1.2:
            y = y * 2
            break
    else:
        y = -y
    return y


@batch
def while_continue(x):
    y = x * 0
    i = 0
    while i < 5:
        i += 1
        if x + i * 0.3 > 1:
            continue
        y = y + x * i
    return y


@batch
def nested_while(x, z):
    a = x
    while a < 1.5:
        a = a + 0.5
        b = z
        while b < a:
            b = b + 0.4
            if b * a > 2:
                break
        a = a + b * 0.1
    return a


@batch
def rnn(x, w):
    h = x.batch_zeros(3)
    for x_t in x.unbind(1):
        h = torch.tanh(h * w + x_t)
    return h


@batch
def rnn_reversed_enumerate(x, w):
    h = x.batch_zeros(3)
    for i, x_t in enumerate(reversed(x.unbind(1))):
        h = torch.tanh(h * w + x_t * (i + 1))
    return h


@batch
def rnn_zip(x, y):
    h = x.batch_zeros(3)
    for x_t, y_t in zip(x.unbind(1), y.unbind(1)):
        if (x_t * y_t).sum() > 0:
            h = h + x_t * y_t
        else:
            h = h - x_t
    return h


@batch
def rnn_break_continue(x):
    h = x[:, 0] * 0  # requires grad in every example, even one that breaks at once
    for x_t in x.unbind(1):
        if x_t.sum() < -1:
            break
        if x_t.sum() > 1:
            continue
        h = torch.tanh(h + x_t)
    return h


@batch
def range_per_example(x):
    n = x.size_as_tensor(1)
    s = x.sum(1) * 0
    for i in range(n):
        s = s + x.sum(1) * (i + 1)
    return s


@batch
def range_reversed(x, z):
    n = x.size_as_tensor(1)
    s = z
    for i in reversed(range(n)):
        s = s * 0.5 + i
    return s


@batch
def for_else(x):
    y = x
    for i in range(4):
        y = y + i
        if y > 3:
            break
    else:
        y = y * 10
    return y


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f,specs", [
    (while_loop, (SCALAR,)),
    (while_true_break, (SCALAR,)),
    (while_else, (SCALAR,)),
    (while_continue, (SCALAR,)),
    (nested_while, (SCALAR, SCALAR)),
    (for_else, (SCALAR,)),
    (rnn, (SEQ, (3,))),
    (rnn_reversed_enumerate, (SEQ, (3,))),
    (rnn_zip, (SEQ, SEQ)),
    (rnn_break_continue, (SEQ,)),
    (range_per_example, (SEQ,)),
    (range_reversed, (SEQ, (6, (False, 1)))),
])
def test_batched_equals_per_example(f, specs, lengths):
    mb_test(f, *specs, lengths=lengths, dtype=torch.float64)


def test_plain_tensor_batch_size_one():
    x = torch.tensor([[0.1]])
    assert while_true_break(x).item() == pytest.approx(
        [v for v in [0.1]][0] * 0 + _ref_while_true_break(0.1))
    seq = torch.randn(1, 4, 3)
    h = torch.zeros(1, 3)
    for t in range(4):
        h = torch.tanh(h * 0.5 + seq[:, t])
    torch.testing.assert_close(rnn(seq, torch.full((3,), 0.5)), h)


def _ref_while_true_break(y):
    n = 0
    while True:
        y = y * 1.3 + 0.2
        n += 1
        if y > 1.5 or n >= 6:
            break
    return y * n


def test_max_iterations_names_the_loop():
    @batch(max_iterations=20)
    def forever(x):
        while x < 1:
            x = x + 0.25 * (x > 0)
        return x

    x = MaskedBatch.fromlist([torch.tensor([[2.0]]), torch.tensor([[-1.0]])], (False,))
    with pytest.raises(LoopLimitError, match=r"while loop at .*test_loops.py:\d+ .*forever.*examples \[1\]"):
        forever(x)
    assert forever(torch.tensor([[0.5]])).item() == pytest.approx(1.0)


def test_loop_body_skipped_when_no_lane_has_item():
    seen = []
    record = seen.append  # (a change to an enclosing list in the loop itself is refused)

    @batch
    def f(x):
        h = x.batch_zeros(3)
        for x_t in x.unbind(1):
            record(1)
            h = h + x_t
        return h

    x = mb_rand(3, (True, 4), (False, 3), lengths="one")
    x = MaskedBatch(torch.cat([x.padded_data, x.padded_data.new_zeros(3, 2, 3)], 1),
                    torch.cat([x.mask, x.mask.new_zeros(3, 2, 1)], 1), x.dims)
    f(x)
    assert len(seen) == 1


@batch
def _last_item(x):
    for i, x_t in enumerate(x.unbind(1)):
        y = x_t * 2
    return x_t * i + y


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_loop_target_after_the_loop_is_each_examples_last_item(lengths):
    mb_test(_last_item, (5, (True, 4), (False, 2)), lengths=lengths, dtype=torch.float64)
    mb_test(_last_item, (1, (False, 3), (False, 2)), dtype=torch.float64)


@batch
def _mirror(x):
    """Pairs each step with its mirror image: x[t] with x[n - 1 - t]."""
    out = []
    for a, b in zip(x.unbind(1), reversed(x.unbind(1))):
        out.append(a * b.sin())
    return matchbox.functional.stack(out, 1)


@batch
def _zip_reversed(x, y):
    """zip of two reversed sequences of different lengths pairs each one's
    own last steps, then the steps before them."""
    h = x.batch_zeros(x.maxsize(2))
    for a, b in zip(reversed(x.unbind(1)), reversed(y.unbind(1))):
        h = torch.tanh(h + a * b)
    return h


@batch
def _reverse_then_last(x):
    out = []
    for i, a in enumerate(reversed(x.unbind(1))):
        out.append(a * (i + 1))
    return matchbox.functional.stack(out[::-1], 1) + a.unsqueeze(1)


@batch
def _cat_steps(x, w):
    """A list of per-step vectors joined with torch.cat, as written for one
    example: each example's result is as long as its own steps."""
    out = []
    for step in reversed(x.unbind(1)):
        out.append(torch.sigmoid(step * w))
    return torch.cat(out, 1)


@pytest.mark.parametrize("lengths", ["random", "mixed", "one", "equal"])
def test_cat_of_a_per_example_list(lengths):
    mb_test(_cat_steps, (5, (True, 6), (False, 2)), (1, 2), lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", ["random", "mixed", "one", "equal"])
def test_reversed_steps_are_each_examples_own(lengths):
    mb_test(_mirror, (5, (True, 6), (False, 2)), lengths=lengths, dtype=torch.float64)
    mb_test(_zip_reversed, (5, (True, 6), (False, 2)), (5, (True, 4), (False, 2)),
            lengths=lengths, dtype=torch.float64)
    mb_test(_reverse_then_last, (5, (True, 6), (False, 2)), lengths=lengths,
            dtype=torch.float64)
