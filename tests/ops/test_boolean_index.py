"""x[mask] with a bool mask and masked_select: a dynamic number of entries
per example, equal per example (values and gradients) on every placement of
the batch-of-one dimension (issue 27 item 10)."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

D = torch.float64
LENGTHS = ("mixed", "one", "equal")
PLACES = {"first": 0, "second": 1, "none": None}
SPECS = {"n": (4, (True, 5)), "n3": (4, (True, 5), (False, 3)), "3n": (4, (False, 3), (True, 5)),
         "nm": (3, (True, 4), (True, 3))}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("place", PLACES)
def test_entries_above_zero(place, spec, lengths):
    """x[x > 0]: per example a 1-D (N,) of its positive entries in order."""
    mb_test(lambda x: poison(x)[x > 0] * 2, SPECS[spec], batch_dim=PLACES[place], lengths=lengths,
            dtype=D)


def _rows(x, bdim):
    """Rows of an (1, n, 3) / (n, 1, 3) / (n, 3) example whose sum is positive."""
    if bdim == 1:
        return x[x.sum(-1).squeeze(1) > 0]        # mask (n,): the batch-of-one dim stays, (N, 1, 3)
    return x[x.sum(-1) > 0]                       # (1, n) or (n,): (N, 3)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("place", PLACES)
def test_rows_under_a_mask_over_the_leading_dims(place, lengths):
    bdim = PLACES[place]
    mb_test(lambda x: _rows(poison(x), bdim).tanh(), SPECS["n3"], batch_dim=bdim, lengths=lengths,
            dtype=D)


def test_a_mask_with_dynamic_trailing_dims_and_masked_select():
    mb_test(lambda x: x[x.sum(-1) > 0].sum(-1), SPECS["nm"], lengths="mixed", dtype=D)
    mb_test(lambda x: torch.masked_select(x, x > 0.5), SPECS["n3"], lengths="mixed", dtype=D)
    mb_test(lambda x: x.masked_select(torch.tensor([True, False, True])), SPECS["n3"],
            lengths="mixed", dtype=D)


def test_a_plain_mask_and_a_plain_table():
    keep = torch.tensor([True, False, True])
    mb_test(lambda x: x[keep], SPECS["3n"], batch_dim=None, lengths="mixed", dtype=D)
    table = torch.randn(5, 3, dtype=D, requires_grad=True)
    flags = MaskedBatch.fromlist([torch.tensor([True, False, True, True, False]),
                                  torch.tensor([False] * 5), torch.tensor([True] * 5)], batch_dim=None)
    mb_test(lambda f: table[f] * 1, flags, params=[table])


def test_an_example_with_no_entry_is_empty():
    x = MaskedBatch.fromlist([torch.tensor([[1.0, -2.0]]), torch.tensor([[-1.0, -3.0, -4.0]])], (True,))
    y = x[x > 0]
    assert [e.shape for e in y.examples()] == [(1,), (0,)]
    assert y.sum().examples()[1] == 0


@matchbox.batch
def positive_steps(x):                          # x: (1, n, 3)
    total = x.sum(1) * 0
    for t in x.unbind(1):
        if t.sum() > 0:
            total = total + t[t > 0].sum() * t
    return total


@pytest.mark.parametrize("lengths", LENGTHS)
def test_under_batch_in_a_branch(lengths):
    mb_test(positive_steps, SPECS["n3"], lengths=lengths, dtype=D)


def test_a_mask_of_another_shape_raises_as_torch():
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 2)], (True,))
    m = MaskedBatch.fromlist([torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)],
                             (True,))
    with pytest.raises(IndexError, match="shape of the mask"):
        x[m]
