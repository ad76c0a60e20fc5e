"""Errors raised by ``@batch``: at decoration time for code it cannot batch,
at run time for loops that exceed their iteration limit."""

__all__ = ["BatchSyntaxError", "SourceUnavailableError", "LoopLimitError"]


class BatchSyntaxError(SyntaxError):
    """A construct ``@batch`` cannot run in SIMT style.  Carries the user's
    file, line and source text, so Python prints a caret under the line."""

    def __init__(self, construct, node, origin, hint=""):
        lineno = getattr(node, "lineno", None)
        text = origin.line_text(lineno) if lineno else None
        msg = f"@matchbox.batch cannot batch {construct} (at {origin.filename}:{lineno})"
        if hint:
            msg += f": {hint}"
        offset = (getattr(node, "col_offset", 0) or 0) + origin.indent + 1
        super().__init__(msg, (origin.filename, lineno, offset, text))


class SourceUnavailableError(NotImplementedError):
    """The function's source code cannot be found (REPL, exec, C function)."""


class LoopLimitError(RuntimeError):
    """A per-example loop ran past ``max_iterations`` for some lane."""
