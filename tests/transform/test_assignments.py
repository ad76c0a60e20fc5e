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


@batch
def collect_mixed(x):
    """One list fed at the loop's level and in a branch: after a branch
    append the next step's lanes are not known to hold every item, so
    append must look (an append that trusts the loop's shrinking lanes
    would put items at the wrong per-example positions)."""
    outs = []
    for x_t in reversed(x.unbind(1)):
        outs.append(x_t * 2.0)
        if x_t.sum() > 0:
            outs.append(torch.tanh(x_t))
    return F.stack(outs, 1)


@batch
def third_item(x):
    """``outs[2]``: each example's own third item, wherever its earlier
    items came from."""
    outs = [x[:, 0] * 1.0]
    for x_t in x.unbind(1):
        if x_t.sum() > 0:
            outs.append(torch.tanh(x_t))
        outs.append(x_t * 2.0)
    return outs[2]


def test_items_keep_per_example_positions():
    """Examples 0 and 2 append in the branch at step 0, example 1 does not:
    example 1's third item is its step-1 item, at list position 2 though
    the others' step-1 items are at position 3."""
    xs = [torch.tensor([[[1.0], [2.0], [3.0]]]), torch.tensor([[[-1.0], [-2.0]]]),
          torch.tensor([[[4.0], [-5.0]]])]
    out = third_item(MaskedBatch.fromlist(xs, (True, False))).examples()
    for x, o in zip(xs, out):
        torch.testing.assert_close(o, third_item(MaskedBatch.fromlist([x], (True, False))).examples()[0])
    torch.testing.assert_close(out[1], torch.tensor([[-4.0]]))


@batch
def collect_while(x):
    """Appends in a while loop whose lanes shrink, some in a branch."""
    h = x.sum(1) * 1.0
    outs = [h]
    n = 0
    while h.abs().sum() < 4 and n < 6:
        h = h * 1.5 + 0.3
        if h.sum() > 1:
            outs.append(h.sin())
        outs.append(h)
        n += 1
    return F.stack(outs, 1)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f,specs", [
    (collect_mixed, (SEQ,)),
    (collect_while, (SEQ,)),
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
    assert out.size_as_tensor(1).padded_data.tolist() == [3, 1, 4]


# ------------------------------------------------------------------ loop temporaries
@batch
def loop_temporaries(x, z):
    """``t``, ``u`` and ``x_t`` are temporaries of their loops (bound first,
    read only in the body); ``h`` and ``n`` are not."""
    h = z * 1.0
    n = 0
    for x_t in x.unbind(1):
        t = torch.tanh(x_t.sum() + h)
        if t > 0.3:
            continue
        u = t * 2 - h          # bound after a continue: lanes that left never read it
        h = h + u
    while h < 1 and n < 4:
        t = h.abs() + 0.5      # the same name, a temporary of this loop too
        h = h + t
        n += 1
    return h


@batch
def not_temporaries(x, z):
    h = z * 1.0
    for x_t in x.unbind(1):
        if x_t.sum() > 0:
            a = x_t.sum()      # first bound in a branch
        else:
            a = -x_t.sum()
        b = h * 2              # read after the loop
        c = a + 1
        c = c * b              # re-bound from itself: masked like any other
        h = h + c * 0.1
    return h + b


@batch
def branch_temporaries(x, z):
    h = z * 1.0
    for x_t in x.unbind(1):
        if x_t.sum() > 0:
            s = x_t.sum() * h      # a temporary of the branch: read only in it
            h = h + s.tanh()
        else:
            s = h - 1              # the same name, a temporary of this branch too
            h = h * 0.5 + s * 0.1
    return h


@batch
def rebound_inside(x, z):
    """``t`` is a temporary of the loop, but a branch and an inner loop bind
    it afresh and the loop reads it after them, in lanes they skipped."""
    h = z * 1.0
    for x_t in x.unbind(1):
        t = x_t.sum() + 1.0
        if x_t.sum() > 0:
            t = h * 3.0
        n = 0
        while n < x_t.sum().abs() * 2:
            t = h - n
            n += 1
        h = h * 0.9 + t * 0.1
    return h


def test_loop_temporaries_are_plain_and_the_rest_masked():
    src = matchbox.to_source(loop_temporaries)
    for line in ("x_t = item", "t = torch.tanh(", "u = _mb.read(t) * 2", "t = _mb.read(h).abs()"):
        assert line in src, src
    assert "h = _mb.assign(h" in src and "n = _mb.aug_assign(n" in src
    src = matchbox.to_source(not_temporaries)
    for name in ("a", "b"):
        assert f"{name} = _mb.assign({name}," in src, src
    assert "c = _mb.assign(c, _mb.read(c) * _mb.read(b))" in src
    src = matchbox.to_source(branch_temporaries)
    assert "s = _mb.assign" not in src and "s = _mb.read(x_t).sum()" in src, src
    src = matchbox.to_source(rebound_inside)
    assert "t = _mb.read(x_t).sum() + 1.0" in src, src
    assert src.count("t = _mb.assign(t,") == 2, src


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", [loop_temporaries, not_temporaries, branch_temporaries,
                               rebound_inside])
def test_loop_temporaries_batched_equals_per_example(f, lengths):
    mb_test(f, SEQ, SCALAR, lengths=lengths, dtype=torch.float64)
