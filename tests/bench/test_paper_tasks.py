"""The two benchmark tasks of the autobatching paper added for issue 22:
the char tagger (a char BiLSTM over rare words) and the arc-hybrid parser.
Every variant computes the per-example loss and gradients and trains a step,
the check rejects a wrong hand variant, the data is what the tasks say, and
the parser's dynamic oracle leads to the gold tree."""
import random

import pytest
import torch

from bench import harness
from bench.tasks import char_tagger, parser

TASKS = {"char_tagger": char_tagger, "parser": parser}


def tensor_variants(mod, **kw):
    """The variants with tensor state (those with Python lists: test_python_state_variants.py)."""
    return {k: v for k, v in mod.build(size="small", **kw).items() if not k.endswith("_list")}


@pytest.mark.parametrize("B", [1, 4])
@pytest.mark.parametrize("name", TASKS)
def test_variants_agree_and_train(name, B):
    mod = TASKS[name]
    variants = tensor_variants(mod, batch_size=B, seed=B)
    assert set(variants) == {"per_example", "matchbox", "hand"}
    harness.check(variants, mod.TRAINS)
    for kind, v in variants.items():
        before = [p.detach().clone() for p in v.model.parameters()]
        loss = harness.step(v, mod.TRAINS)
        assert loss.dim() == 0 and torch.isfinite(loss), kind
        assert any(not torch.equal(a, p) for a, p in zip(before, v.model.parameters())), kind


@pytest.mark.parametrize("name", TASKS)
def test_check_catches_a_wrong_hand_model(name):
    mod = TASKS[name]
    variants = tensor_variants(mod, batch_size=3)
    with torch.no_grad():
        variants["hand"].model.bilstm.fwd[0].bias_ih.add_(0.05)
    with pytest.raises(AssertionError, match="hand"):
        harness.check(variants, mod.TRAINS)


def test_char_sentences_have_rare_words_and_a_length_spread():
    sents = char_tagger.make_sentences(64)
    ns = [w.size(1) for w, _, _ in sents]
    assert min(ns) >= 2 and max(ns) <= 80 and len(set(ns)) > 10
    words = torch.cat([w[0] for w, _, _ in sents])
    share = (words >= char_tagger.FREQUENT).double().mean().item()
    assert 0.05 < share < 0.15                              # RARE = 0.1
    for w, letters, t in sents:                             # letters: a blank-padded prefix per word
        assert letters.shape[:2] == w.shape == t.shape
        real = letters[0] != char_tagger.BLANK
        prefix = torch.arange(real.size(1)) < real.sum(1, keepdim=True)
        assert real.any(1).all() and torch.equal(real, prefix)


def test_char_hand_batch_spells_exactly_the_rare_words():
    sents = char_tagger.make_sentences(5, seed=3)
    p = char_tagger.Padded(sents, "cpu")
    assert p.where.numel() == sum(int((w >= char_tagger.FREQUENT).sum()) for w, _, _ in sents)
    assert (p.words.view(-1)[p.where] >= char_tagger.FREQUENT).all()


def _arcs_by_oracle(heads, rng):
    """Parse one sentence (heads: list, ROOT last) always taking a cheapest
    valid transition per ``parser.oracle`` (ties at random); the arcs made
    and the costs paid."""
    n = len(heads) - 1
    h = torch.tensor([heads])
    in_stack = torch.zeros(1, n + 1, dtype=torch.bool)
    position = torch.arange(n + 1)[None]
    stack, bp, arcs, paid = [], 0, {}, 0
    while stack or bp < n:
        sp = torch.tensor([len(stack)])
        s0 = torch.tensor([stack[-1] if stack else 0])
        s1 = torch.tensor([stack[-2] if len(stack) > 1 else 0])
        cost, valid = parser.oracle(h, in_stack, position, sp, torch.tensor([bp]), torch.tensor([n]), s0, s1)
        options = [t for t in range(3) if valid[0, t]]
        best = min(int(cost[0, t]) for t in options)
        t = rng.choice([t for t in options if int(cost[0, t]) == best])
        paid += best
        if t == parser.SHIFT:
            stack.append(bp)
            in_stack[0, bp] = True
            bp += 1
        else:
            child = stack.pop()
            arcs[child] = bp if t == parser.LEFT else stack[-1]
            in_stack[0, child] = False
    return arcs, paid


def test_parser_oracle_recovers_the_gold_tree():
    rng = random.Random(0)
    for n in [1, 2, 3, 7, 15, 30]:
        for _ in range(5):
            heads = parser.random_heads(rng, n) + [n]
            arcs, paid = _arcs_by_oracle(heads, rng)
            assert paid == 0 and [arcs[i] for i in range(n)] == heads[:n]


def test_parser_trees_are_projective_with_one_root():
    rng = random.Random(1)
    for n in range(1, 25):
        heads = parser.random_heads(rng, n)
        assert heads.count(n) == 1
        for d, h in enumerate(heads):                       # no arc crosses another
            lo, hi = min(d, h), max(d, h)
            assert all(lo <= heads[k] <= hi for k in range(lo + 1, hi))


def test_parser_follows_its_own_predictions():
    # a parser whose MLP prefers a wrong transition pays a loss and takes another path
    variants = parser.build(batch_size=2, size="small", seed=5)
    model = variants["per_example"].model
    words, tags, heads = parser.make_sentences(2, seed=5)[0]
    with torch.no_grad():
        base = model(words, tags, heads).item()
        model.out.bias.copy_(torch.tensor([0.0, 0.0, 50.0]))   # RIGHT whenever it is valid
        biased = model(words, tags, heads).item()
    assert base > 0 and biased > base
