"""matchbox over PyTorch's own op database (issue 20 item 8, issue 30).

Every OpInfo entry of ``torch.testing._internal.common_methods_invocations.op_db``
runs on batches made from its sample inputs, on static dims and with one dim
varying in size, and must agree with the per-example loop in values and
gradients (``mb_test``), or refuse with an error from matchbox that says
why: through its rule where the op has one, else through the general
fallback (matchbox/ops/fallback.py) or the ops with rules it is made of.
The cases live in ``opinfo_table.py``, the coverage page they produce in
``opinfo_page.py``; ``docs/opinfo.md`` is that page, and the last tests check
it is current and that the coverage stays at least what issue 30 asked for.
"""
import os

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's op database (torch.testing._internal) "
                    "imports expecttest: pip install expecttest (it is in the [test] extra)")

import opinfo_page as op  # noqa: E402
import opinfo_table as ot  # noqa: E402

from matchbox.coverage import DOCS_TORCH, docs_torch  # noqa: E402

OP_DB = ot.load_op_db()  # once per session (~3 s)
RESULTS = {}  # entry name -> result, for the page check at the end
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "opinfo.md")


def _problems(result):
    return [f"{mode}: {result[mode][0]}: {result[mode][1]}" for mode in ("static", "dynamic")
            if result.get(mode) and result[mode][0] in ("wrong", "crash")]


@pytest.mark.parametrize("opinfo", OP_DB, ids=ot.entry_name)
def test_op_matches_the_per_example_loop(opinfo):
    result = ot.check(opinfo)
    RESULTS[result["name"]] = result
    if "skip" in result:
        pytest.skip(result["skip"])
    name, problems = result["name"], _problems(result)
    if name in ot.XFAIL:
        if problems:
            pytest.xfail(ot.XFAIL[name])
        pytest.fail(f"{name} is listed in opinfo_table.XFAIL ({ot.XFAIL[name]}) but passes: "
                    f"remove it from XFAIL and regenerate docs/opinfo.md")
    assert not problems, f"{name}: " + "\n".join(problems)
    if ot.refused_by_fallback(result):  # issue 30: no MissingRule for an op vmap batches
        assert not op.vmap_reference(opinfo), (
            f"{name}: the general fallback refuses it, but torch.func.vmap batches it")


def test_the_checker_catches_a_wrong_rule(monkeypatch):
    """A rule that is off by a little is reported wrong, on static and
    dynamic batches: the cases above do check something."""
    right = ot.RULES[torch.tanh]

    def wrong(x, *args, **kwargs):
        return right(x, *args, **kwargs) * 1.001

    monkeypatch.setitem(ot.RULES, torch.tanh, wrong)
    result = ot.check(next(o for o in OP_DB if o.name == "tanh"))
    assert result["static"][0] == "wrong" and result["dynamic"][0] == "wrong", result


def test_an_op_without_a_rule_runs_through_the_fallback():
    """linalg.cholesky has no rule: vmap runs it on static batches, and its own
    call per example on dynamic ones (the examples are scaled copies of a
    positive-definite sample)."""
    result = ot.check(next(o for o in OP_DB if o.name == "linalg.cholesky"))
    assert result["kind"] == "fallback", result
    assert op.path(result, "static") == "fallback: vmap", result


def _all_results():
    if len(RESULTS) < len(OP_DB):
        pytest.skip("only part of the op database ran in this session")
    return [RESULTS[ot.entry_name(o)] for o in OP_DB]


def test_coverage_is_at_least_what_issue_30_asked():
    """Static passes at least vmap's count in the issue (588), dynamic at
    least 500, and nothing wrong beyond the known bugs (the test above)."""
    f = op.figures(_all_results())
    assert f["static pass"] >= 588 and f["dynamic pass"] >= 500, f


def test_docs_opinfo_is_current():
    """docs/opinfo.md is the page the cases above produce (runs last; with
    only some of them selected it cannot be checked)."""
    if not docs_torch():
        pytest.skip(f"docs/opinfo.md is torch {DOCS_TORCH}'s op database")
    results = _all_results()
    with open(DOC) as f:
        assert op.skeleton(f.read()) == op.skeleton(op.table(results)), (
            "docs/opinfo.md is out of date (an op's status or a figure changed): run "
            "python -m tests.ops.opinfo_page > docs/opinfo.md")
