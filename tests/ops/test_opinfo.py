"""matchbox's rules over PyTorch's own op database (issue 20 item 8).

Every OpInfo entry of ``torch.testing._internal.common_methods_invocations.op_db``
whose op has a rule runs on batches made from its sample inputs, on static
dims and with one dim varying in size, and must agree with the per-example
loop in values and gradients (``mb_test``), or refuse with an error from
matchbox that says why; every entry whose op has no rule must raise
``NotImplementedError`` naming the op (or, for composites, be right).  The
cases and the coverage page they produce live in ``opinfo_table.py``;
``docs/opinfo.md`` is that page, and the last test checks it is current.
"""
import os

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's op database (torch.testing._internal) "
                    "imports expecttest: pip install expecttest (it is in the [test] extra)")

import opinfo_table as ot  # noqa: E402

from matchbox.coverage import DOCS_TORCH, docs_torch  # noqa: E402

OP_DB = ot.load_op_db()  # once per session (~3 s)
RULED = [o for o in OP_DB if ot.ruled_callable(o) is not None]
UNRULED = [o for o in OP_DB if ot.ruled_callable(o) is None]
RESULTS = {}  # entry name -> result, for the page check at the end
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "opinfo.md")


def _problems(result):
    return [f"{mode}: {result[mode][0]}: {result[mode][1]}" for mode in ("static", "dynamic")
            if result.get(mode) and result[mode][0] in ("wrong", "crash")]


def _expect(name, problems):
    if name in ot.XFAIL:
        if problems:
            pytest.xfail(ot.XFAIL[name])
        pytest.fail(f"{name} is listed in opinfo_table.XFAIL ({ot.XFAIL[name]}) but passes: "
                    f"remove it from XFAIL and regenerate docs/opinfo.md")
    assert not problems, f"{name}: " + "\n".join(problems)


@pytest.mark.parametrize("opinfo", RULED, ids=ot.entry_name)
def test_op_with_a_rule_matches_the_per_example_loop(opinfo):
    result = ot.check_ruled(opinfo)
    RESULTS[result["name"]] = result
    if "skip" in result:
        pytest.skip(result["skip"])
    _expect(result["name"], _problems(result))


@pytest.mark.parametrize("opinfo", UNRULED, ids=ot.entry_name)
def test_op_without_a_rule_raises_naming_it(opinfo):
    result = ot.check_unruled(opinfo)
    RESULTS[result["name"]] = result
    problems = _problems(result)
    if result["status"] == "other":
        problems.append(f"an unclear error: {result['detail']}")
    _expect(result["name"], problems)


def test_the_checker_catches_a_wrong_rule(monkeypatch):
    """A rule that is off by a little is reported wrong, on static and
    dynamic batches: the cases above do check something."""
    right = ot.RULES[torch.tanh]

    def wrong(x, *args, **kwargs):
        return right(x, *args, **kwargs) * 1.001

    monkeypatch.setitem(ot.RULES, torch.tanh, wrong)
    opinfo = next(o for o in OP_DB if o.name == "tanh")
    result = ot.check_ruled(opinfo)
    assert result["static"][0] == "wrong" and result["dynamic"][0] == "wrong", result


def test_a_missing_rule_names_the_op():
    opinfo = next(o for o in OP_DB if o.name == "linalg.cholesky")
    result = ot.check_unruled(opinfo)
    assert result["status"] == "raises" and "cholesky" in result["detail"], result


def test_docs_opinfo_is_current():
    """docs/opinfo.md is the page the cases above produce (runs last; with
    only some of them selected it cannot be checked)."""
    if len(RESULTS) < len(OP_DB):
        pytest.skip("only part of the op database ran in this session")
    if not docs_torch():
        pytest.skip(f"docs/opinfo.md is torch {DOCS_TORCH}'s op database")
    ruled = [RESULTS[ot.entry_name(o)] for o in RULED]
    unruled = [RESULTS[ot.entry_name(o)] for o in UNRULED]
    with open(DOC) as f:
        assert ot.skeleton(f.read()) == ot.skeleton(ot.table(ruled, unruled)), (
            "docs/opinfo.md is out of date (an op's status or a figure changed): run "
            "python -m tests.ops.opinfo_table > docs/opinfo.md")
