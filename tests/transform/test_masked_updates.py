"""Masked updates keep each example's own value: a name rebound to a value
of another shape while only some examples are active (a value whose
examples hold different shapes raises where it is used), and an assignment
under ``torch.no_grad()`` in a branch, which must not cut the gradients of
the examples that skipped it."""
import pytest
import torch

import matchbox.functional as F
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")
EOS = 0
W = torch.randn(4, 5, dtype=torch.float64)
E = torch.randn(5, 4, dtype=torch.float64)


@batch
def greedy(h):
    """The tutorials' greedy decoder: ``topi`` is (1, 1) from ``topk``, then
    rebound to (1,) in the same step; examples stop at EOS at different steps."""
    out = []
    for i in range(6):
        scores = torch.tanh(h) @ W
        topv, topi = scores.topk(1)
        topi = topi[:, 0]
        out.append(topv)
        if (topi == EOS).any():
            break
        h = h + E[topi]
    return F.stack(out, 1).sum(1), topi


@pytest.mark.parametrize("lengths", LENGTHS)
def test_rebinding_after_break_keeps_each_examples_value(lengths):
    mb_test(greedy, (8, (False, 4)), lengths=lengths, dtype=torch.float64, seed=3)


@batch
def rebound_in_branch(x):
    t = x * 2
    if x.sum() > 0:
        t = t.sum(1)        # (1,) for these examples, (1, n) for the others
        y = t * 3
    else:
        y = x.sum(1) - 1
    t = y + 1               # every example rebinds it again: one shape
    return t * x.sum(1)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_rebinding_in_a_branch_then_everywhere(lengths):
    mb_test(rebound_in_branch, (8, (True, 5)), lengths=lengths, dtype=torch.float64)


@batch
def rebound_in_a_returning_branch(x):
    t = x * 2
    if x.sum() > 0:
        t = t.sum(1)            # (1,): only these examples, which then return
        return t * 3
    return t.sum(1) - 1         # the others still hold their (1, n) value


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_value_bound_in_a_returning_branch_needs_no_merging(lengths):
    mb_test(rebound_in_a_returning_branch, (8, (True, 5)), lengths=lengths, dtype=torch.float64)


@batch
def shapes_differ_at_the_end(x):
    topi = x[:, :2]
    if x.sum() > 0:
        topi = topi[:, 0]
    return topi


def test_a_value_of_different_shapes_per_example_raises_when_used():
    x = MaskedBatch.fromlist([torch.tensor([[1., 2, 3]]), torch.tensor([[-1., -2, -3]])],
                             (False,))
    out = shapes_differ_at_the_end(x)
    for use in (lambda v: v + 1, lambda v: torch.tanh(v), lambda v: v.examples()):
        with pytest.raises(ValueError, match=r"per-example shapes \(1,\) and \(1, 2\)"):
            use(out)
    # every example took the branch: one shape, no error
    x = MaskedBatch.fromlist([torch.tensor([[1., 2, 3]]), torch.tensor([[1., 2, 4]])], (False,))
    assert [e.shape for e in shapes_differ_at_the_end(x).examples()] == [(1,), (1,)]


@batch
def no_grad_in_branch(x, w):
    h = x * 1.5
    if x.sum() > 0:
        with torch.no_grad():
            h = h * 2           # these examples' h has no history; the others keep theirs
    return h + x


@pytest.mark.parametrize("lengths", LENGTHS)
def test_no_grad_block_in_a_branch_keeps_the_other_examples_gradients(lengths):
    mb_test(no_grad_in_branch, (8, (True, 5)), (8, (False, 1)), lengths=lengths,
            dtype=torch.float64, seed=1)


@batch
def list_plus_equals(x):
    out = [x * 1.0]
    if x.sum() > 0:
        out += [x * 2, x * 3]   # these examples' lists grow by two items
    else:
        out += [x - 1]          # the others' by one
    return F.stack(out, 1).sum(1)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_list_plus_equals_in_branches_grows_each_examples_own_list(lengths):
    mb_test(list_plus_equals, (8, (False, 3)), lengths=lengths, dtype=torch.float64, seed=2)


@batch
def list_extend(x):
    out = [x * 1.0]
    if x.sum() > 0:
        out.extend([x * 2, x * 3])
    else:
        out.extend([x - 1])
    return F.stack(out, 1).sum(1)


@batch
def walrus_countdown(x, n):
    acc = x * 0.0
    while (n := n - 1) > 0:     # each example counts down its own n
        acc = acc + x * n
    return acc + n


@batch
def container_stores(x):
    d = {"y": x * 1.0}
    acc = [x * 0.0, x * 0.0]
    if x.sum() > 0:
        d["y"] = x * 2
        acc[0] = x + 1
    else:
        d["y"] = x * 3
        acc[1] = x - 1
    return d["y"] + acc[0] * acc[1]


@pytest.mark.parametrize("f", [list_extend, container_stores], ids=["extend", "containers"])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_list_and_container_changes_in_branches_act_per_example(f, lengths):
    mb_test(f, (8, (False, 3)), lengths=lengths, dtype=torch.float64, seed=4)


@pytest.mark.parametrize("B", (1, 8))
def test_walrus_in_a_loop_test_binds_only_the_examples_still_in_the_loop(B):
    x = MaskedBatch.fromlist([torch.randn(1, 3, dtype=torch.float64) for _ in range(B)], (False,))
    n = MaskedBatch.fromlist([torch.tensor([k % 4 + 1.0], dtype=torch.float64)
                              for k in range(B)], ())   # each example's own count
    mb_test(walrus_countdown, x, n, dtype=torch.float64)


def test_insert_under_a_per_example_condition_raises():
    @batch
    def inserts(x):
        out = [x * 1.0]
        if x.sum() > 0:
            out.insert(0, x * 2)
        return out[0]

    x = MaskedBatch.fromlist([torch.ones(1, 2), -torch.ones(1, 2)], (False,))
    with pytest.raises(NotImplementedError, match="list.insert under per-example control flow"):
        inserts(x)


@batch
def returns_of_two_ranks(x):
    if x.sum() > 0:
        return x.sum(1)
    return x


def test_returns_of_different_per_example_rank_raise_naming_both_returns():
    x = MaskedBatch.fromlist([torch.ones(1, 3), -torch.ones(1, 3)], (False,))
    first = returns_of_two_ranks.__code__.co_firstlineno   # the def line
    with pytest.raises(ValueError, match=rf"shapes \(\(1,\) and \(1, 3\)\) from the return "
                                         rf"statements at lines {first + 2}, {first + 3}"):
        returns_of_two_ranks(x)
    # every example takes the same return: no error
    assert returns_of_two_ranks(x[:, :1] * 0 + 1).examples()[0].shape == (1,)


@batch
def reads_around_an_in_place_update(x):
    """``h`` read several times in each step, changed in place between the
    reads; examples leave at different steps."""
    h = x * 1.5
    n = x.sum() * 0
    while n < x.abs().sum():
        a = h * 2 + h * 3          # two reads of one h
        h.mul_(0.5)                # in place: the reads below see the new h
        h = h + a * h.tanh()
        n = n + 1
    return h * h.sum()


@pytest.mark.parametrize("lengths", LENGTHS)
def test_reads_around_an_in_place_update_in_a_loop(lengths):
    mb_test(reads_around_an_in_place_update, (8, (True, 4)), lengths=lengths,
            dtype=torch.float64, seed=5)


@batch
def sqrt_of_a_value_read_twice(x):
    """Every read of ``h`` in a step shares one gradient cut: the NaN that
    the examples done with the loop compute (sqrt of a negative) must not
    reach their gradients through either read."""
    h = x
    while h.sum() > -3:
        h = h - torch.sqrt(h.sum().clamp(min=0) + 1) + 0 * torch.sqrt(h.sum())
    return h


@pytest.mark.parametrize("lengths", LENGTHS)
def test_dormant_nan_stays_out_of_gradients_with_shared_reads(lengths):
    mb_test(sqrt_of_a_value_read_twice, (8, (True, 3)), lengths=lengths,
            dtype=torch.float64, seed=6)


@batch
def in_place_functions_after_reads(x):
    """In-place functions on a value the step has read already: each
    writes the value itself (its own read), not the reads' shared copy."""
    h = x * 1.0
    n = x.sum() * 0
    while n < x.abs().sum():
        a = h * 2 - 1              # reads h
        torch.neg_(h)              # writes h
        F.relu(h, inplace=True)    # writes h
        h = h + a * h.sum()
        n = n + 1
    return h


@pytest.mark.parametrize("lengths", LENGTHS)
def test_in_place_functions_after_reads_write_the_value(lengths):
    mb_test(in_place_functions_after_reads, (8, (True, 4)), lengths=lengths,
            dtype=torch.float64, seed=7)


def test_shared_reads_end_with_their_region():
    """The reads a loop step shares are dropped when the lanes change: none
    is kept (with the data it holds) after the call."""
    from matchbox._lanes import _ACTIVE
    x = MaskedBatch.fromlist([torch.randn(1, k, dtype=torch.float64, requires_grad=True)
                              for k in (1, 3, 5)], (True,))
    out = reads_around_an_in_place_update(x)
    assert getattr(_ACTIVE._local, "reads", None) is None
    out.padded_data.sum().backward()


# ------------------------------------------------------------------ issue 27 item 14
@batch
def saved_read_then_changed_in_place(x):
    """A read under some lanes that an op saves for its backward (``a * x``
    saves ``a``), whose result no example then uses (``detach``), and an
    in-place update of ``a`` where every example runs: fine per example;
    batched the old value's history is kept for the other lanes, so the
    saved read is reached in the backward and must still hold its values
    (the fuzzer's seed 777497 found it)."""
    a = x * 1.0
    r = x * 1.0
    if x.sum() > 0:
        r = a * x
        r = r.detach()
    a -= 1.0
    return a + r


@batch
def alias_read_across_an_in_place_update(x):
    """``p = h`` (a loop temporary) is ``h``: an in-place update of ``h``
    shows in ``p`` read after it, as for one example."""
    h = x * 1.0
    n = x.sum() * 0
    out = x * 0
    while n < x.abs().sum():
        p = h
        out = out + p * 2
        h.mul_(0.5)
        out = out + p * 3
        n = n + 1
    return out + h


@batch
def _bump(v):
    v.add_(1.0)             # per example this changes the caller's tensor
    return v * 2


@batch
def callee_changes_its_argument_in_a_branch(x):
    h = x * 1.0
    if x.sum() > 0:
        y = h * 3           # the branch reads h before the call ...
        z = _bump(h)        # ... and the call changes it in place
        h = h + y + z
    return h


@pytest.mark.parametrize("f", [saved_read_then_changed_in_place,
                               alias_read_across_an_in_place_update,
                               callee_changes_its_argument_in_a_branch])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_reads_in_a_branch_and_in_place_updates_after_them(f, lengths):
    mb_test(f, (6, (True, 3)), lengths=lengths, dtype=torch.float64)
