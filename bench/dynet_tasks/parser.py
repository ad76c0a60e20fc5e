"""The arc-hybrid BiLSTM parser of ``bench/tasks/parser.py`` in DyNet (BIST,
Kiperwasser & Goldberg 2016, is itself DyNet code; the DyNet benchmark has no
parser), built from its ``Parser`` module: the same features, MLP, dynamic
oracle, hinge loss, and the same rule of following the model's own best
valid transition.

Which transition comes next depends on the scores' VALUES, so a parser has
to run its graph forward at every step.  To leave autobatching something to
batch, the sentences of the minibatch advance in lock-step: each step adds
every unfinished sentence's scores to the graph and runs one forward over
all of them (``dy.values``); the first such forward also runs every
sentence's BiLSTM.  Stack, buffer and oracle are plain Python, as in BIST.
A sentence is Python lists (words, tags, heads), ROOT last."""
from bench.dynet_tasks import BiLSTM, Linear, dy, lookup, parameter

SHIFT, LEFT, RIGHT = 0, 1, 2


def oracle(heads, in_stack, sp, bp, n, s0, s1):
    """``bench.tasks.parser.oracle`` on Python values: the costs of SHIFT,
    LEFT and RIGHT and which are valid (lists of 3)."""
    h_s0, h_b0 = heads[s0], heads[bp]
    s0_deps = sum(heads[k] == s0 for k in range(bp, n + 1))
    head_in_buf = h_s0 >= bp
    left = (head_in_buf and h_s0 != bp) + (sp > 1 and h_s0 == s1) + s0_deps
    right = head_in_buf + s0_deps
    shift = (in_stack[h_b0] and h_b0 != s0) + sum(h == bp and s for h, s in zip(heads, in_stack))
    return [shift, left, right], [bp < n, sp > 0 and (bp < n or sp == 1), sp > 1]


def best(values, allowed):
    """Index of the largest of ``values`` where ``allowed`` (the first on a
    tie, as ``argmax``), or None."""
    ks = [k for k in range(len(values)) if allowed[k]]
    return max(ks, key=lambda k: (values[k], -k)) if ks else None


class Sentence:
    """One sentence's parser state; the stack is a list of n + 1 positions
    with a pointer ``sp`` (so ``stack[sp - 1]`` of an empty stack reads what
    the torch model's ``at(stack, sp - 1)`` reads)."""

    def __init__(self, parser, words, tags, heads):
        self.parser, self.heads = parser, heads
        self.n = n = len(words) - 1
        self.vecs = parser.bilstm([dy.concatenate([parser.wembed[w], parser.pembed[t]])
                                   for w, t in zip(words, tags)])
        self.lmost, self.rmost = list(range(n + 1)), list(range(n + 1))
        self.stack, self.in_stack = [0] * (n + 1), [False] * (n + 1)
        self.sp = self.bp = 0
        self.losses = []

    def done(self):
        return not (self.sp > 0 or self.bp < self.n)

    def item(self, i):
        return dy.concatenate([self.vecs[i], self.vecs[self.lmost[i]], self.vecs[self.rmost[i]]])

    def scores(self):
        p, sp = self.parser, self.sp
        feats = [self.item(self.stack[sp - 1 - j]) if sp > j else p.empty for j in range(p.k)]
        return p.out(dy.tanh(p.hidden(dy.concatenate(feats + [self.item(self.bp)]))))

    def advance(self, scores, values):
        """Add the hinge loss of this step and take the best valid transition."""
        sp, bp, stack = self.sp, self.bp, self.stack
        s0, s1 = stack[sp - 1], stack[sp - 2]
        cost, valid = oracle(self.heads, self.in_stack, sp, bp, self.n, s0, s1)
        cheapest = min(c for c, v in zip(cost, valid) if v)
        correct = [v and c == cheapest for c, v in zip(cost, valid)]
        good = best(values, correct)
        wrong = best(values, [v and not ok for v, ok in zip(valid, correct)])
        if wrong is not None and 1 + values[wrong] - values[good] > 0:
            self.losses.append(dy.pick(scores, wrong) - dy.pick(scores, good) + 1.0)
        t = best(values, valid)
        if t == SHIFT:
            stack[sp] = bp
            self.in_stack[bp] = True
            self.sp, self.bp = sp + 1, bp + 1
        else:
            if t == LEFT:
                self.lmost[bp] = s0
            else:
                self.rmost[s1] = s0
            self.in_stack[s0] = False
            self.sp = sp - 1

    def loss(self):
        return dy.esum(self.losses) if self.losses else dy.zeros(1)


class Parser:
    def __init__(self, pc, model):
        self.k = model.k
        self.wembed, self.pembed = lookup(pc, model.wembed), lookup(pc, model.pembed)
        self.bilstm = BiLSTM(pc, model.bilstm)
        self.empty = parameter(pc, model.empty[0])
        self.hidden, self.out = Linear(pc, model.hidden), Linear(pc, model.out)

    def losses(self, sentences):
        states = [Sentence(self, *s) for s in sentences]
        live = [s for s in states if not s.done()]
        while live:
            scores = [s.scores() for s in live]
            for s, e, v in zip(live, scores, dy.values(scores)):
                s.advance(e, v)
            live = [s for s in live if not s.done()]
        return [s.loss() for s in states]
