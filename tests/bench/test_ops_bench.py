"""``python -m bench ops`` runs every op on every kind of input (no timing
is asserted: the benchmark measures, tests do not)."""
from bench import ops


def test_every_op_runs_on_every_kind(tmp_path):
    rows = ops.measure(B=3, n=4, d=8, number=2)
    kinds = {(r["op"], r["kind"]) for r in rows}
    for op in ops._ops(8):
        assert {(op, k) for k in ("tensor", "static", "dynamic", "dormant")} <= kinds
    assert all(r["us"] > 0 for r in rows)
    ops.main(["--number", "2", "--out", str(tmp_path)])
    assert (tmp_path / "ops.md").read_text().startswith("| op |")
