"""Shared canonicalization of jump statements into flags and guarded code.

A jump (``return``, ``break``, ``continue``) becomes an assignment to a flag;
every statement after a statement that may jump is wrapped in
``if not flag:``.  Used by returns.py, break_statements.py and
continue_statements.py; once they have run, no jump is left and each jump's
effect is carried per lane by ordinary (masked) assignments.
"""
import gast

from . import templates
from .analysis import LOOPS, jumps_of_loop
from .passes import Pass


class JumpGuard:
    """Rewrite a block: ``is_jump(stmt)`` marks the jumps, ``replace(stmt)``
    gives their flag-setting statements, ``may_jump(stmt)`` says whether a
    compound statement contains one, ``into_loops`` whether to descend into
    nested loop bodies."""

    def __init__(self, flag, is_jump, replace, may_jump, into_loops):
        self.flag, self.is_jump, self.replace = flag, is_jump, replace
        self.may_jump, self.into_loops = may_jump, into_loops
        self.loops_with_jumps = []

    def block(self, stmts):
        out = []
        for i, s in enumerate(stmts):
            if self.is_jump(s):
                out += self.replace(s)
                return out  # the rest of the block is dead
            jumps = self.may_jump(s)
            out += self.stmt(s)
            rest = stmts[i + 1:]
            if jumps and rest:
                out += templates.replace(
                    "if not flag:\n    rest", rest[0], flag=self.flag, rest=self.block(rest))
                return out
        return out

    def stmt(self, s):
        if not self.may_jump(s):
            return [s]
        if isinstance(s, gast.If):
            s.body, s.orelse = self.block(s.body), self.block(s.orelse)
        elif isinstance(s, (gast.For, gast.While)):
            if self.into_loops:
                if self.may_jump(s.body):
                    self.loops_with_jumps.append(s)
                s.body = self.block(s.body)
            s.orelse = self.block(s.orelse)
        elif isinstance(s, (gast.With,)):
            s.body = self.block(s.body)
        elif isinstance(s, gast.Try):
            s.body, s.orelse = self.block(s.body), self.block(s.orelse)
            for h in s.handlers:
                h.body = self.block(h.body)
        return [s]


def loop_guard(ctx, loop, kind, prefix):
    """For a loop whose own body holds a ``kind`` jump (Break / Continue): a
    JumpGuard over a new flag named from ``prefix`` that turns those jumps
    into ``flag = True`` (jumps of nested loops are theirs); else None."""
    if not jumps_of_loop(loop.body, kind):
        return None
    flag = ctx.namer.new(prefix)
    return JumpGuard(
        flag, lambda s: isinstance(s, kind),
        lambda s: templates.replace("flag = True", s, flag=flag),
        lambda s: not isinstance(s, LOOPS) and jumps_of_loop(s, kind)
        or isinstance(s, LOOPS) and jumps_of_loop(s.orelse, kind),
        into_loops=False)


class LoopJumps(Pass):
    """A pass that turns the ``kind`` jumps (Break / Continue) of each loop
    into a flag named from ``prefix``, innermost loops first (they own
    their jumps); ``lower(loop, guard)`` rewrites a loop that has some."""
    kind = prefix = None

    def _loop(self, node):
        self.generic_visit(node)
        guard = loop_guard(self.ctx, node, self.kind, self.prefix)
        return node if guard is None else self.lower(node, guard)

    visit_While = visit_For = _loop

    def lower(self, loop, guard):
        raise NotImplementedError


def add_exit_flag(loop, flag):
    """Mark ``loop`` so that a lane leaves it once ``flag`` is set."""
    flags = getattr(loop, "mb_exit_flags", [])
    loop.mb_exit_flags = flags + [flag]
