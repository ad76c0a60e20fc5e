"""``assert`` in per-example code checks every active example (the
BiLSTM-CRF tutorial's ``assert start == self.tag_to_ix[START_TAG]``);
before, a per-example test raised 'Python needs one value for the whole
batch'."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

D = torch.float64


@matchbox.batch
def checked(x):                                  # x: (1, n)
    n = x.size(1)
    assert n >= 1, f"empty example of {n} steps"
    total = x.sum(1)
    if total.item() > 0:
        assert total > 0           # only the examples in the branch are checked
    assert x.size(0) == 1          # a Python test keeps Python's semantics
    return total * n


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_asserts_that_hold_for_every_example(lengths):
    mb_test(checked, (5, (True, 4)), lengths=lengths, dtype=D)


@matchbox.batch
def strict(x):                                   # x: (1, n)
    n = x.size(1)
    assert n < 3, f"too long: {n}"
    return x.sum(1)


def test_an_assert_that_fails_for_one_example_names_it():
    x = MaskedBatch.fromlist([torch.ones(1, 2), torch.ones(1, 4), torch.ones(1, 1)], (True,))
    with pytest.raises(AssertionError, match="too long: 4") as info:
        strict(x)
    if hasattr(info.value, "__notes__"):
        assert "example 1" in info.value.__notes__[0]
    strict(MaskedBatch.fromlist([torch.ones(1, 2), torch.ones(1, 1)], (True,)))


def test_the_message_is_made_only_on_failure():
    calls = []

    @matchbox.batch
    def f(x):
        assert x.sum() > -100, calls.append(1)
        return x * 2

    f(MaskedBatch.fromlist([torch.ones(1, 2), torch.ones(1, 3)], (True,)))
    assert calls == []
