"""State changed through calls under @batch (issue 29, SPEC 4b): a method
that sets ``self.last = h`` or counts ``self.count += 1``, a helper object
with a counter (``meter.update(v)``), a helper appending to a list on
``self``, called in a per-example loop or branch, change each example's
own state, as each example run alone would.  (Before, the change was made
once for the whole batch: every example got the longest one's count.)"""
import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox.test_utils import mb_test

LENGTHS = ["mixed", "equal", "one"]
D = torch.float64


class Meter:
    """A plain helper object, as a training script keeps one."""

    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, v):
        self.total += v
        self.count += 1

    def average(self):
        return self.total / max(self.count, 1)


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 3)
        self.history = []

    def remember(self, h):
        self.last = h
        self.seen += 1

    def log(self, h):
        self.history.append(h)

    @matchbox.batch
    def forward(self, x):                             # x: (1, n, 3)
        meter = Meter()
        self.seen = 0
        self.last = x.sum(1) * 0
        self.history = []
        for t in x.unbind(1):
            h = torch.tanh(self.lin(t))
            if h.sum() > -0.5:
                self.remember(h)
                self.log(h * 2)
            meter.update(h.sum().item())
        logged = F.stack(self.history, 1).sum(1) if self.history else x.sum(1) * 0
        return self.last * meter.count + meter.total + self.seen + meter.average() + logged


class Speller(nn.Module):
    """A loop whose steps share no state but for a helper that counts: it
    must not run once over all (example, step) pairs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.cell = nn.Linear(3, 3)

    def embed(self, w):
        self.calls += 1
        return torch.tanh(self.cell(w))

    @matchbox.batch
    def forward(self, words):                         # words: (1, n, 3)
        self.calls = 0
        out = []
        for w in words.unbind(1):
            out.append(self.embed(w))
        return F.stack(out, 1).sum(1) * self.calls


class Rare(nn.Module):
    """A branch few examples take, gathered on them, calling a helper that
    keeps its result on self."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.lin = nn.Linear(3, 3)

    def spell(self, x):
        self.spelled = torch.tanh(self.lin(x))
        return self.spelled

    @matchbox.batch(compact=1.0)   # (gathered whenever some examples skip it)
    def forward(self, x):                             # x: (1, 3)
        self.spelled = x * 0
        if x.sum() > 1.0:
            e = self.spell(x)
        else:
            e = x * 2
        return e + self.spelled


@pytest.mark.parametrize("lengths", LENGTHS)
def test_helpers_change_each_examples_state(lengths):
    mb_test(Counting().double(), (5, (True, 4), (False, 3)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_loop_calling_a_counting_helper_runs_step_by_step(lengths):
    mb_test(Speller().double(), (5, (True, 4), (False, 3)), lengths=lengths, dtype=D)


def test_a_gathered_branch_keeps_the_helpers_change():
    torch.manual_seed(3)
    mb_test(Rare().double(), (12, (False, 3)), dtype=D)


@matchbox.batch(compact=1.0)   # (each loop runs on its live lanes only, as soon as one leaves)
def tallied(x, s):                               # x: (1, 3), s: (1, n, 3)
    meter = Meter()
    a = x * 1.0
    for t in s.unbind(1):
        a = a + t * 0.5
        meter.update(a.sum().item())           # reads meter.total of every example
    w = 0
    while w < 3 and a.sum() < 2.0:
        w += 1
        a = a + 0.5
        if a.sum() > 0:
            meter.update(1.0)
    return a * meter.count + meter.total


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_compacted_loop_calling_a_counting_helper(lengths):
    """The helper runs at the full batch under the loop's live lanes:
    before, its ``self.total += v`` met a full-batch total with the live
    lanes' v (ValueError), and ``self.count += 1`` counted every example."""
    mb_test(tallied, (6, (False, 3)), (6, (True, 4), (False, 3)), lengths=lengths, dtype=D)


class Bumper:
    def bump(self, h):
        self.calls = getattr(self, "calls", 0) + 1
        h[:, 0] = h[:, 0] + 1.0        # writes into the caller's value
        return h.sum()


@matchbox.batch(compact=1.0)
def bumps(x):                                    # x: (1, 3)
    b = Bumper()
    h = x * 1.0
    w = 0
    while w < 3 and h.sum() < 2.0:
        w += 1
        s = b.bump(h)
        h = h + s * 0
    return h


def test_a_helper_changing_its_argument_in_a_compacted_loop_raises():
    """The helper runs at the full batch on a copy of the live lanes' rows:
    a change in place to its argument would be lost, so it raises."""
    x = matchbox.MaskedBatch.fromlist([torch.tensor([[v, 0.0, 0.0]]) for v in (0.0, 2.5, 1.0)],
                                      (False,))
    with pytest.raises(RuntimeError, match="changed an argument in place"):
        bumps(x)


class Log:
    """A helper whose method names are also Tensor methods' (``log``, ``put``)."""

    def __init__(self):
        self.n, self.total = 0, 0.0

    def log(self, v):
        self.n += 1
        self.total = self.total + v
        return v

    def put(self, v):
        self.n += 2
        return v * 2


@matchbox.batch
def logged(x):                                   # x: (1, n, 3)
    lg = Log()
    out = x.sum(1) * 0
    for s in x.unbind(1):
        if s.sum() > 0:
            out = out + lg.log(s.sum())
        else:
            out = out + lg.put(s)
    return out * lg.n + lg.total


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_helper_method_named_as_a_tensor_method_is_the_helpers(lengths):
    """``lg = Log()`` then ``lg.log(v)``: before, the rewrite took ``log``
    for a tensor's method and ran it once for the batch (a batch-size
    error later, 'add: batch sizes differ (5 vs 11)')."""
    mb_test(logged, (5, (True, 4), (False, 3)), lengths=lengths, dtype=D)
