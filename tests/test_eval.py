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
    assert set(default_report) == {"problem", "policy", "size_metric", "compiler", "modules",
                                   "total"}
    assert default_report["problem"] == "inlining"
    assert default_report["size_metric"] == "allocated"  # the default: what ships
    assert set(default_report["compiler"]) == {"path", "version"}
    total = default_report["total"]
    assert set(total) == {"baseline_bytes", "policy_bytes", "change", "guarded_bytes",
                          "guarded_change", "by_group", "by_metric", "by_size_bucket",
                          "package_interval", "calls_refused_after_size_stop"}
    assert total["calls_refused_after_size_stop"] == 0  # clang 22 never stops on the demo
    assert set(total["by_group"]) == {"code", "rodata", "unwind", "eh_tables", "data"}
    assert set(total["by_metric"]) == {"allocated", "text", "llvm-size"}
    assert set(total["by_size_bucket"]) == {"<4KB", "4-16KB", "16-64KB", ">=64KB"}
    for m in default_report["modules"]:
        assert set(m) == {"name", "baseline_bytes", "policy_bytes", "decisions", "error",
                          "baseline", "policy", "calls_refused_after_size_stop"}
        for side in ("baseline", "policy"):
            assert set(m[side]) == {"groups", "metrics", "bss"}
            # the metric in force is the one the bytes count; allocated = sum of the groups
            assert m[side]["metrics"]["allocated"] == sum(m[side]["groups"].values())
            assert m[f"{side}_bytes"] == m[side]["metrics"]["allocated"]
            assert m[side]["metrics"]["text"] == m[side]["groups"]["code"]


def test_every_metric_totals_the_modules_bytes(default_report):
    modules = default_report["modules"]
    by_metric = default_report["total"]["by_metric"]
    for metric in ("allocated", "text", "llvm-size"):
        assert by_metric[metric]["baseline_bytes"] == sum(
            m["baseline"]["metrics"][metric] for m in modules)
    assert by_metric["allocated"]["baseline_bytes"] == default_report["total"]["baseline_bytes"]
    # the demo's objects carry unwind tables and read-only data beside their code
    groups = default_report["total"]["by_group"]
    assert groups["unwind"]["baseline_bytes"] > 0 and groups["rodata"]["baseline_bytes"] > 0
    buckets = default_report["total"]["by_size_bucket"]
    assert sum(b["modules"] for b in buckets.values()) == len(modules)


def test_text_metric_counts_code_only(demo_corpus_dir, default_report, tmp_path, capsys):
    out = tmp_path / "text.json"
    capsys.readouterr()  # not what the fixture's own run printed
    assert main(["eval", "--corpus", str(demo_corpus_dir), "--policy", "default",
                 "--size-metric", "text", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "size metric: text" in printed
    report = json.loads(out.read_text())
    assert report["size_metric"] == "text"
    assert report["total"]["baseline_bytes"] == (
        default_report["total"]["by_metric"]["text"]["baseline_bytes"])


def test_default_policy_equals_plain_oz_on_every_module(default_report):
    modules = default_report["modules"]
    assert len(modules) >= 40
    assert all(m["error"] is None for m in modules)
    assert all(m["policy_bytes"] == m["baseline_bytes"] for m in modules)
    assert default_report["total"]["change"] == 0.0
    assert sum(m["decisions"] for m in modules) > 5000
    # equal on every package, so equal in every resampling of the three packages
    assert default_report["total"]["package_interval"] == {"bytes": [0.0, 0.0]}


def test_never_and_always_give_different_totals(default_report, demo_corpus_dir, tmp_path):
    totals = {}
    for policy in ("never", "always"):
        out = tmp_path / f"{policy}.json"
        assert main(["eval", "--corpus", str(demo_corpus_dir), "--policy", policy,
                     "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        assert report["total"]["baseline_bytes"] == default_report["total"]["baseline_bytes"]
        totals[policy] = report["total"]["policy_bytes"]
        # a resampled total is a weighted mean of package changes: between the extremes
        changes = [p["change"] for p in package_changes(report["modules"]).values()]
        lo, hi = report["total"]["package_interval"]["bytes"]
        assert min(changes) <= lo < hi <= max(changes)
    base = default_report["total"]["baseline_bytes"]
    assert len({base, totals["never"], totals["always"]}) == 3


def package_changes(modules: list[dict]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for m in modules:
        p = out.setdefault(m["name"].split("/")[0], {"base": 0, "policy": 0})
        p["base"] += m["baseline_bytes"]
        p["policy"] += m["policy_bytes"]
    for p in out.values():
        p["change"] = p["policy"] / p["base"] - 1
    return out


def test_the_table_names_each_packages_change_and_share_and_the_bootstrap_interval():
    rows = (ModuleRow("big/a", 9000, 8100, 1, None), ModuleRow("small/a", 500, 550, 1, None),
            ModuleRow("tiny/a", 500, 500, 1, None))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    table = format_table(report)
    assert "by package (bytes, share of the -Oz total): big -10.00% (90%), small +10.00% (5%)" \
        ", tiny +0.00% (5%)" in table
    assert "in 90% of 2,000 resamplings of the 3 packages; big holds 90% of it" in table
    lo, hi = report.to_json()["total"]["package_interval"]["bytes"]
    assert -0.10 <= lo < report.change < hi <= 0.10
    one = EvalReport("inlining", "p", {}, rows[:1])
    assert "by package" not in format_table(one)  # one package: nothing to resample
    assert one.to_json()["total"]["package_interval"] == {"bytes": None}


def test_failed_module_is_reported_and_left_out_of_totals():
    rows = (ModuleRow("a", 100, 90, 3, None), ModuleRow("b", 50, None, 0, "policy: boom"))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    assert report.baseline_total == 100 and report.policy_total == 90
    assert report.to_json()["total"]["change"] == pytest.approx(-0.1)
    assert "1 module(s) failed" in format_table(report)


def test_guarded_total_keeps_the_smaller_side_per_module():
    rows = (ModuleRow("grew", 1000, 1100, 1, None), ModuleRow("shrank", 1000, 800, 1, None))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    assert report.change == pytest.approx(-0.05)
    assert report.guarded_total == 1800
    assert report.to_json()["total"]["guarded_change"] == pytest.approx(-0.1)
    assert "guarded" in format_table(report)


def test_packages_are_module_names_first_component_and_failures_are_left_out():
    rows = (ModuleRow("zlib/inflate", 1000, 900, 1, None),
            ModuleRow("zlib/_unity/u0", 3000, 3100, 1, None),
            ModuleRow("lz4/lz4", 500, 500, 1, None), ModuleRow("lz4/x", 9, None, 0, "boom"))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    packages = report.by_package()
    assert list(packages) == ["lz4", "zlib"]
    assert packages["zlib"] == {"modules": 2, "baseline_bytes": 4000, "policy_bytes": 4000,
                                "change": 0.0}
    assert packages["lz4"]["modules"] == 1


def test_largest_growth_looks_only_at_modules_as_big_as_asked():
    rows = (ModuleRow("small", 100, 200, 1, None), ModuleRow("big", 70000, 70700, 1, None),
            ModuleRow("bigger", 90000, 89000, 1, None))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    assert report.largest_growth().name == "small"
    assert report.largest_growth(65536).name == "big"
    assert report.largest_growth(10**6) is None
    assert report.largest_big_growth() == {"module": "big", "baseline_bytes": 70000,
                                           "policy_bytes": 70700,
                                           "change": pytest.approx(0.01)}


def test_size_buckets_split_modules_by_their_oz_bytes():
    rows = (ModuleRow("small", 4095, 4000, 1, None), ModuleRow("big", 65536, 66000, 1, None))
    report = EvalReport("inlining", "p", {"path": "clang", "version": "22"}, rows)
    buckets = report.by_bucket()
    assert buckets["<4KB"]["modules"] == 1 and buckets[">=64KB"]["modules"] == 1
    assert buckets[">=64KB"]["change"] == pytest.approx(66000 / 65536 - 1)
    assert buckets["4-16KB"]["modules"] == 0


def test_unknown_policy_is_a_clear_cli_error(capsys, demo_corpus_dir):
    assert main(["eval", "--corpus", str(demo_corpus_dir), "--policy", "sometimes"]) == 2
    assert "unknown inlining policy" in capsys.readouterr().err


def test_missing_corpus_is_a_clear_cli_error(capsys, tmp_path):
    assert main(["eval", "--corpus", str(tmp_path / "nope")]) == 2
    assert "corpus" in capsys.readouterr().err.lower()


FLAG_MODULES = ("brotli/c/enc/histogram", "zstd/lib/compress/hist")


def eval_json(corpus, out, *extra: str) -> dict:
    assert main(["eval", "--corpus", str(corpus), "--workers", "2", "--json", str(out),
                 *extra]) == 0
    return json.loads(out.read_text())


def test_added_flags_change_the_baseline_and_the_policy_compile_alike(demo_corpus_dir,
                                                                      tmp_path):
    from tests.test_train_algorithms import copy_demo_subset

    corpus = copy_demo_subset(demo_corpus_dir, tmp_path / "corpus", FLAG_MODULES)
    plain = eval_json(corpus, tmp_path / "plain.json")
    sections = eval_json(corpus, tmp_path / "sections.json", "--add-flag=-ffunction-sections")
    # a section per function: other .text bytes (alignment) at -Oz and through the channel
    assert sections["total"]["baseline_bytes"] != plain["total"]["baseline_bytes"]
    assert all(m["policy_bytes"] == m["baseline_bytes"] for m in sections["modules"])
    # deleting what was added, or overriding the recorded commands, reaches the compile too
    undone = eval_json(corpus, tmp_path / "undone.json", "--add-flag=-ffunction-sections",
                       "--delete-flag=-ffunction-sections")
    assert undone["total"] == sections["total"]  # deletes come before adds
    override = eval_json(corpus, tmp_path / "override.json", "--command-override",
                         "-O2 -target x86_64-linux-gnu -ffunction-sections")
    assert override["total"]["baseline_bytes"] != plain["total"]["baseline_bytes"]


def test_a_malformed_flag_edit_is_a_one_line_error(capsys, demo_corpus_dir):
    assert main(["eval", "--corpus", str(demo_corpus_dir), "--replace-flag", "a=b=c"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "write OLD=NEW" in err


@pytest.mark.parametrize("where", ["a_file/report.json", "a_dir"])
def test_an_unwritable_json_path_fails_before_the_run_and_leaves_nothing(
    capsys, tmp_path, demo_corpus_dir, where
):
    (tmp_path / "a_file").write_text("not a directory")
    (tmp_path / "a_dir").mkdir()
    before = sorted(tmp_path.rglob("*"))
    assert main(["eval", "--corpus", str(demo_corpus_dir), "--json",
                 str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlgo eval: ") and err.count("\n") == 1
    assert "eval default" not in err  # no progress bar: nothing was compiled
    assert sorted(tmp_path.rglob("*")) == before


def test_a_json_path_in_a_new_directory_is_fine(tmp_path):
    from pymlgo.cli.common import check_writable

    check_writable(tmp_path / "new" / "dirs" / "report.json")
    assert list(tmp_path.iterdir()) == []  # checked, not created
