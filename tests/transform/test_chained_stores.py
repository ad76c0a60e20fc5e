"""Stores into an item of an item: ``buf[i][0][k] = 1`` and ``y[0][j] += v``
(the char-RNN tutorial's one-hot, written per example the ordinary way).
The rewrite makes them one store (``rt.path``) that honours the lanes and
gives each example its own copy of a Tensor the function made; before, a
chained ``+=`` in a loop wrote into a copy of the value that the loop's
read had cut, and the first write of each example was lost (a silently
wrong result), and ``y[0][j] = v`` on a batch raised about the leading 1."""
import pytest
import torch

import matchbox
from matchbox.test_utils import mb_test

D = torch.float64
LENGTHS = ("mixed", "one", "equal")


def counts(line):
    tensor = torch.zeros(len(line), 1, 3, dtype=D)
    for li, letter in enumerate(line):
        tensor[li][0][ord(letter) % 3] += 1.5
    return tensor


@matchbox.batch
def scaled_counts(x, line):                      # x: (1, 3); line: a string
    return x * counts(line).sum(0)


def test_chained_augmented_store_into_a_buffer():
    mb_test(scaled_counts, (4, (False, 3)), matchbox.objects(["ab", "c", "abcab", "bb"]),
            dtype=D)


@matchbox.batch
def overwritten(x):                              # x: (1, n)
    y = x * 1.0
    for j in range(x.size(1)):
        y[0][j] = y[0][j] * j
    return y * 2


@matchbox.batch
def incremented(x):
    y = x * 1.0
    for j in range(x.size(1)):
        y[0][j] += x[0][j] * 2.0
    if x.sum() > 0:
        y[0][0] = 5.0
    return y * 2


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", [overwritten, incremented])
def test_chained_stores_into_a_batch(f, lengths):
    mb_test(f, (5, (True, 4)), lengths=lengths, dtype=D)


@matchbox.batch
def into_a_list_item(x):                         # x: (1, n)
    hs = [x * 1.0, x * 2.0]
    for j in range(x.size(1)):
        hs[1][0, j] = hs[0][0, j] + j
    return hs[0] + hs[1]


@pytest.mark.parametrize("lengths", LENGTHS)
def test_chained_store_into_a_list_item(lengths):
    mb_test(into_a_list_item, (5, (True, 4)), lengths=lengths, dtype=D)


def test_source_reads_and_stores_one_item():
    src = matchbox.to_source(matchbox.batch(counts))
    assert "key = _mb.path(_mb.read(li), 0," in src and \
        "tensor = _mb.setitem(tensor, key, _mb.aug_assign(_mb.getitem(tensor, key), '+='" in src, src
