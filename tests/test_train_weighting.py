"""reward_weighting (issue 24): an objective that counts bytes, as users do."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.vocab import build_vocab
from pymlgo.train.config import ConfigError, ESConfig, make_config, to_dict
from pymlgo.train.env import BYTES, ByteScoring, Episode, byte_weights, objective
from pymlgo.train.es import EvolutionStrategies

# -Oz bytes of a big translation unit (>= 64 KB, an amalgamation-like module) and a small
# one, multiples of 100 so that 1% is exact; the ratio is what matters (~45x)
BIG, SMALL = 91_200, 2_000


def episodes(big: int, small: int) -> list[Episode]:
    return [Episode("zstd/big", 0, BIG, big, 10), Episode("lz4/small", 0, SMALL, small, 10)]


def one_percent(n: int) -> int:
    return n * 99 // 100


def test_bytes_objective_ranks_a_saving_on_the_big_module_above_one_on_the_small():
    saves_big = episodes(one_percent(BIG), SMALL)
    saves_small = episodes(BIG, one_percent(SMALL))
    # every module the same: 1% is 1%, whichever module it is on
    assert objective(saves_big, "module") == objective(saves_small, "module")
    assert objective(saves_big, "module") == pytest.approx(0.005)
    # bytes: the big module's 1% is ~45 times the small one's
    big, small = objective(saves_big, "bytes"), objective(saves_small, "bytes")
    assert big > 10 * small > 0
    # with the batch's own weights the objective is the total relative saving
    assert big == pytest.approx((BIG - one_percent(BIG)) / (BIG + SMALL))


def test_byte_weights_have_mean_one_and_skip_modules_without_bytes():
    w = byte_weights({"a": 1000, "b": 3000, "c": 0}, ["a", "b", "c"])
    assert w == {"a": 0.5, "b": 1.5}


def test_weighting_is_left_out_of_provenance_at_its_default():
    cfg = make_config(algo="ppo")
    assert "reward_weighting" not in to_dict(cfg) and "out_of_range" not in to_dict(cfg)
    assert "reward_weighting" not in cfg.identity()
    weighted = make_config(algo="ppo", reward_weighting="bytes", out_of_range="log")
    assert to_dict(weighted)["reward_weighting"] == "bytes"
    assert weighted.setup_identity()["out_of_range"] == "log"
    assert "reward_weighting" not in weighted.setup_identity()  # setups can be shared
    with pytest.raises(ConfigError):
        make_config(algo="bc", reward_weighting="bytes")
    with pytest.raises(ConfigError):
        make_config(algo="es", reward_weighting="lines")
    with pytest.raises(ConfigError):
        make_config(algo="es", warmstart="pretrained:inlining-oz", out_of_range="log")


@dataclass
class TwoModuleEnv:
    """Member 1 (theta + eps) saves 1% on the big module, member 2 (theta - eps) 1% on the
    small one; everything else compiles to -Oz."""

    baselines: dict[str, int] = field(default_factory=lambda: {"zstd/big": BIG,
                                                               "lz4/small": SMALL})
    scoring: ByteScoring = BYTES

    def sample_modules(self, rng: np.random.Generator, n: int) -> list[str]:
        return sorted(self.baselines)

    def run(self, members: list[InliningPolicy], modules: list[str]) -> list[Episode]:
        out = []
        for m in modules:
            for k in range(len(members)):
                base = self.baselines[m]
                wins = (k == 1 and m == "zstd/big") or (k == 2 and m == "lz4/small")
                out.append(Episode(m, k, base, one_percent(base) if wins else base, 5))
        return out


def es_step(weighting: str) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    cols = {"a": np.arange(100, dtype=np.int64), "b": np.arange(100, dtype=np.int64) % 7}
    vocab = build_vocab(cols)
    policy = InliningPolicy(vocab=vocab, params=init_mlp(vocab.input_dim, (4,),
                                                         np.random.default_rng(0)), hidden=(4,))
    es = EvolutionStrategies(ESConfig(population=1, learning_rate=0.1), policy, seed=3,
                             weighting=weighting)
    before = es.theta.copy()
    eps = np.random.default_rng(3).standard_normal((1, before.size))  # es' own first draw
    stats = es.iterate(TwoModuleEnv(), 1)  # type: ignore[arg-type]
    return stats, es.theta - before, eps[0]


def test_es_moves_towards_the_big_modules_saving_only_when_counting_bytes():
    stats, step, eps = es_step("default")  # ES counts bytes by default
    assert stats["es/grad_norm"] > 0 and float(step @ eps) > 0
    assert es_step("bytes")[1].tolist() == step.tolist()
    stats, step, _ = es_step("module")  # 1% == 1%: the two members tie, no step
    assert stats["es/grad_norm"] == 0.0 and not step.any()


def test_regalloc_cost_weighting_ranks_members_by_the_batchs_total_cost():
    from pymlgo.train.regalloc import CostScoring

    stock = {"vorbis/hot": 10_000.0, "lz4/cold": 100.0}
    # member 1 saves 2% on the hot module, member 2 halves the cold one's cost
    values = {"vorbis/hot": [10_000.0, 9_800.0, 10_000.0], "lz4/cold": [100.0, 100.0, 50.0]}
    common = sorted(stock)
    by_module, change = CostScoring().fitness(values, common, stock, "default")
    assert by_module[2] > by_module[1] > by_module[0] == 0.0  # a halving beats 2%
    assert change == 0.0
    total, _ = CostScoring().fitness(values, common, stock, "cost")
    assert total[1] > total[2] > total[0]  # 200 of cost beats 50, as held-out totals count
    assert total[1] == pytest.approx(200 / 10_100)


def test_cost_weighting_is_regalloc_es_only_and_bytes_inlining_only():
    assert make_config(algo="es", problem="regalloc-evict", warmstart="",
                       reward_weighting="cost").reward_weighting == "cost"
    for bad in ({"algo": "ppo", "problem": "regalloc-evict", "reward_weighting": "cost"},
                {"algo": "es", "problem": "regalloc-evict", "reward_weighting": "bytes"},
                {"algo": "es", "reward_weighting": "cost"}):
        with pytest.raises(ConfigError, match="reward_weighting"):
            make_config(warmstart="", **bad)
