"""Canonicalize ``continue``: a per-lane ``continue_`` flag, reset at the
top of every iteration, guarding the rest of the body.

    for x in xs:                for x in xs:
        if c:                       continue_ = False
            continue    ->          if c:
        a                               continue_ = True
                                    if not continue_:
                                        a
"""
import ast

from . import templates
from .analysis import LOOPS, jumps_of_loop
from .jumps import JumpGuard


class _Continues(ast.NodeTransformer):
    def __init__(self, ctx):
        self.ctx = ctx

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def _loop(self, node):
        self.generic_visit(node)
        if not jumps_of_loop(node.body, ast.Continue):
            return node
        flag = self.ctx.namer.new("continue_")
        guard = JumpGuard(
            flag, lambda s: isinstance(s, ast.Continue),
            lambda s: templates.replace("flag = True", s, flag=flag),
            lambda s: not isinstance(s, LOOPS) and jumps_of_loop(s, ast.Continue)
            or isinstance(s, LOOPS) and jumps_of_loop(s.orelse, ast.Continue),
            into_loops=False)
        node.body = templates.replace("flag = False", node.body[0], flag=flag) + guard.block(node.body)
        return node

    visit_While = visit_For = _loop


def transform(fdef, ctx):
    fdef.body = [_Continues(ctx).visit(s) for s in fdef.body]
    return fdef
