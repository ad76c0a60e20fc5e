"""Sibling recursive calls are merged by default (issue 22): plain ``@batch``
runs ``a = f(left); b = f(right)`` as one call when the function's effects
cannot make that change what an example computes (transform/effects.py),
and leaves them as plain calls, with a note in ``to_source``, when they
could.  ``merge_calls=True/False`` force it on or off."""
import inspect

import pytest
import torch

import matchbox
import matchbox.functional as mF
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test
from matchbox.transform.effects import effects
from matchbox.transform.parser import parse_function
from tests.transform.test_calls import H, encode, tree_batch

LENGTHS = ("mixed", "one", "equal")


def depths():
    return MaskedBatch.fromlist([torch.tensor([k]) for k in (0, 3, 1, 4, 2)], ())


# ------------------------------------------------------------------ merged by default
@batch
def fib_like(x, n):
    if n <= 1:
        return x * 0.0 + 1.0
    a = fib_like(x * 0.5, n - 1)
    b = fib_like(x + 1.0, n - 2)
    return a + b * x


@batch
def ternary(x, n):
    """Three sibling calls in a row: one call of three stacked parts."""
    if n <= 0:
        return torch.tanh(x)
    a = ternary(x * 0.5, n - 1)
    b = ternary(x + 1.0, n - 1)
    c = ternary(x - a * 0.0, n - 1) if False else ternary(x - 1.0, n - 1)
    return a + b * c


@batch
def local_state(x, n):
    """Changes only what it creates: a local list, dict, tensor."""
    acc, seen = [], {}
    h = x * 1.0
    if n <= 0:
        h.mul_(2.0)
        return h
    a = local_state(x * 0.5, n - 1)
    b = local_state(x + 1.0, n - 2)
    acc.append(a)
    acc.append(b)
    seen["a"] = a
    h += seen["a"] * acc[1]
    return h


def test_tree_recursion_merges_by_default():
    src = matchbox.to_source(encode)
    assert "sibling_calls" in src and "not merged" not in src


@pytest.mark.parametrize("f", [fib_like, local_state])
def test_pure_recursions_merge_by_default(f):
    src = matchbox.to_source(f)
    assert "sibling_calls" in src and "not merged" not in src, src


def test_three_siblings_are_one_call():
    src = matchbox.to_source(ternary)
    assert src.count("sibling_calls(") == 1 and "tmp[2]" not in src


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", [fib_like, ternary, local_state])
def test_merged_by_default_equals_per_example(f, lengths):
    mb_test(f, (5, (False, 2)), depths(), lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("B", (1, 6))
def test_default_tree_recursion_equals_per_example(seed, B):
    left, right, feats, root = tree_batch(B, seed)
    mb_test(encode, left, right, feats, root, (H,), dtype=torch.float64, seed=seed)


def test_merge_calls_false_disables():
    src = matchbox.to_source(batch(fib_like.__wrapped__, merge_calls=False))
    assert "sibling_calls" not in src and "not merged" not in src


# ------------------------------------------------------------------ effects: not merged
LOG = []


@batch
def logs_to_global(x, n):
    if n <= 0:
        return x * 1.0
    a = logs_to_global(x * 0.5, n - 1)
    b = logs_to_global(x + 1.0, n - 1)
    LOG.append(a)
    return a + b


@batch
def writes_argument(x, out, n):
    if n <= 0:
        return x * 1.0
    a = writes_argument(x * 0.5, out, n - 1)
    b = writes_argument(x + 1.0, out, n - 1)
    out.append(b)
    return a - b


def test_effects_keep_calls_unmerged_with_a_note():
    src = matchbox.to_source(logs_to_global)
    assert "sibling_calls" not in src
    lines, first = inspect.getsourcelines(logs_to_global.__wrapped__)
    line = first + next(i for i, text in enumerate(lines) if "LOG.append" in text)
    assert src.startswith(f"# sibling calls not merged: line {line} calls LOG.append(), "
                          f"which changes 'LOG', a value from outside the function\n"), src
    src = matchbox.to_source(writes_argument)
    assert "sibling_calls" not in src and "calls out.append(), which changes 'out'" in src


def test_merge_calls_true_forces():
    assert "sibling_calls" in matchbox.to_source(batch(logs_to_global.__wrapped__,
                                                       merge_calls=True))


def test_unmerged_effects_keep_per_example_order():
    """Unmerged, the outside list gets each call's result in call order,
    as per example: the first child's subtree before the second's."""
    n = depths()
    x = MaskedBatch.fromlist([torch.randn(1, 2, dtype=torch.float64) for _ in range(5)], (False,))
    out = []
    writes_argument(x, out, n)
    got = mF.stack(out, 1).examples()
    for k, (xk, nk) in enumerate(zip(x.examples(), n.examples())):
        mine = []
        writes_argument.__wrapped__(xk, mine, int(nk))
        if mine:
            torch.testing.assert_close(got[k], torch.stack(mine, 1))
        else:
            assert got[k].size(1) == 0


# ------------------------------------------------------------------ fallback at run time
@batch
def returns_list(x, n):
    """A list result cannot be split between merged calls: by default the
    calls run again unmerged."""
    if n <= 0:
        return [x * 1.0, x * 2.0]
    a = returns_list(x * 0.5, n - 1)
    b = returns_list(x + 1.0, n - 2)
    return [a[0] + b[1], a[1] * b[0]]


@pytest.mark.parametrize("lengths", LENGTHS)
def test_unsplittable_result_falls_back(lengths):
    assert "auto=True" in matchbox.to_source(returns_list)
    mb_test(lambda x, n: tuple(returns_list(x, n)), (5, (False, 2)), depths(), lengths=lengths,
            dtype=torch.float64)


def test_unsplittable_result_raises_when_forced(monkeypatch):
    f = batch(returns_list.__wrapped__, merge_calls=True)
    monkeypatch.setitem(globals(), "returns_list", f)   # what the recursion calls
    with pytest.raises(TypeError, match="cannot be split"):
        f(MaskedBatch.fromlist([torch.randn(1, 2) for _ in range(3)], (False,)),
          MaskedBatch.fromlist([torch.tensor([k]) for k in (2, 3, 1)], ()))


# ------------------------------------------------------------------ the analysis
def _pure(x, n):
    acc = []
    h = torch.zeros(3) + x
    h.add_(1.0)
    acc.append(h)
    d = {}
    d[0] = h
    total = 0.0
    total += h
    y = x.clone()
    y[0] = 1.0
    return torch.relu(h), F.relu(h, inplace=True), torch.add(h, 1.0)


def _impure(self, x, out, n):
    global G
    G = 1
    self.count = n
    out.append(x)
    x.add_(1.0)
    n += 1
    v = x[0]
    v[0] = 2.0
    print(x)
    torch.relu_(x)
    torch.add(x, x, out=out)
    F.relu(x, inplace=True)
    self.cache.update({})
    it = next(out)


F = torch.nn.functional


def test_effects_analysis():
    assert effects(parse_function(_pure)[0]) == []
    found = effects(parse_function(_impure)[0])
    first = inspect.getsourcelines(_impure)[1]
    assert [int(e.split()[1]) - first for e in found] == [2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14], found
    assert found[0].endswith("writes to 'G', a global or nonlocal variable")
    assert "stores into an attribute of 'self'" in found[1]
    assert "changes 'n' in place (+=)" in found[4]


def test_tree_lstm_example_merges_by_default():
    """The example's (and the bench task's) encode: plain @batch merges."""
    from examples.tree_lstm import TreeLSTM
    src = matchbox.to_source(TreeLSTM.encode)
    assert "sibling_calls" in src and "not merged" not in src


MEMORY = {}


@batch
def reads_full_batch(x, n):
    """Reads a full-batch value that is no argument: the stacked call
    cannot (its batch is the calls' lanes), so it runs again unmerged."""
    if n <= 0:
        return x * MEMORY["m"]
    a = reads_full_batch(x * 0.5, n - 1)
    b = reads_full_batch(x + 1.0, n - 2)
    return a + b * x


def test_stacked_call_that_fails_runs_unmerged():
    assert "auto=True" in matchbox.to_source(reads_full_batch)
    x = MaskedBatch.fromlist([torch.randn(1, 2, dtype=torch.float64) for _ in range(5)], (False,))
    MEMORY["m"] = MaskedBatch.fromlist([torch.randn(1, 2, dtype=torch.float64) for _ in range(5)],
                                       (False,))
    got = reads_full_batch(x, depths())
    plain = batch(reads_full_batch.__wrapped__, merge_calls=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(globals(), "reads_full_batch", plain)
        want = plain(x, depths())
    torch.testing.assert_close(got.padded_data, want.padded_data)
    raw = reads_full_batch.__wrapped__
    for k, (xk, nk, mk) in enumerate(zip(x.examples(), depths().examples(),
                                         MEMORY["m"].examples())):
        MEMORY["m"] = mk
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(globals(), "reads_full_batch", raw)
            torch.testing.assert_close(got.examples()[k], raw(xk, int(nk)))
