"""Built-in inlining policies: default, never, always, random:P[:SEED],
shift:DOWN[:UP[:USERS[:MAX]]] (names in `builtin_specs`)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymlgo.problems.base import Decide, Policy
from pymlgo.problems.inlining.builtin_specs import (
    DEFAULT_FEATURE,
    RANDOM_PREFIX,
    SHIFT_PREFIX,
    USAGE,
    builtin,
)


def module_seed(seed: int, module: str) -> int:
    """A per-module seed independent of worker and order (Python's hash() is salted)."""
    digest = hashlib.sha256(f"{seed}\0{module}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass(frozen=True)
class HeuristicPolicy:
    """Answer with clang's own decision, sent as the last feature `inlining_default`."""

    name: str = "default"
    required_features: tuple[str, ...] = (DEFAULT_FEATURE,)

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> int:
            return int(features[DEFAULT_FEATURE].reshape(-1)[0] != 0)

        return decide


def for_language(policy: Policy, language: str | None) -> Policy:
    """`policy` as it decides a module in `language` ("c", "c++"; None: another): a policy
    that answers only some languages (`for_language`, e.g. a learned one with `languages`)
    gives clang's own decisions for the others; every other policy is itself."""
    narrow = getattr(policy, "for_language", None)
    return policy if narrow is None else narrow(language)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ConstantPolicy:
    """Always inline (1) or never inline (0), whatever the call site."""

    value: int
    name: str = "never"
    required_features: tuple[str, ...] = ()

    def for_module(self, module: str) -> Decide:
        value = self.value

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return value

        return decide


@dataclass(frozen=True)
class RandomPolicy:
    """Inline with probability `p`; the stream of choices is fixed by (seed, module)."""

    p: float
    seed: int = 0
    required_features: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{RANDOM_PREFIX}{self.p:g}:{self.seed}"

    def for_module(self, module: str) -> Decide:
        rng = random.Random(module_seed(self.seed, module))
        p = self.p

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return int(rng.random() < p)

        return decide


# What a shift policy reads: clang's decision, and the two numbers it compares.
_SHIFT_FEATURES = (DEFAULT_FEATURE, "cost_estimate", "threshold", "callee_users")
ANY_USERS = 2**62  # shift's USERS when not given: no limit on the callee's users
ANY_MARGIN = 2**62  # shift's MAX when not given: refused call sites taken however far below


@dataclass(frozen=True)
class ShiftPolicy:
    """Clang's decision with the inline threshold moved, per call site: `margin` is
    `threshold - cost_estimate` (> 0 where the cost model favours inlining).

    - `down`: refuse a call site clang takes when its margin is below `down`;
    - `up`: take a call site clang refuses when its margin is above `-up` and its callee has
      at most `users` users;
    - `max`: ... and its margin is at most `max`. Clang also refuses a few call sites whose
      estimated cost is far below its threshold (margins of 80 to 300 and more; its real
      cost counts what the estimate leaves out, e.g. the loop penalty of `minsize`
      callers), and taking those can grow an object by half (measured in the README);
      `max` 0 takes only the ones the estimate rates at or over the threshold. Not given:
      no limit.

    `shift:0:0` is clang's own decision. Why it exists: on C++ test code, the inlines clang
    makes exactly at its threshold (margin 0) grow the object (measured in the README).
    """

    down: int = 0
    up: int = 0
    users: int = ANY_USERS
    max: int = ANY_MARGIN
    required_features: tuple[str, ...] = _SHIFT_FEATURES

    @property
    def name(self) -> str:
        users = "" if self.users == ANY_USERS and self.max == ANY_MARGIN else f":{self.users}"
        most = "" if self.max == ANY_MARGIN else f":{self.max}"
        return f"{SHIFT_PREFIX}{self.down}:{self.up}{users}{most}"

    def flips(self, features: Mapping[str, np.ndarray]) -> bool:
        """This rule departs from clang's decision at this call site."""
        margin = _scalar(features, "threshold") - _scalar(features, "cost_estimate")
        if _scalar(features, DEFAULT_FEATURE):
            return self.down > 0 and margin < self.down
        return (self.up > 0 and -self.up < margin <= self.max
                and _scalar(features, "callee_users") <= self.users)

    def for_module(self, module: str) -> Decide:
        flips = self.flips

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return _scalar(features, DEFAULT_FEATURE) ^ int(flips(features))

        return decide


def _scalar(features: Mapping[str, np.ndarray], name: str) -> int:
    return int(features[name].reshape(-1)[0])


def shift_policy(spec: str) -> ShiftPolicy:
    """`shift:DOWN[:UP[:USERS[:MAX]]]` -> its rule; ValueError, with the grammar, otherwise."""
    if not spec.startswith(SHIFT_PREFIX):
        raise ValueError(f"bad shift policy {spec!r}: expected shift:DOWN[:UP[:USERS[:MAX]]]")
    parts = spec.removeprefix(SHIFT_PREFIX).split(":")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 4 or any(v < 0 for v in values):
        raise ValueError(f"bad shift policy {spec!r}: expected shift:DOWN[:UP[:USERS[:MAX]]], "
                         "each a whole number >= 0 (e.g. shift:2 or shift:2:30:3:0)")
    down, up, *rest = [*values, 0] if len(values) == 1 else values
    return ShiftPolicy(down, up, *rest)


def builtin_policy(
    spec: str, *, seed: int = 0
) -> HeuristicPolicy | ConstantPolicy | RandomPolicy | ShiftPolicy:
    """Parse a built-in policy name; ValueError with the valid names otherwise."""
    kind = builtin(spec)
    if kind is None:
        raise ValueError(
            f"unknown inlining policy {spec!r}: use {USAGE}, "
            "pretrained:NAME or a saved policy directory"
        )
    if kind.key == "default":
        return HeuristicPolicy()
    if kind.key == "never":
        return ConstantPolicy(0, name="never")
    if kind.key == "always":
        return ConstantPolicy(1, name="always")
    if kind.key == RANDOM_PREFIX:
        return _random_policy(spec, seed)
    if kind.key == SHIFT_PREFIX:
        return shift_policy(spec)
    raise AssertionError(f"built-in {kind.key!r} has no policy here")  # a test builds each


def _random_policy(spec: str, seed: int) -> RandomPolicy:
    parts = spec.split(":")
    try:
        p = float(parts[1])
        s = int(parts[2]) if len(parts) > 2 else seed
    except (ValueError, IndexError):
        raise ValueError(f"bad random policy {spec!r}: expected random:P[:SEED]") from None
    if not 0.0 <= p <= 1.0 or len(parts) > 3:
        raise ValueError(f"bad random policy {spec!r}: P must be in [0, 1]")
    return RandomPolicy(p, s)
