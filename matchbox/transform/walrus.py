"""A walrus in a test that the rewrite runs as a thunk binds the function's
variable, as it does in the user's code.

``while i < n and (v := x[:, i]) > -1:`` becomes
``rt.and_(i < n, lambda: ...)``, and a walrus in a lambda binds the
lambda's own ``v``: the function never sees it (a ``NameError``, even on a
plain Tensor).  So a thunk (the lambda argument of ``rt.and_``, ``rt.or_``
or ``rt.if_exp``) that binds a name with a walrus becomes a nested
function declaring the name ``nonlocal``, defined just before the
statement that holds it:

    def test():
        nonlocal v
        return rt.read((v := rt.assign(v, rt.read(x)[:, rt.read(i)]))) > -1
    with rt.while_loop(...) as loop:
        while loop.test(rt.and_(rt.read(i) < rt.read(n), test)):

(The assignments pass makes the walrus a masked assignment, a thunk being
a region: only the lanes that evaluate it bind the name.)
"""
import gast

from . import templates
from .analysis import assigned_names, declared_outer, param_names, runtime_call

THUNK_CALLS = ("and_", "or_", "if_exp")
_OWN_SCOPES = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef)


def thunks(call, rt):
    """The thunks (lambdas of no argument) passed to ``call`` if it is
    ``rt.and_``, ``rt.or_`` or ``rt.if_exp``; else none."""
    if not runtime_call(call, rt, THUNK_CALLS):
        return []
    return [a for a in call.args if isinstance(a, gast.Lambda) and not a.args.args]


def _walrus_targets(lam):
    """The names a walrus in ``lam``'s own scope binds (its comprehensions
    included: a walrus there binds in the lambda)."""
    names, todo = [], [lam.body]
    while todo:
        n = todo.pop()
        if isinstance(n, gast.NamedExpr) and n.target.id not in names:
            names.append(n.target.id)
        todo.extend(c for c in gast.iter_child_nodes(n) if not isinstance(c, _OWN_SCOPES))
    return names


class _Hoist(gast.NodeTransformer):
    """In one statement's own expressions: each thunk that binds a name
    becomes a nested function hoisted before the statement (``self.defs``),
    passed by name."""

    def __init__(self, ctx, outer):
        self.ctx, self.outer, self.defs, self.bound = ctx, outer, [], set()

    def visit_Call(self, node):
        own = thunks(node, self.ctx.runtime)
        for lam in own:   # thunks in thunks first (and_ of an and_)
            lam.body = self.visit(lam.body)
        self.generic_visit(node)
        for k, lam in enumerate(node.args):
            if lam not in own:
                continue
            names = _walrus_targets(lam)
            if not names:
                continue
            fn = self.ctx.namer.new("thunk")
            kind = "global" if any(n in self.outer for n in names) else "nonlocal"
            self.defs += templates.replace(
                f"def {fn}():\n    {kind} {', '.join(names)}\n    return body", lam,
                body=lam.body)
            self.bound.update(names)
            node.args[k] = templates.name(fn)
        return node

    # a thunk inside one of these reads their own names: left as it is
    def _keep(self, node):
        return node

    visit_Lambda = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _keep
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _keep


_BODIES = ("body", "orelse", "finalbody", "handlers")


def _statements(stmts, ctx, outer, bound):
    out = []
    for s in stmts:
        if isinstance(s, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
            out.append(s)   # nested functions are not rewritten
            continue
        hoist = _Hoist(ctx, outer)
        for field, value in gast.iter_fields(s):
            if field in _BODIES:
                setattr(s, field, _statements(value, ctx, outer, bound))
            elif isinstance(value, gast.AST):
                setattr(s, field, hoist.visit(value))
            elif isinstance(value, list):
                setattr(s, field, [hoist.visit(v) if isinstance(v, gast.AST) else v for v in value])
        bound |= hoist.bound
        out += hoist.defs + [s]
    return out


def transform(fdef, ctx):
    outer = {n for s in gast.walk(fdef) if isinstance(s, gast.Global) for n in s.names}
    own = declared_outer(fdef) | param_names(fdef) | assigned_names(fdef.body)
    bound = set()
    fdef.body = _statements(fdef.body, ctx, outer, bound)
    # nonlocal needs a binding in the function: a name only the walrus binds
    # starts undefined, as a variable first assigned in a branch does
    unbound = sorted(bound - own)
    pre = []
    for name in unbound:
        pre += templates.replace("x = rt.Undefined(label)", fdef, x=name, rt=ctx.runtime,
                                 label=templates.constant(name))
    fdef.body = pre + fdef.body
    return fdef
