"""Canonicalize ``return``: a per-lane ``do_return`` flag and ``retval``.

    if c:                       do_return = False; retval = None
        return a        ->      if c:
    b = f(b)                        retval = a; do_return = True
    return b                    if not do_return:
                                    b = f(b); retval = b; do_return = True
                                return _mb.returned(retval, (2, 4))

Loops that hold a return are marked so a lane leaves them once it returned.
``returned`` raises where examples return values of different per-example
shapes, naming the lines of the returns.
Functions whose returns all sit at the top level are left as they are.
"""
import gast

from . import templates
from .analysis import SCOPES, contains, walk_scope
from .jumps import JumpGuard, add_exit_flag


def transform(fdef, ctx):
    nested = [n for s in fdef.body if not isinstance(s, gast.Return)
              for n in walk_scope(s) if isinstance(n, gast.Return)]
    if not nested:
        return fdef
    done, retval = ctx.namer.new("do_return"), ctx.namer.new("retval")

    def replace(node):
        value = node.value if node.value is not None else templates.constant(None)
        return templates.replace("retval = value\ndone = True", node,
                                 retval=retval, value=value, done=done)

    guard = JumpGuard(done, lambda s: isinstance(s, gast.Return), replace,
                      lambda s: contains(s, gast.Return, SCOPES), into_loops=True)
    body = guard.block(fdef.body)
    for loop in guard.loops_with_jumps:
        add_exit_flag(loop, done)
    first = fdef.body[0]
    lines = templates.constant(tuple(sorted({n.lineno for n in [*nested, *fdef.body]
                                             if isinstance(n, gast.Return)})))
    fdef.body = (templates.replace("done = False\nretval = None", first, done=done, retval=retval)
                 + body + templates.replace("return rt.returned(retval, lines)", fdef.body[-1],
                                            rt=ctx.runtime, retval=retval, lines=lines))
    return fdef
