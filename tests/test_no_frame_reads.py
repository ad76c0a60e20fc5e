"""matchbox decides what it computes from the user's source (what the
@batch rewrite sees) and from explicit arguments, never from interpreter
internals: frames, bytecode, reference counts (issue 28).  The few frame
reads left only shape an error; each is listed here, with why."""
import ast
import pathlib
import re

import matchbox

PACKAGE = pathlib.Path(matchbox.__file__).parent
READS = re.compile(r"_getframe|currentframe|inspect\.stack|\bf_back\b|\bf_lasti\b|\bf_locals\b"
                   r"|\bf_code\b|\bco_code\b|getrefcount|settrace|setprofile|sys\.monitoring")

#: (module, function) -> why its frame read cannot change a result
ALLOWED = {
    ("core.py", "_unconverted_caller"):
        "names the helper @batch did not rewrite in the error for reading a Python value",
    ("transform/runtime/assign.py", "_own_copies"): "names the user's line in the refusal",
    ("ops/loss.py", "_weight_dropped"):
        "refuses torch's F.l1_loss(..., weight=w), which drops the weight before dispatch, "
        "rather than returning an unweighted loss; the weight itself is an argument "
        "(matchbox.functional.l1_loss)",
}


def _reads(path):
    """``{function: [line, ...]}`` of the frame reads in module ``path``."""
    source = path.read_text()
    lines = [i + 1 for i, text in enumerate(source.splitlines())
             if READS.search(text.split("#")[0])]
    spans = [(n.lineno, n.end_lineno, n.name) for n in ast.walk(ast.parse(source))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    out = {}
    for line in lines:
        inner = [s for s in spans if s[0] <= line <= s[1]]
        name = min(inner, key=lambda s: s[1] - s[0])[2] if inner else "<module>"
        out.setdefault(name, []).append(line)
    return out


def _all_reads():
    return {(p.relative_to(PACKAGE).as_posix(), f): lines
            for p in sorted(PACKAGE.rglob("*.py")) for f, lines in _reads(p).items()}


def test_no_frame_read_decides_a_result():
    new = {k: v for k, v in _all_reads().items() if k not in ALLOWED}
    assert not new, f"frame, bytecode or refcount reads outside the allowed list: {new}"


def test_the_allowed_list_is_current():
    assert set(ALLOWED) <= set(_all_reads()), set(ALLOWED) - set(_all_reads())


def test_the_check_sees_a_read(tmp_path):
    (tmp_path / "m.py").write_text("import sys\n\ndef owner():\n    return sys._getframe(1).f_code\n")
    assert _reads(tmp_path / "m.py") == {"owner": [4]}
