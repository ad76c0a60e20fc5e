"""Lower ``and`` / ``or`` / ``not`` in the tests of if, while, assert and
conditional expressions to runtime calls that work per lane:

    if a and not b:   ->   if _mb.and_(a, lambda: _mb.not_(b)):

``b`` of ``a and b`` runs only for lanes where ``a`` holds; for Python
values the calls keep Python's short-circuit semantics.
"""
import gast

from . import templates
from .passes import Pass


class _Tests(Pass):
    def lower(self, test):
        rt = self.ctx.runtime
        if isinstance(test, gast.UnaryOp) and isinstance(test.op, gast.Not):
            return templates.replace_as_expression("rt.not_(a)", test, rt=rt, a=self.lower(test.operand))
        if isinstance(test, gast.BoolOp):
            fn = "rt.and_(a, lambda: b)" if isinstance(test.op, gast.And) else "rt.or_(a, lambda: b)"
            values = [self.lower(v) for v in test.values]
            out = values[-1]
            for v in reversed(values[:-1]):
                out = templates.replace_as_expression(fn, test, rt=rt, a=v, b=out)
                out.args[1].mb_thunk = True  # the function's own code (analysis.walk_scope)
            return out
        return test

    def _with_test(self, node):
        self.generic_visit(node)
        node.test = self.lower(node.test)
        return node

    visit_If = visit_While = visit_IfExp = visit_Assert = _with_test


def transform(fdef, ctx):
    return _Tests.run(fdef, ctx)
