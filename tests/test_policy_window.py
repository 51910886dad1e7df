"""`InliningPolicy.window`: a learned policy that decides only the call sites a shift rule
may flip, and gives clang's own decision everywhere else."""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.deploy.cc import policy_reads_default
from pymlgo.policy.export import ExportError, export_policy
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import MLPParams
from pymlgo.policy.store import PolicyLoadError, load_policy_dir, save_policy
from pymlgo.policy.vocab import build_vocab
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE, builtin_policy
from pymlgo.train.config import ConfigError, make_config
from tests.test_cc import (
    lz4_project,
    mlgo_cc,
    private_runtime,  # noqa: F401 (autouse: servers die with the test)
)
from tests.test_policy_vocab import skewed_columns
from tests.test_shift_policy import CHANGED, UNCHANGED, site
from tests.test_train_algorithms import copy_demo_subset

WINDOW = "shift:2:30:3:0"


def constant(answer: int, window: str = WINDOW) -> InliningPolicy:
    """A network that answers `answer` at every call site, held to `window`."""
    vocab = build_vocab(skewed_columns())
    hidden = (2,)
    params = MLPParams((np.zeros((vocab.input_dim, 2), np.float32),
                        np.zeros((2, 1), np.float32)),
                       (np.zeros(2, np.float32), np.array([5.0 if answer else -5.0],
                                                          np.float32)))
    return InliningPolicy(vocab, params, hidden=hidden, window=window)


def sites() -> list[dict[str, np.ndarray]]:
    """Clang's decision x margins from far refused to far taken x callee users."""
    out = []
    for default, cost, users in product((0, 1), (-300, -80, -1, 0, 1, 3, 4, 5, 20, 34, 35, 60),
                                        (1, 3, 4)):
        features = site(default=default, threshold=5, cost=cost, users=users)
        out.append(features | {k: np.array([1]) for k in skewed_columns(n=1)
                               if k not in features})
    return out


def test_outside_the_window_clang_decides_and_inside_it_the_network():
    # a network that always inlines, held to shift:2:30:3:0, is shift:0:30:3:0 (it keeps
    # every inline clang makes and takes what the rule may add); one that never inlines is
    # shift:2 (it drops what the rule may drop and adds nothing)
    for answer, same_as in ((1, "shift:0:30:3:0"), (0, "shift:2")):
        windowed = constant(answer).for_module("m")
        rule = builtin_policy(same_as).for_module("m")
        assert [windowed(f) for f in sites()] == [rule(f) for f in sites()]


def test_a_window_adds_the_features_it_reads_and_a_bad_one_is_refused():
    policy = constant(1)
    assert DEFAULT_FEATURE in policy.required_features
    assert "callee_users" in policy.required_features
    assert DEFAULT_FEATURE not in constant(1, window="").required_features
    with pytest.raises(ValueError, match="expected shift:DOWN"):
        constant(1, window="shift:x")
    with pytest.raises(ValueError, match="expected shift:DOWN"):
        constant(1, window="default")


def test_the_window_is_saved_with_the_policy_as_version_1_1(tmp_path):
    save_policy(constant(1), tmp_path / "w")
    doc = json.loads((tmp_path / "w" / "policy.json").read_text())
    assert doc["window"] == WINDOW and doc["version"] == "inlining-1.1"
    loaded = load_policy_dir(tmp_path / "w")
    assert loaded.window == WINDOW
    assert [loaded.for_module("m")(f) for f in sites()] == [
        constant(1).for_module("m")(f) for f in sites()]

    save_policy(constant(1, window=""), tmp_path / "plain")
    doc = json.loads((tmp_path / "plain" / "policy.json").read_text())
    assert "window" not in doc and doc["version"] == "inlining-1.0"


def test_a_window_in_a_version_1_0_file_is_refused(tmp_path):
    # a 1.0 reader would ignore it and let the network decide every call site
    save_policy(constant(1), tmp_path / "w")
    path = tmp_path / "w" / "policy.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc | {"version": "inlining-1.0"}))
    with pytest.raises(PolicyLoadError, match="needs inlining-1.1"):
        load_policy_dir(tmp_path / "w")


def test_export_refuses_a_windowed_policy_and_says_how_to_serve_it(tmp_path):
    with pytest.raises(ExportError, match="mlgo cc --mlgo-policy"):
        export_policy(constant(1), "savedmodel", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("table, message", [
    ({"algo": "ppo", "policy": {"window": WINDOW}}, "probability of each decision"),
    ({"algo": "bc", "policy": {"window": "shift:"}}, "expected shift:DOWN"),
    ({"algo": "es", "problem": "regalloc-evict", "warmstart": "", "policy": {"window": WINDOW}},
     "'inlining' only"),
])
def test_a_window_the_training_cannot_honour_is_a_config_error(table, message):
    with pytest.raises(ConfigError, match=message):
        make_config(**table)


def test_real_compiles_a_windowed_policy_gives_its_rule_bytes(demo_corpus_dir, tmp_path):
    corpus = copy_demo_subset(demo_corpus_dir, tmp_path / "corpus", CHANGED + UNCHANGED)
    save_policy(constant(1), tmp_path / "always")
    bytes_of = {}
    for spec in (str(tmp_path / "always"), "shift:0:30:3:0"):
        out = tmp_path / f"{Path(spec).name.replace(':', '_')}.json"
        assert main(["eval", "--corpus", str(corpus), "--policy", spec, "--workers", "2",
                     "--json", str(out)]) == 0
        bytes_of[spec] = {m["name"]: m["policy_bytes"]
                          for m in json.loads(out.read_text())["modules"]}
    assert bytes_of[str(tmp_path / "always")] == bytes_of["shift:0:30:3:0"]


def test_mlgo_cc_serves_a_windowed_policy_with_clangs_decision(tmp_path):
    # the window reads clang's decision: `mlgo cc` must ask clang for it, or no call site
    # could be answered; the object is then its rule's, byte for byte
    save_policy(constant(1), tmp_path / "always")
    assert policy_reads_default(str(tmp_path / "always"))
    src = lz4_project(tmp_path / "lz4")
    objects = {}
    for spec in (str(tmp_path / "always"), "shift:0:30:3:0"):
        out = f"{Path(spec).name.replace(':', '_')}.o"
        res = mlgo_cc("--mlgo-policy", spec, "-Oz", "-c", "lz4frame.c", "-o", out, cwd=src)
        assert res.returncode == 0, res.stderr
        objects[spec] = (src / out).read_bytes()
    assert objects[str(tmp_path / "always")] == objects["shift:0:30:3:0"]


def test_search_starts_from_a_windowed_policy_least_certain_network_decision_first(
        demo_corpus_dir, tmp_path):
    # the window's inputs (clang's decision) are not the network's: the flip order must
    # read the network's own inputs (the stop-38 policy_quality run failed on that)
    corpus = copy_demo_subset(demo_corpus_dir, tmp_path / "corpus", CHANGED[1:])
    save_policy(constant(1), tmp_path / "always")
    assert main(["search", "--corpus", str(corpus), "--policy", str(tmp_path / "always"),
                 "--budget", "2", "--workers", "2", "--output-dir", str(tmp_path / "s")]) == 0
    (module,) = json.loads((tmp_path / "s" / "search.json").read_text())["modules"].values()
    assert module["compiles"] == 2 and module["best_bytes"] <= module["start_bytes"]
