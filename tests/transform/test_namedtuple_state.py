"""A ``namedtuple`` state rebuilt in a per-example branch or loop keeps its
type through every per-lane path: a masked update, a gathered branch, a
compacted loop and merged sibling recursive calls (issue 27 item 8: the
per-lane select rebuilt it with ``type(t)(generator)``, which a namedtuple
does not take)."""
import collections

import pytest
import torch

import matchbox
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")
State = collections.namedtuple("State", "h c")


def in_a_branch(x):
    s = State(x * 1.0, x * 2.0)
    for t in x.unbind(1):
        if t.sum() > 0:
            s = State(s.h + t * s.c, s.c * 0.5)
    return s.h + s.c


def in_a_while_loop(x):
    s = State(x.sum(1), x.sum(1) * 0.5)
    while s.h.sum() < 3:
        s = State(s.h + s.c.abs() + 0.5, s.c * 0.5)
    return s.h * s.c


@matchbox.batch
def _tree(x, n):
    if n > 0:
        a = _tree(x * 0.5, n - 1)
        b = _tree(torch.tanh(x), n - 1)
        return State(a.h + b.c, a.c * b.h)
    return State(x, x * 2)


def from_sibling_calls(x):
    s = _tree(x, x.size(1) % 3)      # per example: its own depth
    return s.h + s.c


@pytest.mark.parametrize("compact", [None, 1.0])
@pytest.mark.parametrize("f", [in_a_branch, in_a_while_loop, from_sibling_calls])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_namedtuple_state_keeps_its_type(f, compact, lengths):
    mb_test(matchbox.batch(f, compact=compact), (9, (True, 4), (False, 3)), lengths=lengths,
            dtype=torch.float64)
