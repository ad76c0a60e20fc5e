"""Lower ``assert`` to a check of every active example:

    assert start == END, "bad path"   ->   _mb.assert_(start == END, lambda: "bad path")

A per-example test fails where some active example's is false (the error
names the first such example); a Python value keeps Python's semantics.
The message is computed only on failure, as Python does.  Under ``python
-O`` (no ``__debug__``) asserts are dropped, as Python drops them.
"""
import gast

from . import templates
from .passes import Pass


class _Asserts(Pass):
    def visit_Assert(self, node):
        if not __debug__:
            return []
        msg = templates.constant(None) if node.msg is None else gast.Lambda(gast.arguments(
            args=[], posonlyargs=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
            defaults=[]), node.msg)
        return templates.replace("rt.assert_(test, msg)", node, rt=self.ctx.runtime,
                                 test=node.test, msg=msg)


def transform(fdef, ctx):
    return _Asserts.run(fdef, ctx)
