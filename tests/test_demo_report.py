"""`mlgo demo`'s report: what it writes and prints after a real (tiny) training run.

The demo's own code path, `train_and_evaluate` then `write_demo_report`, on eight
demo-corpus modules with a one-iteration budget instead of the demo corpus and minutes.
"""

from __future__ import annotations

import json
import re
import struct
import time
import zlib

from pymlgo.cli.demo import demo_config, train_and_evaluate, write_demo_report
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.report import axis_label
from pymlgo.train.config import make_config
from pymlgo.train.trainer import RunOptions
from tests.test_train_algorithms import TINY_DEMO_MODULES, copy_demo_subset

HEADLINE = re.compile(r"^HELD-OUT: ([+-]\d+\.\d\d)% allocated bytes vs -Oz on (\d+) modules "
                      r"never seen in training \(([\d,]+) -> ([\d,]+) bytes; code only "
                      r"([+-]\d+\.\d\d)%; [\d.]+ min in total\)$",
                      re.MULTILINE)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG whose signature and header chunk (with its CRC) are valid."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    header = data[16:29]
    assert struct.unpack(">I", data[29:33])[0] == zlib.crc32(kind + header)
    assert data.endswith(b"IEND\xaeB`\x82")
    width, height = struct.unpack(">II", header[:8])
    return width, height


def test_the_demo_config_is_valid_and_budgeted_in_minutes():
    config = demo_config("es", 0, 4.0)
    assert config.time_budget_minutes == 4.0 and config.split.heldout > 0


def test_the_plot_names_the_size_metric_its_bars_count():
    # the default counts unwind tables as well, so a label saying `.text` would misreport
    assert "allocated bytes" in axis_label("allocated")
    assert "text bytes" in axis_label("text")
    assert axis_label("allocated") != axis_label("llvm-size")


def test_demo_report_png_json_and_headline_agree(demo_corpus_dir, compiler, tmp_path, capsys):
    corpus = load_corpus(copy_demo_subset(demo_corpus_dir, tmp_path / "corpus",
                                          TINY_DEMO_MODULES))
    config = make_config(
        algo="es", seed=0, iterations=1, warmstart="bc",
        split={"validation": 0.25, "heldout": 0.25},
        policy={"hidden": [8], "quantiles": 50},
        bc={"warmstart_epochs": 2, "batch_size": 32},
        es={"population": 1, "modules_per_iteration": 2},
    )
    out = tmp_path / "demo"
    outcome = train_and_evaluate(config, corpus, out, RunOptions(workers=2, progress=False,
                                                                 tensorboard=False), compiler)
    assert write_demo_report(out, outcome, corpus_label="tiny", corpus=corpus, config=config,
                             compiler=compiler, command="pytest",
                             started=time.monotonic()) == 0

    width, height = png_size((out / "size_change.png").read_bytes())
    assert width > 100 and height > 100
    assert "size_change.png" in (out / "report.md").read_text()

    report = json.loads((out / "report.json").read_text())
    heldout = report["heldout"]
    assert sorted(m["name"] for m in heldout["modules"]) == sorted(outcome.result.split.heldout)
    ok = [m for m in heldout["modules"] if m["error"] is None]
    assert ok and len(ok) == len(heldout["modules"])
    total = heldout["total"]
    assert total["baseline_bytes"] == sum(m["baseline_bytes"] for m in ok)
    assert total["policy_bytes"] == sum(m["policy_bytes"] for m in ok)
    assert total["change"] == total["policy_bytes"] / total["baseline_bytes"] - 1
    assert report["training"]["iterations"] == 1

    headline = HEADLINE.search(capsys.readouterr().out)
    assert headline, "no HELD-OUT headline printed"
    assert headline.group(1) == f"{total['change'] * 100:+.2f}"
    assert int(headline.group(2)) == len(ok)
    assert int(headline.group(3).replace(",", "")) == total["baseline_bytes"]
    assert int(headline.group(4).replace(",", "")) == total["policy_bytes"]
    assert headline.group(5) == f"{total['by_metric']['text']['change'] * 100:+.2f}"
    assert report["heldout"]["size_metric"] == "allocated"
