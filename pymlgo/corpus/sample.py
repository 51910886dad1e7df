"""Seeded sampling of modules for training batches."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

import numpy as np

from pymlgo.corpus.format import package_of

T = TypeVar("T")
Rng = np.random.Generator | random.Random | int


def _permutation(n: int, rng: np.random.Generator | random.Random) -> list[int]:
    if isinstance(rng, random.Random):
        order = list(range(n))
        rng.shuffle(order)
        return order
    return [int(i) for i in rng.permutation(n)]


def _as_rng(rng: Rng) -> np.random.Generator | random.Random:
    return np.random.default_rng(rng) if isinstance(rng, int) else rng


def sample(modules: Sequence[T], k: int, rng: Rng) -> list[T]:
    """`k` modules drawn without replacement; past `len(modules)`, further rounds over a
    fresh shuffle, so every module is used as evenly as possible. Same rng state, same draw.

    `rng` is a numpy Generator, a random.Random, or an int seed.
    """
    if k < 0:
        raise ValueError(f"cannot sample {k} modules")
    if k and not modules:
        raise ValueError("cannot sample from an empty module list")
    gen = _as_rng(rng)
    out: list[T] = []
    while len(out) < k:
        order = _permutation(len(modules), gen)
        out.extend(modules[i] for i in order[: k - len(out)])
    return out


def sample_uniformly(names: Sequence[str], k: int, rng: np.random.Generator) -> list[str]:
    """`k` distinct names drawn uniformly (all of them if there are fewer), sorted."""
    if k >= len(names):
        return list(names)
    picked = rng.choice(len(names), size=k, replace=False)
    return sorted(names[i] for i in picked)


def sample_by_package(names: Sequence[str], k: int, rng: np.random.Generator) -> list[str]:
    """`k` distinct module names (all of them if there are fewer), sorted, drawn in rounds
    that take one module from each package (the first path component) in a random order:
    a package with a thousand modules gets no more of a batch than one with ten, so one
    large project cannot dominate what a policy learns from."""
    if k < 0:
        raise ValueError(f"cannot sample {k} modules")
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        groups.setdefault(package_of(name), []).append(name)
    packages = sorted(groups)
    picked: list[str] = []
    while len(picked) < min(k, len(names)):
        for i in rng.permutation(len(packages)):
            pool = groups[packages[int(i)]]
            if pool:
                picked.append(pool.pop(int(rng.integers(len(pool)))))
                if len(picked) == k:
                    break
    return sorted(picked)


def sample_by_weight(weights: Mapping[str, float], k: int,
                     rng: np.random.Generator) -> list[str]:
    """`k` distinct names (all of them if there are fewer), sorted, each drawn with a chance
    that grows with its weight: successive draws without replacement, each in proportion to
    the weights left (Efraimidis and Spirakis' keys, `u ** (1 / w)`). Where a total is what
    counts and a few names hold most of it, a batch then goes where that total is. Names of
    weight 0 come last."""
    if k < 0:
        raise ValueError(f"cannot sample {k} modules")
    names = sorted(weights)
    w = np.array([weights[n] for n in names], dtype=np.float64)
    if np.any(~np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0")
    if k >= len(names):
        return names
    u = rng.random(len(names))
    # log(u) / w, the log of the key: larger is drawn first; weight 0 never before a weight > 0
    keys = np.full(len(names), -np.inf)
    drawable = w > 0
    with np.errstate(divide="ignore"):  # u == 0: key -inf, last among the drawable
        keys[drawable] = np.log(u[drawable]) / w[drawable]
    order = np.argsort(-keys, kind="stable")  # ties: the earlier name first
    return sorted(names[int(i)] for i in order[:k])


class Sampler(Generic[T]):
    """Endless batches over the modules in shuffled epochs: each module is seen once per
    epoch before any is seen again (batches may span an epoch boundary)."""

    def __init__(self, modules: Sequence[T], seed: int | np.random.Generator | random.Random):
        if not modules:
            raise ValueError("cannot sample from an empty module list")
        self._modules = list(modules)
        self._rng = _as_rng(seed)
        self._queue: list[T] = []
        self.epoch = 0

    def batch(self, k: int) -> list[T]:
        out: list[T] = []
        while len(out) < k:
            if not self._queue:
                self._queue = [self._modules[i] for i in _permutation(len(self._modules),
                                                                      self._rng)]
                self.epoch += 1
            take = min(k - len(out), len(self._queue))
            out.extend(self._queue[:take])
            del self._queue[:take]
        return out
