"""Assignment forms under @batch: plain, augmented, tuple unpacking,
subscript, attribute, and list accumulation with append."""
import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")
SCALAR = (6, (False, 1))
SEQ = (6, (True, 5), (False, 3))


@batch
def augmented(x, z):
    y = x * 1.0
    if x > 0:
        y += z
        y *= 2
    else:
        y -= z
        y /= 3
    k = 0
    if z > 0:
        k += 1
    return y + k


@batch
def tuple_unpacking(x, z):
    a, b = x * 1.0, z * 1.0
    if a > b:
        a, b = b, a
    if a + b > 0:
        (a, b), c = (b * 2, a - 1), a + b
    else:
        c = a * b
    return a + b * c


@batch
def chained(x):
    a = b = x * 1.0
    if x > 0:
        a = b = x * 2
    return a + b


@batch
def shape_changes_per_branch(x):
    # examples end up with different sizes along dim 1 (a new dynamic dim)
    if x.sum() > 0:
        y = x[:, :1] * 2
    else:
        y = x * 1.0
    return y


@batch
def subscript(x):
    out = x * 1.0
    i = x.size_as_tensor(1) - 1
    if x[:, 0].sum() > 0:
        out[:, i] = out[:, i] * 2 + 1
    return out


class State:
    pass


@batch
def attribute(x):
    s = State()
    s.h = x * 1.0
    if x > 0:
        s.h = s.h * 3
        s.h += 1
    return s.h


@batch
def collect(x):
    outs = [x[:, 0] * 1.0]
    for x_t in x.unbind(1):
        if x_t.sum() > 0:
            outs.append(torch.tanh(x_t))
    return F.stack(outs, 1)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f,specs", [
    (augmented, (SCALAR, SCALAR)),
    (tuple_unpacking, (SCALAR, SCALAR)),
    (chained, (SCALAR,)),
    (attribute, (SCALAR,)),
    (shape_changes_per_branch, (SEQ,)),
    (subscript, (SEQ,)),
    (collect, (SEQ,)),
])
def test_batched_equals_per_example(f, specs, lengths):
    mb_test(f, *specs, lengths=lengths, dtype=torch.float64)


def test_append_records_lengths():
    xs = [torch.tensor([[[1.0], [-1.0], [2.0]]]), torch.tensor([[[-1.0], [-1.0]]]),
          torch.tensor([[[3.0], [4.0], [5.0], [-6.0]]])]
    out = collect(MaskedBatch.fromlist(xs, (True, False)))
    assert out.size_as_tensor(1).data.tolist() == [3, 1, 4]
