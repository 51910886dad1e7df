"""`mlgo eval --problem regalloc` and `mlgo train --problem regalloc` on a small real corpus."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pymlgo.cli.main import main
from pymlgo.policy.regalloc import load_eviction_policy

MODULES = ("zstd/lib/compress/hist", "brotli/c/enc/compound_dictionary",
           "zstd/lib/compress/zstd_compress_literals", "brotli/c/enc/histogram",
           "brotli/c/enc/literal_cost", "brotli/c/dec/huffman", "brotli/c/enc/bit_cost")


@pytest.fixture(scope="module")
def small_corpus(demo_corpus_dir: Path, tmp_path_factory) -> Path:
    """Seven demo modules as a corpus of their own (same files, same format)."""
    root = tmp_path_factory.mktemp("corpus")
    for m in MODULES:
        (root / m).parent.mkdir(parents=True, exist_ok=True)
        for ext in (".bc", ".cmd"):
            shutil.copyfile(demo_corpus_dir / (m + ext), root / (m + ext))
    (root / "corpus_description.json").write_text(
        json.dumps({"modules": list(MODULES), "has_thinlto": False}))
    return root


def test_eval_reports_the_inlining_schema_plus_weighted_costs(small_corpus, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["eval", "--problem", "regalloc", "--corpus", str(small_corpus), "--policy",
               "no-evict", "--json", str(out), "--workers", "2"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["problem"] == "regalloc-evict" and report["policy"] == "no-evict"
    assert {m["name"] for m in report["modules"]} == set(MODULES)
    row = report["modules"][0]
    assert {"name", "baseline_bytes", "policy_bytes", "decisions", "error"} <= set(row)
    assert {"baseline_cost", "policy_cost", "cost_change", "invalid_advice"} <= set(row)
    total = report["total"]
    assert {"baseline_bytes", "policy_bytes", "change", "baseline_cost", "policy_cost",
            "cost_change"} <= set(total)
    # never evicting leaves live ranges to be split and spilled: more spill code
    assert total["policy_cost"] > total["baseline_cost"] > 0
    assert "TOTAL" in capsys.readouterr().out


def test_eval_refuses_an_unknown_regalloc_policy(small_corpus, capsys):
    rc = main(["eval", "--problem", "regalloc", "--corpus", str(small_corpus), "--policy",
               "never"])
    assert rc == 2 and "unknown regalloc policy" in capsys.readouterr().err


def test_train_es_writes_policies_and_scalars(small_corpus, tmp_path):
    cfg = tmp_path / "ra.toml"
    cfg.write_text("[es]\npopulation = 1\nmodules_per_iteration = 2\n")
    out = tmp_path / "run"
    rc = main(["train", "--problem", "regalloc", "--algo", "es", "--corpus", str(small_corpus),
               "--output_dir", str(out), "--iterations", "1", "--seed", "2", "--config",
               str(cfg), "--workers", "2"])
    assert rc == 0
    assert len((out / "scalars.jsonl").read_text().splitlines()) == 2
    policy = load_eviction_policy(out / "best")
    assert policy.hyperparameters["algo"] == "es"
    assert policy.hyperparameters["config"]["es"]["population"] == 1
    assert policy.hyperparameters["config"]["warmstart"] == ""  # no bc for eviction


def test_train_rejects_unknown_config_keys(small_corpus, tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[es]\npopulaton = 3\n")
    rc = main(["train", "--problem", "regalloc", "--algo", "es", "--corpus", str(small_corpus),
               "--output_dir", str(tmp_path / "run"), "--config", str(cfg)])
    assert rc == 2 and "populaton" in capsys.readouterr().err
