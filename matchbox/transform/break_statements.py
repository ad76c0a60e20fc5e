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
from .jumps import LoopJumps, add_exit_flag


class _Breaks(LoopJumps):
    kind, prefix = gast.Break, "break_"

    def lower(self, loop, guard):
        loop.body = guard.block(loop.body)
        add_exit_flag(loop, guard.flag)
        return templates.replace("flag = False", loop, flag=guard.flag) + [loop]


def transform(fdef, ctx):
    return _Breaks.run(fdef, ctx)
