"""split / chunk / unbind / tensor_split along a dynamic dim (issue 30): each
example gets its own pieces, never the longest one's count.  The pieces are
a per-example list (piece ``k`` holds no value in an example with fewer),
which mb_test compares per example, cat and stack join per example, and
@batch's for loop walks per example."""
import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_assert_allclose, mb_test

MODES = ("mixed", "one", "equal")
DYN = (4, (True, 7), (False, 2))
kw = dict(dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
@pytest.mark.parametrize("f", [
    lambda x: x.split(2, 1), lambda x: torch.split(x, 3, dim=-2), lambda x: x.chunk(3, 1),
    lambda x: torch.chunk(x, 2, 1), lambda x: x.chunk(5, 1), lambda x: x.unbind(1),
    lambda x: torch.tensor_split(x, 3, 1), lambda x: x.tensor_split([1, 4], 1),
])
def test_each_example_gets_its_own_pieces(f, lengths):
    mb_test(f, DYN, lengths=lengths, **kw)
    mb_test(f, DYN, lengths=lengths, batch_dim=1, **kw)


def test_the_piece_counts_are_per_example():
    xs = [torch.randn(1, n, 2) for n in (1, 5, 3, 7)]
    x = MaskedBatch.fromlist(xs, (True, False))
    for f in (lambda t: t.split(2, 1), lambda t: t.chunk(3, 1), lambda t: t.chunk(2, 1)):
        pieces = f(x)
        assert pieces.presences().sum(1).tolist() == [len(f(t)) for t in xs]


@pytest.mark.parametrize("lengths", MODES)
def test_cat_and_stack_join_each_examples_own_pieces(lengths):
    mb_test(lambda x: torch.cat(x.chunk(3, 1)[::-1], 1), DYN, lengths=lengths, **kw)
    mb_test(lambda x: F.stack([p.sum(1) for p in x.split(2, 1)], 1), DYN, lengths=lengths, **kw)


@pytest.mark.parametrize("lengths", MODES)
def test_a_batch_for_loop_walks_each_examples_own_pieces(lengths):
    @matchbox.batch
    def f(x):
        total = x[:, 0] * 0
        count = 0
        for piece in x.chunk(3, 1):
            total = total + piece.sum(1)
            count += 1
        return total * count

    mb_test(f, DYN, lengths=lengths, **kw)


def test_an_example_of_length_zero_has_its_own_empty_pieces():
    x = MaskedBatch.fromlist([torch.randn(1, 0, 2), torch.randn(1, 3, 2)], (True, False))
    for f in (lambda t: t.split(2, 1), lambda t: t.chunk(2, 1)):
        mb_assert_allclose([f(t) for t in x.examples()], f(x))
