"""What every ``@batch`` rewrite pass shares.

A pass is a gast NodeTransformer over the statements of one function.  It
leaves nested functions, lambdas and classes alone (they are not rewritten:
decorate them separately).  ``statements`` visits a list of statements,
splicing in the lists a visit may return; ``region`` does the same for a
branch or loop body and counts how deep in such bodies the pass is
(``depth``), for passes that treat code inside them differently.

By default ``if``, ``while`` and ``for`` walk their bodies (and ``else``
blocks: a loop's ``else`` runs after it, guarded by its exit flags) as
regions; a ``while`` test is in the region too, since it runs once per
iteration for the lanes still in the loop, while an ``if`` test and a
``for`` iterable run before it.
"""
import gast


class Pass(gast.NodeTransformer):
    depth = 0

    def __init__(self, ctx):
        self.ctx = ctx

    @classmethod
    def run(cls, fdef, ctx, *args):
        """Rewrite ``fdef``'s body with a new pass ``cls(ctx, *args)``."""
        fdef.body = cls(ctx, *args).statements(fdef.body)
        return fdef

    def visit_FunctionDef(self, node):
        return node  # nested functions are not rewritten

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def statements(self, nodes):
        out = []
        for n in nodes:
            r = self.visit(n)
            out += r if isinstance(r, list) else [r]
        return out

    def region(self, nodes):
        self.depth += 1
        try:
            return self.statements(nodes) if isinstance(nodes, list) else self.visit(nodes)
        finally:
            self.depth -= 1

    def _regions(self, node):
        node.body, node.orelse = self.region(node.body), self.region(node.orelse)
        return node

    def visit_If(self, node):
        node.test = self.visit(node.test)
        return self._regions(node)

    def visit_While(self, node):
        node.test = self.region(node.test)
        return self._regions(node)

    def visit_For(self, node):
        node.iter = self.visit(node.iter)
        return self._regions(node)
