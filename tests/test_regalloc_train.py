"""Every problem through the one trainer (`mlgo train --problem P`) on eight small demo
modules (real clang): same seed, same policy bytes; a stopped run resumes and ends with the
bytes of an uninterrupted one; the scalars reach TensorBoard; the trained policy evaluates
with `mlgo eval`. es for the three problems, ppo for the two register allocation ones."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.policy import priority
from pymlgo.policy.regalloc import (
    EvictionPolicy,
    init_network,
    load_eviction_policy,
    load_saved_policy,
)
from pymlgo.policy.store import load_policy_dir
from pymlgo.problems.base import ModuleResult
from pymlgo.problems.regalloc.compile import FUNCTION_PREFIX
from pymlgo.problems.regalloc.policies import priority_from_log2, stage_size_score
from pymlgo.train.regalloc import DEFAULT_HIDDEN
from tests.test_train_algorithms import copy_demo_subset
from tests.test_train_reproducible import in_process
from tests.test_train_resume import mlgo_train, policy_bytes

# small modules (well under a second each) that have spill code, eviction and priority
# decisions, and call sites
MODULES = ("zstd/lib/compress/hist", "brotli/c/enc/compound_dictionary",
           "zstd/lib/compress/zstd_compress_literals", "brotli/c/enc/histogram",
           "brotli/c/enc/literal_cost", "brotli/c/dec/huffman", "brotli/c/enc/bit_cost",
           "brotli/c/enc/entropy_encode")
SPLIT = """
warmstart = ""
[split]
validation = 0.25
heldout = 0.0
"""
ES = """
algo = "es"
seed = 4
[es]
population = 2
sigma = 0.5
learning_rate = 0.05
modules_per_iteration = 3
"""
PPO = """
algo = "ppo"
seed = 1
[ppo]
modules_per_iteration = 3
samples_per_module = 2
minibatch_size = 256
"""
# what each problem adds to a config: inlining's network reads a quantile vocab
PROBLEM_KEYS = {
    "inlining": 'problem = "inlining"\n' + SPLIT + "[policy]\nhidden = [8]\nquantiles = 100\n",
    "regalloc-evict": 'problem = "regalloc-evict"\n' + SPLIT,
    "regalloc-priority": 'problem = "regalloc-priority"\n' + SPLIT,
}
REGALLOC = ("regalloc-evict", "regalloc-priority")
CHANGE = {"inlining": "size_change", "regalloc-evict": "cost_change",
          "regalloc-priority": "cost_change"}


@pytest.fixture(scope="module")
def corpus(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_demo_subset(demo_corpus_dir, tmp_path_factory.mktemp("ra") / "corpus",
                            MODULES)


def scalars(run: Path) -> list[dict[str, float]]:
    return [json.loads(ln) for ln in (run / "scalars.jsonl").read_text().splitlines()]


def saved(problem: str, directory: Path) -> Any:
    return (load_policy_dir(directory) if problem == "inlining"
            else load_saved_policy(directory))


def initial_network(problem: str) -> Any:
    """`init_network` of the problem's policy: its untrained network from a generator."""
    return init_network if problem == "regalloc-evict" else priority.init_network


def write_config(tmp_path: Path, problem: str, algo: str) -> Path:
    config = tmp_path / f"{algo}.toml"
    # TOML: the top-level keys first, then the tables
    top, _, tables = (ES if algo == "es" else PPO).partition("[")
    config.write_text(top + PROBLEM_KEYS[problem] + "[" + tables)
    return config


def trained_twice_and_resumed(corpus: Path, problem: str, algo: str, tmp_path: Path
                              ) -> Path:
    """Train 2 iterations in a subprocess (TensorBoard on) and in this process, stopped
    after 1 and resumed; both end with the same bytes. Returns the subprocess's run."""
    config = write_config(tmp_path, problem, algo)
    done = subprocess.run(mlgo_train(corpus, config, tmp_path / "a", "--iterations", "2"),
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "777"})
    assert done.returncode == 0, done.stderr
    in_process(corpus, config, tmp_path / "stopped", 1)
    assert saved(problem, tmp_path / "stopped" / "final").hyperparameters["iteration"] == 1
    resumed = in_process(corpus, config, tmp_path / "stopped", 2)
    assert "resuming" in resumed and "at iteration 2" in resumed
    for name in ("best", "final"):
        assert policy_bytes(tmp_path / "stopped" / name) == policy_bytes(tmp_path / "a" / name)
    final = saved(problem, tmp_path / "a" / "final")
    assert final.hyperparameters["algo"] == algo
    # a saved config leaves out the default problem (provenance of older runs unchanged)
    assert final.hyperparameters["config"].get("problem", "inlining") == problem
    rows = scalars(tmp_path / "a")
    change = CHANGE[problem]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert all(f"{change}/validation" in r for r in rows)
    assert all(r[f"{change}/validation_best"] <= r[f"{change}/validation"] + 1e-12
               for r in rows[1:])
    assert all(r["failures"] == 0 and r["compiles"] > 1 for r in rows[1:])
    return tmp_path / "a"


def tensorboard_holds(run: Path, problem: str, algo: str) -> None:
    """The event files hold every iteration's scalars, as scalars.jsonl has them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    change = CHANGE[problem]
    tags = (f"{change}/validation", f"{change}/train", "reward/train", "compiles",
            f"{algo}/grad_norm" if algo == "es" else "ppo/loss")
    assert set(tags) <= set(events.Tags()["scalars"])
    rows = {r["iteration"]: r for r in scalars(run)}
    for tag in tags:
        logged = {e.step: e.value for e in events.Scalars(tag)}
        assert logged == pytest.approx({it: r[tag] for it, r in rows.items() if tag in r})


def evaluates(problem: str, policy: Path, corpus: Path, tmp_path: Path) -> dict[str, Any]:
    """`mlgo eval --problem P --policy DIR` on two of the modules: the report's totals."""
    out = tmp_path / "eval.json"
    two = copy_demo_subset(corpus, tmp_path / "eval-corpus", MODULES[:2])
    assert main(["eval", "--problem", problem, "--corpus", str(two), "--policy", str(policy),
                 "--workers", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["modules"]) == 2
    return report["total"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("problem", sorted(PROBLEM_KEYS))
def test_es_gives_one_policy_per_seed_resumes_after_a_stop_and_logs_to_tensorboard(
        corpus, problem, tmp_path):
    run = trained_twice_and_resumed(corpus, problem, "es", tmp_path)
    tensorboard_holds(run, problem, "es")
    assert all(r["es/common_modules"] == 3 for r in scalars(run)[1:])
    total = evaluates(problem, run / "final", corpus, tmp_path)
    if problem in REGALLOC:
        # two Adam steps moved the problem's default network away from the stock rule's
        final = load_saved_policy(run / "final")
        assert final.hidden == DEFAULT_HIDDEN[final.advisor]
        start = initial_network(problem)(np.random.default_rng([4, 1]), final.hidden)
        assert start.flat().shape == final.flat().shape
        assert not np.array_equal(final.flat(), start.flat())
        # the trained policy: weighted costs vs the stock advisor, every answer valid
        assert total["baseline_cost"] > 0 and total["invalid_advice"] == 0
        assert total["cost_change"] > -1.0
    else:
        assert total["baseline_bytes"] > 0


@pytest.mark.parametrize("problem", REGALLOC)
def test_ppo_learns_per_function_gives_one_policy_per_seed_and_resumes(corpus, problem,
                                                                       tmp_path):
    run = trained_twice_and_resumed(corpus, problem, "ppo", tmp_path)
    tensorboard_holds(run, problem, "ppo")
    step = scalars(run)[1]
    assert step["ppo/decisions"] > 50 and step["ppo/functions"] > 0
    assert np.isfinite(step["ppo/loss"]) and step["ppo/entropy"] > 0
    final = saved(problem, run / "final")
    start = initial_network(problem)(np.random.default_rng([1, 1]), final.hidden)
    assert not np.array_equal(final.network.flat(), start.flat())
    assert isinstance(final, EvictionPolicy) == (problem == "regalloc-evict")


def test_an_untrained_priority_policy_is_the_stage_size_rule():
    policy = priority.PriorityPolicy(priority.init_network(np.random.default_rng(0)))
    decide = policy.for_module("m")
    for size, stage, weight in [(0, 1, 0.0), (96, 1, np.inf), (5000, 2, 0.3), (5000, 4, 9.0)]:
        features = {"li_size": np.array([size]), "stage": np.array([stage]),
                    "weight": np.array([weight], dtype=np.float32)}
        assert decide(features) == pytest.approx(
            priority_from_log2(stage_size_score(size, stage)), rel=1e-5)


def test_a_saved_priority_policy_loads_with_the_same_bits_and_sampling_is_seeded(tmp_path):
    from pymlgo.policy.regalloc import load_priority_policy, save_policy

    rng = np.random.default_rng(3)
    net = priority.init_network(rng, (4,))
    policy = priority.PriorityPolicy(net.with_flat(rng.standard_normal(net.size)), log_std=-1.5)
    save_policy(policy, tmp_path / "p")
    save_policy(policy, tmp_path / "q")
    assert (tmp_path / "p/policy.json").read_bytes() == (tmp_path / "q/policy.json").read_bytes()
    loaded = load_priority_policy(tmp_path / "p")
    assert np.array_equal(loaded.flat(), policy.flat()) and loaded.log_std == -1.5
    assert loaded.version == "regalloc-1.1" and loaded.hidden == (4,)
    with pytest.raises(ValueError, match="not an eviction policy"):
        load_eviction_policy(tmp_path / "p")
    features = {"li_size": np.array([700]), "stage": np.array([1]),
                "weight": np.array([2.0], dtype=np.float32)}
    draws = [loaded.sampling(s).for_module("m")(features) for s in (5, 5, 6)]
    assert draws[0] == draws[1] != draws[2]


@pytest.mark.parametrize("argv, says", [
    (["--algo", "bc"], "trains with algo = 'es' or 'ppo'"),
    (["--algo", "es", "--warmstart", "bc"], "no bc warm start"),
    (["--algo", "ppo", "--partial-rewards", "ir2native"], "applies to problem 'inlining'"),
    (["--algo", "es", "--vocab", "v"], "applies to problem 'inlining'"),
])
def test_what_eviction_cannot_train_with_is_refused(corpus, tmp_path, capsys, argv, says):
    rc = main(["train", "--problem", "regalloc", "--corpus", str(corpus), "--output_dir",
               str(tmp_path / "run"), *argv])
    assert rc == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_advantage_of_a_function_is_relative_to_its_other_samples():
    pytest.importorskip("torch")
    from pymlgo.train.heads import function_advantages

    def result(**costs: float) -> ModuleResult:
        return ModuleResult("m", 1, extra={FUNCTION_PREFIX + f: c for f, c in costs.items()})

    base = result(f=100.0, g=10.0, same=50.0)
    samples = [result(f=90.0, g=10.0, same=50.0), result(f=110.0, g=12.0, same=50.0),
               result(f=100.0, g=8.0, same=50.0)]
    adv = function_advantages(samples, base)
    # f: rewards 0.1, -0.1, 0 -> each minus the mean of the other two
    assert adv[0]["f"] == pytest.approx(0.1 - (-0.1 + 0.0) / 2)
    assert adv[1]["f"] == pytest.approx(-0.1 - 0.05)
    assert sum(a["g"] for a in adv) == pytest.approx(0.0)
    assert all("same" not in a for a in adv)  # no difference between samples: no signal
