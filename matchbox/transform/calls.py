"""Rewrite the calls whose meaning depends on the active lanes.

- ``out.append(v)`` -> ``_mb.append(out, v)``: records which lanes appended,
  so each example's list has its own length; ``out.extend(vs)`` appends
  each item so; ``out.insert(i, v)`` runs only where every lane is active.
- in the iterable of a ``for``: ``range``, ``enumerate``, ``zip`` and
  ``reversed`` -> their per-lane versions in the runtime (plain builtins
  when nothing is per-example).

Calls to other ``@batch`` functions (recursion included) need no rewrite:
they read the active lanes from the context, so they run for the lanes
active at the call.
"""
import gast

from . import templates
from .analysis import local_names
from .passes import Pass

#: list methods whose effect depends on the active lanes, and their arities
_LIST_METHODS = {"append": 1, "extend": 1, "insert": 2}
_ITER_BUILTINS = {"range": "range_", "enumerate": "enumerate_", "zip": "zip_", "reversed": "reversed_"}


class _Calls(Pass):
    def __init__(self, ctx, names):
        super().__init__(ctx)
        self.names = names

    def visit_Expr(self, node):
        self.generic_visit(node)
        call = node.value
        if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
                and not call.keywords and not any(isinstance(a, gast.Starred) for a in call.args)
                and len(call.args) == _LIST_METHODS.get(call.func.attr)):
            lst, call.func = call.func.value, templates.replace_as_expression(
                f"rt.{call.func.attr}", call.func, rt=self.ctx.runtime)
            call.args = [lst] + call.args
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = self._iter(node.iter)
        return node

    def _iter(self, expr):
        if (isinstance(expr, gast.Call) and isinstance(expr.func, gast.Name)
                and expr.func.id in _ITER_BUILTINS and expr.func.id not in self.names):
            expr.func = templates.replace_as_expression(
                f"rt.{_ITER_BUILTINS[expr.func.id]}", expr.func, rt=self.ctx.runtime)
            expr.args = [self._iter(a) for a in expr.args]
        return expr


def transform(fdef, ctx):
    return _Calls.run(fdef, ctx, local_names(fdef))
