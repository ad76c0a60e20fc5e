"""The command line: ``python -m matchbox COMMAND ...``.

Commands:

- ``show TARGET``: print the ``@batch`` rewrite of a function, where TARGET
  is ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``; FUNCTION may be
  ``Class.method``.  The function may or may not carry ``@matchbox.batch``
  already; either way the rewrite is what ``@batch`` runs.
- ``ops``: print the ops coverage table (markdown) generated from the rule
  registry; ``docs/ops.md`` is its output.

Loading the target imports its file (as ``python FILE.py`` would, but not as
``__main__``, so an ``if __name__ == "__main__":`` block does not run).  A
file inside a package is imported under its dotted name, so its relative
imports work.
"""
import argparse
import importlib
import importlib.util
import inspect
import os
import sys

__all__ = ["main"]


class CommandError(Exception):
    """A user-facing error: printed as ``matchbox COMMAND: error: ...``, exit status 1."""


def _module_name(path):
    """``(sys.path root, dotted module name)`` for the file at ``path``,
    walking up through package directories (those with ``__init__.py``)."""
    directory, base = os.path.split(os.path.abspath(path))
    parts = [os.path.splitext(base)[0]]
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        directory, pkg = os.path.split(directory)
        parts.insert(0, pkg)
    return directory, ".".join(parts)


def _load_module(spec):
    """Import the module named by ``spec``: a path to a .py file or a
    dotted module name."""
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        if not os.path.isfile(spec):
            raise CommandError(f"no such file: {spec}")
        root, name = _module_name(spec)
        if root not in sys.path:
            sys.path.insert(0, root)
        loaded = sys.modules.get(name)
        if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") \
                != os.path.abspath(spec):
            # another module of that name is loaded: import the file on its own
            s = importlib.util.spec_from_file_location(name, spec)
            module = importlib.util.module_from_spec(s)
            return _run_import(lambda: s.loader.exec_module(module) or module, spec)
        return _run_import(lambda: importlib.import_module(name), spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise CommandError(f"no module named {spec!r} (give a FILE.py path or an importable "
                           f"module name)")
    return _run_import(lambda: importlib.import_module(spec), spec)


def _run_import(load, spec):
    try:
        return load()
    except SyntaxError as e:
        raise CommandError(f"cannot import {spec}: syntax error at {e.filename}:{e.lineno}: "
                           f"{e.msg}") from None
    except Exception as e:
        raise CommandError(f"importing {spec} failed: {type(e).__name__}: {e}") from None


def _functions(module):
    """The names of the functions and methods defined in ``module`` (for
    error messages)."""
    names = []
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            names.append(name)
        elif inspect.isclass(obj):
            names += [f"{name}.{m}" for m, f in vars(obj).items()
                      if inspect.isfunction(getattr(f, "__func__", f))
                      and not (m.startswith("__") and m != "__call__")]
    return sorted(names)


def _resolve(module, qualname, spec):
    obj = module
    for i, part in enumerate(qualname.split(".")):
        if not hasattr(obj, part):
            where = spec if i == 0 else f"{'.'.join(qualname.split('.')[:i])} in {spec}"
            known = ", ".join(_functions(module)) or "none"
            raise CommandError(f"{where} has no {part!r} (functions there: {known})")
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    fn = getattr(obj, "__func__", obj)  # staticmethod, classmethod, bound method
    if not inspect.isfunction(fn):
        raise CommandError(f"{qualname} in {spec} is a {type(obj).__name__}, not a function; "
                           f"name a function or a method (Class.method)")
    return fn


def show(target):
    """The ``@batch`` rewrite of the function named by ``target``."""
    from .transform import BatchSyntaxError, SourceUnavailableError, to_source
    spec, sep, qualname = target.rpartition(":")
    if not sep or not spec or not qualname:
        raise CommandError(f"expected FILE.py:FUNCTION or module:FUNCTION, got {target!r}")
    fn = _resolve(_load_module(spec), qualname, spec)
    try:
        return to_source(fn)
    except (BatchSyntaxError, SourceUnavailableError) as e:
        raise CommandError(f"@batch cannot rewrite {qualname}: {e}") from None


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m matchbox",
        description="matchbox: write PyTorch code for one example, run it on a batch.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = commands.add_parser(
        "show", help="print the @batch rewrite of a function",
        description="Print the source that @matchbox.batch runs for a function.")
    p.add_argument("target", metavar="FILE.py:FUNCTION",
                   help="a file (or an importable module) and a function in it, e.g. "
                        "examples/n_expansions.py:NExpansions.n_expansions")
    commands.add_parser(
        "ops", help="print the ops coverage table generated from the rule registry",
        description="Print, as markdown, every op with a rule and the ops without one "
                    "(docs/ops.md is this output).")
    return parser


def main(argv=None):
    """Run the command line with ``argv`` (default ``sys.argv[1:]``);
    returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "show":
            print(show(args.target))
        elif args.command == "ops":
            from .coverage import table
            print(table(), end="")
    except CommandError as e:
        print(f"matchbox {args.command}: error: {e}", file=sys.stderr)
        return 1
    return 0
