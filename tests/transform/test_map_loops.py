"""A ``for`` over the steps of a dynamic dim whose iterations share no
state runs its body once, every (example, step) pair a lane of its own
(transform/maps.py, runtime/maps.py): each program here is checked batched
vs per example (values and gradients), and which loops are maps."""
import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_rand, mb_test
from matchbox.transform.runtime import branch_compaction, compaction

LENGTHS = ("mixed", "one", "equal")
SEQ = (9, (True, 5), (False, 3))
LETTERS = (9, (True, 4), (True, 5), (False, 3))
SCALAR = (9, (False, 3))

_CELL = nn.LSTMCell(3, 3).double()


@batch
def spell(letters):
    """(1, c, 3) -> (1, 3): a cell over the letters (a loop with state)."""
    h = c = letters.batch_zeros(3)
    for x in letters.unbind(1):
        h, c = _CELL(x, (h, c))
    return h


def rare_words(words, letters):
    """The char tagger's loop: a rare word (few of them) is spelled."""
    out = []
    for w, spelling in zip(words.unbind(1), letters.unbind(1)):
        if w.sum() > 1.5:
            e = spell(spelling)
        else:
            e = torch.tanh(w)
        out.append(e)
    return F.stack(out, 1)


def reads_outside(xs, z):
    """Reads a value from before the loop; two appends per step, one in a branch."""
    out, other = [], []
    scale = torch.tanh(z) + 1
    for x in reversed(xs.unbind(1)):
        y = x * scale
        if y.sum() > 0:
            y = y + _CELL(x)[0]
            other.append(y * 2)
        out.append(y)
        out.append(x.sum(1, keepdim=True) * y)
    return F.stack(out, 1), len(other)


def inner_loop(letters):
    """A loop with state inside a map's body, over each step's own letters."""
    out = []
    for word in letters.unbind(1):
        s = word.sum(1) * 0
        for x in word.unbind(1):
            s = torch.tanh(s + x)
        out.append(s)
    return F.stack(out, 1)


def in_a_branch(xs, z):
    """A map loop that only some examples run."""
    y = z * 1.0
    if z.sum() > 0:
        out = []
        for x in xs.unbind(1):
            out.append(torch.sigmoid(x) + z)
        y = F.stack(out, 1).sum(1)
    return y


def rare_appends(xs, z):
    """A rare heavy branch (gathered within the map) appends to two lists."""
    out, rare = [], []
    for x in xs.unbind(1):
        y = x * z
        if x.sum() > 2.0:
            h = _CELL(x)[0]
            out.append(h)
            rare.append(y + h)
        else:
            out.append(y * 2)
    return F.stack(out, 1), F.stack(rare + [z], 1)


PROGRAMS = {"rare_appends": (rare_appends, ((16, (True, 9), (False, 3)), (16, (False, 3)))),
            "rare_words": (rare_words, (SEQ, LETTERS)),
            "reads_outside": (reads_outside, (SEQ, SCALAR)),
            "inner_loop": (inner_loop, (LETTERS,)),
            "in_a_branch": (in_a_branch, (SEQ, SCALAR))}


@pytest.fixture
def mapped(monkeypatch):
    """How many loops ran as maps."""
    count = []
    init = compaction.MapCompaction.__init__

    def counting(self, *args):
        count.append(1)
        init(self, *args)
    monkeypatch.setattr(compaction.MapCompaction, "__init__", counting)
    return count


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_map_loops_equal_per_example(name, lengths, mapped):
    f, specs = PROGRAMS[name]
    assert "_mb.map_loop(" in matchbox.to_source(batch(f))
    mb_test(batch(f), *specs, lengths=lengths, dtype=torch.float64,
            params=list(_CELL.parameters()))
    if lengths == "mixed":
        assert mapped, "no loop ran as a map"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_map_equals_plain_loop(name):
    f, specs = PROGRAMS[name]
    torch.manual_seed(1)
    args = [mb_rand(*s, lengths="mixed", dtype=torch.float64) for s in specs]
    a, b = batch(f)(*args), batch(f, compact=False)(*args)
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    for x, y in zip(a, b):
        for ea, eb in zip(x.examples(), y.examples()):
            assert torch.allclose(ea, eb)


def test_rare_words_gathered_once_across_steps(monkeypatch):
    """The rare branch runs once for the whole loop, gathered on its pairs."""
    count = []
    init = branch_compaction.BranchCompaction.__init__

    def counting(self, *args):
        count.append(args[0].numel())
        init(self, *args)
    monkeypatch.setattr(branch_compaction.BranchCompaction, "__init__", counting)
    B = 16
    torch.manual_seed(0)
    words = MaskedBatch.fromlist([torch.where(torch.rand(1, n, 3) < 0.1, 1.0, 0.0).double()
                                  for n in range(1, B + 1)], dims=(True, False))
    letters = MaskedBatch.fromlist([torch.randn(1, n, 4, 3, dtype=torch.float64)
                                    for n in range(1, B + 1)], dims=(True, True, False))
    batch(rare_words)(words, letters)
    assert count == [B * (B + 1) // 2]   # one branch over every (sentence, word) pair


def _carried(xs):
    h = xs.batch_zeros(3)
    out = []
    for x in xs.unbind(1):
        h = torch.tanh(h + x)
        out.append(h)
    return F.stack(out, 1)


def _maybe_bound(xs):
    out = []
    y = xs.sum(1) * 0
    for x in xs.unbind(1):
        if x.sum() > 0:
            y = x * 2
        out.append(y)      # else: the last step's y
    return F.stack(out, 1)


def _read_after(xs):
    out = []
    for x in xs.unbind(1):
        y = x * 2
        out.append(y)
    return F.stack(out, 1) + y


def _reads_list(xs):
    out = []
    for x in xs.unbind(1):
        out.append(x * len(out))
    return F.stack(out, 1)


def _breaks(xs):
    out = [xs.sum(1) * 0]
    for x in xs.unbind(1):
        if x.sum() > 1:
            break
        out.append(x)
    return F.stack(out, 1)


@pytest.mark.parametrize("f", [_carried, _maybe_bound, _read_after, _reads_list, _breaks])
def test_loops_with_state_are_not_maps(f):
    assert "_mb.map_loop(" not in matchbox.to_source(batch(f))
    mb_test(batch(f), SEQ, dtype=torch.float64)


def _attends(qs, memory):
    out = []
    for q in qs.unbind(1):
        out.append(torch.softmax(memory @ q.unsqueeze(2), 1).sum(1))
    return F.stack(out, 1)


def test_a_large_value_read_at_every_step_keeps_the_plain_loop(mapped):
    """Gathering a large per-example value for every step would copy far
    more than the steps themselves: the loop runs step by step."""
    assert "_mb.map_loop(" in matchbox.to_source(batch(_attends))
    mb_test(batch(_attends), (9, (True, 6), (False, 64)), (9, (False, 400), (False, 64)),
            dtype=torch.float64)
    assert not mapped
    mb_test(batch(_attends), (9, (True, 6), (False, 64)), (9, (False, 4), (False, 64)),
            dtype=torch.float64)
    assert mapped


def _reads_a_per_example_list(xs, z):
    hs = []
    h = z * 1.0
    for x in xs.unbind(1):
        h = h + x
        hs.append(h)              # per-example lengths
    out = []
    for y in xs.unbind(1):
        out.append(y * len(hs))   # a map that reads the per-example list
    return F.stack(out, 1)


def test_a_map_reading_a_per_example_list_runs_step_by_step(mapped):
    assert "_mb.map_loop(" in matchbox.to_source(batch(_reads_a_per_example_list))
    mb_test(batch(_reads_a_per_example_list), SEQ, SCALAR, dtype=torch.float64)
    assert not mapped


class _Memory(nn.Module):
    def forward(self, xs):
        self.memory = xs.sum(1)           # the whole batch, kept on self
        out = []
        for x in xs.unbind(1):
            out.append(x + self.memory)
        return F.stack(out, 1)


def test_an_attribute_the_function_sets_keeps_the_plain_loop():
    assert "_mb.map_loop(" not in matchbox.to_source(batch(_Memory.forward))
    _Memory.forward = batch(_Memory.forward)
    mb_test(_Memory(), SEQ, dtype=torch.float64)


def test_compact_settings_keep_plain_loops():
    assert "_mb.map_loop(" not in matchbox.to_source(batch(rare_words, compact=False))
    assert "_mb.map_loop(" not in matchbox.to_source(batch(rare_words, compact=0.5))
