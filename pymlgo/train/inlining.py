"""Inlining's training hooks (`hooks.ProblemTraining`): every algorithm, object bytes as
the measure, and a setup that records (or reads from a trace) clang's own decisions to
behaviour-clone, builds the feature normalization and the warm-start policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from pymlgo.ir2vec.vocab_file import EMBEDDING_FEATURES
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.vocab import build_vocab
from pymlgo.problems.base import CompileJob, Problem
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE, HeuristicPolicy
from pymlgo.train.config import ALGORITHMS, DEFAULT_HIDDEN, TrainConfig
from pymlgo.train.env import BYTES, Demonstrations, Episode, TrainEnv, inputs
from pymlgo.train.hooks import (
    STREAM_INIT,
    STREAM_WARMSTART,
    PolicySetup,
    PPOHead,
    TrainError,
    stream_seed,
)
from pymlgo.train.sources import Sources, check_features, load_sources

if TYPE_CHECKING:
    from pymlgo.corpus.format import Corpus
    from pymlgo.corpus.split import Split
    from pymlgo.toolchain.compiler import Compiler
    from pymlgo.workers.protocol import Executor, WorkSpec


def _demonstrations(episodes: list[Episode], features: tuple[str, ...]) -> Demonstrations:
    """Inputs and clang's decision (the label) of every recorded call site."""
    ok = [e for e in episodes if e.ok and e.actions is not None and len(e.actions)]
    if not ok:
        return Demonstrations(np.zeros((0, len(features))), np.zeros(0, dtype=np.float32))
    x = np.concatenate([inputs(features, e) for e in ok])
    y = np.concatenate([inputs((DEFAULT_FEATURE,), e)[:, 0] for e in ok])
    return Demonstrations(x=x, y=(y != 0).astype(np.float32))


def _input_features(config: TrainConfig, episodes: list[Episode]) -> tuple[str, ...]:
    if config.policy.features is not None:
        return config.policy.features
    # clang's own decision is the label, not an input (as in MLGO), unless the policy is to
    # learn departures from it; IR2Vec embeddings (float[dim], from traces made with
    # --ir2vec) are not quantile inputs
    sent = _compiler_features(episodes)
    own = tuple(n for n in sent if n != DEFAULT_FEATURE and n not in EMBEDDING_FEATURES)
    if config.policy.reads_default:
        if DEFAULT_FEATURE not in sent:
            raise TrainError(f"policy.reads_default: the decisions recorded have no "
                             f"{DEFAULT_FEATURE} (a trace made without clang's decision?)")
        return (*own, DEFAULT_FEATURE)
    return own


def _compiler_features(episodes: list[Episode]) -> tuple[str, ...]:
    """The features clang sent, in its order (from the first module with decisions)."""
    for e in episodes:
        if e.ok and e.features:
            return tuple(e.features)
    raise TrainError("no training module produced a single inlining decision")


class InliningTraining:
    algorithms = ALGORITHMS
    bc_warmstart = True
    scoring = BYTES
    keep_baseline_results = False
    default_hidden = DEFAULT_HIDDEN

    def check(self, config: TrainConfig) -> None:
        pass  # every key of TrainConfig applies to inlining

    def load_sources(self, config: TrainConfig, corpus: Corpus, compiler: Compiler) -> Sources:
        return load_sources(config, corpus, compiler.version)

    def setup(self, config: TrainConfig, split: Split, baselines: Mapping[str, float],
              jobs: Mapping[str, CompileJob], executor: Executor, spec: WorkSpec,
              sources: Sources, say: Callable[[str], None]) -> PolicySetup:
        """Heuristic decisions (recorded, or read from `config.traces`), vocab, and the
        warm-start policy."""
        names = (*split.train, *split.validation)
        usable = sorted(n for n in names if n in baselines)
        if sources.traces is not None:
            say(f"clang's decisions on {len(usable)} modules from {sources.traces.directory}")
            episodes = sources.traces.episodes(usable, baselines)  # type: ignore[arg-type]
        else:
            say(f"recording clang's decisions on {len(jobs)} modules")
            env = TrainEnv(executor, spec, jobs, baselines)
            episodes = env.run([HeuristicPolicy()], usable, record=True)
        train_eps = [e for e in episodes if e.module in set(split.train)]
        val_eps = [e for e in episodes if e.module in set(split.validation)]
        compiler_features = _compiler_features(train_eps)

        initial: InliningPolicy
        if sources.warm is not None:
            check_features(sources, config, compiler_features, None)
            initial = sources.warm
            features = initial.vocab.features
        else:
            vocab = sources.vocab
            if vocab is None:
                features = _input_features(config, train_eps)
                columns = {name: np.concatenate(
                    [np.asarray(e.features[name]).reshape(-1) for e in train_eps
                     if e.ok and e.features]) for name in features}
                vocab = build_vocab(columns, quantiles=config.quantiles, features=features,
                                    tail=config.out_of_range)
            elif config.out_of_range == "log":  # `mlgo vocab` writes "clip" vocabs
                vocab = replace(vocab, tail=config.out_of_range)
            check_features(sources, config, compiler_features, vocab)
            features = vocab.features
            rng = np.random.default_rng([config.seed, STREAM_INIT])
            params = init_mlp(vocab.input_dim, config.hidden, rng)
            initial = InliningPolicy(vocab=vocab, params=params, hidden=config.hidden,
                                     name=f"mlgo-{config.algo}")
        demos_train = _demonstrations(train_eps, features)
        demos_val = _demonstrations(val_eps, features) if val_eps else None
        warm_scalars: dict[str, float] = {}
        if config.warmstart == "bc" and config.algo != "bc":
            from pymlgo.train.bc import BehaviourCloning

            say(f"behaviour cloning warm start: {len(demos_train)} decisions, "
                f"{config.bc.warmstart_epochs} epochs")
            bc = BehaviourCloning(config.bc, initial, demos_train, demos_val,
                                  seed=stream_seed(config.seed, STREAM_WARMSTART))
            warm_scalars = bc.fit(config.bc.warmstart_epochs)
            initial = bc.policy()
        decisions = {e.module: e.decisions for e in episodes if e.ok}
        return PolicySetup(decisions, demos_train, demos_val, initial, warm_scalars)

    def ppo_head(self) -> PPOHead:
        from pymlgo.train.heads import InliningHead

        return InliningHead()


def training(problem: Problem) -> InliningTraining:
    return InliningTraining()
