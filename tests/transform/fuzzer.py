"""A random program fuzzer for ``@matchbox.batch``.

Generates example-level programs from nested if/elif/else, while (with a
bound), ``while True`` + break, for over ``range`` with constant and
per-example bounds (plain, ``reversed``, ``enumerate``) and over the steps
of a sequence of per-example length (``s.unbind(1)``, plain and
``reversed``), break, continue,
early return, augmented and tuple assignment over a few float variables and
an int counter, loop temporaries (``p``/``q`` bound and then read later in
the same block, perhaps after a nested block that binds them again), a
variable rebound to another shape (``r``: ``(1, 1)``, then ``(1,)`` in a
branch or a loop, perhaps left by a jump before it is rebound back), the
other binding forms (``no_grad`` blocks, walrus in ``if`` and ``while``
tests, dict and list item
stores, append and extend, a pure nested function, returns of another
per-example rank, losses with each reduction accumulated, size reads in
arithmetic), reads of the steps ``st = s.unbind(1)`` (``st[-1]``,
``st[0]``, ``st[k]`` where the example has it, slices, ``len(st)`` in a
``range``, ``sum(st)``, a generator sum), a walrus in the right operand of
``and``, a ``namedtuple`` state rebuilt, per-example Python values (a
string built and tested, a dict of counts made in the function, a helper
object changed through its method, builtins, ``math``, ``%``, f-strings
and ``in`` on per-example numbers) and (``--implicit-dim``)
softmax-family calls with no ``dim`` on values whose batch-of-one
dimension sits first, elsewhere or nowhere; and checks each batched run
against per-example runs (values and gradients) with ``mb_test``.  A few programs hold a construct
that ``@batch`` must refuse at decoration (``try``/``except``, a nested
function that changes an enclosing list); for them the check is that it
does.

Only exact float ops (+, -, *, abs, clamp) are used, so a comparison takes
the same branch in the batched and in the per-example run (but for the sum
of the steps and the softmax family, whose last bits may differ; a flip
needs two values within one rounding, which does not happen in practice).

    python -m tests.transform.fuzzer --count 5000 [--seed 0] [--show]
"""
import argparse
import collections
import linecache
import math
import random
import re
import sys
import traceback
import time

import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.transform import BatchSyntaxError
from matchbox.test_utils import mb_test

FLOATS = ("a", "b", "c")
TEMPS = ("p", "q")  # only read in the block that binds them, after the binding
Pair = collections.namedtuple("Pair", "h c")

# softmax-family calls with no dim (F.softmax(x)): PyTorch picks the dim from
# each example's own rank.  Off until ops/softmax.py follows that rule for
# every placement (issue 27 item 2); --implicit-dim turns them on.
IMPLICIT_DIM = True
IMPLICIT = ("F.softmax(s.transpose(0, 1)).sum(0)",       # sequence-first (n, 1, 1): over n
            "F.log_softmax(s.transpose(0, 1)).sum(0)",
            "F.softmin(s.transpose(0, 1)).sum(0)",
            "F.softmax(s[0]).sum(0, keepdim=True)",      # no batch-of-one dim (n, 1): over 1
            "F.log_softmax(s.view(-1)).sum() + x * 0",   # (n,): over n
            "F.softmax(s).sum(1)",                       # batch-first (1, n, 1): over the 1
            "torch.nn.Softmax()(s.transpose(0, 1)).sum(0)")


def _tensorish(e):
    """Does expression ``e`` involve a tensor variable?"""
    return re.search(r"\b[abcxy]\b", e) is not None


class ProgramGenerator:
    """One random program: ``generate()`` returns its source."""

    def __init__(self, rng, max_depth=3, max_stmts=3, implicit_dim=None):
        self.rng, self.max_depth, self.max_stmts = rng, max_depth, max_stmts
        self.implicit_dim = IMPLICIT_DIM if implicit_dim is None else implicit_dim
        self.counter = 0
        # one reduction per program: L += loss keeps one shape, as in PyTorch
        self.reduction = rng.choice(["'mean'", "'sum'", "'none'"])

    def fresh(self, base):
        self.counter += 1
        return f"{base}{self.counter}"

    # ---------------------------------------------------------- expressions
    def atom(self):
        r = self.rng.random()
        if r < 0.6:
            return self.rng.choice(FLOATS)
        if r < 0.8:
            return repr(self.rng.choice([0.25, 0.5, -0.75, 1.5, 2.0]))
        return self.rng.choice(["x", "y"])

    def value(self):
        """An expression for the right of an assignment: never a bare
        variable (aliasing plus an in-place ``+=`` is plain-PyTorch
        semantics that MaskedBatch, being immutable, does not copy)."""
        e = self.expr()
        if not _tensorish(e):
            return f"x * 0.0 + {e}"
        return f"{e} * 1.0" if e.isidentifier() else e

    def expr(self, depth=0):
        r = self.rng.random()
        if depth >= 2 or r < 0.3:
            return self.atom()
        a, b = self.expr(depth + 1), self.expr(depth + 1)
        if r < 0.5:
            return f"({a} + {b})"
        if r < 0.65:
            return f"({a} - {b})"
        if r < 0.8:
            return f"torch.clamp({a} * {b if _tensorish(b) else 'c'}, -4.0, 4.0)"
        if r < 0.9:
            return f"torch.abs({a if _tensorish(a) else 'a'})"
        return f"({a} * 0.5 + k * 0.25)"

    def cond(self, depth=0):
        r = self.rng.random()
        if r < 0.08:
            return self.rng.choice(["True", "False", "FLAG"])
        if r < 0.18:
            return f"k {self.rng.choice(['>', '<', '>=', '=='])} {self.rng.randint(0, 3)}"
        if r < 0.3 and depth == 0:
            op = self.rng.choice(["and", "or"])
            return f"({self.cond(1)}) {op} ({self.cond(1)})"
        if r < 0.36 and depth == 0:
            return f"not ({self.cond(1)})"
        op = self.rng.choice(["<", ">", "<=", ">="])
        return f"{self.rng.choice(FLOATS)} {op} {self.expr(1)}"

    # ---------------------------------------------------------- statements
    def block(self, depth, loop, indent):
        n = self.rng.randint(1, self.max_stmts)
        lines = []
        for _ in range(n):
            lines += self.stmt(depth, loop, indent)
        return lines

    def stmt(self, depth, loop, indent):
        pad = "    " * indent
        if loop and self.rng.random() < 0.2:
            return self.temporary(depth, loop, indent)
        if depth and self.rng.random() < 0.08:
            return self.reshaped(depth, loop, indent)
        if depth and self.rng.random() < 0.12:
            return self.binding_form(indent)
        if depth and self.rng.random() < 0.12:
            return self.python_value(indent)
        r = self.rng.random()
        if depth >= self.max_depth:
            r = self.rng.random() * 0.45
        if r < 0.2:
            return [f"{pad}{self.rng.choice(FLOATS)} = {self.value()}"]
        if r < 0.3:
            op = self.rng.choice(["+=", "-=", "*="])
            rhs = self.value() if op != "*=" else self.rng.choice(["0.5", "-1.0", "1.5"])
            return [f"{pad}{self.rng.choice(FLOATS)} {op} {rhs}"]
        if r < 0.36:
            u, v = self.rng.sample(FLOATS, 2)
            return [f"{pad}{u}, {v} = {v} * 1.0, {self.value()}"]
        if r < 0.4:
            return [f"{pad}k += 1"]
        if r < 0.45:
            if loop and self.rng.random() < 0.6:
                jump = self.rng.choice(["break", "continue"])
                return [f"{pad}if {self.cond()}:", f"{pad}    {jump}"]
            return [f"{pad}if {self.cond()}:", f"{pad}    return {self.value()} + k"]
        if r < 0.65:
            lines = [f"{pad}if {self.cond()}:"] + self.block(depth + 1, loop, indent + 1)
            for _ in range(self.rng.choice([0, 0, 1, 2])):
                lines += [f"{pad}elif {self.cond()}:"] + self.block(depth + 1, loop, indent + 1)
            if self.rng.random() < 0.5:
                lines += [f"{pad}else:"] + self.block(depth + 1, loop, indent + 1)
            return lines
        if r < 0.75:
            w = self.fresh("w")
            # sometimes the test binds a per-example value with a walrus
            test = self.cond(1) if self.rng.random() < 0.8 else \
                f"(v := {self.value()}) {self.rng.choice(['<', '>'])} {self.rng.choice(FLOATS)}"
            lines = [f"{pad}{w} = 0", f"{pad}while {w} < {self.rng.randint(1, 4)} and {test}:",
                     f"{pad}    {w} += 1"] + self.block(depth + 1, True, indent + 1)
            if self.rng.random() < 0.2:
                lines += [f"{pad}else:"] + self.block(depth + 1, loop, indent + 1)
            return lines
        if r < 0.82:
            w = self.fresh("w")
            return ([f"{pad}{w} = 0", f"{pad}while True:", f"{pad}    {w} += 1",
                     f"{pad}    if {w} > {self.rng.randint(1, 4)}:", f"{pad}        break"]
                    + self.block(depth + 1, True, indent + 1))
        t = self.fresh("t")
        bound = self.rng.choice(["n", str(self.rng.randint(1, 3))])
        kind = self.rng.random()
        if kind < 0.45:
            head = f"for {t} in range({bound}):"
        elif kind < 0.6:
            head = f"for {t} in reversed(range({bound})):"
        elif kind < 0.75:
            head = f"for j{t}, {t} in enumerate(range({bound})):"
        elif kind < 0.9:
            head = f"for {t} in s.unbind(1):"
        else:
            head = f"for {t} in reversed(s.unbind(1)):"
        lines = [f"{pad}{head}", f"{pad}    a = a + {t} * 0.25"] + self.block(depth + 1, True, indent + 1)
        if self.rng.random() < 0.15:
            lines += [f"{pad}else:"] + self.block(depth + 1, loop, indent + 1)
        return lines

    def temporary(self, depth, loop, indent):
        """``p = value``, maybe a nested statement (which may bind ``p``
        again), then a read of ``p`` in the same block."""
        pad = "    " * indent
        t = self.rng.choice(TEMPS)
        lines = [f"{pad}{t} = {self.value()}"]
        if depth < self.max_depth and self.rng.random() < 0.5:
            lines += self.stmt(depth + 1, loop, indent)
        return lines + [f"{pad}{self.rng.choice(FLOATS)} = {self.rng.choice(FLOATS)} + {t} * 0.5"]

    def reshaped(self, depth, loop, indent):
        """``r`` rebound from ``(1, 1)`` to ``(1,)``, read, maybe a nested
        statement (which may jump), then rebound back to ``(1, 1)``."""
        pad = "    " * indent
        lines = [f"{pad}r = ({self.value()}).sum(1)",
                 f"{pad}{self.rng.choice(FLOATS)} = {self.rng.choice(FLOATS)} + r.unsqueeze(1) * 0.5"]
        if depth < self.max_depth and self.rng.random() < 0.5:
            lines += self.stmt(depth + 1, loop, indent)
        return lines + [f"{pad}r = {self.value()}"]

    def binding_form(self, indent):
        """One of the other ways to bind or change a value: a ``no_grad``
        block, a walrus in an ``if`` test, a dict or list item store, an
        append or extend, a call of a pure nested function, a return of
        another per-example rank, a loss with each reduction added to an
        accumulator (each example's own loss), a size read (``x.size(0)``,
        ``len(x)``: 1 per example) used in arithmetic, or a softmax with no
        dim on each placement of ``s`` (torch's implicit dim, read on each
        example's rank, is a size-1 dim there, so it is exact; the wrong
        one would be ``s``'s steps)."""
        pad = "    " * indent
        f, g = self.rng.choice(FLOATS), self.rng.choice(FLOATS)
        kind = self.rng.randrange(16)
        if kind >= 11:
            return self.steps_form(kind, f, g, pad)
        if kind == 10:  # a size read used in arithmetic: per example, x.size(0) is 1
            read = self.rng.choice(["x.size(0)", "x.shape[0]", "len(x)", "s.size(0)"])
            return [f"{pad}{f} = {f} / {read} + {g} * ({read} - 1)"]
        if kind >= 8:   # a loss reduced inside the per-example code, accumulated
            loss = self.rng.choice(["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
            return [f"{pad}L += F.{loss}({f}, {g} * 0.5, reduction={self.reduction})"]
        if kind == 0:
            return [f"{pad}with torch.no_grad():", f"{pad}    {f} = {self.value()}"]
        if kind == 1:
            return [f"{pad}if (v := {self.value()}) {self.rng.choice(['<', '>'])} {g}:",
                    f"{pad}    {f} = {f} + v * 0.5"]
        if kind == 2:
            return [f"{pad}d['k'] = {self.value()}"]
        if kind == 3:
            return [f"{pad}acc[{self.rng.randrange(2)}] = {self.value()}"]
        if kind == 4:
            return [f"{pad}lst.append({self.value()})"]
        if kind == 5:
            return [f"{pad}lst.extend([{self.value()}, {self.value()}])"]
        if kind == 6:
            return [f"{pad}{f} = half({g}) * 1.0"]
        return [f"{pad}if {self.cond()}:", f"{pad}    return ({self.value()}).sum(1) + k"]

    def steps_form(self, kind, f, g, pad):
        """Reads of the steps ``st = s.unbind(1)`` (each example's own),
        a walrus in ``and``, a namedtuple rebuilt, an implicit-dim call."""
        if kind == 15 and self.implicit_dim:
            return [f"{pad}{f} = {f} + {self.rng.choice(IMPLICIT)} * 0.5"]
        if kind == 14:
            return [f"{pad}pt = Pair(pt.h + {self.value()} * 0.5, pt.c * 0.5)"]
        if kind == 13:
            test, value = self.cond(1), self.value()
            op = self.rng.choice(["<", ">"])
            return [f"{pad}if {test} and (v := {value}) {op} {g}:",
                    f"{pad}    {f} = {f} + v * 0.5"]
        k = self.rng.randint(1, 3)
        read = self.rng.choice([
            "st[-1]", "st[0]", "st[-1] * st[0]", "sum(st)", "sum(t * 0.5 for t in st)",
            "st[-2:][0]", "st[1:][-1] if len(st) > 1 else st[0]", "len(st) * 0.25 + x * 0"])
        if self.rng.random() < 0.3:   # an index only the examples with that step read
            op = self.rng.choice([">", ">="])
            at = k if op == ">" else -k
            return [f"{pad}if s.size(1) {op} {k}:", f"{pad}    {f} = {f} + st[{at}] * 0.5"]
        if self.rng.random() < 0.2:   # each example's own steps, by index
            i = self.fresh("i")
            return [f"{pad}for {i} in range(len(st)):", f"{pad}    {f} = {f} + st[{i}] * 0.25"]
        return [f"{pad}{f} = {f} + ({read}) * 0.5"]
    # ------------------------------------------------ per-example Python values
    # (issue 29) a string ``tag`` and a dict ``counts`` made in the function,
    # a helper object ``tally`` whose method changes it, and builtins, math,
    # str, f-strings and ``in`` on per-example numbers, in loops and branches
    PY_PRELUDE = ["    tag = 'w'", "    counts = {}", "    tally = Tally()"]
    PY_RESULT = ("            + len(tag) * 0.25 + len(counts) * 0.5 + tally.n * 0.125 + tally.total\n"
                 "            + w.hits * 0.5 + len(w.ids) * 0.25")

    def python_value(self, indent):
        """A statement on per-example Python values (all exact: ints,
        strings, dicts, sums of floats the tensors hold)."""
        pad = "    " * indent
        f = self.rng.choice(FLOATS)
        kind = self.rng.randrange(15)
        if kind >= 10:
            return self.object_value(pad, f, kind - 10)
        if kind == 0:
            return [f"{pad}tag = tag + str(k % 3)"]
        if kind == 1:
            return [f"{pad}tag = f\"{{tag}}{{int({f}.sum().item() > 0)}}\""]
        if kind == 2:
            return [f"{pad}if tag.endswith('1') or len(tag) > 3:", f"{pad}    {f} = {f} + 0.5"]
        if kind == 3:
            return [f"{pad}counts[k % 3] = counts.get(k % 3, 0) + 1"]
        if kind == 4:
            return [f"{pad}counts[tag[-1]] = len(tag)"]
        if kind == 5:
            return [f"{pad}tally.add({f}.sum().item())"]
        if kind == 6:
            return [f"{pad}k = min(max(k, n.item()), 4) + abs(k - 2) // 2"]
        if kind == 7:
            return [f"{pad}if (k % 3) in counts and '%d' % k != '1':", f"{pad}    {f} = {f} * 0.5"]
        if kind == 8:
            return [f"{pad}for ch in tag[-2:]:", f"{pad}    {f} = {f} + (0.25 if ch == '1' else 0.125)"]
        return [f"{pad}{f} = {f} + math.floor(math.sqrt(k)) * 0.5 + round(k / 2) * 0.25"]

    def object_value(self, pad, f, kind):
        """A statement on ``w``, each example's own ``Tok`` object (a word
        string ``w.text``, a list of ints ``w.ids``, a counter ``w.hits``),
        passed as ``matchbox.objects``."""
        if kind == 0:
            return [f"{pad}if w.text.startswith('a') or len(w.ids) > 2:", f"{pad}    {f} = {f} + 0.5"]
        if kind == 1:
            return [f"{pad}for i2 in w.ids:", f"{pad}    {f} = {f} + i2 * 0.125"]
        if kind == 2:
            return [f"{pad}w.hits += 1", f"{pad}counts[w.text] = counts.get(w.text, 0) + k % 2"]
        if kind == 3:
            return [f"{pad}tag = tag + w.text[:1]",
                    f"{pad}{f} = {f} + w.text.count('b') * 0.25"]
        return [f"{pad}k = k + len(w.text) % 3 + (1 if w.first() in 'ab' else 0)"]

    def generate(self, name="prog"):
        lines = [f"def {name}(x, y, n, s, w):", "    a = x * 1.0", "    b = y + 0.5", "    c = x - y",
                 "    k = 0", "    r = x * 1.0", "    v = x * 0.0", "    d = {'k': y * 1.0}",
                 "    acc = [x * 1.0, y * 1.0]", "    lst = [x * 1.0]", "    L = 0",
                 "    st = s.unbind(1)", "    pt = Pair(x * 1.0, y * 1.0)",
                 "", "    def half(u):", "        return u * 0.5 + 0.25"]
        refused = self.rng.random()
        if refused < 0.03:   # refused at decoration: an exception would be whole-batch
            lines += ["    try:", "        b = b * 1.0", "    except ValueError:", "        b = b * 2.0"]
        elif refused < 0.06:   # refused: a nested function that changes lst
            lines += ["    def put(u):", "        lst.append(u)", "    put(a * 1.0)"]
        lines += self.PY_PRELUDE
        lines += self.block(0, False, 1)
        lines += ["    return (a + b * c + k + r * 0.5 + v + d['k'] + acc[0] * acc[1]",
                  "            + F.stack(lst, 1).sum(1) + L + pt.h * pt.c",
                  self.PY_RESULT + ")"]
        return "\n".join(lines) + "\n"


class Tok:
    """A word the programs get as an object per example (``matchbox.objects``)."""

    def __init__(self, text, ids):
        self.text, self.ids, self.hits = text, list(ids), 0

    def first(self):
        return self.text[:1]


def random_toks(B, g):
    """``B`` words of 1-4 letters from 'abc' and their ids (0-3 of them)."""
    toks = []
    for _ in range(B):
        n = int(torch.randint(1, 5, (), generator=g))
        text = "".join("abc"[int(i)] for i in torch.randint(0, 3, (n,), generator=g))
        ids = torch.randint(0, 4, (int(torch.randint(0, 4, (), generator=g)),), generator=g)
        toks.append(Tok(text, ids.tolist()))
    return toks


class Tally:
    """A helper object the programs change through a method (``tally.add(v)``)."""

    def __init__(self):
        self.n = 0
        self.total = 0.0

    def add(self, v):
        self.n += 1
        self.total += v


_COUNTER = [0]


def compile_program(source, name="prog", flag=True, compact=None):
    """Define the program from ``source`` (registered with linecache so
    ``@batch`` can read it) and return ``(plain, batched)``; ``compact`` is
    passed to ``@batch``."""
    _COUNTER[0] += 1
    filename = f"<matchbox-fuzz-{_COUNTER[0]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"torch": torch, "F": F, "FLAG": flag, "Pair": Pair, "math": math, "Tally": Tally,
          "Tok": Tok}
    exec(compile(source, filename, "exec"), ns)
    plain = ns[name]
    return plain, matchbox.batch(plain, max_iterations=100, compact=compact)


def check_program(source, seed, B=5, lengths_seed=None, compact=None):
    """Run the program per example (undecorated) and batched; raise
    AssertionError with the source on a mismatch.  Returns ``KNOWN`` for a
    program that hits the known in-place limit (see ``KNOWN``).  Returns False for a program that plain
    PyTorch itself rejects (an in-place update of a tensor autograd saved)
    or that reads, where all examples run, a value whose examples hold
    different shapes, or rebinds one to another shape in a compacted loop
    (matchbox raises a clear error for both)."""
    refused = re.search(r"^    (try:|def put\()", source, re.M)
    try:
        plain, fn = compile_program(source, flag=bool(seed % 2), compact=compact)
    except BatchSyntaxError as e:
        expected = {"try:": "try/except", "def put(": "nested function 'put' that changes 'lst'"}
        if refused and expected[refused.group(1)] in str(e):
            return True  # refused at decoration, as it must be
        raise AssertionError(f"fuzz program (seed {seed}) refused: {e}\n{source}") from e
    if refused:
        raise AssertionError(f"fuzz program (seed {seed}) was not refused:\n{source}")
    g = torch.Generator().manual_seed(seed)
    ns = [torch.randint(0, 4, (1,), generator=g) for _ in range(B)]
    n = MaskedBatch.fromlist(ns, ())
    words = matchbox.objects(random_toks(B, g))
    batched = []   # mb_test runs (and backpropagates) every example before the batch

    def f(*args):   # each example through the undecorated function: the contract
        batched.append(isinstance(args[0], MaskedBatch))
        return fn(*args) if batched[-1] else plain(*args)
    try:
        mb_test(f, (B, (False, 1)), (B, (False, 1)), n, (B, (True, 4), (False, 1)), words,
                dtype=torch.float64, seed=seed)
    except RuntimeError as e:
        if "inplace operation" in str(e) or "in-place operation" in str(e):
            if not batched[-1]:
                return False  # the program itself is invalid PyTorch (in-place on a saved tensor)
            if "modified by an inplace operation" in str(e):
                return KNOWN
        raise AssertionError(f"fuzz program (seed {seed}) failed: {type(e).__name__}: {e}\n"
                             f"{source}\n--- rewritten ---\n{matchbox.to_source(fn)}") from e
    except Exception as e:
        if isinstance(e, ValueError) and str(e).startswith(
                "the examples return values of different per-example shapes"):
            return False  # some examples returned (1,), others (1, 1): refused clearly
        if isinstance(e, ValueError) and str(e).startswith("this value holds per-example shapes"):
            # r was left at (1,) by a jump in some examples and is read where
            # all examples run: matchbox refuses that clearly (a Mixed value)
            return False
        if compact is not None and type(e).__name__ == "ShapeMismatch":
            return False  # a compacted loop keeps one shape per variable: a clear error
        where = [f"{f.filename}:{f.lineno} {f.line}" for f in traceback.extract_tb(e.__traceback__)
                 if f.filename.startswith("<matchbox-fuzz") or "matchbox/transform" in f.filename]
        raise AssertionError(f"fuzz program (seed {seed}) failed: {type(e).__name__}: {e}\n"
                             f"at: {where[-3:]}\n"
                             f"{source}\n--- rewritten ---\n{matchbox.to_source(fn)}") from e
    return True


# A known limit, counted apart: x += f(x) (f saving x for its backward)
# where every example that did so discards the result later (a no_grad
# rebinding, an overwrite in its branch) runs per example, but batched the
# masked updates keep that history for the other examples, so the backward
# reaches the op that saved x and autograd raises that x was modified in
# place.  (Autograd runs every node it can reach, with zero gradients too.)
KNOWN = "known"


def run(count, seed=0, show=False, stop_on_fail=True, compact=None, implicit_dim=None):
    failures = skipped = 0
    known = []
    for i in range(count):
        s = seed + i
        src = ProgramGenerator(random.Random(s), implicit_dim=implicit_dim).generate()
        if show:
            print(src)
        try:
            result = check_program(src, s, compact=compact)
            skipped += result is False
            if result is KNOWN:
                known.append(s)
        except AssertionError as e:
            failures += 1
            print(e, file=sys.stderr)
            if stop_on_fail:
                break
    return failures, skipped, known


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", action="store_true", help="print every program")
    p.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    p.add_argument("--compact", type=float, default=None,
                   help="run the programs with @batch(compact=SHARE)")
    p.add_argument("--implicit-dim", action="store_true",
                   help="also generate softmax-family calls with no dim (IMPLICIT_DIM)")
    a = p.parse_args(argv)
    t = time.time()
    failures, skipped, known = run(a.count, a.seed, a.show, not a.keep_going, a.compact,
                                   a.implicit_dim or None)
    print(f"{a.count} programs from seed {a.seed}: {failures} failed, {skipped} skipped "
          f"(invalid in plain PyTorch, or refused with a clear error), {len(known)} hit the "
          f"known in-place limit (KNOWN in fuzzer.py; seeds {known}), {time.time() - t:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
