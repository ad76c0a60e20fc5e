"""What every ``@batch`` rewrite pass shares.

A pass is a gast NodeTransformer over the statements of one function.  It
leaves nested functions, lambdas and classes alone (they are not rewritten:
decorate them separately).  ``statements`` visits a list of statements,
splicing in the lists a visit may return; ``region`` does the same for a
branch or loop body and counts how deep in such bodies the pass is
(``depth``), for passes that treat code inside them differently.
"""
import gast


class Pass(gast.NodeTransformer):
    depth = 0

    def __init__(self, ctx):
        self.ctx = ctx

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
            return self.statements(nodes)
        finally:
            self.depth -= 1
