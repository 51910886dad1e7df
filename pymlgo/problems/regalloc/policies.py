"""Built-in register-allocation policies.

Eviction: `default` (the stock advisor, no channel), `random[:SEED]` (uniform over the
valid columns), `no-evict` (always "evict nothing" when allowed), `heuristic` (the
stock rule rebuilt from the channel's features: walk the allocation order for the
cheapest interference lighter than the candidate). Priority: `priority:default`,
`priority:random[:SEED]`, `priority:size` (larger live ranges first),
`priority:stage-size` (the stock rule's coarse order, from what the channel tells: split
ranges last, larger ranges first). A learned policy of either advisor is a saved policy
directory (`pymlgo.policy.regalloc`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymlgo.problems.base import Decide, Policy
from pymlgo.problems.inlining.policies import module_seed
from pymlgo.problems.regalloc.advice import MASK_FEATURE, Advisor, fallback_column

USE_FEATURES = ("weighed_reads_by_max", "weighed_writes_by_max", "weighed_read_writes_by_max")
HEURISTIC_FEATURES = (MASK_FEATURE, "nr_urgent", "nr_broken_hints", "use_def_density",
                      "is_hint", "is_local", "max_stage", *USE_FEATURES, "liverange_size")
# heuristic_weights' size term, in units of the decision's longest range: LLVM divides by
# size + 25 instructions; picked on the demo corpus and the training packages (stop 43)
SIZE_OFFSET = 1.0
_RS_SPILL = 4  # LiveRangeStage: New, Assign, Split, Split2, Spill, Memory, Done
RS_SPLIT = 2
PRIORITY_FEATURES = ("li_size", "stage", "weight")  # everything LLVM 22's priority channel sends
# Priorities are chosen on a log2 scale: LLVM casts the float32 to an unsigned, so [0, 32)
# covers every useful value, and float32 keeps the same relative resolution across it (a
# linear score near 2**31 would have steps of 256 and tie ranges the stock rule orders).
LOG2_PRIORITY_MAX = 31.99
SPLIT_DEFERRAL = 16.0  # log2 steps every range not yet split gets over split ones
SIZE_SLOPE = 0.5  # log2 priority per doubling of the live range: 32 bits hold sizes < 2**32


def heuristic_weights(features: Mapping[str, np.ndarray],
                      size_offset: float = SIZE_OFFSET) -> np.ndarray:
    """Each column's spill weight as far as the channel tells: `use_def_density` (the
    largest weight of the column's live ranges, divided by the decision's maximum), inf
    where it is not finite (inf, or NaN: LLVM divided inf by inf).

    One infinite weight turns every finite one into 0 (x / inf). LLVM's weight is the
    frequency-weighted count of defs and uses over the range's size plus a constant, so
    those columns are estimated as (reads + writes + read-writes, each frequency weighted
    and scaled to the decision's maximum) / (size scaled likewise + `size_offset`): an
    ordering, not the weights.
    """
    weight = np.asarray(features["use_def_density"], dtype=np.float64).reshape(-1)
    finite = np.isfinite(weight)
    if finite.all():
        return weight
    uses = sum(np.asarray(features[n], dtype=np.float64).reshape(-1) for n in USE_FEATURES)
    size = np.asarray(features["liverange_size"], dtype=np.float64).reshape(-1)
    return np.where(finite, uses / (size + size_offset), np.inf)


def heuristic_choice(features: Mapping[str, np.ndarray],
                     weight: np.ndarray | None = None) -> int:
    """The stock eviction rule (LLVM's `DefaultEvictionAdvisor::tryFindEvictionCandidate`),
    rebuilt from the channel's features; the columns are the allocation order.

    Walk the valid columns in order; a column can be evicted if its interference is
    lighter than the candidate (a candidate that must find a register, being unspillable,
    evicts any finite weight), and it becomes the pick if its cost is strictly below the
    pick so far: cost = (cascade-breaking urgent evictions, broken hints, largest weight),
    as LLVM charges 10 broken hints per urgent eviction. Once a pick exists, columns with
    local interference are passed over; a hint column that becomes the pick ends the walk.
    No pick: "evict nothing" (or, when the candidate must be placed, the first valid
    column). `weight`: `heuristic_weights(features)`, if already computed.

    Approximate where the channel does not tell: weights next to an infinite one are
    estimated (`heuristic_weights`), and the allocator's cheaper-register search (which
    also refuses any broken hint) looks like an ordinary decision. On the demo corpus at
    -O2 it ties the stock advisor's cost on half the modules.
    """
    mask = features[MASK_FEATURE].reshape(-1)
    last = mask.size - 1
    must_evict = mask[last] != 1
    if weight is None:
        weight = heuristic_weights(features)
    limit = np.inf if must_evict else weight[last]
    # strict: an unspillable candidate evicts finite weights only
    evictable = (mask[:last] == 1) & (weight[:last] < limit)
    cost = np.stack([features["nr_urgent"].reshape(-1)[:last],
                     features["nr_broken_hints"].reshape(-1)[:last], weight[:last]])
    local = features["is_local"].reshape(-1)[:last] != 0
    hint = features["is_hint"].reshape(-1)[:last] != 0
    pick = -1
    for col in np.flatnonzero(evictable):
        if pick >= 0 and (local[col] or not tuple(cost[:, col]) < tuple(cost[:, pick])):
            continue
        pick = int(col)
        if hint[col]:
            break
    if pick >= 0:
        return pick
    return last if not must_evict else fallback_column(mask)


def heuristic_weights_1_0(features: Mapping[str, np.ndarray]) -> np.ndarray:
    """`heuristic_weights` of regalloc-1.0 networks' inputs (kept so a saved 1.0 policy
    computes what it was trained on): finite weights next to an infinite one estimated as
    frequency-weighted uses per size, the size offset all but 0."""
    return heuristic_weights(features, size_offset=1e-3)


def heuristic_choice_1_0(features: Mapping[str, np.ndarray],
                         weight: np.ndarray | None = None) -> int:
    """The stock rule as regalloc-1.0 networks see it (kept for them): a hint column whose
    interference can still be split and breaks no hint is taken at once, whatever its
    weight (the rule of the allocator's hint check, which the channel never asks); else
    the cheapest lighter-than-candidate column by (broken hints, weight), local
    interference passed over after the first. Off by +24.6% total cost on the demo corpus
    at -O2, where `heuristic_choice` is within a few percent."""
    mask = features[MASK_FEATURE].reshape(-1)
    last = mask.size - 1
    must_evict = mask[last] != 1
    valid = mask[:last] == 1
    stage = features["max_stage"].reshape(-1)[:last]
    hints = features["nr_broken_hints"].reshape(-1)[:last]
    take_hint = valid & (features["is_hint"].reshape(-1)[:last] != 0) & (hints == 0) & (
        stage < _RS_SPILL)
    if take_hint.any():  # the walk stops at the first such hint
        return int(np.argmax(take_hint))
    if weight is None:
        weight = heuristic_weights_1_0(features)
    eligible = valid if must_evict else valid & (weight[:last] < weight[last])
    if not eligible.any():
        return last if not must_evict else fallback_column(mask)
    first = int(np.argmax(eligible))
    # After the first eligible register, local interference is left alone.
    eligible &= features["is_local"].reshape(-1)[:last] == 0
    eligible[first] = True
    cand = np.flatnonzero(eligible)
    # Fewest broken hints, then lowest weight; ties go to the earliest in allocation order.
    return int(cand[np.lexsort((cand, weight[cand], hints[cand]))[0]])


def lightest_choice(features: Mapping[str, np.ndarray], weight: np.ndarray) -> int:
    """A simpler rule than `heuristic_choice`: the valid register whose interference is
    cheapest by (broken hints, spill weight), if lighter than the candidate, else "evict
    nothing" (when allowed). Better than the stock rule on some modules, worse on others:
    the learned policy gets both as inputs."""
    mask = features[MASK_FEATURE].reshape(-1)
    last = mask.size - 1
    valid = mask[:last] == 1
    if mask[last] == 1:
        valid &= weight[:last] < weight[last]
    if not valid.any():
        return fallback_column(mask)
    cand = np.flatnonzero(valid)
    hints = features["nr_broken_hints"].reshape(-1)
    return int(cand[np.lexsort((cand, weight[cand], hints[cand]))[0]])


@dataclass(frozen=True)
class StockPolicy:
    """LLVM's own advisor: the compile runs without a channel (`compile.is_stock`)."""

    advisor: Advisor = "evict"
    name: str = "default"
    stock: bool = True
    required_features: tuple[str, ...] = ()

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> int:
            raise RuntimeError("the stock advisor is never asked over the channel")

        return decide


@dataclass(frozen=True)
class RandomEvictionPolicy:
    """Evict a uniformly chosen valid column (mask == 1); seeded per (seed, module)."""

    seed: int = 0
    advisor: Advisor = "evict"
    required_features: tuple[str, ...] = (MASK_FEATURE,)

    @property
    def name(self) -> str:
        return f"random:{self.seed}"

    def for_module(self, module: str) -> Decide:
        rng = random.Random(module_seed(self.seed, module))

        def decide(features: Mapping[str, np.ndarray]) -> int:
            valid = np.flatnonzero(features[MASK_FEATURE].reshape(-1) == 1)
            return int(valid[rng.randrange(len(valid))])

        return decide


@dataclass(frozen=True)
class NoEvictionPolicy:
    """Never evict when "evict nothing" is allowed (the candidate is split or spilled)."""

    advisor: Advisor = "evict"
    name: str = "no-evict"
    required_features: tuple[str, ...] = (MASK_FEATURE,)

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> int:
            return fallback_column(features[MASK_FEATURE])

        return decide


@dataclass(frozen=True)
class HeuristicEvictionPolicy:
    """The stock advisor's rule (`heuristic_choice`), from the channel's features."""

    advisor: Advisor = "evict"
    name: str = "heuristic"
    required_features: tuple[str, ...] = HEURISTIC_FEATURES

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> int:
            return heuristic_choice(features)

        return decide


@dataclass(frozen=True)
class RandomPriorityPolicy:
    """A uniformly random priority in [0, 2**31): a stress test for the priority path."""

    seed: int = 0
    advisor: Advisor = "priority"
    required_features: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"priority:random:{self.seed}"

    def for_module(self, module: str) -> Decide:
        rng = random.Random(module_seed(self.seed, module))

        def decide(features: Mapping[str, np.ndarray]) -> float:
            return float(rng.randrange(2**31))

        return decide


@dataclass(frozen=True)
class SizePriorityPolicy:
    """Priority = live-range size (`li_size`): the largest live ranges are allocated first."""

    advisor: Advisor = "priority"
    name: str = "priority:size"
    required_features: tuple[str, ...] = ("li_size",)

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> float:
            return float(features["li_size"].reshape(-1)[0])

        return decide


def priority_from_log2(score: float) -> float:
    """The priority for a log2-scale `score`, clamped to [1, 2**LOG2_PRIORITY_MAX] (a
    float32 LLVM's cast keeps exactly; lower scores all mean "last")."""
    return 2.0 ** min(max(float(score), 0.0), LOG2_PRIORITY_MAX)


def stage_size_score(size: float, stage: int) -> float:
    """log2 priority of the stock rule's coarse order: ranges split already (stage
    RS_Split) after all others, larger ranges first within each group. The stock advisor
    also orders by register class, globalness and hints, which the channel does not send."""
    return SPLIT_DEFERRAL * (stage != RS_SPLIT) + SIZE_SLOPE * math.log2(1.0 + max(size, 0.0))


@dataclass(frozen=True)
class StageSizePriorityPolicy:
    """`stage_size_score` as priorities: the rule a learned priority policy starts from."""

    advisor: Advisor = "priority"
    name: str = "priority:stage-size"
    required_features: tuple[str, ...] = ("li_size", "stage")

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> float:
            return priority_from_log2(stage_size_score(
                float(features["li_size"].reshape(-1)[0]),
                int(features["stage"].reshape(-1)[0])))

        return decide


BUILTIN_NAMES = ("default", "random[:SEED]", "no-evict", "heuristic", "priority:default",
                 "priority:random[:SEED]", "priority:size", "priority:stage-size")


def builtin_policy(spec: str, *, seed: int = 0) -> Policy:
    """Parse a built-in regalloc policy name; ValueError listing the valid names."""
    parts = spec.split(":")
    try:
        if spec == "default":
            return StockPolicy()
        if spec == "priority:default":
            return StockPolicy(advisor="priority", name="priority:default")
        if spec == "no-evict":
            return NoEvictionPolicy()
        if spec == "heuristic":
            return HeuristicEvictionPolicy()
        if spec == "priority:size":
            return SizePriorityPolicy()
        if spec == "priority:stage-size":
            return StageSizePriorityPolicy()
        if parts[0] == "random" and len(parts) <= 2:
            return RandomEvictionPolicy(int(parts[1]) if len(parts) == 2 else seed)
        if parts[:2] == ["priority", "random"] and len(parts) <= 3:
            return RandomPriorityPolicy(int(parts[2]) if len(parts) == 3 else seed)
    except ValueError:
        pass
    raise ValueError(f"unknown regalloc policy {spec!r}: use {', '.join(BUILTIN_NAMES)} "
                     "or a saved regalloc policy directory")
