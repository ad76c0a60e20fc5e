"""Sibling recursive calls are merged by default (issue 22): plain ``@batch``
runs ``a = f(left); b = f(right)`` as one call when the function's effects
cannot make that change what an example computes (transform/effects.py),
and leaves them as plain calls, with a note in ``to_source``, when they
could.  ``merge_calls=True/False`` force it on or off."""
import inspect
import random

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
@pytest.mark.parametrize("B", (1, 6, 24))
def test_default_tree_recursion_equals_per_example(seed, B):
    left, right, feats, root = tree_batch(B, seed, max_leaves=3 if B > 8 else 5)
    mb_test(encode, left, right, feats, root, (H,), dtype=torch.float64, seed=seed)


@batch
def branch_temporaries(x, n):
    """``t`` and ``u`` are temporaries of their branches (bound first, read
    only there): plain stores, as a loop's temporaries are; ``y`` is not."""
    if n > 1:
        t = x * 2.0
        u = t.tanh() + x
        y = u * t
    else:
        t = x - 1.0
        y = t * t
    return y


def test_branch_temporaries_are_plain_stores():
    src = matchbox.to_source(branch_temporaries)
    for line in ("t = _mb.read(x) * 2.0", "u = _mb.read(t).tanh()", "t = _mb.read(x) - 1.0"):
        assert line in src, src
    assert src.count("y = _mb.assign(y,") == 2, src


@pytest.mark.parametrize("lengths", LENGTHS)
def test_branch_temporaries_equal_per_example(lengths):
    mb_test(branch_temporaries, (5, (False, 2)), depths(), lengths=lengths, dtype=torch.float64)


def test_merged_call_results_are_plain_stores():
    """The merged call's result and the parts that the branch alone reads
    are stored without masking (the stacked call ran for the branch's
    lanes only), and the branch that holds the call always runs gathered
    on its lanes (share 1.0); the leaf branch by the measured rule (None)."""
    from examples.tree_lstm import TreeLSTM
    src = matchbox.to_source(TreeLSTM.encode)
    assert "calls = _mb.sibling_calls(" in src and "_mb.assign(calls" not in src, src
    for name in ("hl", "cl", "loss_l", "correct_l", "hr", "cr", "loss_r", "correct_r"):
        assert f"{name} = tmp" in src, src
    assert "h = _mb.assign(h," in src
    assert "if_true(cond, 'if branch" in src and "encode)', None, self, 'leaf_state')" in src, src
    assert "if_false(cond, 'else branch" in src and "encode)', 1.0, self, 'node_state')" in src, src


@batch
def sums_of_halves(x, n):
    if n <= 0:
        return x.sum(1) + x.size(1)
    a = sums_of_halves(x * 0.5, n - 1)
    b = sums_of_halves(x + 1.0, n - 2)
    return a + b


@batch
def scaled_copies(x, n):
    if n <= 0:
        return x * 2.0
    a = scaled_copies(x * 0.5, n - 1)
    b = scaled_copies(x + 1.0, n - 2)
    return a + b


@pytest.mark.parametrize("f", [sums_of_halves, scaled_copies])
def test_merged_calls_keep_empty_examples(f):
    """An example of length 0 is a real example (it holds a value) in the
    stacked call's arguments and results too."""
    x = MaskedBatch.fromlist([torch.randn(1, k, dtype=torch.float64) for k in (3, 0, 2, 0)],
                             (True,))
    n = MaskedBatch.fromlist([torch.tensor([k]) for k in (2, 3, 1, 0)], ())
    assert "sibling_calls" in matchbox.to_source(f)
    mb_test(f, x, n)


@batch(compact=1.0, merge_calls=False)
def plain_gathered(x, n):
    """Plain recursive calls in a branch that runs gathered."""
    if n <= 0:
        return torch.tanh(x)
    a = plain_gathered(x * 0.5, n - 1)
    b = plain_gathered(x - 1.0, n - 1)
    return a + b * 0.5


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", [plain_gathered, ternary])
def test_plain_recursive_call_in_gathered_branch(f, lengths):
    """A recursive call that stays plain (``ternary``'s third, in a
    conditional expression) runs outside its caller's gathered branch: the
    callee, the same code, must not take that compaction for its own."""
    assert "_mb.recursive(" in matchbox.to_source(f)
    mb_test(f, (5, (False, 2)), depths(), lengths=lengths, dtype=torch.float64)


def test_merged_branch_gathers_unless_the_function_reads_outside_values():
    """``reads_full_batch`` reads a global that holds the whole batch, which
    a gathered branch cannot: its merged calls' branch keeps the measured rule."""
    assert "ternary)', 1.0)" in matchbox.to_source(ternary)
    src = matchbox.to_source(reads_full_batch)
    assert "sibling_calls" in src and "1.0)" not in src, src


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


# ------------------------------------------------------------------ n-ary: a loop over children
K = 3   # most children a node has


def nary(kids, nkids, feats, i):
    """A node's state from its own features and the sum of its children's."""
    x = feats[:, i][:, 0]                        # (1, H)
    n = nkids[:, i][:, 0]                        # (1,) number of children
    if n <= 0:
        return torch.tanh(x)
    hs = []
    for j in range(n):
        hs.append(nary(kids, nkids, feats, kids[:, i][:, 0][:, j]))
    return torch.tanh(x + mF.stack(hs, 1).sum(1))


# branch gathering (runtime BranchCompaction) off: at batch >= 8 it gathers
# the recursion's branch, where lists appended to and stacked do not work yet
nary_masked = batch(nary, compact=False)
nary = batch(nary)


def nary_batch(B, seed):
    """Random trees of 1..12 nodes with 1..K children per inner node, as
    per-example (1, n, K) child ids, (1, n) child counts, (1, n, H) features."""
    rng = random.Random(seed)
    ks, ns, fs, roots = [], [], [], []
    for b in range(B):
        kids, counts = [], []

        def build(budget):
            k = len(kids)
            kids.append([0] * K)
            counts.append(0)
            if budget > 1:
                m = rng.randint(1, min(K, budget - 1))
                for c in range(m):
                    kids[k][c] = build(max(1, (budget - 1) // m))
                counts[k] = m
            return k
        build(1 if b == 0 else rng.randint(1, 12))
        ks.append(torch.tensor([kids]))
        ns.append(torch.tensor([counts]))
        fs.append(torch.randn(1, len(counts), H, dtype=torch.float64))
        roots.append(torch.tensor([0]))
    return (MaskedBatch.fromlist(ks, (True, False)), MaskedBatch.fromlist(ns, (True,)),
            MaskedBatch.fromlist(fs, (True, False)), MaskedBatch.fromlist(roots, ()))


def test_child_loop_is_merged():
    src = matchbox.to_source(nary)
    assert "SiblingLoop(nary, True)" in src and ".defer(" in src and "not merged" not in src
    assert "SiblingLoop" not in matchbox.to_source(batch(nary.__wrapped__, merge_calls=False))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("B", (1, 6, 16))
def test_nary_recursion_equals_per_example(B, seed, monkeypatch):
    f = nary if B < 8 else nary_masked
    monkeypatch.setitem(globals(), "nary", f)     # what the recursion calls
    mb_test(f, *nary_batch(B, seed), dtype=torch.float64, seed=seed)


def test_child_loop_runs_one_call_per_depth(monkeypatch):
    from matchbox.transform.runtime import calls
    runs = []
    merged = calls.SiblingLoop._merged
    monkeypatch.setattr(calls.SiblingLoop, "_merged",
                        lambda self, *a: runs.append(1) or merged(self, *a))
    monkeypatch.setitem(globals(), "nary", nary_masked)
    kids, counts, feats, root = nary_batch(16, 0)
    nary_masked(kids, counts, feats, root)
    height = 0
    for k, n in zip(kids.examples(), counts.examples()):
        def depth(i):
            m = int(n[0, i])
            return 0 if m == 0 else 1 + max(depth(int(k[0, i, c])) for c in range(m))
        height = max(height, depth(0))
    assert 0 < len(runs) <= height
