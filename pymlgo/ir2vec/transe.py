"""TransE (Bordes et al., 2013) in numpy: entity and relation vectors such that h + r ~ t for
observed triplets, learned by a margin loss against triplets with a corrupted head or tail.

Deterministic for a seed: one numpy Generator drives initialization, sampling and
corruption; arithmetic is float64 in a fixed order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pymlgo.ir2vec.triplets import Triplet


@dataclass(frozen=True)
class TransEConfig:
    dim: int = 64
    steps: int = 2000
    batch: int = 512
    learning_rate: float = 2.0
    margin: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dim < 1 or self.steps < 0 or self.batch < 1:
            raise ValueError(f"TransE needs dim >= 1, steps >= 0, batch >= 1: {self}")
        if not self.learning_rate > 0 or not self.margin > 0:
            raise ValueError(f"TransE needs a positive learning rate and margin: {self}")


@dataclass(frozen=True)
class TransEResult:
    entities: dict[str, np.ndarray]
    relations: dict[str, np.ndarray]
    losses: tuple[float, ...]  # mean margin loss per tenth of the training steps


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def train_transe(counts: Mapping[Triplet, int], entities: Sequence[str],
                 relations: Sequence[str], config: TransEConfig) -> TransEResult:
    """Vectors for `entities` (all of them, seen in `counts` or not) and `relations`.

    Triplets are sampled with probability proportional to their counts; a negative replaces
    the head or the tail (a fair coin) by an entity drawn uniformly. Entity vectors are kept
    at unit length, as TransE prescribes, so the loss cannot shrink them away.
    """
    ent = {e: i for i, e in enumerate(entities)}
    rel = {r: i for i, r in enumerate(relations)}
    unknown = sorted({x for h, r, t in counts for x in (h, t) if x not in ent}
                     | {r for _, r, _ in counts if r not in rel})
    if unknown:
        raise ValueError(f"triplets name unknown entities or relations: {', '.join(unknown[:5])}")
    rng = np.random.default_rng(config.seed)
    bound = 6.0 / np.sqrt(config.dim)
    E = _unit_rows(rng.uniform(-bound, bound, (len(entities), config.dim)))
    R = _unit_rows(rng.uniform(-bound, bound, (len(relations), config.dim)))
    keys = sorted(counts)  # a fixed order: the Counter's insertion order is the corpus's
    if not keys or config.steps == 0:
        return _result(entities, relations, E, R, ())
    H = np.array([ent[h] for h, _, _ in keys])
    Rel = np.array([rel[r] for _, r, _ in keys])
    T = np.array([ent[t] for _, _, t in keys])
    p = np.array([counts[k] for k in keys], dtype=np.float64)
    p /= p.sum()
    lr, margin = config.learning_rate, config.margin
    losses, window = [], []
    report_every = max(1, config.steps // 10)
    for step in range(config.steps):
        pick = rng.choice(len(keys), size=config.batch, p=p)
        h, r, t = H[pick], Rel[pick], T[pick]
        corrupt_head = rng.random(config.batch) < 0.5
        other = rng.integers(0, len(entities), config.batch)
        nh, nt = np.where(corrupt_head, other, h), np.where(corrupt_head, t, other)
        d_pos = E[h] + R[r] - E[t]
        d_neg = E[nh] + R[r] - E[nt]
        n_pos = np.linalg.norm(d_pos, axis=1)
        n_neg = np.linalg.norm(d_neg, axis=1)
        loss = np.maximum(0.0, margin + n_pos - n_neg)
        window.append(float(loss.mean()))
        active = loss > 0
        if active.any():
            g_pos = d_pos[active] / np.maximum(n_pos[active], 1e-12)[:, None]
            g_neg = d_neg[active] / np.maximum(n_neg[active], 1e-12)[:, None]
            gE = np.zeros_like(E)
            gR = np.zeros_like(R)
            np.add.at(gE, h[active], g_pos)
            np.add.at(gE, t[active], -g_pos)
            np.add.at(gE, nh[active], -g_neg)
            np.add.at(gE, nt[active], g_neg)
            np.add.at(gR, r[active], g_pos - g_neg)
            E -= lr * gE / config.batch
            R -= lr * gR / config.batch
            E = _unit_rows(E)
        if (step + 1) % report_every == 0:
            losses.append(float(np.mean(window)))
            window = []
    return _result(entities, relations, E, R, tuple(losses))


def _result(entities: Sequence[str], relations: Sequence[str], E: np.ndarray, R: np.ndarray,
            losses: tuple[float, ...]) -> TransEResult:
    return TransEResult({e: E[i].copy() for i, e in enumerate(entities)},
                        {r: R[i].copy() for i, r in enumerate(relations)}, losses)
