"""The @batch runtime reads top-down: no runtime module imports, directly
or through others, a module that imports it back, and none imports
another inside a function (the usual way to dodge such a circle)."""
import ast
import pathlib

import matchbox.transform.runtime as runtime

RUNTIME = pathlib.Path(runtime.__file__).parent


def _imports(path):
    """``[(module, at_top_level)]``: the runtime modules ``path`` imports."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            out += [(name.split(".")[0], id(node) in top) for name in names]
    return out


def _graph():
    return {p.stem: _imports(p) for p in RUNTIME.glob("*.py")}


def test_no_function_level_imports_between_runtime_modules():
    late = {m: [n for n, top in deps if not top] for m, deps in _graph().items()}
    assert not {m: d for m, d in late.items() if d}, late


def test_no_runtime_module_imports_one_that_imports_it_back():
    graph = {m: {n for n, _ in deps} for m, deps in _graph().items()}

    def reach(m, seen):
        for n in graph.get(m, ()):
            if n not in seen:
                seen.add(n)
                reach(n, seen)
        return seen
    circles = {m: sorted(n for n in reach(m, set()) if m in reach(n, set()))
               for m in graph if m != "__init__"}
    assert not {m: c for m, c in circles.items() if c}, circles


def test_the_check_sees_a_circle(tmp_path):
    (tmp_path / "a.py").write_text("from .b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import g\n")
    assert _imports(tmp_path / "a.py") == [("b", True)]
    assert _imports(tmp_path / "b.py") == [("a", False)]
