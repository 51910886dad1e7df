"""Built-in inlining policies: default, never, always, random:P[:SEED]."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymlgo.problems.base import Decide

DEFAULT_FEATURE = "inlining_default"


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
        return f"random:{self.p:g}:{self.seed}"

    def for_module(self, module: str) -> Decide:
        rng = random.Random(module_seed(self.seed, module))
        p = self.p

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return int(rng.random() < p)

        return decide


def builtin_policy(spec: str, *, seed: int = 0) -> HeuristicPolicy | ConstantPolicy | RandomPolicy:
    """Parse a built-in policy name; ValueError with the valid names otherwise."""
    if spec == "default":
        return HeuristicPolicy()
    if spec == "never":
        return ConstantPolicy(0, name="never")
    if spec == "always":
        return ConstantPolicy(1, name="always")
    if spec.startswith("random:"):
        parts = spec.split(":")
        try:
            p = float(parts[1])
            s = int(parts[2]) if len(parts) > 2 else seed
        except (ValueError, IndexError):
            raise ValueError(f"bad random policy {spec!r}: expected random:P[:SEED]") from None
        if not 0.0 <= p <= 1.0 or len(parts) > 3:
            raise ValueError(f"bad random policy {spec!r}: P must be in [0, 1]")
        return RandomPolicy(p, s)
    raise ValueError(
        f"unknown inlining policy {spec!r}: use default, never, always, random:P[:SEED], "
        "pretrained:NAME or a saved policy directory"
    )
