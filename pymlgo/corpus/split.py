"""Deterministic train / validation / held-out splits of a corpus.

By package (the first path component of a module name), held-out packages share no source
with training, which is what measures generalization to unseen code; by module is the
finer-grained alternative. A split depends only on the module names and the seed, never on
listing order, so every process agrees on it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pymlgo.corpus.format import Corpus, CorpusError, package_of


@dataclass(frozen=True)
class Split:
    """Module names of each part, each sorted; the parts are disjoint."""

    train: tuple[str, ...]
    validation: tuple[str, ...]
    heldout: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"train": list(self.train), "validation": list(self.validation),
                "heldout": list(self.heldout)}


def _check_fractions(validation: float, heldout: float) -> None:
    if not (0.0 <= validation < 1.0 and 0.0 <= heldout < 1.0 and validation + heldout < 1.0):
        raise CorpusError(
            f"split fractions must be in [0, 1) and leave something to train on: "
            f"validation={validation}, heldout={heldout}"
        )


def _shuffled(items: Sequence[str], seed: int, salt: str) -> list[str]:
    # Sorting first makes the result independent of the corpus' listing order; the salt
    # keeps the package and module draws of one seed independent of each other.
    out = sorted(items)
    random.Random(f"{salt}:{seed}").shuffle(out)
    return out


def split_by_module(
    corpus: Corpus, *, seed: int, validation: float = 0.1, heldout: float = 0.1
) -> Split:
    """Each module goes to exactly one part; part sizes are the rounded fractions."""
    _check_fractions(validation, heldout)
    names = _shuffled(corpus.names, seed, "module")
    n_held = round(heldout * len(names))
    n_val = round(validation * len(names))
    if n_held + n_val >= len(names):
        raise CorpusError(f"{len(names)} module(s) are too few for this split")
    return Split(
        heldout=tuple(sorted(names[:n_held])),
        validation=tuple(sorted(names[n_held:n_held + n_val])),
        train=tuple(sorted(names[n_held + n_val:])),
    )


def _pick_packages(order: list[str], sizes: dict[str, int], target: float) -> list[str]:
    """Packages (taken in `order`) whose module count comes closest to `target`; at least
    one when the target is positive, and never all of them."""
    chosen: list[str] = []
    total = 0
    for pkg in order[:-1]:
        if not chosen or abs(total + sizes[pkg] - target) < abs(total - target):
            chosen.append(pkg)
            total += sizes[pkg]
    return chosen


def _pick_weighted(order: list[str], sizes: Mapping[str, int], weights: Mapping[str, float],
                   fraction: float) -> list[str]:
    """Packages (taken in `order`) whose share of the modules and share of the weight both
    come near `fraction`: a package is taken when it lowers the sum of the two distances.
    The weight alone would not do: where one package holds most of it, reaching the target
    with the rest means taking nearly every small package and training on one or two. If
    no package helps, the one that comes nearest; never all of them."""
    n_total = sum(sizes[p] for p in order) or 1
    w_total = sum(weights[p] for p in order) or 1.0

    def distance(n: int, w: float) -> float:
        return abs(n / n_total - fraction) + abs(w / w_total - fraction)

    chosen: list[str] = []
    n, w = 0, 0.0
    for pkg in order[:-1]:
        if distance(n + sizes[pkg], w + weights[pkg]) < distance(n, w):
            chosen.append(pkg)
            n, w = n + sizes[pkg], w + weights[pkg]
    if not chosen and fraction > 0 and len(order) > 1:
        chosen = [min(order[:-1], key=lambda p: distance(sizes[p], weights[p]))]
    return chosen


def split_by_package(
    corpus: Corpus,
    *,
    seed: int,
    validation: float = 0.1,
    heldout: float = 0.2,
    heldout_packages: Sequence[str] | None = None,
    validation_by: Literal["module", "package"] = "module",
    validation_weights: Mapping[str, float] | None = None,
) -> Split:
    """Held-out = whole packages, chosen by `seed` (about `heldout` of the modules) or named
    in `heldout_packages`. Validation is drawn from the remaining packages, by module (the
    default: it tracks overfitting on seen code) or, with `validation_by="package"`, as
    whole packages too. Training gets the rest; it never shares a package with held-out.

    `validation_weights` (package -> weight, e.g. its baseline cost; by package only): the
    validation packages hold about `validation` of the remaining packages' total weight as
    well as of their modules (`_pick_weighted`). A package missing from it weighs 0.
    """
    _check_fractions(validation, heldout)
    sizes: dict[str, int] = {}
    for m in corpus.modules:
        sizes[m.package] = sizes.get(m.package, 0) + 1
    packages = sorted(sizes)
    if heldout_packages is not None:
        unknown = sorted(set(heldout_packages) - set(packages))
        if unknown:
            raise CorpusError(
                f"held-out package(s) not in the corpus: {', '.join(unknown)} "
                f"(packages: {', '.join(packages)})"
            )
        held = sorted(set(heldout_packages))
        if len(held) == len(packages):
            raise CorpusError("every package is held out; nothing is left to train on")
    elif heldout > 0:
        if len(packages) < 2:
            raise CorpusError(
                f"a by-package split needs at least 2 packages, corpus has {packages}; "
                "use split_by_module"
            )
        held = _pick_packages(_shuffled(packages, seed, "package"), sizes,
                              heldout * len(corpus.modules))
    else:
        held = []
    held_set = set(held)
    rest = [m.name for m in corpus.modules if m.package not in held_set]
    if validation_by == "package":
        rest_pkgs = [p for p in packages if p not in held_set]
        if validation > 0 and len(rest_pkgs) < 2:
            raise CorpusError("not enough packages left for a by-package validation set")
        order = _shuffled(rest_pkgs, seed, "validation")
        if not validation:
            val_pkgs: set[str] = set()
        elif validation_weights is not None:
            weights = {p: float(validation_weights.get(p, 0.0)) for p in rest_pkgs}
            val_pkgs = set(_pick_weighted(order, sizes, weights, validation))
        else:
            val_pkgs = set(_pick_packages(order, sizes, validation * len(corpus.modules)))
        val = [n for n in rest if package_of(n) in val_pkgs]
    else:
        if validation_weights is not None:
            raise CorpusError('validation weights choose whole packages: validation_by="package"')
        n_val = round(validation * len(corpus.modules))
        if n_val >= len(rest) and n_val > 0:
            raise CorpusError(f"{len(rest)} module(s) outside held-out: too few to validate")
        val = _shuffled(rest, seed, "validation")[:n_val]
    val_set = set(val)
    return Split(
        train=tuple(sorted(n for n in rest if n not in val_set)),
        validation=tuple(sorted(val)),
        heldout=tuple(sorted(m.name for m in corpus.modules if m.package in held_set)),
    )
