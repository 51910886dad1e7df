"""Training the eviction policy through the one trainer (`mlgo train --problem
regalloc-evict`) with es and ppo on small demo modules (real clang): same seed, same policy
bytes; a stopped run resumes and ends with the bytes of an uninterrupted one; TensorBoard
scalars; the trained policy evaluates like any other."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.policy.regalloc import init_network, load_eviction_policy
from pymlgo.problems.base import ModuleResult
from pymlgo.problems.regalloc.compile import FUNCTION_PREFIX
from pymlgo.workers import WorkSpec, make_executor
from tests.test_train_algorithms import copy_demo_subset
from tests.test_train_reproducible import in_process
from tests.test_train_resume import mlgo_train, policy_bytes

# small modules (well under a second each) that have spill code and eviction decisions
MODULES = ("zstd/lib/compress/hist", "brotli/c/enc/compound_dictionary",
           "zstd/lib/compress/zstd_compress_literals", "brotli/c/enc/histogram",
           "brotli/c/enc/literal_cost", "brotli/c/dec/huffman", "brotli/c/enc/bit_cost",
           "brotli/c/enc/entropy_encode")
COMMON = """
problem = "regalloc-evict"
warmstart = ""
[split]
validation = 0.25
heldout = 0.0
"""
ES = 'algo = "es"\nseed = 4\n' + COMMON + """
[es]
population = 2
sigma = 0.5
learning_rate = 0.05
modules_per_iteration = 3
"""
PPO = 'algo = "ppo"\nseed = 1\n' + COMMON + """
[ppo]
modules_per_iteration = 3
samples_per_module = 2
minibatch_size = 256
"""


@pytest.fixture(scope="module")
def corpus(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_demo_subset(demo_corpus_dir, tmp_path_factory.mktemp("ra") / "corpus",
                            MODULES)


def scalars(run: Path) -> list[dict[str, float]]:
    return [json.loads(ln) for ln in (run / "scalars.jsonl").read_text().splitlines()]


def _same_seed_same_bytes_and_resume(corpus: Path, config: Path, tmp_path: Path) -> None:
    done = subprocess.run(mlgo_train(corpus, config, tmp_path / "a", "--iterations", "2"),
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "777"})
    assert done.returncode == 0, done.stderr
    assert "cost vs stock" in done.stdout
    in_process(corpus, config, tmp_path / "stopped", 1)
    assert load_eviction_policy(tmp_path / "stopped" / "final").hyperparameters[
        "iteration"] == 1
    resumed = in_process(corpus, config, tmp_path / "stopped", 2)
    assert "resuming" in resumed and "at iteration 2" in resumed
    for name in ("best", "final"):
        assert policy_bytes(tmp_path / "stopped" / name) == policy_bytes(tmp_path / "a" / name)
    rows = scalars(tmp_path / "a")
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert all("cost_change/validation" in r for r in rows)
    assert all(r["cost_change/validation_best"] <= r["cost_change/validation"] + 1e-12
               for r in rows[1:])
    # the same scalars as TensorBoard events (tensorboard is a test dependency)
    assert list((tmp_path / "a" / "tensorboard").glob("events.out.tfevents.*"))


def test_es_gives_one_policy_per_seed_and_resumes_after_a_stop(corpus, tmp_path):
    config = tmp_path / "es.toml"
    config.write_text(ES)
    _same_seed_same_bytes_and_resume(corpus, config, tmp_path)
    rows = scalars(tmp_path / "a")
    assert all(r["es/common_modules"] == 3 and r["failures"] == 0 for r in rows[1:])
    final = load_eviction_policy(tmp_path / "a" / "final")
    assert final.hyperparameters["algo"] == "es"
    assert final.hyperparameters["config"]["problem"] == "regalloc-evict"
    assert final.hidden == (16,)  # the problem's default network
    # two Adam steps moved the parameters away from the initial (stock-rule) network
    start = init_network(np.random.default_rng([4, 1]), (16,)).flat()
    assert start.shape == final.network.flat().shape
    assert not np.array_equal(final.network.flat(), start)
    # the trained policy evaluates like any other: weighted costs vs the stock advisor
    jobs = corpus_jobs(load_corpus(corpus), MODULES[:2])
    with make_executor(None, 2) as ex:
        from pymlgo.toolchain.compiler import find_compiler

        report = evaluate(ex, find_compiler(None), jobs, final,
                          spec=WorkSpec(problem="regalloc"))
    total = report.to_json()["total"]
    assert len(report.ok_modules) == 2 and total["baseline_cost"] > 0
    assert total["invalid_advice"] == 0 and total["cost_change"] > -1.0


def test_ppo_learns_per_function_gives_one_policy_per_seed_and_resumes(corpus, tmp_path):
    config = tmp_path / "ppo.toml"
    config.write_text(PPO)
    _same_seed_same_bytes_and_resume(corpus, config, tmp_path)
    step = scalars(tmp_path / "a")[1]
    assert step["ppo/decisions"] > 50 and step["ppo/functions"] > 0
    assert np.isfinite(step["ppo/loss"]) and step["ppo/entropy"] > 0
    final = load_eviction_policy(tmp_path / "a" / "final")
    start = load_eviction_policy(tmp_path / "stopped" / "best")
    assert final.hyperparameters["algo"] == "ppo"
    assert not np.array_equal(final.network.flat(),
                              init_network(np.random.default_rng([1, 1]), (16,)).flat())
    del start


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


def test_priority_has_nothing_to_train_yet_and_says_so(corpus, tmp_path, capsys):
    rc = main(["train", "--problem", "regalloc-priority", "--algo", "es", "--corpus",
               str(corpus), "--output_dir", str(tmp_path / "run")])
    assert rc == 2 and "built-in policies only" in capsys.readouterr().err


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
