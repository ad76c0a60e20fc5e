"""Decoration-time checks for constructs ``@batch`` cannot run per lane.

Each raises :class:`BatchSyntaxError` (a SyntaxError) naming the construct,
the file and the line.
"""
import gast

from .analysis import assigned_names, walk_scope
from .errors import BatchSyntaxError

_CONTROL = (gast.If, gast.While, gast.For, gast.IfExp)


def transform(fdef, ctx):
    outer = set()
    for n in walk_scope(fdef.body):
        if isinstance(n, (gast.Yield, gast.YieldFrom)):
            raise BatchSyntaxError("a generator (yield)", n, ctx.origin,
                                   "a generator's lanes would yield at different times")
        if isinstance(n, gast.Await):
            raise BatchSyntaxError("await", n, ctx.origin)
        if isinstance(n, (gast.AsyncFor, gast.AsyncWith)):
            raise BatchSyntaxError("async for/with", n, ctx.origin)
        if isinstance(n, gast.Match):
            raise BatchSyntaxError("a match statement", n, ctx.origin,
                                   "rewrite it as if/elif/else")
        if isinstance(n, (gast.Global, gast.Nonlocal)):
            outer |= set(n.names)
        if isinstance(n, gast.Try):
            for s in n.finalbody:
                for m in walk_scope(s):
                    if isinstance(m, (gast.Return, gast.Break, gast.Continue)):
                        raise BatchSyntaxError(
                            f"'{type(m).__name__.lower()}' inside a finally block", m, ctx.origin)
        if isinstance(n, gast.Delete) and any(isinstance(t, gast.Name) for t in n.targets):
            raise BatchSyntaxError("'del' of a variable", n, ctx.origin,
                                   "a variable cannot be deleted for some examples only")
    if outer:
        for n in walk_scope(fdef.body):
            if isinstance(n, _CONTROL[:3]):
                for part in (n.body, n.orelse):
                    written = assigned_names(part) & outer if part else set()
                    if written:
                        name = sorted(written)[0]
                        raise BatchSyntaxError(
                            f"a write to global/nonlocal variable {name!r} under a condition or "
                            f"in a loop", n, ctx.origin,
                            "per-example control flow may run it for some examples only; "
                            "return the value instead")
    return fdef
