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
import gast

from . import templates
from .jumps import add_exit_flag, loop_guard
from .passes import Pass


class _Breaks(Pass):
    def _loop(self, node):
        self.generic_visit(node)  # inner loops first: they own their breaks
        guard = loop_guard(self.ctx, node, gast.Break, "break_")
        if guard is None:
            return node
        node.body = guard.block(node.body)
        add_exit_flag(node, guard.flag)
        return templates.replace("flag = False", node, flag=guard.flag) + [node]

    visit_While = visit_For = _loop


def transform(fdef, ctx):
    fdef.body = _Breaks(ctx).statements(fdef.body)
    return fdef
