"""@batch(compact=...): a while loop's later iterations run on its live
lanes only.  Every program here is checked batched vs per example (values
and gradients) with compaction starting at once (share 1.0) and halfway
(0.5), against the same program without it."""
import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_rand, mb_test

LENGTHS = ("mixed", "one", "equal")
SCALAR = (7, (False, 1))
SEQ = (7, (True, 5), (False, 3))


def steps(x, z):
    """A per-example number of iterations with ifs, augmented assignment,
    append, a loop temporary and a value read from outside the loop."""
    h = x * 1.0
    k = 0
    out = []
    while h.abs().sum() < 4 and k < 6:
        t = torch.tanh(h + z)          # loop temporary
        if t.sum() > 0:
            h = h + t * z
        else:
            h = h - 0.5
        k += 1
        out.append(h.sum(-1))
    return h, F.stack(out + [h.sum(-1)], 1)


def breaks_and_returns(x, z):
    h = x * 1.0
    n = 0
    while True:
        n += 1
        h = h * 1.5 + z
        if h.sum() > 3:
            break
        if n > 3:
            return h * 0 - 1
    return h * n


@batch
def helper(h, z):
    acc = h * 0
    while acc.sum() < z.abs().sum() + 1:   # a loop of its own in the callee
        acc = acc + 0.75
    return acc


def nested(x, z):
    h = x * 1.0
    rounds = 0
    while rounds < 3 and h.sum() < 5:
        i = 0
        while i < 2 and h.sum() < 5:      # inner loop: runs inside the compaction
            h = h + helper(h, z) * 0.1
            i += 1
        for step in x.unbind(1) if x.dim() > 2 else []:
            h = h + step.sum() * 0.01
        rounds += 1
    return h


class Box:
    pass


def attributes(x, z):
    box = Box()
    box.h = x * 1.0
    while box.h.sum() < 2:
        box.h = box.h + z.abs() + 0.25
    return box.h


def tuple_state(x, z):
    hc = (x * 1.0, z * 1.0)
    while hc[0].sum() < 3:
        h, c = hc
        hc = (h + c.abs() + 0.25, c * 0.5)
    return hc


def rebound_temporary(x, z):
    """``t`` is a loop temporary (compacted when bound); a branch binds it
    again with a masked update before the loop reads it."""
    h = x * 1.0
    while h.sum() < 3:
        t = h * 0.5 + z
        if t.sum() > 1:
            t = z * 2.0
        h = h + t.abs() + 0.25
    return h


PROGRAMS = {"rebound_temporary": (rebound_temporary, (SCALAR, SCALAR)),
            "steps": (steps, (SEQ, SCALAR)), "tuple_state": (tuple_state, (SCALAR, SCALAR)), "breaks_and_returns": (breaks_and_returns, (SCALAR, SCALAR)),
            "nested": (nested, (SEQ, SCALAR)), "attributes": (attributes, (SCALAR, SCALAR))}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("share", [1.0, 0.5])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compacted_equals_per_example(name, share, lengths):
    f, specs = PROGRAMS[name]
    mb_test(batch(f, compact=share), *specs, lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compacted_equals_uncompacted(name):
    f, specs = PROGRAMS[name]
    torch.manual_seed(0)
    args = [mb_rand(*s, lengths="mixed", dtype=torch.float64) for s in specs]
    plain, compacted = batch(f)(*args), batch(f, compact=1.0)(*args)
    for a, b in zip(plain if isinstance(plain, tuple) else (plain,),
                    compacted if isinstance(compacted, tuple) else (compacted,)):
        for ea, eb in zip(a.examples(), b.examples()):
            assert torch.equal(ea, eb)


def test_generated_source_names_the_share():
    src = matchbox.to_source(batch(steps, compact=0.25))
    assert "compact=0.25" in src
    assert "compact=" not in matchbox.to_source(batch(steps))


@pytest.mark.parametrize("bad", [0, 1.5, -0.1, "half"])
def test_bad_share_is_refused(bad):
    with pytest.raises(ValueError, match="compact"):
        batch(steps, compact=bad)


def test_in_place_change_of_a_gathered_value_raises():
    def bump(x):
        h = x - 1.0
        while h.sum() < 3:
            F.relu(h, inplace=True)   # in place on the live lanes' copy
            h = h + 1.0
        return h

    x = MaskedBatch.fromlist([torch.tensor([[v]]) for v in (0.0, 2.5, 1.0)], dims=(False,))
    with pytest.raises(RuntimeError, match="changed in place"):
        batch(bump, compact=1.0)(x)


def subscript_store(x):
    h = x * 1.0
    while h.sum() < 3:
        h[:, 0] = h[:, 0] + 1.0
    return h


def test_loops_that_store_into_subscripts_are_not_compacted():
    f = batch(subscript_store, compact=1.0)
    assert "compact=" not in matchbox.to_source(f)
    mb_test(f, (5, (False, 2)), lengths="mixed", dtype=torch.float64)


def test_greedy_decoding_is_unchanged():
    from examples import transformer as ex
    torch.manual_seed(0)
    model = ex.Transformer(vocab=12, d_model=16, heads=2, layers=1, d_ff=32, max_len=40).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3)
    srcs = [torch.randint(ex.FIRST, 12, (1, n)) for n in (3, 7, 1, 5, 9)]
    src = MaskedBatch.fromlist(srcs, dims=(True,))
    fast = batch(ex.greedy_decode.__wrapped__, compact=1.0)
    with torch.no_grad():
        want = ex.greedy_decode(model, src, max_len=12).examples()
        got = fast(model, src, max_len=12).examples()
    assert [w.tolist() for w in want] == [g.tolist() for g in got]
    assert len({w.numel() for w in want}) > 1  # the examples stop at different steps


SEEN = []


def record(h):
    """A plain function: records the batch size the loop body runs at."""
    SEEN.append(h.batch_size)
    return h


def countdown(x):
    h = x * 1.0
    while h.sum() > 0:
        h = record(h) - 1
    return h


@pytest.mark.parametrize("share,sizes", [(None, [6] * 6), (1.0, [6, 5, 4, 3, 2, 1]),
                                         (0.5, [6, 6, 6, 3, 2, 1])])
def test_the_body_runs_on_the_live_lanes_only(share, sizes):
    x = MaskedBatch.fromlist([torch.tensor([[float(v)]]) for v in (1, 2, 3, 4, 5, 6)], dims=(False,))
    SEEN.clear()
    out = batch(countdown, compact=share)(x)
    assert [e.item() for e in out.examples()] == [0.0] * 6
    # compacted once no more than `share` of the lanes are live, on those only
    assert SEEN == sizes


FULL = {}


def stored():
    return FULL["h"]


def escapes(x):
    FULL["h"] = x * 2.0
    h = x * 1.0
    while h.sum() < 3:
        h = h + stored()  # a full-batch value that no read of this function gathers
    return h


def test_a_full_batch_value_that_escapes_the_gather_names_compaction():
    f = batch(escapes, compact=1.0)
    x = MaskedBatch.fromlist([torch.tensor([[v]]) for v in (0.5, 2.5, 1.0)], dims=(False,))
    with pytest.raises(ValueError, match="live lanes of 3"):
        f(x)


def bump_subscript(h):
    h[:, 0] = h[:, 0] + 1.0   # writes into the caller's variable (per example: the same object)
    return h.sum()


def calls_a_writer(x):
    h = x * 1.0
    while h.sum() < 3:
        s = bump_subscript(h)
        h = h + s * 0
    return h


def test_a_callee_writing_into_a_gathered_value_raises():
    x = MaskedBatch.fromlist([torch.tensor([[v, 0.0]]) for v in (0.0, 2.5, 1.0)], dims=(False,))
    with pytest.raises(RuntimeError, match="changed in place"):
        batch(calls_a_writer, compact=1.0)(x)


# ------------------------------------------------------------------ for loops over steps
W = torch.linspace(-1, 1, 9, dtype=torch.float64).view(3, 3)


def rnn(xs, z):
    """A loop over the steps of a dynamic dim: state in a tuple, a value
    read from outside, an if, an augmented assignment, a variable first
    assigned in the loop, and every variable read after it."""
    h = xs.batch_zeros(3)
    hc = (h, h + 1.0)
    total = z * 0.0
    out = []
    for x in xs.unbind(1):
        a, b = hc
        s = torch.tanh(x @ W + a * z)
        if s.sum() > 0:
            total += s.sum(-1, keepdim=True)
        else:
            total = total - b.sum(-1, keepdim=True) * 0.5
        last = s * 2.0
        hc = (s, b * 0.5 + s)
        out.append(s)
    return F.stack(out, 1), hc, total, last


def reversed_with_inner_while(xs, z):
    h = z * 1.0
    for x in reversed(xs.unbind(1)):
        k = 0
        while k < 2 and h.sum() < 3:
            h = h + x.sum(-1, keepdim=True).abs() * 0.5
            k += 1
        h = h * 0.9
    return h


def for_with_break(xs, z):
    h = z * 1.0
    for x in xs.unbind(1):
        h = h + x.sum(-1, keepdim=True)
        if h.sum() > 1:
            break
    return h


def for_rebound_temporary(xs, z):
    h = z * 1.0
    for x in xs.unbind(1):
        t = x.sum(-1, keepdim=True) + h
        if t.sum() > 0:
            t = h * 0.5
        h = h * 0.9 + t
    return h


def for_subscript_store(xs, z):
    h = z * 1.0
    for x in xs.unbind(1):
        h[:, 0] = h[:, 0] + x.sum(-1)   # a store into a compacted copy would be lost
    return h


FOR_PROGRAMS = {"rnn": rnn, "reversed_with_inner_while": reversed_with_inner_while,
                "for_with_break": for_with_break, "for_subscript_store": for_subscript_store,
                "for_rebound_temporary": for_rebound_temporary}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("share", [1.0, 0.5])
@pytest.mark.parametrize("name", sorted(FOR_PROGRAMS))
def test_compacted_for_equals_per_example(name, share, lengths):
    mb_test(batch(FOR_PROGRAMS[name], compact=share), (7, (True, 6), (False, 3)), SCALAR,
            lengths=lengths, dtype=torch.float64)


def test_compacted_for_settles_what_it_assigns_and_skips_loops_with_exits():
    src = matchbox.to_source(batch(rnn, compact=1.0))
    assert "compact=1.0" in src
    for name in ("hc", "last", "total"):
        assert f"{name} = loop.settle({name})" in src
    for f in (for_with_break, for_subscript_store):
        assert "compact=" not in matchbox.to_source(batch(f, compact=1.0))


def stepper(xs):
    h = xs.batch_zeros(1)
    for x in xs.unbind(1):
        h = record(h) + x
    return h


@pytest.mark.parametrize("share,sizes", [(None, [6] * 6), (1.0, [6, 5, 4, 3, 2, 1]),
                                         (0.5, [6, 6, 6, 3, 2, 1])])
def test_a_compacted_for_runs_each_step_on_its_examples_only(share, sizes):
    xs = MaskedBatch.fromlist([torch.full((1, n, 1), float(n)) for n in (3, 1, 6, 2, 5, 4)],
                              dims=(True, False))
    SEEN.clear()
    out = batch(stepper, compact=share)(xs)
    assert [e.item() for e in out.examples()] == [9.0, 1.0, 36.0, 4.0, 25.0, 16.0]
    assert SEEN == sizes


def for_escapes(xs, z):
    FULL["h"] = z * 2.0
    h = z * 1.0
    for x in xs.unbind(1):
        h = h + x.sum(-1, keepdim=True) * stored()  # full batch, not read by this function
    return h


def test_a_full_batch_value_that_escapes_a_compacted_for_names_compaction():
    xs = MaskedBatch.fromlist([torch.ones(1, n, 2) for n in (3, 1, 2)], dims=(True, False))
    z = MaskedBatch.fromlist([torch.ones(1, 1) for _ in range(3)], dims=(False,))
    with pytest.raises(ValueError, match=r"for loop at .* runs on its 2 live lanes of 3"):
        batch(for_escapes, compact=1.0)(xs, z)


def rank_changes(x):
    h = x[0]
    n = x.size(0)
    i = 0
    while i < n:
        if i == 2:
            h = h.sum()         # in the lanes still in the loop only: (3,) -> ()
        i = i + 1
    return h


def test_a_compacted_loop_that_changes_a_rank_names_the_variable():
    """(the rewrite passes the name to _mb.assign where a loop may compact)"""
    x = MaskedBatch.fromlist([torch.randn(k, 3) for k in (1, 3, 5, 6)], (True, False),
                             batch_dim=None)
    with pytest.raises(ValueError, match=r"variable 'h' would hold a value of per-example shape \(\)"):
        batch(rank_changes, compact=0.9)(x)


def _no_grad_in_a_branch(x, y, s):
    """A recurrent loop whose else-branch updates ``a`` under no_grad (the
    fuzzer's seed 4169, compacted): its first read of ``c`` in a step is
    under no_grad, and ``c`` is read again with grad after the branch."""
    a, b = x * 1.0, y + 0.5
    c, total = a * 0.5, x * 1.0
    for step in s.unbind(1):
        a = a + step * 0.25
        if a <= b:
            b, c = c * 1.0, torch.clamp(c * c, -4.0, 4.0) + (x - a)
        else:
            with torch.no_grad():
                a = (a + c) + b * 0.5
        total = total + c * 0.5
    return a + b * c + total


@pytest.mark.parametrize("share", [1.0, 0.5])
@pytest.mark.parametrize("seed", [8, 9, 41, 3])
def test_a_first_read_under_no_grad_keeps_the_cut_history(share, seed):
    """A compacted for cuts a loop variable to the live rows at its first
    read in a step and keeps the cut for later reads: made under no_grad,
    the cut had no history, and the later read with grad lost the
    gradients through it."""
    mb_test(batch(compact=share)(_no_grad_in_a_branch), (5, (False, 1)), (5, (False, 1)),
            (5, (True, 4), (False, 1)), dtype=torch.float64, seed=seed)
