"""The steps of ``x.unbind(d)`` read as each example's own tuple (issue 27
items 1 and 7): ``steps[-1]`` is each example's own last step, ``steps[i]``
its own i-th, ``len(steps)`` and ``sum(steps)`` under ``@batch`` its own;
what cannot be per example raises where it is made, naming it."""
import functools

import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")
SEQ = (6, (True, 5), (False, 3))
W = torch.randn(3, 3, dtype=torch.float64)


def _short():
    """Example 1 has one step, the others more."""
    return MaskedBatch.fromlist([torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 1, 2)],
                                (True, False))


# ------------------------------------------------------------------ item 1: steps[-1], steps[i]
def last_step(x):
    steps = x.unbind(1)
    return steps[-1] * 2 + steps[0]


def branch_on_the_last_step(x):
    steps = x.unbind(1)
    if steps[-1].sum() > 0:            # each example's own last step decides
        return torch.tanh(steps[-1] @ W)
    return steps[0] * 3


def indexed_loop(x):
    steps = x.unbind(1)
    h = x[:, 0] * 0
    for i in range(len(steps)):        # each example's own number of steps
        h = torch.tanh(h @ W + steps[i])
    return h


def second_step_where_there_is_one(x):
    steps = x.unbind(1)
    y = steps[0] * 1.0
    if x.size(1) > 1:                  # only the examples with a second step read it
        y = y + steps[1]
    return y


def slices(x):
    steps = x.unbind(1)
    rest, head = steps[1:], steps[:-1]
    out = F.stack(steps[::-1], 1).sum(1)
    if len(rest) > 0:
        out = out + F.stack(rest, 1).sum(1) * 2 + F.stack(head, 1).sum(1) * 3
    return out + steps[-2:][0]


ITEM_1 = [last_step, branch_on_the_last_step, indexed_loop, second_step_where_there_is_one]


@pytest.mark.parametrize("f", ITEM_1)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_steps_indexed_are_each_examples_own(f, lengths):
    mb_test(matchbox.batch(f), SEQ, lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_slices_of_steps_are_each_examples_own(lengths):
    mb_test(matchbox.batch(slices), (6, (True, 5), (False, 3)), lengths=lengths,
            dtype=torch.float64, seed=1)


def test_last_step_without_batch_and_sequence_first():
    """``steps[-1]`` is per example outside ``@batch`` too, and where each
    example is sequence-first ``(n, 1, d)``."""
    mb_test(last_step, SEQ, dtype=torch.float64)
    xs = [torch.randn(n, 1, 3, dtype=torch.float64) for n in (2, 4, 1)]
    x = MaskedBatch.fromlist(xs, (True, False), batch_dim=1)
    for got, e in zip(x.unbind(0)[-1].examples(), xs):
        assert torch.equal(got, e[-1])


def test_a_step_an_active_example_lacks_raises_naming_it():
    x = _short()

    @matchbox.batch
    def third(x):
        steps = x.unbind(1)
        return steps[2]
    with pytest.raises(IndexError, match=r"steps\[2\] of x.unbind.*example 1"):
        third(x)
    with pytest.raises(IndexError, match=r"steps\[2\] of x.unbind.*example 1"):
        x.unbind(1)[2]                 # outside @batch too, as per example


# ------------------------------------------------------------------ item 7: sums and loops
def sum_of_steps(x):
    return sum(x.unbind(1))


def generator_sum(x):
    return sum(torch.tanh(s @ W) for s in x.unbind(1))


def sum_of_an_appended_list(x):
    hs = []
    for t in x.unbind(1):
        hs.append(t * 2)
    return sum(hs, x[:, 0])


ITEM_7 = [sum_of_steps, generator_sum, sum_of_an_appended_list, indexed_loop, last_step]


@pytest.mark.parametrize("f", ITEM_7)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_sums_and_loops_over_steps_are_each_examples_own(f, lengths):
    mb_test(matchbox.batch(f), SEQ, lengths=lengths, dtype=torch.float64)


def reduce_over_steps(x):
    return functools.reduce(lambda a, b: a * 0.5 + b, x.unbind(1))


def plain_loop_over_an_appended_list(x):
    hs = []
    for t in x.unbind(1):
        hs.append(t * 2)
    return sum(hs)


@pytest.mark.parametrize("f, where", [
    (sum_of_steps, "__add__"), (generator_sum, "__add__"), (reduce_over_steps, "__add__"),
    (plain_loop_over_an_appended_list, "__add__")])
def test_outside_batch_a_missing_step_raises_where_it_is_joined(f, where):
    x = _short()
    with pytest.raises(ValueError, match=rf"{where}: one operand holds no value for example 1"):
        f(x)


def test_reduce_under_batch_raises_where_it_is_joined():
    """``functools.reduce`` walks every padded step: it raises at the op
    that joins a step an example lacks (a for loop is each example's own)."""
    x = _short()
    with pytest.raises(ValueError, match="holds no value for example 1.*for loop over x.unbind"):
        matchbox.batch(reduce_over_steps)(x)


def test_an_indexed_loop_outside_batch_raises_at_the_missing_step():
    x = _short()
    with pytest.raises(IndexError, match=r"steps\[1\] of x.unbind.*example 1"):
        indexed_loop(x)


# ------------------------------------------------------------------ item 7: empty examples
def _with_an_empty_example():
    torch.manual_seed(0)
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (2, 0, 3)]
    return MaskedBatch.fromlist(xs, (True, False))


@pytest.mark.parametrize("f", [
    lambda x: x.mT @ x,
    lambda x: torch.bmm(x.transpose(1, 2), torch.tanh(x)),
    lambda x: torch.einsum("bnd,bne->bde", x, x),
    lambda x: torch.zeros(1, 4, 3, dtype=torch.float64).scatter_add(
        1, (x.abs() * 3).long().clamp(max=3), x),
], ids=["mT_matmul", "bmm", "einsum", "scatter_add"])
def test_a_product_over_an_empty_example_is_its_zero(f):
    mb_test(f, _with_an_empty_example(), dtype=torch.float64)


# ------------------------------------------------------------------ steps held by a variable
def steps_in_a_compacted_loop(x, s):
    st = s.unbind(1)
    a = x * 1.0
    k = 0
    while k < 3 and a.sum() < 2:
        a = a + st[-1] * 0.5 + sum(st) * 0.25 + len(st) * 0.1
        if s.size(1) > 1:
            a = a + st[1]
        k += 1
    return a


def steps_rebound_in_a_branch(x, s):
    st = s.unbind(1)
    if x.sum() > 0:
        st = (s * 2).unbind(1)       # a masked update, item by item
    return st[-1] + sum(st) + x


@pytest.mark.parametrize("f", [steps_in_a_compacted_loop, steps_rebound_in_a_branch])
@pytest.mark.parametrize("compact", [None, 1.0])
def test_steps_a_variable_holds_stay_each_examples_own(f, compact):
    mb_test(matchbox.batch(f, compact=compact), (6, (False, 1)), (6, (True, 4), (False, 1)),
            dtype=torch.float64)


def masked_value_into_a_compacted_loops_state(x, s):
    """``h`` stays compacted between the steps of a compacted loop; a value
    with a mask (here a step read from outside the loop) assigned to it must
    not leave it at the loop's rows after the loop (fuzzer seed 6000270)."""
    st = s.unbind(1)
    h = x * 1.0
    for t in s.unbind(1):
        h = h + t
        h = h + st[0] * 0.5
    return h * 2


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_masked_value_into_a_compacted_loops_state(lengths):
    mb_test(matchbox.batch(masked_value_into_a_compacted_loops_state, compact=1.0),
            (6, (False, 1)), (6, (True, 4), (False, 1)), lengths=lengths, dtype=torch.float64)
