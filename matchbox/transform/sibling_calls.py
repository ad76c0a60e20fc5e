"""Run sibling recursive calls as one call (``@batch(merge_calls=True)``).

A recursion over trees calls itself once per child:

    a = f(x, left)                tmp = _mb.sibling_calls(f, (x, left), (x, right))
    b = f(x, right)       ->      a = tmp[0]
                                  b = tmp[1]

Run one after the other, each call recurses for the lanes active at it, so
the calls follow paths from the root: one call per path that some example
has.  ``sibling_calls`` runs both as ONE call on the active lanes of the
two, stacked (runtime.py), so a recursion runs one call per depth.  The
examples' own results are the same; what changes is the order of side
effects between the two calls (all of the first before any of the second,
per example), hence the opt-in.

Merged: two consecutive assignments ``target = f(args)`` whose ``f`` is the
function itself (``name(...)`` or ``self.name(...)``), with positional
arguments only, where the second call's arguments and function do not read
what the first one assigns.
"""
import gast

from . import templates
from .analysis import walk_scope


def _names(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


class _Merger:
    def __init__(self, fdef, ctx):
        self.ctx, self.name = ctx, fdef.name
        args = fdef.args.posonlyargs + fdef.args.args
        self.self_name = args[0].id if args else None  # gast: parameters are Names

    def _recursive_call(self, stmt):
        """The call of ``stmt`` if it is ``target = f(args)`` with ``f`` the function itself."""
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.value, gast.Call)):
            return None
        call, func = stmt.value, stmt.value.func
        if call.keywords or any(isinstance(a, gast.Starred) for a in call.args):
            return None
        if not all(isinstance(n, (gast.Name, gast.Tuple, gast.List))
                   for n in gast.walk(stmt.targets[0]) if isinstance(n, gast.expr)):
            return None
        itself = (isinstance(func, gast.Name) and func.id == self.name) or (
            isinstance(func, gast.Attribute) and func.attr == self.name
            and isinstance(func.value, gast.Name) and func.value.id == self.self_name)
        return call if itself else None

    def statements(self, stmts):
        out, i = [], 0
        while i < len(stmts):
            a = stmts[i]
            b = stmts[i + 1] if i + 1 < len(stmts) else None
            ca, cb = self._recursive_call(a), b is not None and self._recursive_call(b)
            if ca and cb and gast.dump(ca.func) == gast.dump(cb.func) \
                    and not _names(a.targets[0]) & _names(cb):
                out += self._merged(a, b)
                i += 2
            else:
                out.append(a)
                i += 1
        return out

    def _merged(self, a, b):
        """``a`` becomes the merged call and ``b`` the second store, in place:
        nodes keep their identity, which ``ctx.loop_temporaries`` is keyed by."""
        tmp = self.ctx.namer.new("calls")
        call, unpack, b.value = templates.replace(
            """
            tmp = rt.sibling_calls(f, first, second)
            target = tmp[0]
            tmp[1]
            """, a, tmp=tmp, rt=self.ctx.runtime, f=a.value.func,
            first=gast.Tuple(elts=a.value.args, ctx=gast.Load()),
            second=gast.Tuple(elts=b.value.args, ctx=gast.Load()), target=a.targets[0])
        a.targets, a.value, b.value = call.targets, call.value, b.value.value
        return [a, unpack, b]


def transform(fdef, ctx):
    if not ctx.merge_calls:
        return fdef
    merger = _Merger(fdef, ctx)
    for node in [fdef, *walk_scope(fdef.body)]:
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], gast.stmt):
                setattr(node, field, merger.statements(stmts))
    return fdef
