"""Decoration-time checks for constructs ``@batch`` cannot run per lane.

Each raises :class:`BatchSyntaxError` (a SyntaxError) naming the construct,
the file and the line.
"""
import ast

from .analysis import assigned_names, walk_scope
from .errors import BatchSyntaxError

_CONTROL = (ast.If, ast.While, ast.For, ast.IfExp)


def transform(fdef, ctx):
    outer = set()
    for n in walk_scope(fdef.body):
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            raise BatchSyntaxError("a generator (yield)", n, ctx.origin,
                                   "a generator's lanes would yield at different times")
        if isinstance(n, ast.Await):
            raise BatchSyntaxError("await", n, ctx.origin)
        if isinstance(n, (ast.AsyncFor, ast.AsyncWith)):
            raise BatchSyntaxError("async for/with", n, ctx.origin)
        if isinstance(n, ast.Match):
            raise BatchSyntaxError("a match statement", n, ctx.origin,
                                   "rewrite it as if/elif/else")
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            outer |= set(n.names)
        if isinstance(n, ast.Try):
            for s in n.finalbody:
                for m in walk_scope(s):
                    if isinstance(m, (ast.Return, ast.Break, ast.Continue)):
                        raise BatchSyntaxError(
                            f"'{type(m).__name__.lower()}' inside a finally block", m, ctx.origin)
        if isinstance(n, ast.Delete) and any(isinstance(t, ast.Name) for t in n.targets):
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
