"""Quantile vocabulary: maps raw feature values to [0, 1] the way MLGO normalizes them.

A feature value `x` becomes `bucket(x) / k`, where the feature's `k` boundaries are its
distinct quantiles over the training traces and `bucket(x)` counts the boundaries `<= x`
(TensorFlow's `Bucketize`, i.e. `np.searchsorted(..., side="right")`). With `with_square`
the squares of those values follow as extra inputs (MLGO feeds `[x, x*x]`), so the input
layout is `[v_0 .. v_{f-1}, v_0^2 .. v_{f-1}^2]`.

Repeated quantiles (common: most features are small counts, many of them zero) are stored
once, so every distinct boundary gets an equal share of [0, 1]. A constant feature has a
single boundary: its training value maps to 1.0, anything smaller to 0.0. A feature with
no data at all has no boundaries and always maps to 0.0.

Values beyond the last boundary (`tail`). The last boundary is the largest value in the
traces the vocab was built from, so a module bigger than any training module (an
amalgamation's node_count, edge_count, callee/caller users, callsite_height...) is seen as
exactly 1.0, like the biggest training value ("clip", what every vocab did before `tail`
existed). With `tail = "log"` the bucket index is extrapolated past 1.0 in log space at
the slope of the vocab's own top decile: with `b` the k boundaries, m = max(1, round(k /
10)) (at most k - 1), g(x) = sign(x) * ln(1 + |x|),

    value(x) = min(TAIL_CAP, 1 + (m / k) * (g(x) - g(b[k-1])) / (g(b[k-1]) - g(b[k-1-m])))

for x > b[k-1]; everything up to the last boundary maps as before (so "log" decides
exactly as "clip" on every value the vocab has seen). A feature with fewer than 2
boundaries has no slope and stays clipped at 1.0. A "log" vocab is written as version 2
(older pymlgo refuses it instead of silently clipping); a "clip" vocab keeps version 1
and its bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pymlgo.toolchain.files import write_atomic

VOCAB_FORMAT = "pymlgo-vocab"
VOCAB_VERSION = 1  # "clip" tail (the only kind before `tail`)
VOCAB_VERSION_LOG_TAIL = 2
DEFAULT_QUANTILES = 1000
Tail = Literal["clip", "log"]
TAILS: tuple[Tail, ...] = ("clip", "log")
TAIL_SPAN = 0.1  # fraction of the boundaries whose spread sets the extrapolation slope
TAIL_CAP = 4.0  # keeps absurd inputs (and their squares) from swamping the network


def _symlog(x: float) -> float:
    return math.copysign(math.log1p(abs(x)), x)


def tail_params(b: np.ndarray) -> tuple[float, float, float] | None:
    """(last boundary, g(last boundary), slope) of a feature's log tail, None when it has
    fewer than 2 distinct boundaries (no spread to take a slope from)."""
    k = int(b.size)
    if k < 2:
        return None
    m = min(max(1, round(TAIL_SPAN * k)), k - 1)
    top, lo = float(b[k - 1]), float(b[k - 1 - m])
    g_top, g_lo = _symlog(top), _symlog(lo)
    if not g_top > g_lo or not math.isfinite(g_top):  # huge boundaries collapse in float
        return None
    return top, g_top, (m / k) / (g_top - g_lo)


def tail_value(x: float, params: tuple[float, float, float]) -> float:
    """The normalized value of `x` > the last boundary (see the module docstring). One
    scalar function for the batch and the per-decision paths: bit-identical inputs."""
    _, g_top, slope = params
    return min(TAIL_CAP, 1.0 + slope * (_symlog(x) - g_top))


@dataclass(frozen=True, eq=False)  # eq=False: ndarray fields make generated __eq__ raise
class Vocab:
    features: tuple[str, ...]  # feature names, in input order
    boundaries: tuple[np.ndarray, ...]  # sorted distinct quantile boundaries per feature
    with_square: bool = True
    tail: Tail = "clip"  # values beyond the last boundary: see the module docstring

    def __post_init__(self) -> None:
        features = tuple(self.features)
        if len(set(features)) != len(features):
            raise ValueError(f"vocab lists a feature twice: {features}")
        if len(self.boundaries) != len(features):
            raise ValueError(
                f"vocab has {len(features)} features but {len(self.boundaries)} boundary lists"
            )
        bounds = []
        for name, b in zip(features, self.boundaries, strict=True):
            arr = np.array(b, dtype=np.float64).reshape(-1)
            if np.isnan(arr).any() or (arr.size > 1 and not (np.diff(arr) > 0).all()):
                raise ValueError(f"vocab boundaries of {name!r} must be strictly increasing")
            arr.flags.writeable = False  # frozen means frozen, also for the arrays
            bounds.append(arr)
        if self.tail not in TAILS:
            raise ValueError(f"vocab tail must be one of {', '.join(TAILS)}, not {self.tail!r}")
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "boundaries", tuple(bounds))

    @property
    def tails(self) -> tuple[tuple[float, float, float] | None, ...]:
        """Per feature the log tail's parameters; all None for a "clip" vocab."""
        if self.tail == "clip":
            return (None,) * len(self.boundaries)
        return tuple(tail_params(b) for b in self.boundaries)

    @property
    def input_dim(self) -> int:
        return len(self.features) * (2 if self.with_square else 1)

    def matrix(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """Raw (n, len(features)) matrix from per-feature arrays with one value per row
        (e.g. a Trajectory's `features`, each (n, 1)); other features are ignored."""
        missing = [f for f in self.features if f not in features]
        if missing:
            raise KeyError(f"features missing for the vocab: {', '.join(missing)}")
        cols = [np.asarray(features[f]).reshape(-1) for f in self.features]
        if len({len(c) for c in cols}) > 1:
            raise ValueError("features have different numbers of rows (or values per row)")
        return np.stack(cols, axis=1) if cols else np.zeros((0, 0))

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """(n, len(features)) raw values -> (n, input_dim) float32 network inputs."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(
                f"expected raw features of shape (n, {len(self.features)}), got {x.shape}"
            )
        out = np.zeros((x.shape[0], len(self.features)), dtype=np.float64)
        for j, (b, tail) in enumerate(zip(self.boundaries, self.tails, strict=True)):
            if b.size:
                out[:, j] = np.searchsorted(b, x[:, j], side="right") / b.size
            if tail is not None:
                # rare (values no training module reached): a Python loop keeps the
                # arithmetic that of the per-decision path, bit for bit
                for i in np.flatnonzero(x[:, j] > tail[0]):
                    out[i, j] = tail_value(float(x[i, j]), tail)
        v = out.astype(np.float32)
        # Square in float32, as the per-decision path does, so both give identical inputs.
        return np.concatenate((v, v * v), axis=1) if self.with_square else v

    def to_json(self) -> dict[str, Any]:
        # a "clip" vocab is written exactly as before `tail` existed
        extra: dict[str, Any] = {} if self.tail == "clip" else {"tail": self.tail}
        return {
            "format": VOCAB_FORMAT,
            "version": VOCAB_VERSION if self.tail == "clip" else VOCAB_VERSION_LOG_TAIL,
            "with_square": self.with_square,
            **extra,
            "features": [
                {"name": name, "boundaries": [_json_number(v) for v in b.tolist()]}
                for name, b in zip(self.features, self.boundaries, strict=True)
            ],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Vocab:
        if not isinstance(d, Mapping) or d.get("format") != VOCAB_FORMAT:
            raise ValueError(f"not a {VOCAB_FORMAT} document")
        version = d.get("version")
        if version not in (VOCAB_VERSION, VOCAB_VERSION_LOG_TAIL):
            raise ValueError(
                f"vocab version {version!r} is not supported (this pymlgo reads versions "
                f"{VOCAB_VERSION} and {VOCAB_VERSION_LOG_TAIL})"
            )
        tail = d.get("tail", "clip")
        if (tail == "clip") != (version == VOCAB_VERSION) or tail not in TAILS:
            raise ValueError(f"vocab version {version} with tail {tail!r}: version "
                             f"{VOCAB_VERSION} is 'clip', {VOCAB_VERSION_LOG_TAIL} 'log'")
        feats = d.get("features")
        if not isinstance(feats, list) or not all(
            isinstance(f, Mapping)
            and isinstance(f.get("name"), str)
            and isinstance(f.get("boundaries"), list)
            for f in feats
        ):
            raise ValueError("vocab 'features' must be a list of {name, boundaries} objects")
        return cls(
            features=tuple(f["name"] for f in feats),
            boundaries=tuple(np.array(f["boundaries"], dtype=np.float64) for f in feats),
            with_square=bool(d.get("with_square", True)),
            tail=tail,
        )


def _json_number(v: float) -> int | float:
    # Inliner features are integers: "3" reads better and is shorter than "3.0".
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def build_vocab(
    columns: Mapping[str, np.ndarray],
    *,
    quantiles: int = DEFAULT_QUANTILES,
    features: Sequence[str] | None = None,
    with_square: bool = True,
    tail: Tail = "clip",
) -> Vocab:
    """Per-feature quantile boundaries of `columns` (name -> all observed values).

    `features` picks and orders the inputs (default: every column, in mapping order).
    Boundaries are observed values (no interpolation between integers), deduplicated.
    """
    if quantiles < 1:
        raise ValueError(f"quantiles must be >= 1, got {quantiles}")
    names = tuple(columns) if features is None else tuple(features)
    missing = [n for n in names if n not in columns]
    if missing:
        raise KeyError(f"no values for feature(s): {', '.join(missing)}")
    positions = np.linspace(0.0, 1.0, quantiles)
    bounds = []
    for name in names:
        values = np.asarray(columns[name], dtype=np.float64).reshape(-1)
        if values.size == 0:
            bounds.append(np.zeros(0))
            continue
        if np.isnan(values).any():
            raise ValueError(f"feature {name!r} has NaN values")
        bounds.append(np.unique(np.quantile(values, positions, method="lower")))
    return Vocab(names, tuple(bounds), with_square=with_square, tail=tail)


def dumps_vocab(vocab: Vocab) -> str:
    """Stable text: one feature per line, fixed key order, so equal vocabs give equal bytes."""
    d = vocab.to_json()
    head = {k: v for k, v in d.items() if k != "features"}
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {json.dumps(head[k])}," for k in sorted(head)]
    feats = [json.dumps(f, separators=(", ", ": ")) for f in d["features"]]  # name first
    lines.append('  "features": [')
    lines += [f"    {f}{',' if i < len(feats) - 1 else ''}" for i, f in enumerate(feats)]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def save_vocab(vocab: Vocab, path: Path) -> None:
    """Write `vocab` as JSON to `path` atomically (a reader never sees half a file)."""
    write_atomic(Path(path), dumps_vocab(vocab).encode())


def load_vocab(path: Path) -> Vocab:
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    try:
        return Vocab.from_json(d)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
