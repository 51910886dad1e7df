"""`mlgo eval` on the real demo corpus: default equals plain -Oz to the byte."""

from __future__ import annotations

import json

import pytest

from pymlgo.cli.main import main
from pymlgo.evaluate.eval import EvalReport, ModuleRow, format_table


@pytest.fixture(scope="module")
def default_report(demo_corpus_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("eval") / "default.json"
    assert main(["eval", "--corpus", str(demo_corpus_dir), "--policy", "default",
                 "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_json_report_has_the_documented_schema(default_report):
    assert set(default_report) == {"problem", "policy", "compiler", "modules", "total"}
    assert default_report["problem"] == "inlining"
    assert set(default_report["compiler"]) == {"path", "version"}
    assert set(default_report["total"]) == {"baseline_bytes", "policy_bytes", "change"}
    for m in default_report["modules"]:
        assert set(m) == {"name", "baseline_bytes", "policy_bytes", "decisions", "error"}


def test_default_policy_equals_plain_oz_on_every_module(default_report):
    modules = default_report["modules"]
    assert len(modules) >= 40
    assert all(m["error"] is None for m in modules)
    assert all(m["policy_bytes"] == m["baseline_bytes"] for m in modules)
    assert default_report["total"]["change"] == 0.0
    assert sum(m["decisions"] for m in modules) > 5000


def test_never_and_always_give_different_totals(default_report, demo_corpus_dir, tmp_path):
    totals = {}
    for policy in ("never", "always"):
        out = tmp_path / f"{policy}.json"
        assert main(["eval", "--corpus", str(demo_corpus_dir), "--policy", policy,
                     "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        assert report["total"]["baseline_bytes"] == default_report["total"]["baseline_bytes"]
        totals[policy] = report["total"]["policy_bytes"]
    base = default_report["total"]["baseline_bytes"]
    assert len({base, totals["never"], totals["always"]}) == 3


def test_failed_module_is_reported_and_left_out_of_totals():
    rows = (ModuleRow("a", 100, 90, 3, None), ModuleRow("b", 50, None, 0, "policy: boom"))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    assert report.baseline_total == 100 and report.policy_total == 90
    assert report.to_json()["total"]["change"] == pytest.approx(-0.1)
    assert "1 module(s) failed" in format_table(report)


def test_unknown_policy_is_a_clear_cli_error(capsys, demo_corpus_dir):
    assert main(["eval", "--corpus", str(demo_corpus_dir), "--policy", "sometimes"]) == 2
    assert "unknown inlining policy" in capsys.readouterr().err


def test_missing_corpus_is_a_clear_cli_error(capsys, tmp_path):
    assert main(["eval", "--corpus", str(tmp_path / "nope")]) == 2
    assert "corpus" in capsys.readouterr().err.lower()
