"""The learned register-allocation priority policy: a small network maps the three features
LLVM's priority channel sends (`li_size`, `stage`, `weight`) to a log2 priority.

The allocator dequeues live ranges highest priority first, so only the order of the
priorities matters. The network's score is a log2 priority (`policies.priority_from_log2`:
clamped to [0, 31.99], then 2**score), which keeps float32's relative resolution over the
whole unsigned range. Inputs (`encode_rows`): log2(1 + li_size) / 16, the stage one-hot,
whether the weight is infinite (unspillable), and log2(1 + weight) / 8. The score is
`mlp(x) + skip . x`; at initialization the MLP's output layer is zero and the skip holds
the stock rule's coarse order (`policies.stage_size_score`: split ranges last, larger
first), so the untrained policy is that rule and training learns departures from it.

For ppo, the sampling policy draws the score from a Gaussian around the network's
(standard deviation `exp(log_std)` log2 steps). Numpy only: compile workers never import
torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pymlgo.policy.mlp import MLPParams, SkipMLP, init_mlp
from pymlgo.problems.inlining.policies import module_seed
from pymlgo.problems.regalloc.advice import Advisor
from pymlgo.problems.regalloc.policies import (
    LOG2_PRIORITY_MAX,
    PRIORITY_FEATURES,
    RS_SPLIT,
    SIZE_SLOPE,
    SPLIT_DEFERRAL,
    priority_from_log2,
)
from pymlgo.problems.regalloc.problem import POLICY_TAG

# 1.1: the first version with priority policies (1.0 readers refuse their inputs)
VERSION = f"{POLICY_TAG}-1.1"
NUM_STAGES = 7  # LiveRangeStage: New, Assign, Split, Split2, Spill, Memory, Done
SIZE_SCALE, WEIGHT_SCALE = 16.0, 8.0  # log2 of a large live range / of a large spill weight
INPUT_NAMES = (
    "log2(1+li_size)/16", *(f"stage=={k}" for k in range(NUM_STAGES)),
    "weight_is_infinite", "log2(1+weight)/8",
)  # fmt: skip
INPUT_DIM = len(INPUT_NAMES)
DEFAULT_HIDDEN = (8,)
DEFAULT_LOG_STD = math.log(0.5)  # ppo's exploration: half a log2 step (a factor of 1.41)
_EYE = np.eye(NUM_STAGES, dtype=np.float32)


def encode_rows(size: np.ndarray, stage: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """n decisions' features (each (n,) or (n, 1)) -> (n, INPUT_DIM) float32 inputs."""
    size = np.maximum(np.asarray(size, dtype=np.float64).reshape(-1), 0.0)
    stage = np.clip(np.asarray(stage, dtype=np.int64).reshape(-1), 0, NUM_STAGES - 1)
    weight = np.asarray(weight, dtype=np.float64).reshape(-1)
    finite = np.isfinite(weight)
    x = np.zeros((size.size, INPUT_DIM), dtype=np.float32)
    x[:, 0] = _log2_1p(size) / SIZE_SCALE
    x[:, 1 : 1 + NUM_STAGES] = _EYE[stage]
    x[:, -2] = ~finite
    x[:, -1] = _log2_1p(np.maximum(np.where(finite, weight, 0.0), 0.0)) / WEIGHT_SCALE
    return x


def _log2_1p(v: np.ndarray) -> np.ndarray:
    # libm's log2 per value: numpy's SIMD kernels differ per CPU in the last bit, and the
    # policy's answers (and the bytes training writes) must not depend on the machine
    return np.array([math.log2(1.0 + float(a)) for a in v], dtype=np.float64)


def encode(features: Mapping[str, np.ndarray]) -> np.ndarray:
    """The features of decisions (name -> (n,) or (n, 1); one decision: (1,)) -> inputs."""
    return encode_rows(features["li_size"], features["stage"], features["weight"])


@dataclass(frozen=True, eq=False)  # eq=False: holds arrays
class PriorityNetwork(SkipMLP):
    """log2 priority = mlp(x) + skip . x, for rows x of `encode`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mlp.input_dim != INPUT_DIM:
            raise ValueError(f"network takes {self.mlp.input_dim} inputs; the priority "
                             f"encoding has {INPUT_DIM}")


def init_network(rng: np.random.Generator,
                 hidden: Sequence[int] = DEFAULT_HIDDEN) -> PriorityNetwork:
    """Glorot hidden layers, a zero output layer, and the stage-size rule in the skip."""
    mlp = init_mlp(INPUT_DIM, hidden, rng)
    weights = (*mlp.weights[:-1], np.zeros_like(mlp.weights[-1]))
    skip = np.zeros(INPUT_DIM, dtype=np.float32)
    # SIZE_SLOPE * log2(1 + size) = SIZE_SLOPE * SIZE_SCALE * input 0
    skip[0] = SIZE_SLOPE * SIZE_SCALE
    skip[1 : 1 + NUM_STAGES] = SPLIT_DEFERRAL
    skip[1 + RS_SPLIT] = 0.0
    return PriorityNetwork(MLPParams(weights, mlp.biases), skip)


@dataclass(frozen=True, eq=False)
class PriorityPolicy:
    """Implements `problems.base.Policy` for the priority advisor: 2**score (greedy), or
    2**(score + exp(log_std) * N(0, 1)) with a per-(seed, module) generator (`sample`)."""

    network: PriorityNetwork
    log_std: float = DEFAULT_LOG_STD
    sample: bool = False
    seed: int = 0
    version: str = VERSION
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    name: str = "regalloc-priority-mlp"
    advisor: Advisor = "priority"
    required_features: tuple[str, ...] = PRIORITY_FEATURES

    @property
    def hidden(self) -> tuple[int, ...]:
        return self.network.mlp.hidden

    def scores(self, x: np.ndarray) -> np.ndarray:
        """(n, INPUT_DIM) encoded decisions -> (n,) float32 log2 priorities (unclamped)."""
        return self.network.scores(x)

    def for_module(self, module: str) -> Callable[[Mapping[str, np.ndarray]], float]:
        net = self.network
        if not self.sample:
            def greedy(features: Mapping[str, np.ndarray]) -> float:
                return priority_from_log2(float(net.scores(encode(features))[0]))

            return greedy
        rng = np.random.default_rng(module_seed(self.seed, module))
        std = math.exp(self.log_std)

        def draw(features: Mapping[str, np.ndarray]) -> float:
            score = float(net.scores(encode(features))[0]) + std * float(rng.standard_normal())
            return priority_from_log2(score)

        return draw

    def with_network(self, network: PriorityNetwork) -> PriorityPolicy:
        return dataclasses.replace(self, network=network)

    def flat(self) -> np.ndarray:
        """The network's parameters in one vector (what ES perturbs; not `log_std`, which
        only sampling uses)."""
        return self.network.flat()

    def with_flat(self, v: np.ndarray) -> PriorityPolicy:
        return self.with_network(self.network.with_flat(v))

    def sampling(self, seed: int) -> PriorityPolicy:
        return dataclasses.replace(self, sample=True, seed=seed)

    def greedy(self) -> PriorityPolicy:
        return dataclasses.replace(self, sample=False)


def log2_actions(advice: np.ndarray) -> np.ndarray:
    """The scores a sampling policy drew, from the priorities it sent (float32 keeps the
    log2 to ~1e-7; a score clamped at 0 or LOG2_PRIORITY_MAX comes back clamped)."""
    sent = np.asarray(advice, dtype=np.float64).reshape(-1)
    return np.clip(np.log2(np.maximum(sent, 1.0)), 0.0, LOG2_PRIORITY_MAX)
