"""docs/benchmarks.md and the README's benchmark table are written by
``python -m bench report`` from bench/results/, never by hand."""
import json

from bench import report


def test_the_document_and_the_readme_table_are_current(tmp_path):
    runs = report.load_runs()
    history = open(f"{report.RESULTS}/history.md").read()
    assert open(report.DOC).read() == report.document(runs, history), \
        "docs/benchmarks.md is stale: run python -m bench report"
    readme = open(report.README).read()
    assert report.TASTE.search(readme).group(0) == \
        f"<!-- bench-taste -->\n{report.taste(runs)}<!-- /bench-taste -->"


def _run(folder, name, records):
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    (folder / "runs" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_every_variant_found_gets_columns(tmp_path):
    """Kinds the runner does not know (another library's, e.g. DyNet's) too."""
    rec = dict(task="bilstm", size="small", batch_size=64, machine="m", torch="2.x")
    _run(tmp_path, "2026-01-01-a", [dict(rec, variant=v, seconds=s) for v, s in
                                    [("per_example", 1.0), ("hand", 0.2), ("matchbox", 0.1),
                                     ("dynet", 0.4)]])
    _run(tmp_path, "2026-02-01-b", [dict(rec, variant=v, seconds=s) for v, s in
                                    [("hand", 0.2), ("matchbox", 0.3)]])
    (tmp_path / "runs" / "2026-02-01-b.md").write_text("the second run")
    doc = tmp_path / "benchmarks.md"
    text = report.write(str(tmp_path), str(doc), readme=None)
    assert text.index("## Run 2026-02-01-b") < text.index("the second run") \
        < text.index("## Run 2026-01-01-a")
    first = text[text.index("## Run 2026-01-01-a"):]
    assert "| task | size | batch | per_example (s) | hand (s) | matchbox (s) | dynet (s) | " \
           "matchbox / hand | dynet / hand | per_example / matchbox |" in first
    assert "| bilstm | small | 64 | 1.0000 | 0.2000 | 0.1000 | 0.4000 | 0.50 | 2.00 | 10.00 |" \
        in first
    assert "- `dynet`: see the run notes" in text
    taste = report.taste(report.load_runs(str(tmp_path)))
    assert "| bilstm | small | – | 320.0 | 213.3 | 1.50 |" in taste, taste
    _run(tmp_path, "2026-03-01-c", [dict(rec, variant=v, seconds=s) for v, s in
                                    [("hand", 0.2), ("matchbox", 0.1), ("dynet_auto", 0.4)]])
    taste = report.taste(report.load_runs(str(tmp_path)))
    assert "| bilstm | small | – | 320.0 | 640.0 | 160.0 | 0.50 | 4.00 |" in taste, taste
