"""Canonicalize ``break``: a per-lane ``break_`` flag per loop.

    while c:                    break_ = False
        a                       while c:            (lanes leave once break_)
        if d:           ->          a
            break                   if d:
        b                               break_ = True
                                    if not break_:
                                        b

The loop is marked so a lane leaves it once its flag is set; the loop's
``else`` runs only for lanes that did not break (see loops.py).
"""
import ast

from . import templates
from .analysis import LOOPS, jumps_of_loop
from .jumps import JumpGuard, add_exit_flag


class _Breaks(ast.NodeTransformer):
    def __init__(self, ctx):
        self.ctx = ctx

    def visit_FunctionDef(self, node):
        return node  # nested functions are not rewritten

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def _loop(self, node):
        self.generic_visit(node)  # inner loops first: they own their breaks
        if not jumps_of_loop(node.body, ast.Break):
            return node
        flag = self.ctx.namer.new("break_")
        guard = JumpGuard(
            flag, lambda s: isinstance(s, ast.Break),
            lambda s: templates.replace("flag = True", s, flag=flag),
            lambda s: not isinstance(s, LOOPS) and jumps_of_loop(s, ast.Break)
            or isinstance(s, LOOPS) and jumps_of_loop(s.orelse, ast.Break),
            into_loops=False)
        node.body = guard.block(node.body)
        add_exit_flag(node, flag)
        return templates.replace("flag = False", node, flag=flag) + [node]

    visit_While = visit_For = _loop


def transform(fdef, ctx):
    fdef.body = [s for stmt in fdef.body for s in _as_list(_Breaks(ctx).visit(stmt))]
    return fdef


def _as_list(x):
    return x if isinstance(x, list) else [x]
