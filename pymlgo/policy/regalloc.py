"""The learned eviction policy: one small network scores every column, masked softmax picks;
and the regalloc policy codec (`load_spec`, `save_policy`) for it and the learned priority
policy (`policy/priority.py`): one `policy.json` holding the network, versioned
`regalloc-1.x`, its `advisor` field saying which of the two it is.

As in MLGO's regalloc network, the same network is applied to each column (each
interfering register, the last column being the candidate itself, "evict nothing"), the
scores of columns with `mask == 0` are removed, and a softmax over the rest is the
distribution over which column to evict. Numpy only: compile workers never import torch.

Per-column inputs (`encode`): the 14 float features (LLVM divides each by its largest
value in the decision, so they are in [0, 1]; an infinite spill weight turns into NaN and
is flagged), their square roots (MLGO's `with_sqrt`), the three 0/1 flags, one-hot
stages, `progress` (broadcast), whether the column is the candidate, and three columns
from hand-written rules: the stock rule's pick (`heuristic_choice`), "lighter than the
candidate", and the simpler `lightest_choice` pick. The score
is `mlp(x) + skip . x`; at initialization the skip term puts a large weight on the stock
rule's pick, so the untrained policy behaves like it and training learns the deviations.

The minor version names the rules behind those three inputs (`rules`): up to 1.1 the first
rebuild of the stock rule (`heuristic_choice_1_0`, +24.6% cost on the demo corpus at -O2;
1.1 added priority policies), from 1.2 the allocation-order walk (`heuristic_choice`),
under new input names so that older readers refuse such a policy. A saved policy keeps its
version, so its inputs never change under it; new eviction policies are 1.2.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from pymlgo.policy.mlp import MLPParams, SkipMLP, init_mlp
from pymlgo.policy.priority import INPUT_NAMES as PRIORITY_INPUTS
from pymlgo.policy.priority import PriorityNetwork, PriorityPolicy
from pymlgo.policy.store import PRETRAINED_PREFIX, PolicyLoadError, pretrained_dir
from pymlgo.problems.base import Policy, Problem
from pymlgo.problems.inlining.policies import module_seed
from pymlgo.problems.regalloc.advice import ADVISORS, MASK_FEATURE, Advisor
from pymlgo.problems.regalloc.policies import (
    HEURISTIC_FEATURES,
    builtin_policy,
    heuristic_choice,
    heuristic_choice_1_0,
    heuristic_weights,
    heuristic_weights_1_0,
    lightest_choice,
)
from pymlgo.problems.regalloc.problem import POLICY_TAG, RegallocProblem
from pymlgo.toolchain.files import write_atomic

PROBLEM = POLICY_TAG
VERSION_MAJOR, VERSION_MINOR = 1, 2
CURRENT_VERSION = f"{PROBLEM}-{VERSION_MAJOR}.{VERSION_MINOR}"
WALK_MINOR = 2  # the first minor version whose rule inputs come from the walk
Weights = Callable[[Mapping[str, np.ndarray]], np.ndarray]
Choice = Callable[[Mapping[str, np.ndarray], np.ndarray], int]


def rules(minor: int) -> tuple[Weights, Choice]:
    """(spill weights, stock-rule pick) behind the rule inputs of version 1.`minor`."""
    if minor < WALK_MINOR:
        return heuristic_weights_1_0, heuristic_choice_1_0
    return heuristic_weights, heuristic_choice
POLICY_FILE = "policy.json"
POLICY_FORMAT = "pymlgo-regalloc-policy"

FLOAT_FEATURES = (
    "nr_urgent", "nr_broken_hints", "nr_rematerializable", "nr_defs_and_uses",
    "weighed_reads_by_max", "weighed_writes_by_max", "weighed_read_writes_by_max",
    "weighed_indvars_by_max", "hint_weights_by_max", "start_bb_freq_by_max",
    "end_bb_freq_by_max", "hottest_bb_freq_by_max", "liverange_size", "use_def_density",
)  # fmt: skip
FLAG_FEATURES = ("is_free", "is_hint", "is_local")
STAGE_FEATURES = ("max_stage", "min_stage")
NUM_STAGES = 7  # LiveRangeStage: New, Assign, Split, Split2, Spill, Memory, Done
PROGRESS = "progress"
REQUIRED_FEATURES = tuple(dict.fromkeys(
    (MASK_FEATURE, *FLOAT_FEATURES, *FLAG_FEATURES, *STAGE_FEATURES, PROGRESS,
     *HEURISTIC_FEATURES)))

INPUT_NAMES = (
    *FLOAT_FEATURES,
    *(f"sqrt({n})" for n in FLOAT_FEATURES),
    *FLAG_FEATURES,
    *(f"{n}=={k}" for n in STAGE_FEATURES for k in range(NUM_STAGES)),
    PROGRESS, "is_candidate", "non_finite", "walk_choice", "lighter_than_candidate(walk)",
    "lightest_choice(walk)",
)  # fmt: skip
RULE_INPUTS = 3  # the last inputs: the stock-rule pick, lighter than the candidate, lightest
INPUT_NAMES_1_0 = (*INPUT_NAMES[:-RULE_INPUTS], "heuristic_choice", "lighter_than_candidate",
                   "lightest_choice")
INPUT_DIM = len(INPUT_NAMES)
HEURISTIC_INPUT = INPUT_DIM - RULE_INPUTS


def input_names(minor: int) -> tuple[str, ...]:
    """The names a policy of version 1.`minor` saves its inputs under."""
    return INPUT_NAMES_1_0 if minor < WALK_MINOR else INPUT_NAMES
HEURISTIC_PRIOR = 2.0  # skip weight on the stock rule's pick at initialization
OUTPUT_INIT_SCALE = 0.1  # MLGO's logits_init_output_factor: small initial MLP scores
DEFAULT_HIDDEN = (16,)
_VERSION_RE = re.compile(r"(?P<problem>[a-z_]+)-(?P<major>\d+)\.(?P<minor>\d+)")


class RegallocPolicyError(PolicyLoadError):
    """A saved regalloc policy cannot be used; the message says why."""


def version_minor(version: str) -> int:
    """1 for "regalloc-1.1"; ValueError for a version this pymlgo cannot encode for."""
    m = _VERSION_RE.fullmatch(version)
    if not m or m["problem"] != PROBLEM or int(m["major"]) != VERSION_MAJOR or int(
            m["minor"]) > VERSION_MINOR:
        raise ValueError(f"version {version!r} is not readable (this pymlgo reads "
                         f"{PROBLEM}-{VERSION_MAJOR}.0 to {CURRENT_VERSION})")
    return int(m["minor"])


_EYE = np.eye(NUM_STAGES, dtype=np.float32)
_F = len(FLOAT_FEATURES)


def encode(features: Mapping[str, np.ndarray], minor: int = VERSION_MINOR) -> np.ndarray:
    """One decision's features (each [1, C] as the channel sends them; `progress` [1])
    -> (C, INPUT_DIM) float32 network inputs, one row per column, the rule inputs those of
    version 1.`minor`.

    Built column-major into one buffer: this runs once per eviction decision (tens of
    thousands per module), so it keeps to a few dozen numpy calls.
    """
    floats = np.concatenate([features[n] for n in FLOAT_FEATURES], axis=0)  # (F, C)
    cols = floats.shape[1]
    x = np.zeros((INPUT_DIM, cols), dtype=np.float32)
    finite = np.isfinite(floats)
    # LLVM divides by the decision's maximum, so finite values are already in [0, 1].
    np.copyto(x[:_F], floats)
    np.copyto(x[:_F], np.float32(1.0), where=~finite)
    np.sqrt(x[:_F], out=x[_F : 2 * _F])
    at = 2 * _F
    flags = np.concatenate([features[n] for n in FLAG_FEATURES], axis=0)
    np.minimum(flags, 1, out=x[at : at + len(FLAG_FEATURES)], casting="unsafe")
    at += len(FLAG_FEATURES)
    for name in STAGE_FEATURES:
        stage = np.minimum(features[name].reshape(-1), NUM_STAGES - 1)  # stages are >= 0
        x[at : at + NUM_STAGES] = _EYE[:, stage]
        at += NUM_STAGES
    progress = float(features[PROGRESS].reshape(-1)[0])
    x[at] = progress if math.isfinite(progress) else 0.0
    x[at + 1, -1] = 1.0  # is_candidate
    x[at + 2] = ~finite.all(axis=0)
    weights, choice = rules(minor)
    weight = weights(features)
    x[at + 3, choice(features, weight)] = 1.0
    x[at + 4] = weight < weight[-1]
    x[at + 5, lightest_choice(features, weight)] = 1.0
    return x.T


def masked_log_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log P(column) over the last axis, -inf where `mask != 1`."""
    valid = np.asarray(mask).reshape(logits.shape) == 1
    z = np.where(valid, logits, -np.inf)
    top = z.max(axis=-1, keepdims=True)
    shifted = z - top
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@dataclass(frozen=True, eq=False)  # eq=False: holds arrays
class EvictionNetwork(SkipMLP):
    """score(x) = mlp(x) + skip . x, for rows x of `encode`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mlp.input_dim != INPUT_DIM:
            raise ValueError(f"network takes {self.mlp.input_dim} inputs; the encoding has "
                             f"{INPUT_DIM}")


def init_network(rng: np.random.Generator,
                 hidden: Sequence[int] = DEFAULT_HIDDEN) -> EvictionNetwork:
    """Glorot MLP with a small output layer, and the skip weight on the stock rule's pick:
    the greedy policy starts as `heuristic`."""
    mlp = init_mlp(INPUT_DIM, hidden, rng)
    weights = (*mlp.weights[:-1], mlp.weights[-1] * OUTPUT_INIT_SCALE)
    skip = np.zeros(INPUT_DIM, dtype=np.float32)
    skip[HEURISTIC_INPUT] = HEURISTIC_PRIOR
    return EvictionNetwork(MLPParams(weights, mlp.biases), skip)


@dataclass(frozen=True, eq=False)
class EvictionPolicy:
    """Implements `problems.base.Policy` for the eviction advisor: the valid column with
    the highest score (greedy) or one drawn from the masked softmax (`sample`), with a
    per-(seed, module) generator."""

    network: EvictionNetwork
    sample: bool = False
    seed: int = 0
    version: str = CURRENT_VERSION
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    name: str = "regalloc-mlp"
    advisor: Advisor = "evict"
    required_features: tuple[str, ...] = REQUIRED_FEATURES

    @property
    def hidden(self) -> tuple[int, ...]:
        return self.network.mlp.hidden

    @property
    def minor(self) -> int:
        """The minor version: which rules its inputs come from (`rules`)."""
        return version_minor(self.version)

    def encode(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """`encode` with this policy's rules."""
        return encode(features, self.minor)

    def log_probs(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(..., C, INPUT_DIM) encoded decisions and their (..., C) masks -> log P."""
        return masked_log_softmax(self.network.scores(x), mask)

    def for_module(self, module: str) -> Callable[[Mapping[str, np.ndarray]], int]:
        net, minor = self.network, self.minor
        if not self.sample:
            def greedy(features: Mapping[str, np.ndarray]) -> int:
                valid = np.asarray(features[MASK_FEATURE]).reshape(-1) == 1
                s = np.where(valid, net.scores(encode(features, minor)), -np.inf)
                return int(np.argmax(s))

            return greedy
        rng = np.random.default_rng(module_seed(self.seed, module))

        def draw(features: Mapping[str, np.ndarray]) -> int:
            logp = masked_log_softmax(net.scores(encode(features, minor)),
                                      features[MASK_FEATURE])
            p = np.exp(logp.astype(np.float64))
            return int(rng.choice(p.size, p=p / p.sum()))

        return draw

    def with_network(self, network: EvictionNetwork) -> EvictionPolicy:
        return dataclasses.replace(self, network=network)

    def flat(self) -> np.ndarray:
        """Every parameter in one vector (what ES perturbs)."""
        return self.network.flat()

    def with_flat(self, v: np.ndarray) -> EvictionPolicy:
        return self.with_network(self.network.with_flat(v))

    def sampling(self, seed: int) -> EvictionPolicy:
        return dataclasses.replace(self, sample=True, seed=seed)

    def greedy(self) -> EvictionPolicy:
        return dataclasses.replace(self, sample=False)


def initial_policy(seed: int = 0, hidden: Sequence[int] = DEFAULT_HIDDEN) -> EvictionPolicy:
    return EvictionPolicy(init_network(np.random.default_rng(seed), hidden),
                          hyperparameters={"init_seed": seed, "hidden": list(hidden)})


# --- save / load ----------------------------------------------------------------------------


def _floats(a: np.ndarray) -> list[Any]:
    # float32 -> Python float is exact, and JSON keeps every digit: loading gives the same bits.
    return np.asarray(a, dtype=np.float32).astype(np.float64).tolist()  # type: ignore[no-any-return]


def policy_document(policy: EvictionPolicy | PriorityPolicy) -> dict[str, Any]:
    if isinstance(policy, PriorityPolicy):
        kind = "mlp + linear skip -> log2 priority; sampling: Gaussian, exp(log_std)"
        inputs: Sequence[str] = PRIORITY_INPUTS
        extra: dict[str, Any] = {"log_std": float(policy.log_std)}
    else:
        kind = "per-column mlp + linear skip, masked softmax over columns"
        inputs, extra = input_names(policy.minor), {}
    net = policy.network
    return {
        "format": POLICY_FORMAT,
        "version": policy.version,
        "problem": PROBLEM,
        "advisor": policy.advisor,
        "name": policy.name,
        "features": list(policy.required_features),
        "inputs": list(inputs),
        "network": {
            "kind": kind,
            "activation": "relu",
            "hidden": list(policy.hidden),
            "weights": [_floats(w) for w in net.mlp.weights],
            "biases": [_floats(b) for b in net.mlp.biases],
            "skip": _floats(net.skip),
            **extra,
        },
        "hyperparameters": dict(policy.hyperparameters),
    }


def save_policy(policy: EvictionPolicy | PriorityPolicy, directory: Path) -> None:
    """Write `directory/policy.json` (byte-deterministic: sorted keys, exact floats)."""
    try:
        text = json.dumps(policy_document(policy), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"policy hyperparameters must be plain JSON values: {exc}") from exc
    write_atomic(Path(directory) / POLICY_FILE, (text + "\n").encode())


def load_saved_policy(directory: Path) -> EvictionPolicy | PriorityPolicy:
    """The saved regalloc policy in `directory`, of whichever advisor it answers."""
    path = Path(directory) / POLICY_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise RegallocPolicyError(
            f"{directory}: not a policy directory (no {POLICY_FILE})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegallocPolicyError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != POLICY_FORMAT:
        raise RegallocPolicyError(f"{path}: not a {POLICY_FORMAT} file")
    advisor = doc.get("advisor", "evict")
    if advisor not in ADVISORS:
        raise RegallocPolicyError(f"{path}: unknown advisor {advisor!r} (this pymlgo reads "
                                  f"{', '.join(ADVISORS)})")
    try:
        minor = version_minor(str(doc.get("version")))
    except ValueError as exc:
        raise RegallocPolicyError(f"{path}: {exc}") from None
    inputs = PRIORITY_INPUTS if advisor == "priority" else input_names(minor)
    if doc.get("inputs") != list(inputs):
        raise RegallocPolicyError(f"{path}: the policy was trained on other inputs than this "
                                  "pymlgo encodes")
    try:
        net = doc["network"]
        mlp = MLPParams(tuple(np.array(w, dtype=np.float32) for w in net["weights"]),
                        tuple(np.array(b, dtype=np.float32) for b in net["biases"]))
        skip = np.array(net["skip"], dtype=np.float32)
        common: dict[str, Any] = {"version": str(doc["version"]),
                                  "hyperparameters": doc.get("hyperparameters") or {},
                                  "required_features": tuple(doc["features"])}
        if advisor == "priority":
            log_std = float(net["log_std"])
            if not math.isfinite(log_std):
                raise ValueError(f"log_std is {log_std}")
            return PriorityPolicy(PriorityNetwork(mlp, skip), log_std=log_std,
                                  name=str(doc.get("name", "regalloc-priority-mlp")), **common)
        return EvictionPolicy(EvictionNetwork(mlp, skip),
                              name=str(doc.get("name", "regalloc-mlp")), **common)
    except (KeyError, TypeError, ValueError) as exc:
        raise RegallocPolicyError(f"{path}: malformed policy ({exc})") from exc


_P = TypeVar("_P", "EvictionPolicy", "PriorityPolicy")


def load_eviction_policy(directory: Path) -> EvictionPolicy:
    return _load_advisor(directory, EvictionPolicy, "an eviction")


def load_priority_policy(directory: Path) -> PriorityPolicy:
    return _load_advisor(directory, PriorityPolicy, "a priority")


def _load_advisor(directory: Path, kind: type[_P], what: str) -> _P:
    policy = load_saved_policy(directory)
    if not isinstance(policy, kind):
        raise RegallocPolicyError(f"{directory}: a {policy.advisor} policy, not {what} policy")
    return policy


def load_spec(spec: str, *, seed: int = 0, problem: Problem | None = None) -> Policy:
    """A built-in regalloc policy name, `pretrained:NAME` (a shipped policy of the regalloc
    format) or a saved policy directory (named as `spec`): the
    regalloc problems' policy codec (`Problem.policy_codec`). For `regalloc-priority`,
    `default`, `random[:SEED]` and `size` name its priority policies."""
    advisor = problem.advisor if isinstance(problem, RegallocProblem) else None
    if advisor == "priority" and spec.split(":")[0] in ("default", "random", "size",
                                                          "stage-size"):
        spec = f"priority:{spec}"
    try:
        policy = builtin_policy(spec, seed=seed)
    except ValueError as exc:
        if spec.startswith(PRETRAINED_PREFIX):
            directory = pretrained_dir(spec, POLICY_FORMAT)
        elif Path(spec).is_dir():
            directory = Path(spec)
        else:
            raise RegallocPolicyError(f"{exc} (and no directory {spec!r} exists)") from None
        policy = dataclasses.replace(load_saved_policy(directory), name=spec, seed=seed)
    answers = getattr(policy, "advisor", "evict")
    if advisor is not None and answers != advisor:
        assert problem is not None
        raise RegallocPolicyError(f"{spec!r} answers the {answers} advisor: not a policy of "
                                  f"--problem {problem.name}")
    return policy
