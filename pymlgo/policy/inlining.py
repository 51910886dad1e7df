"""The learned inlining policy: quantile-normalized features (and z-scored IR2Vec
embeddings, when its vocab has them) -> MLP -> logit of P(inline).

Runs in compile workers with numpy only. The per-decision path (`for_module`) is tuned for
one call site at a time: boundaries are bisected as Python lists (a numpy call per feature
would cost more than the whole network), then the network runs on one float32 row.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pymlgo.policy.mlp import MLPParams, affine
from pymlgo.policy.vocab import Vocab, tail_value
from pymlgo.problems.inlining.policies import (
    DEFAULT_FEATURE,
    HeuristicPolicy,
    module_seed,
    shift_policy,
)
from pymlgo.problems.inlining.problem import INLINING
from pymlgo.toolchain.language import LANGUAGES

PROBLEM = INLINING.name
VERSION_MAJOR, VERSION_MINOR = 1, 0
CURRENT_VERSION = f"{PROBLEM}-{VERSION_MAJOR}.{VERSION_MINOR}"
WINDOW_MINOR = 1  # inlining-1.1 adds `window`; a policy without one stays 1.0
LANGUAGES_MINOR = 2  # inlining-1.2 adds `languages`; a policy without them keeps its version
_VERSION_RE = re.compile(r"(?P<problem>[a-z_]+)-(?P<major>\d+)\.(?P<minor>\d+)")


def parse_version(version: str) -> tuple[str, int, int]:
    """`inlining-1.0` -> ("inlining", 1, 0); ValueError if malformed."""
    m = _VERSION_RE.fullmatch(version)
    if not m:
        raise ValueError(f"policy version {version!r} is not PROBLEM-MAJOR.MINOR")
    return m["problem"], int(m["major"]), int(m["minor"])


def check_languages(languages: object) -> tuple[str, ...]:
    """`languages` as a policy keeps them (a tuple of distinct names of `LANGUAGES`, in
    that order); ValueError otherwise."""
    if isinstance(languages, str) or not isinstance(languages, (list, tuple)):
        raise ValueError(f"languages must be a list of {' and '.join(LANGUAGES)}, not "
                         f"{languages!r}")
    bad = [x for x in languages if x not in LANGUAGES]
    if bad:
        raise ValueError(f"unknown language(s) {', '.join(map(repr, bad))}: expected "
                         f"{' and/or '.join(LANGUAGES)}")
    return tuple(x for x in LANGUAGES if x in languages)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function (float32 in, float32 out)."""
    z = np.asarray(z, dtype=np.float32)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.float32)


def _sigmoid1(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@dataclass(frozen=True, eq=False)  # eq=False: holds arrays; identity equality is enough
class InliningPolicy:
    """Implements `problems.base.Policy`: inline when P(inline) >= 0.5 (greedy), or with
    probability P(inline) (sampling, for exploration) from a per-module seeded stream."""

    vocab: Vocab
    params: MLPParams
    hidden: tuple[int, ...] = (40, 40, 20)
    version: str = CURRENT_VERSION  # inlining-MAJOR.MINOR
    sample: bool = False  # False: greedy (p >= 0.5); True: sample with a seeded rng
    seed: int = 0
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    name: str = "mlp"
    # The IR2Vec vocabulary file clang embeds with when this policy compiles (None: none).
    # Saved with the policy and checked by its sha256, so it never compiles with another.
    ir2vec_vocab: Path | None = None
    # A shift rule (`shift:DOWN[:UP[:USERS[:MAX]]]`): the network decides only the call
    # sites that rule may flip, and clang's own decision stands everywhere else. Why: a
    # clone of such a rule that departs from clang where its teacher never does (e.g. takes
    # a call site clang refuses far below its threshold) grows code it was never shown
    # (stop 38). Needs clang's decision, which only the interactive channel sends. "": none.
    window: str = ""
    # The source languages ("c", "c++") the network decides for; a module of any other
    # language gets clang's own decisions, which are plain -Oz's bytes (`for_language`).
    # Why: the shipped network saves on C++ and nothing on C (stop 39, validation: C++
    # -7.94%, C +0.21%). (): every language.
    languages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        problem, _, _ = parse_version(self.version)
        if problem != PROBLEM:
            raise ValueError(f"policy version {self.version!r} is not an {PROBLEM} policy")
        if self.params.hidden != self.hidden:
            raise ValueError(
                f"params have hidden sizes {self.params.hidden}, policy says {self.hidden}"
            )
        if self.params.input_dim != self.vocab.input_dim:
            raise ValueError(
                f"params take {self.params.input_dim} inputs, the vocab gives "
                f"{self.vocab.input_dim} ({len(self.vocab.features)} features"
                f"{', with squares' if self.vocab.with_square else ''}"
                f"{', embeddings' if self.vocab.embeddings else ''})"
            )
        if self.window:
            shift_policy(self.window)  # ValueError with the grammar
            self._at_least(WINDOW_MINOR)
        object.__setattr__(self, "languages", check_languages(self.languages))
        if self.languages:
            self._at_least(LANGUAGES_MINOR)
        if self.vocab.embeddings and self.ir2vec_vocab is None:
            # without the vocabulary file clang sends no embeddings to read
            raise ValueError("a policy that reads IR2Vec embeddings must carry the IR2Vec "
                             "vocabulary clang embeds with (ir2vec_vocab)")

    def _at_least(self, minor: int) -> None:
        """Raise the version to 1.`minor` (a reader of an older one would ignore the key)."""
        if parse_version(self.version)[2] < minor:
            object.__setattr__(self, "version", f"{PROBLEM}-{VERSION_MAJOR}.{minor}")

    def for_language(self, language: str | None) -> InliningPolicy | HeuristicPolicy:
        """This policy as it decides a module in `language` (None: one it cannot tell):
        itself, or clang's own decisions where `languages` leaves the language out."""
        if not self.languages or language in self.languages:
            return self
        return HeuristicPolicy()

    @property
    def required_features(self) -> tuple[str, ...]:
        if not self.window:
            return self.vocab.raw_features
        return tuple(dict.fromkeys((*self.vocab.raw_features,
                                    *shift_policy(self.window).required_features)))

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Raw feature matrix (n, vocab.raw_width), columns in `vocab.raw_features` order (an
        embedding spans `dim` columns) -> (n,) logits of the network (a window's forced
        decisions aside)."""
        return self.params.forward(self.vocab.normalize(x))

    def decision_logits(self, features: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        """The network's logits at `n` recorded decisions, from their features by name (as a
        trajectory holds them: one row per decision)."""
        return self.logits(np.concatenate(
            [np.asarray(features[name]).reshape(n, -1) for name in self.vocab.raw_features],
            axis=1))

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Raw feature matrix (n, f) -> (n,) P(inline), float32."""
        return sigmoid(self.logits(x))

    def for_module(self, module: str) -> Callable[[Mapping[str, np.ndarray]], int]:
        decide = self._network_decisions(module)
        if not self.window:
            return decide
        flips = shift_policy(self.window).flips

        def in_window(features: Mapping[str, np.ndarray]) -> int:
            if flips(features):
                return decide(features)
            return int(features[DEFAULT_FEATURE].reshape(-1)[0])

        return in_window

    def _network_decisions(self, module: str) -> Callable[[Mapping[str, np.ndarray]], int]:
        logit = _row_logit_fn(self.vocab, self.params)
        if not self.sample:
            # p >= 0.5 exactly when the logit is >= 0; no exp needed.
            return lambda features: int(logit(features) >= 0.0)
        rng = random.Random(module_seed(self.seed, module))
        draw = rng.random

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return int(draw() < _sigmoid1(logit(features)))

        return decide

    def with_params(self, params: MLPParams) -> InliningPolicy:
        return dataclasses.replace(self, params=params)

    def flat(self) -> np.ndarray:
        """Every parameter in one vector (what ES perturbs)."""
        return self.params.flat()

    def with_flat(self, v: np.ndarray) -> InliningPolicy:
        return self.with_params(self.params.with_flat(v))

    def sampling(self, seed: int) -> InliningPolicy:
        return dataclasses.replace(self, sample=True, seed=seed)

    def greedy(self) -> InliningPolicy:
        return dataclasses.replace(self, sample=False)


def _row_logit_fn(vocab: Vocab, params: MLPParams) -> Callable[[Mapping[str, np.ndarray]], float]:
    """One decision's logit from its feature tensors.

    Gives the same float32 inputs as `vocab.normalize` and the same arithmetic as
    `MLPParams.forward` (`affine`), so it returns exactly `logits()` of that row, on any
    CPU. Not thread-safe: the input row buffer is reused (one module's decisions come one
    by one).
    """
    table = [
        (name, b.tolist(), b.size)
        for name, b in zip(vocab.features, vocab.boundaries, strict=True)
    ]
    # differences: (minuend name, subtrahend name, boundaries, count)
    derived = [(d.minuend, d.subtrahend, d.boundaries.tolist(), d.boundaries.size)
               for d in vocab.differences]
    # quantile inputs with a log tail (vocab.tail == "log"): position -> its parameters
    tails = {j: t for j, t in enumerate(vocab.tails) if t is not None}
    nf, ns = len(table), len(table) + len(derived)
    buf = np.zeros(vocab.input_dim, dtype=np.float32)
    scalar_end = ns * (2 if vocab.with_square else 1)
    values, diffs, squares = buf[:nf], buf[nf:ns], buf[ns:scalar_end]
    scalars = buf[:ns]
    # float[dim] inputs: where each one's normalized values go in the row
    embeddings = []
    at = scalar_end
    for e in vocab.embeddings:
        embeddings.append((e.name, e.normalize, buf[at:at + e.dim]))
        at += e.dim
    with_square = vocab.with_square
    hidden = list(zip(params.weights[:-1], params.biases[:-1], strict=True))
    w_out, b_out = params.weights[-1], params.biases[-1]
    relu = np.maximum

    def logit(features: Mapping[str, np.ndarray]) -> float:
        # float(): bisecting a float list with a float is ~1.5x faster than with an int.
        if tails:
            values[:] = [_value(b, float(features[name].item()), k, tails.get(j))
                         for j, (name, b, k) in enumerate(table)]
        else:  # the common case, kept free of the tail's branch
            values[:] = [
                bisect_right(b, float(features[name].item())) / k if k else 0.0
                for name, b, k in table
            ]
        if derived:
            diffs[:] = [
                _value(bounds, float(features[minuend].item())
                       - float(features[subtrahend].item()), k, tails.get(nf + j))
                for j, (minuend, subtrahend, bounds, k) in enumerate(derived)
            ]
        if with_square:
            np.multiply(scalars, scalars, out=squares)
        for name, normalize, out in embeddings:
            out[:] = normalize(features[name])
        h = buf
        for w, b in hidden:
            h = affine(h, w, b)
            relu(h, 0.0, out=h)
        return float(affine(h, w_out, b_out)[0])

    return logit


def _value(b: list[float], x: float, k: int, tail: tuple[float, float, float] | None) -> float:
    """One feature's normalized value, as `Vocab.normalize` computes it."""
    if tail is not None and x > tail[0]:
        return tail_value(x, tail)
    return bisect_right(b, x) / k if k else 0.0
