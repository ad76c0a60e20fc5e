"""Code templates: Python source with placeholder names, filled with gast.

``replace(template, origin, **subs)`` parses ``template`` into gast nodes
and substitutes each placeholder name: a ``str`` renames it (parameters
too: gast writes them as names), a ``gast.expr`` replaces it, and a list of
statements replaces a placeholder that stands alone as a statement;
placeholders named ``attr_*`` also rename attributes.  Every node the
template creates (and every substitute without a location) gets the
location of ``origin``, the user node it stands for, so generated code
keeps the user's line numbers.  ``name`` and
``constant`` build the two leaf nodes passes need outside a template.
"""
import copy
import textwrap

import gast

__all__ = ["replace", "replace_as_expression", "stamp", "name", "constant"]


def stamp(node, origin):
    """Give ``node`` and its children without a location ``origin``'s."""
    for n in gast.walk(node):
        if "lineno" in n._attributes and getattr(n, "lineno", None) is None:
            n.lineno = origin.lineno
            n.col_offset = origin.col_offset
            n.end_lineno = getattr(origin, "end_lineno", origin.lineno)
            n.end_col_offset = getattr(origin, "end_col_offset", origin.col_offset)
    return node


def name(id, ctx=None):
    """A ``gast.Name`` (loaded unless ``ctx`` says otherwise)."""
    return gast.Name(id=id, ctx=ctx or gast.Load(), annotation=None, type_comment=None)


def constant(value):
    return gast.Constant(value=value, kind=None)


class _Filler(gast.NodeTransformer):
    def __init__(self, subs):
        self.subs = subs

    def visit_Expr(self, node):
        if isinstance(node.value, gast.Name) and isinstance(self.subs.get(node.value.id), list):
            return self.subs[node.value.id]
        return self.generic_visit(node)

    def visit_Name(self, node):
        sub = self.subs.get(node.id)
        if sub is None:
            return node
        if isinstance(sub, str):
            node.id = sub
            return node
        if isinstance(sub, list):
            raise ValueError(f"statement placeholder {node.id} used as an expression")
        new = copy.deepcopy(sub) if getattr(sub, "_mb_template_used", False) else sub
        sub._mb_template_used = True
        if hasattr(new, "ctx"):
            new.ctx = node.ctx
        return new

    def visit_Attribute(self, node):
        self.generic_visit(node)
        sub = self.subs.get(node.attr) if node.attr.startswith("attr_") else None
        if isinstance(sub, str):
            node.attr = sub
        return node


def replace(template, origin, **subs):
    """The statements of ``template`` with placeholders filled."""
    tree = gast.parse(textwrap.dedent(template))
    for n in gast.walk(tree):
        if "lineno" in n._attributes:
            n.lineno = None
    tree = _Filler(subs).visit(tree)
    return stamp(tree, origin).body


def replace_as_expression(template, origin, **subs):
    """The single expression of ``template`` with placeholders filled."""
    (stmt,) = replace(template, origin, **subs)
    return stmt.value
