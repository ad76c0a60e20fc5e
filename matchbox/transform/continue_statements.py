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
from .jumps import LoopJumps


class _Continues(LoopJumps):
    kind, prefix = gast.Continue, "continue_"

    def lower(self, loop, guard):
        reset = templates.replace("flag = False", loop.body[0], flag=guard.flag)
        loop.body = reset + guard.block(loop.body)
        return loop


def transform(fdef, ctx):
    return _Continues.run(fdef, ctx)
