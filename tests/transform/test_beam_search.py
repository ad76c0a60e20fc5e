"""A beam search written for one example, run batched (SPEC 4b): per-example
lists whose items are tuples (a score, a list of token ids, a hidden state)
appended under per-example branches (a beam that reached EOS is carried
over, the others grow two candidates), unpacked in ``for score, toks, h in
beams``, sorted with ``key=`` and sliced per example, ``toks + [tok]`` per
example.  Each batched run equals the per-example runs, values and
gradients, with EOS reached by no, some and every example."""
import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

V, H, EOS = 7, 5, 1
D = torch.float64
torch.manual_seed(0)
emb = nn.Embedding(V, H).to(D)
cell = nn.GRUCell(H, H).to(D)
out = nn.Linear(H, V).to(D)
PARAMS = [*emb.parameters(), *cell.parameters(), *out.parameters()]


@matchbox.batch
def beam_search(h0, beam_size=2, max_len=4):          # h0: (1, H)
    beams = [(0.0, [0], h0)]
    for step in range(max_len):
        candidates = []
        for score, toks, h in beams:
            if toks[-1] == EOS:
                candidates.append((score, toks, h))
                continue
            h2 = cell(emb(torch.tensor([toks[-1]])), h)
            logp = F.log_softmax(out(h2), dim=-1)
            top_v, top_i = logp.topk(beam_size)
            for k in range(beam_size):
                candidates.append((score + top_v[0, k].item(), toks + [top_i[0, k].item()], h2))
        beams = sorted(candidates, key=lambda c: c[0], reverse=True)[:beam_size]
    best = beams[0]
    return best[0], best[1], best[2]


@matchbox.batch
def beam_search_scored(h0, beam_size=2, max_len=4):   # scores are tensors: they get gradients
    beams = [(torch.zeros(()), [0], h0)]
    for step in range(max_len):
        candidates = []
        for score, toks, h in beams:
            if toks[-1] == EOS:
                candidates.append((score, toks, h))
                continue
            h2 = cell(emb(torch.tensor([toks[-1]])), h)
            logp = F.log_softmax(out(h2), dim=-1)
            top_v, top_i = logp.topk(beam_size)
            for k in range(beam_size):
                candidates.append((score + top_v[0, k], toks + [top_i[0, k].item()], h2))
        beams = sorted(candidates, key=lambda c: c[0], reverse=True)[:beam_size]
    scores = [s for s, _, _ in beams]
    hyps = [toks for _, toks, _ in beams]
    return beams[0][0], hyps, torch.cat([h for _, _, h in beams]), scores[-1]


@pytest.fixture(params=[0.0, 0.5, 3.0], ids=["eos-some", "eos-early", "eos-all"])
def eos_bias(request):
    """A bias on EOS's logit: 0 (some examples' beams reach EOS), 0.5
    (most reach it at different steps), 3 (every beam at the first step)."""
    with torch.no_grad():
        out.bias[EOS] += request.param
    yield request.param
    with torch.no_grad():
        out.bias[EOS] -= request.param


def _inputs(B, equal):
    if equal:
        x = torch.randn(1, H, dtype=D)
        return MaskedBatch.fromlist([x.clone() for _ in range(B)])
    return MaskedBatch.fromlist([torch.randn(1, H, dtype=D) for _ in range(B)])


@pytest.mark.parametrize("B,equal", [(1, False), (4, False), (6, False), (4, True)])
@pytest.mark.parametrize("fn", [beam_search, beam_search_scored], ids=["item", "tensor"])
def test_beam_search(fn, B, equal, eos_bias):
    got = mb_test(fn, _inputs(B, equal), dtype=D, params=PARAMS)
    hyps = matchbox.examples(got[1])
    if fn is beam_search_scored:
        hyps = [h[0] for h in hyps]
    assert all(h[0] == 0 and 2 <= len(h) <= 5 for h in hyps)
    if eos_bias == 3.0:
        assert all(h == [0, EOS] for h in hyps)


def test_examples_differ():
    """The inputs above do take different paths: the examples' best
    hypotheses and the steps at which their beams end differ."""
    got = beam_search(_inputs(6, False))
    assert len({len(h) for h in matchbox.examples(got[1])}) > 1
    with torch.no_grad():
        out.bias[EOS] += 0.5
    try:
        hyps = matchbox.examples(beam_search_scored(_inputs(8, False))[1])
    finally:
        with torch.no_grad():
            out.bias[EOS] -= 0.5
    assert len({tuple(len(t) for t in h) for h in hyps}) > 1


@matchbox.batch
def tagged_steps(x):                                  # x: (1, n, 2)
    items = []
    for i, t in enumerate(x.unbind(1)):
        if t.sum() > 0:
            items.append((i, t * 2, [i]))
        else:
            items.append((i * 10, t, []))
            items.append((-1, t.exp(), [i, i]))
    total = x.sum(1)
    n = 0
    for i, t, ids in items:
        total = total + t * i + len(ids)
        n += i
    ranked = sorted(items, key=lambda it: it[0])[1:]
    return total, n, len(items), [i for i, _, _ in ranked], [t for _, t, _ in ranked]


@pytest.mark.parametrize("B,lengths", [(4, "mixed"), (4, "equal"), (1, "random"), (5, "one")])
def test_tuples_appended_under_lanes(B, lengths):
    mb_test(tagged_steps, (B, (True, 5), (False, 2)), lengths=lengths, dtype=D)


Hyp = collections.namedtuple("Hyp", "score h")


@matchbox.batch
def named_hyps(x):                                    # x: (1, n, 2)
    hyps = []
    for i, t in enumerate(x.unbind(1)):
        if t.sum() > 0:
            hyps.append(Hyp(t.sum().item(), t * 2))
        else:
            hyps.append(Hyp(-1.0, t))
            hyps.append(Hyp(i * 1.0, t.exp()))
    total = x.sum(1)
    for hyp in sorted(hyps, key=lambda y: y.score):
        total = total * 0.5 + hyp.h
    s, h = hyps[-1]
    return total, s, h, hyps[0].h


@pytest.mark.parametrize("B,lengths", [(4, "mixed"), (4, "equal"), (1, "random"), (5, "one")])
def test_namedtuples_appended_under_lanes(B, lengths):
    mb_test(named_hyps, (B, (True, 5), (False, 2)), lengths=lengths, dtype=D)
