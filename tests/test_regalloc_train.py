"""Training the eviction policy with es and ppo on small demo modules (real clang)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.policy.regalloc import initial_policy, load_eviction_policy
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.problems.regalloc.compile import FUNCTION_PREFIX
from pymlgo.train.regalloc_es import RegallocESConfig
from pymlgo.train.regalloc_run import SCALARS_FILE, RegallocTrainConfig, train_regalloc
from pymlgo.workers import WorkSpec, make_executor

# small modules (well under a second each) that have spill code and eviction decisions
TRAIN = ("zstd/lib/compress/hist", "brotli/c/enc/compound_dictionary",
         "zstd/lib/compress/zstd_compress_literals", "brotli/c/enc/histogram",
         "brotli/c/enc/literal_cost", "brotli/c/dec/huffman")
VALIDATION = ("brotli/c/enc/bit_cost", "brotli/c/enc/entropy_encode")


@pytest.fixture(scope="module")
def jobs(demo_corpus_dir: Path) -> dict[str, CompileJob]:
    return {j.module: j for j in corpus_jobs(load_corpus(demo_corpus_dir),
                                             (*TRAIN, *VALIDATION))}


@pytest.fixture(scope="module")
def executor():
    with make_executor(None, 2) as ex:
        yield ex


def _train(executor, compiler, jobs, config, out: Path):
    return train_regalloc(executor, compiler, [jobs[m] for m in TRAIN],
                          [jobs[m] for m in VALIDATION], config, output_dir=out)


def test_es_trains_saves_and_is_reproducible(executor, compiler, jobs, tmp_path):
    config = RegallocTrainConfig(algo="es", seed=4, iterations=2,
                                 es=RegallocESConfig(population=2, sigma=0.5,
                                                     modules_per_iteration=3))
    result = _train(executor, compiler, jobs, config, tmp_path / "a")
    scalars = (tmp_path / "a" / SCALARS_FILE).read_text().splitlines()
    assert len(scalars) == 3 and len(result.history) == 3
    assert all(h["es/common_modules"] == 3 for h in result.history[1:])
    # two Adam steps moved the parameters away from the initial (stock-rule) network
    start = initial_policy(4).network.flat()
    assert not np.array_equal(result.final.network.flat(), start)
    best = load_eviction_policy(tmp_path / "a" / "best")
    assert np.array_equal(best.network.flat(), result.best.network.flat())
    assert best.hyperparameters["algorithm"] == "es"
    # same seed, same modules: the same policy bytes
    _train(executor, compiler, jobs, config, tmp_path / "b")
    for name in ("best", "final"):
        assert ((tmp_path / "a" / name / "policy.json").read_bytes()
                == (tmp_path / "b" / name / "policy.json").read_bytes())
    # the trained policy evaluates like any other: weighted costs vs the stock advisor
    report = evaluate(executor, compiler, [jobs[m] for m in VALIDATION], result.final,
                      spec=WorkSpec(problem="regalloc"))
    total = report.to_json()["total"]
    assert len(report.ok_modules) == 2 and total["baseline_cost"] > 0
    assert total["invalid_advice"] == 0 and total["cost_change"] > -1.0


def test_ppo_learns_from_per_function_rewards(executor, compiler, jobs, tmp_path):
    config = RegallocTrainConfig(algo="ppo", seed=1, iterations=1,
                                 ppo_options={"modules_per_iteration": 3,
                                              "samples_per_module": 2})
    result = _train(executor, compiler, jobs, config, tmp_path)
    step = result.history[1]
    assert step["ppo/decisions"] > 50 and step["ppo/functions"] > 0
    assert np.isfinite(step["ppo/loss"]) and step["ppo/entropy"] > 0
    assert not np.array_equal(result.final.network.flat(), initial_policy(1).network.flat())
    assert load_eviction_policy(tmp_path / "final").hyperparameters["algorithm"] == "ppo"


def test_the_advantage_of_a_function_is_relative_to_its_other_samples():
    torch = pytest.importorskip("torch")
    del torch
    from pymlgo.train.regalloc_ppo import function_advantages

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
