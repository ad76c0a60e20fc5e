"""Canonicalize ``continue``: a per-lane ``continue_`` flag, reset at the
top of every iteration, guarding the rest of the body.

    for x in xs:                for x in xs:
        if c:                       continue_ = False
            continue    ->          if c:
        a                               continue_ = True
                                    if not continue_:
                                        a
"""
import gast

from . import templates
from .jumps import loop_guard
from .passes import Pass


class _Continues(Pass):
    def _loop(self, node):
        self.generic_visit(node)
        guard = loop_guard(self.ctx, node, gast.Continue, "continue_")
        if guard is None:
            return node
        node.body = templates.replace("flag = False", node.body[0], flag=guard.flag) + guard.block(node.body)
        return node

    visit_While = visit_For = _loop


def transform(fdef, ctx):
    fdef.body = _Continues(ctx).statements(fdef.body)
    return fdef
