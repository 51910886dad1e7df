"""Register allocation through the one trainer (`mlgo train --problem P`) on small demo
modules (real clang): es and ppo move the problems' networks away from the stock rule, ppo
learns per machine function, and the trained policy evaluates with `mlgo eval`. What every
problem shares (same seed, same bytes; stop, resume and kill -9; TensorBoard) is in
test_train_resume.py, over the same shared runs (`tests/train_runs.py`)."""

from __future__ import annotations

import json
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
from pymlgo.problems.base import ModuleResult
from pymlgo.problems.regalloc.compile import FUNCTION_PREFIX
from pymlgo.problems.regalloc.policies import priority_from_log2, stage_size_score
from pymlgo.train.regalloc import DEFAULT_HIDDEN
from tests.test_train_algorithms import copy_demo_subset
from tests.train_runs import MODULES, policy_bytes, scalars, train_in_process

REGALLOC = ("regalloc-evict", "regalloc-priority")
# batches by the stock advisor's cost (3 of the 6 training modules), as stop 54's
# eviction runs drew them
ES = """
algo = "es"
seed = 4
warmstart = ""
sample_by = "baseline"
[split]
validation = 0.25
heldout = 0.0
[es]
population = 2
sigma = 0.5
learning_rate = 0.05
modules_per_iteration = 3
"""


def initial_network(problem: str) -> Any:
    """`init_network` of the problem's policy: its untrained network from a generator."""
    return init_network if problem == "regalloc-evict" else priority.init_network


def evaluates(problem: str, policy: Path, corpus: Path, tmp_path: Path) -> dict[str, Any]:
    """`mlgo eval --problem P --policy DIR` on two of the modules: the report's totals."""
    out = tmp_path / "eval.json"
    two = copy_demo_subset(corpus, tmp_path / "eval-corpus", MODULES[:2])
    assert main(["eval", "--problem", problem, "--corpus", str(two), "--policy", str(policy),
                 "--workers", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["modules"]) == 2
    return report["total"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("problem", REGALLOC)
def test_es_moves_the_default_network_and_the_policy_evaluates(train_corpus, problem,
                                                               tmp_path):
    config = tmp_path / "es.toml"
    config.write_text(f'problem = "{problem}"\n' + ES)
    train_in_process(train_corpus, config, tmp_path / "run", "--no-tensorboard",
                     "--iterations", "2")
    rows = scalars(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert all(r["es/common_modules"] == 3 and r["failures"] == 0 for r in rows[1:])
    # two Adam steps moved the problem's default network away from the stock rule's
    final = load_saved_policy(tmp_path / "run" / "final")
    assert final.hyperparameters["algo"] == "es"
    assert final.hidden == DEFAULT_HIDDEN[final.advisor]
    start = initial_network(problem)(np.random.default_rng([4, 1]), final.hidden)
    assert start.flat().shape == final.flat().shape
    assert not np.array_equal(final.flat(), start.flat())
    # the trained policy: weighted costs vs the stock advisor, every answer valid
    total = evaluates(problem, tmp_path / "run" / "final", train_corpus, tmp_path)
    assert total["baseline_cost"] > 0 and total["invalid_advice"] == 0
    assert total["cost_change"] > -1.0


@pytest.mark.parametrize("problem", REGALLOC)
def test_ppo_learns_per_function_from_the_stock_rule(trained, problem):
    run = trained(problem).out
    for step in scalars(run)[1:]:
        assert step["ppo/decisions"] > 50 and step["ppo/functions"] > 0
        assert np.isfinite(step["ppo/loss"]) and step["ppo/entropy"] > 0
    final = load_saved_policy(run / "final")
    assert isinstance(final, EvictionPolicy) == (problem == "regalloc-evict")
    seed = final.hyperparameters["seed"]
    start = initial_network(problem)(np.random.default_rng([seed, 1]), final.hidden)
    assert not np.array_equal(final.network.flat(), start.flat())


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
    (["--algo", "dqn"], "trains with algo = 'es' or 'ppo' or 'bc' or 'il'"),
    (["--algo", "il", "--config", "MOVES"], "il.moves = 'callee'"),
    (["--algo", "es", "--warmstart", "bc"], "no bc warm start"),
    (["--algo", "ppo", "--partial-rewards", "ir2native"], "applies to problem 'inlining'"),
    (["--algo", "es", "--vocab", "v"], "applies to problem 'inlining'"),
])
def test_what_eviction_cannot_train_with_is_refused(train_corpus, tmp_path, capsys, argv,
                                                   says):
    moves = tmp_path / "moves.toml"  # a callee's call sites: an inlining move
    moves.write_text('algo = "il"\n[il]\nmoves = "callee"\n')
    argv = [str(moves) if a == "MOVES" else a for a in argv]
    rc = main(["train", "--problem", "regalloc", "--corpus", str(train_corpus), "--output_dir",
               str(tmp_path / "run"), *argv])
    assert rc == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_priorities_cannot_be_imitated_from_search(train_corpus, tmp_path, capsys):
    rc = main(["train", "--problem", "regalloc-priority", "--algo", "il", "--corpus",
               str(train_corpus), "--output_dir", str(tmp_path / "run")])
    assert rc == 2 and "trains with algo = 'es' or 'ppo' or 'bc', not algo = 'il'" in (
        capsys.readouterr().err)


IL = """
problem = "regalloc-evict"
algo = "il"
seed = 4
warmstart = ""
[split]
validation = 0.25
heldout = 0.0
[il]
budget = 6
search_batch = 3
modules_per_iteration = 2
epochs_per_iteration = 2
batch_size = 32
"""


def test_il_clones_searched_evictions_and_a_resumed_run_ends_with_the_same_bytes(
        train_corpus, tmp_path):
    config = tmp_path / "il.toml"
    config.write_text(IL)
    train_in_process(train_corpus, config, tmp_path / "run", "--no-tensorboard",
                     "--iterations", "2")
    rows = scalars(tmp_path / "run")
    for row in rows[1:]:
        # search starts from the policy and never ends above it; the cost is its measure
        assert row["il/search_change"] <= row["il/start_change"]
        assert row["cost_change/train"] == row["il/start_change"]
        assert row["il/search_compiles"] > 2 and row["il/dataset_decisions"] > 0
        assert np.isfinite(row["il/loss"]) and row["failures"] == 0
    final = load_saved_policy(tmp_path / "run" / "final")
    assert isinstance(final, EvictionPolicy) and final.hyperparameters["algo"] == "il"
    # stopped after iteration 1 and resumed: the bytes of the uninterrupted run
    train_in_process(train_corpus, config, tmp_path / "stopped", "--no-tensorboard",
                     "--iterations", "1")
    resumed = train_in_process(train_corpus, config, tmp_path / "stopped", "--no-tensorboard",
                               "--iterations", "2")
    assert "resuming" in resumed
    for name in ("final", "best"):
        assert policy_bytes(tmp_path / "stopped" / name) == policy_bytes(tmp_path / "run" / name)


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
