"""Splits and sampling: deterministic for a seed, disjoint, and by package when asked."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from pymlgo.corpus.format import Corpus, CorpusError, Module
from pymlgo.corpus.sample import Sampler, sample, sample_by_package, sample_by_weight
from pymlgo.corpus.split import Split, split_by_module, split_by_package
from pymlgo.train.env import TrainEnv
from pymlgo.workers.protocol import WorkSpec

# Package sizes like a real corpus: a few big libraries and some small ones.
SIZES = {"zstd": 28, "brotli": 31, "lz4": 4, "zlib": 12, "sqlite": 3, "xz": 9, "bzip2": 6}


def corpus_of(sizes: dict[str, int], *, reverse: bool = False) -> Corpus:
    names = [f"{pkg}/src/m{i}" for pkg, n in sizes.items() for i in range(n)]
    if reverse:
        names.reverse()
    modules = tuple(Module(name=n, bc_path=Path(f"/c/{n}.bc"), cmd=("-cc1",)) for n in names)
    return Corpus(root=Path("/c"), modules=modules)


CORPUS = corpus_of(SIZES)


def parts(split: Split) -> list[set[str]]:
    return [set(split.train), set(split.validation), set(split.heldout)]


def assert_partition(split: Split, corpus: Corpus) -> None:
    train, val, held = parts(split)
    assert not (train & val or train & held or val & held)
    assert train | val | held == set(corpus.names)


@pytest.mark.parametrize("splitter", [split_by_module, split_by_package])
def test_a_split_is_a_partition_and_the_same_for_the_same_seed(splitter) -> None:
    a = splitter(CORPUS, seed=7)
    b = splitter(CORPUS, seed=7)

    assert a == b
    assert_partition(a, CORPUS)
    assert a.train and a.validation and a.heldout


@pytest.mark.parametrize("splitter", [split_by_module, split_by_package])
def test_a_split_ignores_the_listing_order_of_the_corpus(splitter) -> None:
    assert splitter(CORPUS, seed=3) == splitter(corpus_of(SIZES, reverse=True), seed=3)


@pytest.mark.parametrize("splitter", [split_by_module, split_by_package])
def test_different_seeds_give_different_splits(splitter) -> None:
    splits = {splitter(CORPUS, seed=s).heldout for s in range(10)}
    assert len(splits) > 1


@pytest.mark.parametrize("by", ["module", "package"])
def test_a_run_with_a_split_seed_splits_as_that_seed_whatever_its_own_seed(by) -> None:
    from pymlgo.train.config import make_config
    from pymlgo.train.trainer import make_split

    def split(**kw) -> Split:
        return make_split(make_config(algo="es", **kw), CORPUS)

    fixed = [split(seed=s, split={"by": by, "seed": 5}) for s in range(6)]
    assert all(f == split(seed=5, split={"by": by}) for f in fixed)
    # without one, the run's seed draws the split as it always did
    assert len({split(seed=s, split={"by": by}).heldout for s in range(6)}) > 1


def test_by_package_held_out_shares_no_package_with_train_or_validation() -> None:
    for seed in range(20):
        split = split_by_package(CORPUS, seed=seed, validation=0.1, heldout=0.2)
        pkg = lambda names: {n.split("/")[0] for n in names}  # noqa: E731
        assert not pkg(split.heldout) & pkg(split.train)
        assert not pkg(split.heldout) & pkg(split.validation)
        assert_partition(split, CORPUS)


def test_by_package_held_out_size_is_near_the_fraction() -> None:
    sizes = [len(split_by_package(CORPUS, seed=s, heldout=0.2).heldout) for s in range(30)]
    target = 0.2 * len(CORPUS)
    # Whole packages only, so not exact; but never nothing and never almost everything.
    assert all(0 < n < len(CORPUS) / 2 for n in sizes)
    assert abs(float(np.mean(sizes)) - target) < target


def test_named_held_out_packages_are_exactly_held_out() -> None:
    split = split_by_package(CORPUS, seed=0, heldout_packages=["lz4", "sqlite"])

    assert {n.split("/")[0] for n in split.heldout} == {"lz4", "sqlite"}
    assert len(split.heldout) == SIZES["lz4"] + SIZES["sqlite"]
    with pytest.raises(CorpusError, match="not in the corpus: gzip"):
        split_by_package(CORPUS, seed=0, heldout_packages=["gzip"])
    with pytest.raises(CorpusError, match="every package is held out"):
        split_by_package(CORPUS, seed=0, heldout_packages=list(SIZES))


def test_validation_can_also_be_whole_packages() -> None:
    split = split_by_package(CORPUS, seed=5, validation=0.15, validation_by="package")
    pkg = lambda names: {n.split("/")[0] for n in names}  # noqa: E731

    assert pkg(split.validation) and not pkg(split.validation) & pkg(split.train)
    assert not pkg(split.validation) & pkg(split.heldout)


def test_weighed_validation_holds_about_its_share_of_the_weight_not_of_the_modules() -> None:
    # zstd and brotli hold most modules; a hot package with few modules holds most cost
    weights = {"zstd": 10.0, "brotli": 20.0, "lz4": 900.0, "zlib": 30.0, "sqlite": 5.0,
               "xz": 25.0, "bzip2": 10.0}
    total = sum(weights.values())
    for seed in range(20):
        split = split_by_package(CORPUS, seed=seed, validation=0.1, heldout=0.0,
                                 validation_by="package", validation_weights=weights)
        val = {n.split("/")[0] for n in split.validation}
        share = sum(weights[p] for p in val) / total
        # never the hot package (90% of the weight, drawn first or not), never nothing
        assert val and "lz4" not in val
        assert share < 0.1 + 30 / total
        assert_partition(split, CORPUS)
        # the same seed, the same draw
        assert split == split_by_package(CORPUS, seed=seed, validation=0.1, heldout=0.0,
                                         validation_by="package", validation_weights=weights)


def test_weighed_validation_does_not_take_every_small_package_to_reach_the_weight() -> None:
    # one hot package holds 91% of the weight; the other nine together hold the 9% a 10%
    # validation asks for, but taking them all would leave training the hot one alone
    sizes = {"hot": 10, **{f"p{i}": 10 for i in range(9)}}
    weights = {"hot": 900.0, **{f"p{i}": 10.0 for i in range(9)}}
    corpus = corpus_of(sizes)
    for seed in range(10):
        split = split_by_package(corpus, seed=seed, validation=0.1, heldout=0.0,
                                 validation_by="package", validation_weights=weights)
        val = {n.split("/")[0] for n in split.validation}
        assert len(val) == 1 and "hot" not in val
        assert len({n.split("/")[0] for n in split.train}) == 9


def test_weighed_validation_that_no_package_approaches_takes_the_nearest_one() -> None:
    weights = {"zstd": 100.0, "brotli": 100.0, "lz4": 100.0, "zlib": 100.0, "sqlite": 100.0,
               "xz": 100.0, "bzip2": 100.0}
    split = split_by_package(CORPUS, seed=2, validation=0.01, heldout=0.0,
                             validation_by="package", validation_weights=weights)
    assert len({n.split("/")[0] for n in split.validation}) == 1


def test_weighed_validation_needs_whole_packages() -> None:
    with pytest.raises(CorpusError, match='validation_by="package"'):
        split_by_package(CORPUS, seed=0, validation=0.1, validation_weights={"zstd": 1.0})


def test_by_module_sizes_are_the_rounded_fractions() -> None:
    split = split_by_module(CORPUS, seed=1, validation=0.1, heldout=0.25)
    n = len(CORPUS)
    assert len(split.validation) == round(0.1 * n)
    assert len(split.heldout) == round(0.25 * n)
    assert len(split.train) == n - round(0.1 * n) - round(0.25 * n)
    assert list(split.train) == sorted(split.train)


def test_a_single_package_corpus_cannot_be_split_by_package() -> None:
    with pytest.raises(CorpusError, match="at least 2 packages"):
        split_by_package(corpus_of({"only": 10}), seed=0)


def test_impossible_fractions_are_refused() -> None:
    for validation, heldout in ((0.6, 0.5), (-0.1, 0.1), (0.0, 1.0)):
        with pytest.raises(CorpusError, match="fractions"):
            split_by_module(CORPUS, seed=0, validation=validation, heldout=heldout)


# --- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make_rng", [lambda: np.random.default_rng(11),
                                      lambda: random.Random(11), lambda: 11])
def test_sample_is_reproducible_for_a_seeded_rng(make_rng) -> None:
    names = list(CORPUS.names)
    a, b = sample(names, 10, make_rng()), sample(names, 10, make_rng())

    assert a == b
    assert len(set(a)) == 10  # without replacement


def test_sample_more_than_the_corpus_uses_every_module_evenly() -> None:
    names = ["a", "b", "c"]
    drawn = sample(names, 7, np.random.default_rng(0))
    assert sorted(drawn[:3]) == names and sorted(drawn[3:6]) == names
    assert len(drawn) == 7
    assert sample(names, 0, 0) == []


def test_sampling_by_package_gives_a_big_package_no_more_than_a_small_one() -> None:
    # openssl-like: one package holds most modules of the corpus
    names = [f"big/m{i}" for i in range(900)] + [f"{p}/m{i}" for p in "abcdef" for i in range(5)]
    draws = [sample_by_package(names, 14, np.random.default_rng(s)) for s in range(50)]

    for drawn in draws:
        per_package = {p: sum(n.startswith(p + "/") for n in drawn) for p in [*"abcdef", "big"]}
        assert sorted(per_package.values()) == [2, 2, 2, 2, 2, 2, 2]  # two rounds of seven
        assert len(set(drawn)) == 14 and drawn == sorted(drawn)
    assert draws[0] == sample_by_package(names, 14, np.random.default_rng(0))
    assert draws[0] != draws[1]


def test_sampling_by_package_takes_everything_when_asked_for_more() -> None:
    names = ["a/x", "a/y", "b/z"]
    assert sample_by_package(names, 10, np.random.default_rng(0)) == names
    # once a small package is used up, the others fill the batch
    assert sample_by_package(names, 3, np.random.default_rng(1)) == names


def test_sampling_by_weight_draws_a_heavy_module_far_more_often_than_a_light_one() -> None:
    # a corpus's stock cost: one module holds half of it, a hundred share the rest
    weights = {"hot/m": 100.0, **{f"cold/m{i}": 1.0 for i in range(100)}}
    draws = [sample_by_weight(weights, 4, np.random.default_rng(s)) for s in range(200)]

    assert all(len(set(d)) == 4 and d == sorted(d) for d in draws)
    # missed only if each of 4 draws misses a half of the weight: 1/16; uniformly, 4/101
    assert sum("hot/m" in d for d in draws) >= 170
    cold = [sum(f"cold/m{i}" in d for d in draws) for i in range(100)]
    assert max(cold) < 20  # each about 3 times in 200 batches of 3 cold draws
    assert draws[0] == sample_by_weight(weights, 4, np.random.default_rng(0))
    assert draws[0] != draws[1]


def test_sampling_by_weight_takes_weight_zero_last_and_everything_when_asked_for_more() -> None:
    weights = {"a/x": 0.0, "a/y": 1e-9, "b/z": 5.0}
    for s in range(20):
        assert sample_by_weight(weights, 2, np.random.default_rng(s)) == ["a/y", "b/z"]
    assert sample_by_weight(weights, 5, np.random.default_rng(0)) == ["a/x", "a/y", "b/z"]
    with pytest.raises(ValueError, match="finite"):
        sample_by_weight({"a/x": float("nan")}, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="cannot sample -1"):
        sample_by_weight(weights, -1, np.random.default_rng(0))


def test_sampler_sees_every_module_once_per_epoch() -> None:
    names = list(CORPUS.names)
    sampler = Sampler(names, seed=4)
    first = sampler.batch(50) + sampler.batch(len(names) - 50)

    assert sorted(first) == sorted(names)
    assert sampler.epoch == 1
    again = Sampler(names, seed=4)
    assert again.batch(len(names)) == first
    sampler.batch(1)
    assert sampler.epoch == 2


def test_a_training_env_sampling_by_baseline_draws_where_the_baseline_total_is() -> None:
    baselines = {"hot/m": 1e6, "zero/m": 0.0, **{f"cold/m{i}": 10.0 for i in range(50)}}
    env = TrainEnv(None, WorkSpec(), dict.fromkeys(baselines), baselines,  # type: ignore[arg-type]
                   sample_by="baseline")
    for s in range(10):
        drawn = env.sample_modules(np.random.default_rng(s), 3)
        assert "hot/m" in drawn and "zero/m" not in drawn  # no baseline: not a training module
