"""Transition-based dependency parser training step, the autobatching paper's
"Transition-Parsing" task (a BIST arc-hybrid parser, Kiperwasser & Goldberg
2016): forward + backward + SGD step on a batch of sentences.

The example-level model (``Parser.forward``, written for ONE sentence) embeds
the words and POS tags, runs a two-layer BiLSTM over them (BIST's
``--bibi-lstm``; ROOT is the last token, as in BIST's barchybrid), then
parses with the arc-hybrid system: a stack and a buffer, SHIFT (push the
buffer's first word), LEFT (the first buffer word becomes the head of the
stack top, which is popped) and RIGHT (the second stack word becomes the
head of the stack top, which is popped).  At every step an MLP scores the
three transitions from the BiLSTM vectors of the three top stack words and
the first buffer word, each with the vectors of its leftmost and rightmost
dependent so far (BIST's ``--userlmost --userl``).  Training is BIST's
(Goldberg & Nivre's dynamic oracle): the arc-hybrid oracle costs of the
valid transitions are computed from the gold heads and the current stack
and buffer, the loss is the hinge ``max(0, 1 + best wrong - best correct)``
(correct: the cheapest valid transitions), and the parser then follows its
OWN best valid transition (exploration), so which vectors meet the MLP, the
costs and the loss at each step depend on the earlier predictions.  BIST
explores at random; here it always follows the model, so that every variant
takes the same path and can be checked.  A sentence stops after its own
``2n`` transitions (stack empty, only ROOT left in the buffer).
Unlabeled: BIST also scores a label per arc (one more small linear layer).

The stack is a tensor of word positions with a per-example pointer ``sp``,
"in the stack" a bool tensor over the sentence, and the buffer the words
``bp..n`` (ROOT's position ``n = words.size(1) - 1``, a per-example int
under ``@batch``).

Variants:

- ``per_example``: ``Parser.forward`` on each sentence alone;
- ``matchbox``: the same ``@matchbox.batch`` forward on MaskedBatches;
- ``per_example_list`` / ``matchbox_list``: the same parser with its state
  in Python lists, the way BIST keeps it (``ListParser``): the stack and the
  buffer are lists of word positions (``stack.append(buffer.pop(0))``,
  ``stack.pop()``, ``stack[-1 - j]``), the outermost dependents lists
  indexed by position, the gold heads a list, and the oracle costs counted
  over the lists in Python; on each sentence alone, and under
  ``@matchbox.batch`` with the heads as ``matchbox.objects(heads)``;
- ``hand``: what an expert writes for the same module: the BiLSTM on padded
  sentences (``bench/tasks/bilstm.py``), then all B parsers advanced in
  lock-step on padded ``(B, T)`` state with gathers, ``torch.where`` for
  the transition each sentence takes, and an ``active`` mask for sentences
  that have finished.

Data: sentence lengths as in ``bilstm`` (``bench.data``: WikiNER's at the
paper size),
random words and POS tags, and a random projective gold tree per sentence
(the arc-hybrid oracle's setting).  Sizes: ``paper`` is Appendix C's BIST
defaults: 100-dim word, 25-dim POS embeddings, 200-dim LSTMs (each way, two
BiLSTM layers), a 100-unit MLP; ``small`` fits a laptop CPU.
"""
import random

import torch
import torch.nn as nn

import matchbox
from bench.data import sentence_lengths
from bench.harness import Variant, fresh
from bench.tasks.bilstm import _direction
from examples.bilstm_tagger import BiLSTM
from matchbox import MaskedBatch, example_sum

NAME = "parser"
TRAINS = True
SHIFT, LEFT, RIGHT = 0, 1, 2
VOCAB, TAGS = 1000, 17           # ids VOCAB and TAGS are ROOT's word and tag
SIZES = {"small": dict(wdim=32, pdim=8, hidden=32, mlp=32),
         "paper": dict(wdim=100, pdim=25, hidden=200, mlp=100)}
NEG = float("-inf")


def at(x, i):
    """``x[:, i]`` for one position per sentence, i (1,): (1, ...)."""
    return x[:, i].squeeze(1)


def oracle(heads, in_stack, position, sp, bp, n, s0, s1):
    """The arc-hybrid dynamic oracle (Goldberg & Nivre 2013) for one
    sentence: the cost (1, 3) of SHIFT, LEFT and RIGHT (the gold arcs each
    makes unreachable) and which of them are valid (1, 3).  ``heads``,
    ``in_stack``, ``position`` (1, n + 1); the stack size ``sp``, the first
    buffer word ``bp``, ROOT's position ``n``, the top stack words ``s0``,
    ``s1`` (1,) (meaningless where the stack is too short)."""
    h_s0, h_b0 = at(heads, s0), at(heads, bp)
    in_buf = position >= bp[:, None]                          # the buffer is bp..n
    s0_deps = ((heads == s0[:, None]) & in_buf).sum(1)        # s0's dependents in the buffer
    head_in_buf = h_s0 >= bp                                  # s0's head is in the buffer
    left = (head_in_buf & (h_s0 != bp)).long() + ((sp > 1) & (h_s0 == s1)).long() + s0_deps
    right = head_in_buf.long() + s0_deps
    shift = (at(in_stack, h_b0) & (h_b0 != s0)).long() + ((heads == bp[:, None]) & in_stack).sum(1)
    valid = torch.stack([bp < n, (sp > 0) & ((bp < n) | (sp == 1)), sp > 1], 1)
    return torch.stack([shift, left, right], 1), valid


def hinge(scores, cost, valid):
    """BIST's loss (1,): max(0, 1 + best wrong - best correct), correct
    meaning the cheapest valid transitions (0 when every valid one is)."""
    cheapest = cost.masked_fill(~valid, 10**6).min(1, keepdim=True).values
    correct = valid & (cost == cheapest)
    best_correct = scores.masked_fill(~correct, NEG).max(1).values
    best_wrong = scores.masked_fill(~(valid & ~correct), NEG).max(1).values
    return torch.relu(1 + best_wrong - best_correct)


class Parser(nn.Module):
    """Arc-hybrid BiLSTM parser for ONE sentence: word ids, tags and gold
    heads (1, n + 1), ROOT last (its own head)."""

    def __init__(self, wdim=100, pdim=25, hidden=200, mlp=100, k=3):
        super().__init__()
        self.k = k
        self.wembed = nn.Embedding(VOCAB + 1, wdim)
        self.pembed = nn.Embedding(TAGS + 1, pdim)
        self.bilstm = BiLSTM(wdim + pdim, hidden, layers=2)
        self.empty = nn.Parameter(0.1 * torch.randn(1, 3 * 2 * hidden))  # a missing stack word
        self.hidden = nn.Linear((k + 1) * 3 * 2 * hidden, mlp)
        self.out = nn.Linear(mlp, 3)

    def encode(self, words, tags):
        return self.bilstm(torch.cat([self.wembed(words), self.pembed(tags)], 2))

    @staticmethod
    def item(vecs, lmost, rmost, i):
        """Features of the word at position i (1,): its vector and those of
        its leftmost and rightmost dependents so far (1, 3 * d)."""
        return torch.cat([at(vecs, i), at(vecs, at(lmost, i)), at(vecs, at(rmost, i))], 1)

    @matchbox.batch
    def forward(self, words, tags, heads):
        """The summed hinge loss (1,) of parsing one sentence."""
        vecs = self.encode(words, tags)                   # (1, n + 1, d)
        n = words.size(1) - 1                             # ROOT's position
        position = torch.ones_like(words).cumsum(1) - 1
        lmost, rmost = position.clone(), position.clone()  # a word's outermost dependents (itself: none)
        stack = torch.zeros_like(words)                   # word positions, sp of them
        in_stack = torch.zeros_like(words, dtype=torch.bool)
        sp = words.batch_zeros()                          # (1,)
        bp = words.batch_zeros()                          # the buffer is bp..n
        loss = vecs.new_zeros(1)
        while sp > 0 or bp < n:
            s0, s1 = at(stack, sp - 1), at(stack, sp - 2)
            feats = []
            for j in range(self.k):
                if sp > j:
                    f = self.item(vecs, lmost, rmost, at(stack, sp - 1 - j))
                else:
                    f = self.empty
                feats.append(f)
            feats.append(self.item(vecs, lmost, rmost, bp))
            scores = self.out(torch.tanh(self.hidden(torch.cat(feats, 1))))   # (1, 3)
            cost, valid = oracle(heads, in_stack, position, sp, bp, n, s0, s1)
            loss = loss + hinge(scores, cost, valid)

            t = scores.masked_fill(~valid, NEG).argmax(1)   # follow the model
            if t == SHIFT:
                stack[:, sp] = bp
                in_stack[:, bp] = True
                sp = sp + 1
                bp = bp + 1
            elif t == LEFT:
                lmost[:, bp] = s0
                in_stack[:, s0] = False
                sp = sp - 1
            else:
                rmost[:, s1] = s0
                in_stack[:, s0] = False
                sp = sp - 1
        return loss


# ------------------------------------------------------------------ hand-written
class Padded:
    """The batch as an expert pads it: words / tags / heads (B, T) with each
    sentence's ROOT at its own position n (B,), real (B, T)."""

    def __init__(self, sentences, device):
        B, T = len(sentences), max(w.size(1) for w, _, _ in sentences)
        self.words = torch.zeros(B, T, dtype=torch.long)
        self.tags = torch.zeros(B, T, dtype=torch.long)
        self.heads = torch.zeros(B, T, dtype=torch.long)
        self.n = torch.tensor([w.size(1) - 1 for w, _, _ in sentences])
        for b, (w, t, h) in enumerate(sentences):
            self.words[b, :w.size(1)], self.tags[b, :w.size(1)], self.heads[b, :w.size(1)] = w[0], t[0], h[0]
        self.real = torch.arange(T) <= self.n[:, None]
        for name in ("words", "tags", "heads", "n", "real"):
            setattr(self, name, getattr(self, name).to(device))


def hand_loss(model, p):
    """The summed hinge loss of the batch ``p`` (a :class:`Padded`): the
    B parsers in lock-step for the longest one's 2n steps."""
    B, T = p.words.shape
    dev = p.words.device
    rows = torch.arange(B, device=dev)
    xs = torch.cat([model.wembed(p.words), model.pembed(p.tags)], 2)
    for fwd, bwd in zip(model.bilstm.fwd, model.bilstm.bwd):
        xs = torch.cat([_direction(fwd, xs, p.real, False), _direction(bwd, xs, p.real, True)], 2)
    vecs = xs                                                           # (B, T, d)
    n, heads = p.n, p.heads
    position = torch.arange(T, device=dev)
    lmost = position.repeat(B, 1)                                       # positions (B, T)
    rmost = lmost.clone()
    stack = torch.zeros(B, T, dtype=torch.long, device=dev)
    in_stack = torch.zeros(B, T, dtype=torch.bool, device=dev)
    sp = torch.zeros(B, dtype=torch.long, device=dev)
    bp = torch.zeros(B, dtype=torch.long, device=dev)
    total = vecs.new_zeros(())

    def item(i):                                                        # (B, 3d)
        return torch.cat([vecs[rows, i], vecs[rows, lmost[rows, i]], vecs[rows, rmost[rows, i]]], 1)

    for _ in range(int(2 * n.max())):
        active = (sp > 0) | (bp < n)
        s0 = stack[rows, (sp - 1).clamp(min=0)]
        s1 = stack[rows, (sp - 2).clamp(min=0)]
        feats = [torch.where((sp > j)[:, None], item(stack[rows, (sp - 1 - j).clamp(min=0)]),
                             model.empty) for j in range(model.k)]
        feats.append(item(bp))
        scores = model.out(torch.tanh(model.hidden(torch.cat(feats, 1))))    # (B, 3)

        h_s0, h_b0 = heads[rows, s0], heads[rows, bp]
        in_buf = p.real & (position >= bp[:, None])                     # the buffer is bp..n
        s0_deps = ((heads == s0[:, None]) & in_buf).sum(1)
        head_in_buf = h_s0 >= bp
        left = (head_in_buf & (h_s0 != bp)).long() + ((sp > 1) & (h_s0 == s1)).long() + s0_deps
        right = head_in_buf.long() + s0_deps
        shift = (in_stack[rows, h_b0] & (h_b0 != s0)).long() + ((heads == bp[:, None]) & in_stack).sum(1)
        cost = torch.stack([shift, left, right], 1)
        valid = torch.stack([bp < n, (sp > 0) & ((bp < n) | (sp == 1)), sp > 1], 1)
        total = total + torch.where(active, hinge(scores, cost, valid), 0).sum()

        t = scores.masked_fill(~valid, NEG).argmax(1)
        shifts, lefts, rights = (rows[active & (t == c)] for c in (SHIFT, LEFT, RIGHT))
        pops = rows[active & (t != SHIFT)]
        stack[shifts, sp[shifts]] = bp[shifts]
        in_stack[shifts, bp[shifts]] = True
        lmost[lefts, bp[lefts]] = s0[lefts]
        rmost[rights, s1[rights]] = s0[rights]
        in_stack[pops, s0[pops]] = False
        sp = sp + active.long() * torch.where(t == SHIFT, 1, -1)
        bp = bp + (active & (t == SHIFT)).long()
    return total


# ------------------------------------------------------------------ data
def random_heads(rng, n):
    """Gold heads (positions; ROOT is n) of a random projective tree over n
    words with one word attached to ROOT and any number of dependents per side."""
    heads = [0] * n

    def subtree(lo, hi, head):          # the words lo..hi-1 form one subtree under head
        h = rng.randrange(lo, hi)
        heads[h] = head
        for a, b in ((lo, h), (h + 1, hi)):
            while a < b:               # split a side into consecutive dependent subtrees
                m = rng.randint(a + 1, b)
                subtree(a, m, h)
                a = m

    subtree(0, n, n)
    return heads


def make_sentences(batch_size, seed=0, size="small"):
    """``batch_size`` sentences: word ids, tags, heads (1, n + 1), ROOT last;
    ``bench.data``'s lengths for ``size``."""
    rng = random.Random(seed)
    out = []
    for n in sentence_lengths(batch_size, size, seed):
        words = [rng.randrange(VOCAB) for _ in range(n)] + [VOCAB]
        tags = [rng.randrange(TAGS) for _ in range(n)] + [TAGS]
        heads = random_heads(rng, n) + [n]
        out.append(tuple(torch.tensor([x]) for x in (words, tags, heads)))
    return out


def setup(batch_size, size="small", seed=0):
    """The parser (seeded initial weights) and ``make_sentences``."""
    torch.manual_seed(seed)
    return Parser(**SIZES[size]), make_sentences(batch_size, seed, size)


def build_dynet(batch_size=64, size="small", seed=0):
    """DyNet's autobatching off and on (``bench/dynet_tasks``), same
    sentences and initial weights."""
    from bench.dynet_tasks import parser, variants
    model, sentences = setup(batch_size, size, seed)
    data = [tuple(x[0].tolist() for x in s) for s in sentences]
    return variants(lambda pc: parser.Parser(pc, model), data)


def build(batch_size=64, device="cpu", size="small", seed=0):
    model, sentences = setup(batch_size, size, seed)
    model = model.to(device)
    sentences = [tuple(x.to(device) for x in s) for s in sentences]

    per = fresh(model)
    def per_example():
        return sum(per(*s).sum() for s in sentences)

    mb = fresh(model)
    words, tags, heads = (MaskedBatch.fromlist([s[i] for s in sentences], dims=(True,))
                          for i in range(3))
    def matchbox_():
        return example_sum(mb(words, tags, heads))

    hand = fresh(model)
    padded = Padded(sentences, device)
    def hand_written():
        return hand_loss(hand, padded)

    return {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
            "matchbox": Variant(matchbox_, mb), **list_variants(model, sentences, SIZES[size])}


# ------------------------------------------------------------------ Python lists
@matchbox.batch
def list_oracle(heads, stack, buffer, device):
    """:func:`oracle` over Python lists, counted as BIST counts: the costs
    (1, 3) of SHIFT, LEFT and RIGHT and which are valid (1, 3)."""
    b0 = buffer[0]
    shift = (heads[b0] in stack[:-1]) + len([d for d in stack if heads[d] == b0])
    left = right = 0
    if stack:
        s0 = stack[-1]
        s0_deps = len([d for d in buffer if heads[d] == s0])
        left = (heads[s0] in buffer[1:]) + (len(stack) > 1 and heads[s0] == stack[-2]) + s0_deps
        right = (heads[s0] in buffer) + s0_deps
    valid = [len(buffer) > 1, len(stack) > 0 and (len(buffer) > 1 or len(stack) == 1), len(stack) > 1]
    return torch.tensor([[shift, left, right]], device=device), torch.tensor([valid], device=device)


class ListParser(Parser):
    """:class:`Parser` with the parser state in Python lists; ``heads`` is
    the gold head of each word, a list (ROOT last, its own head)."""

    @staticmethod
    def features(vecs, lmost, rmost, i):
        """Features (1, 3 * d) of the word at position ``i``, an int."""
        return torch.cat([vecs[:, i], vecs[:, lmost[i]], vecs[:, rmost[i]]], 1)

    @matchbox.batch
    def forward(self, words, tags, heads):
        """The summed hinge loss (1,) of parsing one sentence."""
        vecs = self.encode(words, tags)                   # (1, n + 1, d)
        buffer = list(range(len(heads)))                  # word positions, ROOT last
        stack = []
        lmost = list(range(len(heads)))                   # a word's outermost dependents so far
        rmost = list(range(len(heads)))
        loss = vecs.new_zeros(1)
        while stack or len(buffer) > 1:
            feats = []
            for j in range(self.k):
                if len(stack) > j:
                    feats.append(self.features(vecs, lmost, rmost, stack[-1 - j]))
                else:
                    feats.append(self.empty)
            feats.append(self.features(vecs, lmost, rmost, buffer[0]))
            scores = self.out(torch.tanh(self.hidden(torch.cat(feats, 1))))   # (1, 3)
            cost, valid = list_oracle(heads, stack, buffer, scores.device)
            loss = loss + hinge(scores, cost, valid)

            t = scores.masked_fill(~valid, NEG).argmax(1)   # follow the model
            if t == SHIFT:
                stack.append(buffer.pop(0))
            elif t == LEFT:
                lmost[buffer[0]] = stack.pop()
            else:
                s0 = stack.pop()
                rmost[stack[-1]] = s0
        return loss


def list_variants(model, sentences, sizes):
    """``per_example_list`` and ``matchbox_list``: :class:`ListParser` with
    ``model``'s weights (made with ``sizes``) on each sentence alone / on the batch."""
    def list_model():
        m = ListParser(**sizes).to(model.empty.device)
        m.load_state_dict(model.state_dict())
        return m

    heads = [s[2][0].tolist() for s in sentences]
    per = list_model()
    def per_example_list():
        return sum(per(w, t, h).sum() for (w, t, _), h in zip(sentences, heads))

    mb = list_model()
    words, tags = (MaskedBatch.fromlist([s[i] for s in sentences], dims=(True,)) for i in range(2))
    def matchbox_list():                # wrapping the list is part of the step
        return example_sum(mb(words, tags, matchbox.objects(heads)))

    return {"per_example_list": Variant(per_example_list, per),
            "matchbox_list": Variant(matchbox_list, mb)}
