"""Lower ``if``/``elif``/``else`` and conditional expressions.

    if test:                    cond = _mb.cond(test)          (evaluated once)
        body                    with _mb.if_true(cond) as run:
    else:               ->          if run:
        orelse                          body
                                with _mb.if_false(cond) as run:
                                    if run:
                                        orelse

A Python-valued condition keeps Python semantics (``run`` is the bool); a
per-example one narrows the active lanes for each branch and skips a branch
no lane takes.  ``a if c else b`` -> ``_mb.if_exp(c, lambda: a, lambda: b)``.
"""
import gast

from . import templates
from .passes import Pass


class _Conditionals(Pass):
    # a conditional expression inside a lambda is per example too
    visit_Lambda = gast.NodeTransformer.generic_visit

    def visit_If(self, node):
        self.generic_visit(node)
        rt = self.ctx.runtime
        cond, run = self.ctx.namer.new("cond"), self.ctx.namer.new("run")
        out = templates.replace(
            """
            cond = rt.cond(test)
            with rt.if_true(cond) as run:
                if run:
                    body
            """, node, rt=rt, cond=cond, run=run, test=node.test, body=node.body)
        if node.orelse:
            out += templates.replace(
                """
                with rt.if_false(cond) as run:
                    if run:
                        orelse
                """, node.orelse[0], rt=rt, cond=cond, run=run, orelse=node.orelse)
        return out

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return templates.replace_as_expression(
            "rt.if_exp(test, lambda: body, lambda: orelse)", node, rt=self.ctx.runtime,
            test=node.test, body=node.body, orelse=node.orelse)


def transform(fdef, ctx):
    return _Conditionals.run(fdef, ctx)
