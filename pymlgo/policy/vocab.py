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

Float vector features (`embeddings`: clang's IR2Vec `callee_embedding` and
`caller_embedding`, float[dim]) are no quantile buckets: each dimension is z-scored with
a mean and scale fixed when the vocab is built (from the training decisions) and clipped,

    value(x)[i] = clip((x[i] - mean[i]) / scale[i], -EMBEDDING_CLIP, EMBEDDING_CLIP)

every operation in float32 (so the batch, per-decision and exported paths agree bit for
bit). A dimension that never varied in training has scale 1. Their values follow the
scalar inputs (and their squares), one embedding after the other, in `embeddings` order;
the raw matrix `normalize` takes has the scalar features' columns, then each embedding's
`dim` columns. A vocab with embeddings is written as version 3 (older pymlgo refuses it).

Differences (`differences`): a scalar input computed from two scalar features of the
vocab, `minuend - subtrahend`, quantile-normalized (and tailed) like any feature with
boundaries of its own. Its name is `"minuend-subtrahend"`. Clang's inliner decides by
`threshold - cost_estimate`, and quantile buckets of the two features apart cannot show
a network that difference sharply (a margin of 0 and of 1 may share a bucket of each).
They follow the features in the input layout, `[v_0 .. v_{f-1}, d_0 .. d_{g-1}]`, then
the squares of all of those, then the embeddings; they add no raw column (both operands
are features already). A vocab with differences is written as version 4, with an explicit
tail and embeddings optional (older pymlgo refuses it).
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
VOCAB_VERSION_EMBEDDINGS = 3  # any tail, written explicitly; float vector inputs
VOCAB_VERSION_DIFFERENCES = 4  # any tail, written explicitly; differences of two features
EMBEDDING_CLIP = 5.0  # z-scores beyond it (code far from the training code) are clipped
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


_CLIP32 = np.float32(EMBEDDING_CLIP)


@dataclass(frozen=True, eq=False)  # eq=False: ndarray fields make generated __eq__ raise
class EmbeddingInput:
    """One float[dim] feature's normalization: per dimension a z-score with a fixed mean and
    scale, clipped to +-EMBEDDING_CLIP (see the module docstring)."""

    name: str
    mean: np.ndarray  # float32 (dim,)
    scale: np.ndarray  # float32 (dim,), every value > 0

    def __post_init__(self) -> None:
        mean = np.array(self.mean, dtype=np.float32).reshape(-1)
        scale = np.array(self.scale, dtype=np.float32).reshape(-1)
        if not mean.size or mean.shape != scale.shape:
            raise ValueError(f"embedding {self.name!r}: mean and scale must be non-empty and "
                             f"of one length, got {mean.size} and {scale.size}")
        if not (np.isfinite(mean).all() and np.isfinite(scale).all() and (scale > 0).all()):
            raise ValueError(f"embedding {self.name!r}: mean must be finite and scale "
                             "finite and > 0")
        mean.flags.writeable = scale.flags.writeable = False
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "scale", scale)

    @property
    def dim(self) -> int:
        return int(self.mean.size)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """Raw values (..., dim) -> float32 network inputs of the same shape."""
        z = (np.asarray(x).astype(np.float32) - self.mean) / self.scale
        return np.clip(z, -_CLIP32, _CLIP32)

    def to_json(self) -> dict[str, Any]:
        # float32 values printed as the float64 they convert to: they read back exactly
        return {"name": self.name, "dim": self.dim, "mean": [float(v) for v in self.mean],
                "scale": [float(v) for v in self.scale]}

    @classmethod
    def from_json(cls, d: Any) -> EmbeddingInput:
        if not (isinstance(d, Mapping) and isinstance(d.get("name"), str)
                and isinstance(d.get("mean"), list) and isinstance(d.get("scale"), list)):
            raise ValueError("vocab 'embeddings' must be a list of {name, dim, mean, scale} "
                             "objects")
        emb = cls(d["name"], np.array(d["mean"], dtype=np.float64),
                  np.array(d["scale"], dtype=np.float64))
        if d.get("dim") != emb.dim:
            raise ValueError(f"vocab embedding {emb.name!r}: dim {d.get('dim')!r} but "
                             f"{emb.dim} values")
        return emb


def fit_embedding(name: str, values: np.ndarray) -> EmbeddingInput:
    """The normalization of one float[dim] feature from its training values (n, dim):
    mean and standard deviation per dimension (scale 1 where a dimension is constant, or
    where there are no values)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or not x.shape[1]:
        raise ValueError(f"embedding {name!r}: values must be (n, dim), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"embedding {name!r} has non-finite values")
    if not len(x):
        return EmbeddingInput(name, np.zeros(x.shape[1]), np.ones(x.shape[1]))
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    # a constant dimension has a std of rounding noise: scale it by 1, not by the noise
    constant = std <= 1e-6 * (1.0 + np.abs(mean))
    return EmbeddingInput(name, mean, np.where(constant, 1.0, std))


def difference_operands(name: str) -> tuple[str, str]:
    """`"threshold-cost_estimate"` -> ("threshold", "cost_estimate"); ValueError if not
    two non-empty feature names joined by one `-`."""
    parts = name.split("-")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"a difference is MINUEND-SUBTRAHEND (two feature names joined by "
                         f"'-', e.g. threshold-cost_estimate), not {name!r}")
    return parts[0], parts[1]


@dataclass(frozen=True, eq=False)  # eq=False: an ndarray field makes generated __eq__ raise
class Difference:
    """One derived scalar input: `minuend - subtrahend`, quantile-normalized by its own
    boundaries (see the module docstring)."""

    minuend: str
    subtrahend: str
    boundaries: np.ndarray

    def __post_init__(self) -> None:
        if not self.minuend or not self.subtrahend or "-" in self.minuend + self.subtrahend:
            raise ValueError(f"difference operands must be feature names without '-', got "
                             f"{self.minuend!r} and {self.subtrahend!r}")
        if self.minuend == self.subtrahend:
            raise ValueError(f"difference {self.name!r} is always 0")
        object.__setattr__(self, "boundaries", _checked_boundaries(self.name, self.boundaries))

    @property
    def name(self) -> str:
        return f"{self.minuend}-{self.subtrahend}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "boundaries": [_json_number(v) for v in
                                                  self.boundaries.tolist()]}

    @classmethod
    def from_json(cls, d: Any) -> Difference:
        if not (isinstance(d, Mapping) and isinstance(d.get("name"), str)
                and isinstance(d.get("boundaries"), list)):
            raise ValueError("vocab 'differences' must be a list of {name, boundaries} objects")
        a, b = difference_operands(d["name"])
        return cls(a, b, np.array(d["boundaries"], dtype=np.float64))


def _checked_boundaries(name: str, b: Any) -> np.ndarray:
    arr = np.array(b, dtype=np.float64).reshape(-1)
    if np.isnan(arr).any() or (arr.size > 1 and not (np.diff(arr) > 0).all()):
        raise ValueError(f"vocab boundaries of {name!r} must be strictly increasing")
    arr.flags.writeable = False  # frozen means frozen, also for the arrays
    return arr


@dataclass(frozen=True, eq=False)  # eq=False: ndarray fields make generated __eq__ raise
class Vocab:
    features: tuple[str, ...]  # feature names, in input order
    boundaries: tuple[np.ndarray, ...]  # sorted distinct quantile boundaries per feature
    with_square: bool = True
    tail: Tail = "clip"  # values beyond the last boundary: see the module docstring
    embeddings: tuple[EmbeddingInput, ...] = ()  # float[dim] inputs after the scalar ones
    differences: tuple[Difference, ...] = ()  # derived scalar inputs after the features

    def __post_init__(self) -> None:
        features = tuple(self.features)
        embeddings = tuple(self.embeddings)
        differences = tuple(self.differences)
        names = (*features, *(d.name for d in differences), *(e.name for e in embeddings))
        if len(set(names)) != len(names):
            raise ValueError(f"vocab lists a feature twice: {names}")
        if len(self.boundaries) != len(features):
            raise ValueError(
                f"vocab has {len(features)} features but {len(self.boundaries)} boundary lists"
            )
        for d in differences:
            missing = [f for f in (d.minuend, d.subtrahend) if f not in features]
            if missing:
                raise ValueError(f"difference {d.name!r} needs the vocab to read "
                                 f"{' and '.join(missing)} as a feature")
        bounds = [_checked_boundaries(name, b)
                  for name, b in zip(features, self.boundaries, strict=True)]
        if self.tail not in TAILS:
            raise ValueError(f"vocab tail must be one of {', '.join(TAILS)}, not {self.tail!r}")
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "boundaries", tuple(bounds))
        object.__setattr__(self, "embeddings", embeddings)
        object.__setattr__(self, "differences", differences)

    @property
    def scalar_inputs(self) -> tuple[tuple[str, np.ndarray], ...]:
        """(name, boundaries) of every quantile input in input order: the features, then
        the differences."""
        return (*zip(self.features, self.boundaries, strict=True),
                *((d.name, d.boundaries) for d in self.differences))

    @property
    def difference_columns(self) -> tuple[tuple[int, int], ...]:
        """Per difference the raw columns (feature positions) of its two operands."""
        at = {f: i for i, f in enumerate(self.features)}
        return tuple((at[d.minuend], at[d.subtrahend]) for d in self.differences)

    @property
    def tails(self) -> tuple[tuple[float, float, float] | None, ...]:
        """Per quantile input (`scalar_inputs`) the log tail's parameters; all None for a
        "clip" vocab."""
        if self.tail == "clip":
            return (None,) * len(self.scalar_inputs)
        return tuple(tail_params(b) for _, b in self.scalar_inputs)

    @property
    def input_dim(self) -> int:
        return ((len(self.features) + len(self.differences)) * (2 if self.with_square else 1)
                + sum(e.dim for e in self.embeddings))

    @property
    def raw_features(self) -> tuple[str, ...]:
        """Every compiler tensor the inputs are made of, in raw column order: the scalar
        features, then the embeddings."""
        return (*self.features, *(e.name for e in self.embeddings))

    @property
    def raw_width(self) -> int:
        """Columns of the raw matrix `normalize` takes (an embedding has `dim` of them)."""
        return len(self.features) + sum(e.dim for e in self.embeddings)

    def matrix(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """Raw (n, raw_width) matrix from per-feature arrays with one row per call site
        (e.g. a Trajectory's `features`: scalars (n, 1), embeddings (n, dim)); other
        features are ignored."""
        missing = [f for f in self.raw_features if f not in features]
        if missing:
            raise KeyError(f"features missing for the vocab: {', '.join(missing)}")
        rows = {len(np.asarray(features[f])) for f in self.raw_features}
        if len(rows) > 1:
            raise ValueError("features have different numbers of rows")
        n = rows.pop() if rows else 0
        widths = [1] * len(self.features) + [e.dim for e in self.embeddings]
        try:
            cols = [np.asarray(features[f]).reshape(n, w)
                    for f, w in zip(self.raw_features, widths, strict=True)]
        except ValueError as exc:
            raise ValueError(f"features do not have the vocab's widths: {exc}") from exc
        return np.concatenate(cols, axis=1) if cols else np.zeros((0, 0))

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """(n, raw_width) raw values -> (n, input_dim) float32 network inputs."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.raw_width:
            raise ValueError(
                f"expected raw features of shape (n, {self.raw_width}), got {x.shape}"
            )
        nf = len(self.features)
        scalars = x[:, :nf].astype(np.float64)
        if self.differences:  # float64 differences of integer features: exact
            scalars = np.concatenate(
                [scalars, *((scalars[:, a] - scalars[:, b])[:, None]
                            for a, b in self.difference_columns)], axis=1)
        inputs = self.scalar_inputs
        out = np.zeros((x.shape[0], len(inputs)), dtype=np.float64)
        for j, ((_, b), tail) in enumerate(zip(inputs, self.tails, strict=True)):
            if b.size:
                out[:, j] = np.searchsorted(b, scalars[:, j], side="right") / b.size
            if tail is not None:
                # rare (values no training module reached): a Python loop keeps the
                # arithmetic that of the per-decision path, bit for bit
                for i in np.flatnonzero(scalars[:, j] > tail[0]):
                    out[i, j] = tail_value(float(scalars[i, j]), tail)
        v = out.astype(np.float32)
        # Square in float32, as the per-decision path does, so both give identical inputs.
        parts = [v, v * v] if self.with_square else [v]
        at = nf
        for e in self.embeddings:
            parts.append(e.normalize(x[:, at:at + e.dim]))
            at += e.dim
        return np.concatenate(parts, axis=1) if len(parts) > 1 else v

    @property
    def version(self) -> int:
        if self.differences:
            return VOCAB_VERSION_DIFFERENCES
        if self.embeddings:
            return VOCAB_VERSION_EMBEDDINGS
        return VOCAB_VERSION if self.tail == "clip" else VOCAB_VERSION_LOG_TAIL

    def to_json(self) -> dict[str, Any]:
        # a "clip" vocab is written exactly as before `tail` existed
        extra: dict[str, Any] = {} if self.version == VOCAB_VERSION else {"tail": self.tail}
        if self.embeddings:
            extra["embeddings"] = [e.to_json() for e in self.embeddings]
        if self.differences:
            extra["differences"] = [d.to_json() for d in self.differences]
        return {
            "format": VOCAB_FORMAT,
            "version": self.version,
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
        known = (VOCAB_VERSION, VOCAB_VERSION_LOG_TAIL, VOCAB_VERSION_EMBEDDINGS,
                 VOCAB_VERSION_DIFFERENCES)
        if version not in known:
            raise ValueError(
                f"vocab version {version!r} is not supported (this pymlgo reads versions "
                f"{', '.join(map(str, known))})"
            )
        tail = d.get("tail", "clip")
        if version in (VOCAB_VERSION_EMBEDDINGS, VOCAB_VERSION_DIFFERENCES):
            if tail not in TAILS or "tail" not in d:
                raise ValueError(f"vocab version {version} needs a tail, one of "
                                 f"{', '.join(TAILS)}")
        elif (tail == "clip") != (version == VOCAB_VERSION) or tail not in TAILS:
            raise ValueError(f"vocab version {version} with tail {tail!r}: version "
                             f"{VOCAB_VERSION} is 'clip', {VOCAB_VERSION_LOG_TAIL} 'log'")
        embeddings = d.get("embeddings", [])
        if not isinstance(embeddings, list) or (
                version != VOCAB_VERSION_DIFFERENCES
                and (version == VOCAB_VERSION_EMBEDDINGS) != bool(embeddings)):
            raise ValueError(f"vocab 'embeddings' must be a non-empty list in version "
                             f"{VOCAB_VERSION_EMBEDDINGS}, a list in "
                             f"{VOCAB_VERSION_DIFFERENCES}, and absent before")
        differences = d.get("differences", [])
        if not isinstance(differences, list) or (
                (version == VOCAB_VERSION_DIFFERENCES) != bool(differences)):
            raise ValueError(f"vocab 'differences' must be a non-empty list in version "
                             f"{VOCAB_VERSION_DIFFERENCES} and absent before")
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
            embeddings=tuple(EmbeddingInput.from_json(e) for e in embeddings),
            differences=tuple(Difference.from_json(x) for x in differences),
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
    differences: Sequence[str] = (),
) -> Vocab:
    """Per-feature quantile boundaries of `columns` (name -> all observed values).

    `features` picks and orders the inputs (default: every column, in mapping order).
    `differences` ("minuend-subtrahend", both among `features`) adds derived inputs whose
    values are the row-wise differences of two columns.
    Boundaries are observed values (no interpolation between integers), deduplicated.
    """
    if quantiles < 1:
        raise ValueError(f"quantiles must be >= 1, got {quantiles}")
    names = tuple(columns) if features is None else tuple(features)
    missing = [n for n in names if n not in columns]
    if missing:
        raise KeyError(f"no values for feature(s): {', '.join(missing)}")
    positions = np.linspace(0.0, 1.0, quantiles)

    def column(name: str) -> np.ndarray:
        values = np.asarray(columns[name], dtype=np.float64).reshape(-1)
        if np.isnan(values).any():
            raise ValueError(f"feature {name!r} has NaN values")
        return values

    def quantile_bounds(values: np.ndarray) -> np.ndarray:
        if values.size == 0:
            return np.zeros(0)
        return np.unique(np.quantile(values, positions, method="lower"))

    bounds = [quantile_bounds(column(name)) for name in names]
    derived = []
    for name in differences:
        a, b = difference_operands(name)
        missing = [f for f in (a, b) if f not in names]
        if missing:
            raise KeyError(f"difference {name!r} needs {' and '.join(missing)} among the "
                           f"vocab's features")
        va, vb = column(a), column(b)
        if va.shape != vb.shape:
            raise ValueError(f"difference {name!r}: {a} and {b} have different numbers of "
                             f"values")
        derived.append(Difference(a, b, quantile_bounds(va - vb)))
    return Vocab(names, tuple(bounds), with_square=with_square, tail=tail,
                 differences=tuple(derived))


def dumps_vocab(vocab: Vocab) -> str:
    """Stable text: one feature per line, fixed key order, so equal vocabs give equal bytes."""
    d = vocab.to_json()
    head = {k: v for k, v in d.items() if k not in ("features", "embeddings", "differences")}
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {json.dumps(head[k])}," for k in sorted(head)]
    feats = [json.dumps(f, separators=(", ", ": ")) for f in d["features"]]  # name first
    lines.append('  "features": [')
    lines += [f"    {f}{',' if i < len(feats) - 1 else ''}" for i, f in enumerate(feats)]
    lines.append("  ]")
    # one line per embedding, then per difference, after the features
    for key in ("embeddings", "differences"):
        if key not in d:
            continue
        lines[-1] += ","
        items = [json.dumps(e, separators=(", ", ": ")) for e in d[key]]
        lines.append(f'  "{key}": [')
        lines += [f"    {e}{',' if i < len(items) - 1 else ''}" for i, e in enumerate(items)]
        lines.append("  ]")
    lines.append("}")
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
