"""Source capture, origin information and loading of generated code.

The function's source is read with ``inspect.getsource`` and dedented,
parsed, and converted to gast (one AST across Python versions), which is
what the passes work on; ``unparse`` and ``load_function`` convert back to
the standard library's AST to print and to compile.  Every node keeps the
user's line numbers, and generated code is compiled under the user's file
name, so tracebacks and ``linecache`` point into user source.
"""
import ast
import inspect
import linecache
import sys
import textwrap
import types

import gast

from . import templates
from .errors import SourceUnavailableError

__all__ = ["Origin", "parse_function", "unparse", "load_function"]


class Origin:
    """Where a function's source came from."""

    def __init__(self, filename, firstline, indent, lines):
        self.filename, self.firstline, self.indent, self.lines = filename, firstline, indent, lines

    def line_text(self, lineno):
        i = lineno - self.firstline
        if 0 <= i < len(self.lines):
            return self.lines[i].rstrip("\n")
        return linecache.getline(self.filename, lineno).rstrip("\n") or None


def parse_function(fn):
    """The ``gast.FunctionDef`` of ``fn`` (decorators removed, user line
    numbers) and its :class:`Origin`."""
    try:
        lines, firstline = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError) as e:
        raise SourceUnavailableError(
            f"@matchbox.batch needs the source code of {getattr(fn, '__qualname__', fn)!r} to "
            f"rewrite its control flow, but Python cannot find it ({e}). This happens for "
            f"functions typed into an interactive prompt, built with exec(), or written in C. "
            f"Put the function in a .py file (or a notebook cell, which keeps its source), "
            f"or run it without @batch (set MATCHBOX_DISABLE=1) if it has no per-example "
            f"control flow.") from None
    source = "".join(lines)
    dedented = textwrap.dedent(source)
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    tree = ast.parse(dedented)
    ast.increment_lineno(tree, firstline - 1)
    fdef = gast.ast_to_gast(tree).body[0]
    if isinstance(fdef, gast.AsyncFunctionDef):
        from .errors import BatchSyntaxError
        raise BatchSyntaxError("an async function", fdef, Origin(filename, firstline, indent, lines))
    if not isinstance(fdef, gast.FunctionDef):
        raise SourceUnavailableError(
            f"@matchbox.batch can rewrite a def statement, but the source of "
            f"{getattr(fn, '__qualname__', fn)!r} is not one (a lambda?); write it as a def")
    fdef.decorator_list = []
    return fdef, Origin(filename, firstline, indent, lines)


def _to_ast(node):
    return ast.fix_missing_locations(gast.gast_to_ast(node))


def unparse(node):
    """The Python source of a gast node."""
    return ast.unparse(_to_ast(node))


def load_function(fdef, fn, origin, runtime_name, runtime):
    """Compile the rewritten ``fdef`` under the user's file name and build a
    function that shares ``fn``'s globals, defaults and closure cells."""
    free = list(fn.__code__.co_freevars)
    # a unique name in the factory, so a recursive call still finds the
    # decorated function through the globals (or its own closure cell)
    user_name, fdef.name = fdef.name, "__matchbox_converted"
    params = [templates.name(a, gast.Param()) for a in [runtime_name] + free]
    ret = gast.Return(value=templates.name(fdef.name))
    factory = gast.FunctionDef(
        name="__matchbox_factory", args=gast.arguments(
            posonlyargs=[], args=params, vararg=None, kwonlyargs=[], kw_defaults=[],
            kwarg=None, defaults=[]),
        body=[fdef, ret], decorator_list=[], returns=None, type_comment=None, type_params=[])
    for node in [factory, ret, ret.value] + params:
        node.lineno = node.end_lineno = fdef.lineno
        node.col_offset = node.end_col_offset = 0
    module = _to_ast(gast.Module(body=[factory], type_ignores=[]))
    code = compile(module, origin.filename, "exec")
    fcode = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in fcode.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    names = {"co_name": user_name}
    if sys.version_info >= (3, 11):  # code objects have a qualified name since 3.11
        names["co_qualname"] = fn.__qualname__
    inner = inner.replace(**names)
    fdef.name = user_name
    cells = dict(zip(free, fn.__closure__ or ()))
    cells[runtime_name] = types.CellType(runtime)
    closure = tuple(cells[name] for name in inner.co_freevars)
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, fn.__defaults__, closure or None)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__dict__.update(fn.__dict__)
    new.__wrapped__ = fn
    return new
