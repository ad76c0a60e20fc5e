"""A per-example ``if`` that few examples take runs gathered on them
(runtime/branch_compaction.py ``BranchCompaction``): every program here is
checked batched vs per example (values and gradients) with every branch
gathered (``compact=1.0``), and the measured rule's choices are checked."""
import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_rand, mb_test
from matchbox.transform.runtime import branch_compaction

LENGTHS = ("mixed", "one", "equal")
SCALAR = (7, (False, 3))
SEQ = (7, (True, 5), (False, 3))


@batch
def spell(xs):
    """A loop over the steps of a dynamic dim, in a called @batch function."""
    h = xs.batch_zeros(3)
    for x in xs.unbind(1):
        if x.sum() > -1:
            h = torch.tanh(h + x)
    return h


def calls_a_loop(xs, z):
    if z.sum() > 0.5:
        v = spell(xs) * 2
    else:
        v = z * 1.0
    return v + 1


def nested(x, z):
    y = x * 1.0
    if x.sum() > 0:
        y = torch.tanh(y) + z
        if z.sum() > 0:
            y = y * 3
        else:
            y = y - 1
        k = 0
        while y.abs().sum() < 6 and k < 4:
            y = y * 1.5 + 0.25
            k += 1
        y = y + (y * 2 if x.sum() > 1 else y * 0.5)
    return y


def returns_and_breaks(xs, z):
    h = z * 1.0
    for x in xs.unbind(1):
        if x.sum() > 0:
            h = h + x
            if h.sum() > 1:
                return h * 2
            if h.sum() < -1:
                break
        h = h * 0.5
    return h


def appends(xs, z):
    out = []
    for x in xs.unbind(1):
        if x.sum() > 0:
            out.append(torch.tanh(x + z))
            out.append(x * 2)
        else:
            out.append(x)
    return F.stack(out, 1)


def pops(x, z):
    stack = [z * 1.0]
    if x.sum() > 0:
        stack.append(x + 1)
        top = stack.pop()
        stack.append(top * stack[-1])
    return stack[-1] + len(stack)


def tuple_and_aug(x, z):
    a, b = x * 1.0, z * 1.0
    if x.sum() + z.sum() > 0:
        a, b = b * 2, a + b
        a += b
        a *= 0.5
    return a - b


class Box:
    pass


def attributes(x, z):
    box = Box()
    box.h = x * 1.0
    if z.sum() > 0:
        box.h = box.h + z
    return box.h


def other_shape(x, z):
    y = x * 1.0
    if z.sum() > 0:
        y = y.sum(1)          # (1, 3) -> (1,): another shape in these lanes
        y = y + 1             # the branch reads its own part
        y = y.unsqueeze(1) * torch.ones(1, 3, dtype=torch.float64)
    return y * 2


def undefined_before(x, z):
    if x.sum() > 0:
        w = torch.tanh(x) + z
    else:
        w = z * 2
    return w


PROGRAMS = {"calls_a_loop": (calls_a_loop, (SEQ, SCALAR)), "nested": (nested, (SCALAR, SCALAR)),
            "returns_and_breaks": (returns_and_breaks, (SEQ, SCALAR)),
            "appends": (appends, (SEQ, SCALAR)), "pops": (pops, (SCALAR, SCALAR)),
            "tuple_and_aug": (tuple_and_aug, (SCALAR, SCALAR)),
            "attributes": (attributes, (SCALAR, SCALAR)),
            "other_shape": (other_shape, (SCALAR, SCALAR)),
            "undefined_before": (undefined_before, (SCALAR, SCALAR))}


@pytest.fixture
def gathered(monkeypatch):
    """How many branches ran gathered."""
    count = []
    init = branch_compaction.BranchCompaction.__init__

    def counting(self, *args):
        count.append(1)
        init(self, *args)
    monkeypatch.setattr(branch_compaction.BranchCompaction, "__init__", counting)
    return count


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gathered_branches_equal_per_example(name, lengths, gathered):
    f, specs = PROGRAMS[name]
    mb_test(batch(f, compact=1.0), *specs, lengths=lengths, dtype=torch.float64)
    if lengths == "mixed":
        assert gathered, "no branch ran gathered"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gathered_equals_masked(name):
    f, specs = PROGRAMS[name]
    torch.manual_seed(1)
    args = [mb_rand(*s, lengths="mixed", dtype=torch.float64) for s in specs]
    masked, gathered = batch(f, compact=False)(*args), batch(f, compact=1.0)(*args)
    for ea, eb in zip(masked.examples(), gathered.examples()):
        assert torch.allclose(ea, eb)


class Tagger(nn.Module):
    """The char tagger's shape: a rare word is spelled by a cell loop."""

    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(3, 4)
        self.table = nn.Linear(3, 4)

    @batch
    def spell(self, letters):
        h = c = letters.batch_zeros(4)
        for x in letters.unbind(1):
            h, c = self.cell(x, (h, c))
        return h

    @batch
    def forward(self, words, letters):
        if words.sum() > 1.2:       # rare: few examples
            e = self.spell(letters)
        else:
            e = self.table(words)
        return e


def test_measured_rule_gathers_a_heavy_rare_branch(gathered):
    torch.manual_seed(0)
    model = Tagger().double()
    B = 32
    words = MaskedBatch.fromlist([torch.full((1, 3), 1.0 if b % 8 == 0 else 0.0,
                                             dtype=torch.float64) for b in range(B)], dims=(False,))
    letters = mb_rand(B, (True, 5), (False, 3), lengths="mixed", dtype=torch.float64)
    out = model(words, letters)
    assert len(gathered) == 1      # 4 of 32 rare: gathered; the else (28 of 32): masked
    for b, (w, l) in enumerate(zip(words.examples(), letters.examples())):
        assert torch.allclose(out.examples()[b], model(w, l))
    mb_test(model, (B, (False, 3)), (B, (True, 5), (False, 3)), dtype=torch.float64)


def test_measured_rule_keeps_light_or_common_branches_masked(gathered):
    x = mb_rand(32, (False, 3), lengths="mixed", dtype=torch.float64)
    batch(nested)(x, x)                                 # light bodies: never
    assert not gathered
    words = MaskedBatch.fromlist([torch.ones(1, 3, dtype=torch.float64)] * 32, dims=(False,))
    Tagger().double()(words, mb_rand(32, (True, 5), (False, 3), dtype=torch.float64))
    assert not gathered                                 # every lane rare: no gather
    small = MaskedBatch.fromlist([torch.full((1, 3), float(b == 0), dtype=torch.float64)
                                  for b in range(4)], dims=(False,))
    Tagger().double()(small, mb_rand(4, (True, 5), (False, 3), dtype=torch.float64))
    assert not gathered                                 # a batch of 4: too small to pay


def test_compact_false_keeps_every_branch_masked(gathered):
    src = matchbox.to_source(batch(calls_a_loop, compact=False))
    assert "if branch at" not in src
    x = mb_rand(*SEQ, dtype=torch.float64)
    batch(calls_a_loop, compact=False)(x, mb_rand(*SCALAR, dtype=torch.float64))
    assert not gathered


def test_source_names_gatherable_branches():
    src = matchbox.to_source(batch(calls_a_loop))
    assert "'if branch at" in src and "(in calls_a_loop)', None)" in src

    def stores(x):
        if x.sum() > 0:
            x[:, 0] = spell(x).sum()
        return x
    assert "branch at" not in matchbox.to_source(batch(stores, compact=1.0))

    def in_place(x):
        y = x * 1
        if x.sum() > 0:
            y.add_(spell(x).sum())
        return y
    assert "branch at" not in matchbox.to_source(batch(in_place, compact=1.0))


def _many_reads(a, b, c, d, z):
    y = z * 1.0
    if z.sum() > 0:
        y = _HEAVY(a + b + c + d)
    return y


def test_a_call_reading_many_values_stays_masked():
    """Gathering each value costs more than the call saves: by default a
    body with no loop that reads more than BRANCH_MAX_READS values stays
    masked; compact=s still gathers it; a body with a loop always may."""
    assert "branch at" not in matchbox.to_source(batch(_many_reads))
    assert "branch at" in matchbox.to_source(batch(_many_reads, compact=0.5))
    assert "branch at" in matchbox.to_source(batch(calls_a_loop))
    mb_test(batch(_many_reads), *[SCALAR] * 5, dtype=torch.float64,
            params=list(_HEAVY.parameters()))


def test_in_loop_compaction_branches_stay_masked(gathered):
    def loop(x, z):
        h = x * 1.0
        while h.sum() < 3:
            if z.sum() > 0:
                h = h + torch.tanh(z) + 0.5
            else:
                h = h + 1.0
        return h
    mb_test(batch(loop, compact=0.5), SCALAR, SCALAR, dtype=torch.float64)


_HEAVY = nn.Linear(3, 3).double()


def _stacked_in_branch(x, n):
    if n > 0:
        hs = []
        for j in range(n):
            hs.append(torch.tanh(_HEAVY(x * j)))
        y = x + F.stack(hs, 1).sum(1)
    else:
        y = x * 1.0
    return y


def test_list_made_and_stacked_in_a_rare_branch():
    """A list the branch makes and hands to F.stack keeps the branch masked
    (the list is read whole), at a batch size the measured rule gathers."""
    B = 16
    xs = [torch.randn(1, 3, dtype=torch.float64) for _ in range(B)]
    ns = [torch.tensor(2 if i < 2 else 0) for i in range(B)]
    mb_test(batch(_stacked_in_branch), MaskedBatch.fromlist(xs),
            MaskedBatch.fromlist(ns, batch_dim=None), dtype=torch.float64,
            params=list(_HEAVY.parameters()))


# ------------------------------------------------------------------ issue 27 item 13
class _Tagger(nn.Module):
    """A rare branch whose method keeps a cache on ``self``: the method
    reads the cache of the whole batch and sets it; a later method sets
    another attribute, first set in the branch (issue 27 item 13: a
    batch-size error without a word of the gathered branch)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.cache = self.extra = None

    def spell(self, x):
        h = torch.tanh(self.lin(x))
        if self.cache is not None:
            h = h + self.cache * 0.5     # the cache of the branch's examples
        self.cache = h
        return h

    def note(self, h):
        self.extra = h * 3

    @batch(compact=1.0)
    def forward(self, x):
        self.cache, self.extra = x * 0.1, None
        if x.sum() > 1.0:
            e = self.spell(x)
            self.note(e)
        else:
            e = x * 2
            self.extra = x * 0.5
        return e + self.cache + self.extra


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_method_in_a_gathered_branch_reads_and_sets_attributes_of_self(lengths):
    m = _Tagger().double()
    src = matchbox.to_source(_Tagger.forward)
    assert "(in _Tagger.forward)', 1.0, self)" in src   # the branch gathers self's attributes
    mb_test(m, (10, (False, 3)), lengths=lengths, dtype=torch.float64, seed=3)


class _Speller(nn.Module):
    """A submodule keeping a cache on itself, called in a rare branch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.cache = None

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        if self.cache is not None:
            h = h + self.cache * 0.5     # the cache of the branch's examples
        self.cache = h
        return h


class _SubTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.speller = _Speller()

    @batch(compact=1.0)
    def forward(self, x):
        self.speller.cache = x * 0.1
        if x.sum() > 1.0:
            e = self.speller(x)
        else:
            e = x * 2
        return e + self.speller.cache


@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_submodule_in_a_gathered_branch_reads_and_sets_its_own_attributes(lengths):
    """Before, the submodule read its full-batch cache with the branch's
    rows: 'add: batch sizes differ (3 vs 10)'."""
    src = matchbox.to_source(_SubTagger.forward)
    assert "1.0, self, 'speller')" in src
    mb_test(_SubTagger().double(), (10, (False, 3)), lengths=lengths, dtype=torch.float64, seed=3)
