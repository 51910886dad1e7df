"""Inlining's training hooks (`hooks.ProblemTraining`): every algorithm, object bytes as
the measure, and a setup that records (or reads from a trace) clang's own decisions to
behaviour-clone, builds the feature normalization and the warm-start policy.

A run with an IR2Vec vocabulary (`policy.ir2vec_vocab`, or a warm start that reads
embeddings) keeps a copy of it as OUTPUT_DIR/ir2vec.json; every compile of the run passes
that copy to clang, and the policies it saves carry it, so a moved or deleted original does
not matter once the run is set up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pymlgo.ir2vec.vocab_file import EMBEDDING_FEATURES
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.store import IR2VEC_FILE
from pymlgo.policy.vocab import EmbeddingInput, Vocab, build_vocab, fit_embedding
from pymlgo.problems.base import CompileJob, Policy, Problem
from pymlgo.problems.inlining.policies import (
    DEFAULT_FEATURE,
    HeuristicPolicy,
    builtin_policy,
    shift_policy,
)
from pymlgo.problems.inlining.problem import InliningOptions, ir2vec_vocab_of
from pymlgo.toolchain.files import write_atomic
from pymlgo.train.config import (
    ALGORITHMS,
    DEFAULT_HIDDEN,
    ConfigError,
    ILConfig,
    TrainConfig,
)
from pymlgo.train.env import BYTES, Demonstrations, Episode, TrainEnv, inputs
from pymlgo.train.hooks import (
    STREAM_INIT,
    STREAM_WARMSTART,
    PolicySetup,
    PPOHead,
    TrainError,
    stream_seed,
)
from pymlgo.train.sources import Sources, check_features, load_sources, policy_inputs

if TYPE_CHECKING:
    from pymlgo.corpus.format import Corpus
    from pymlgo.corpus.split import Split
    from pymlgo.toolchain.compiler import Compiler
    from pymlgo.workers.protocol import Executor, WorkSpec


BEST_OF_PREFIX = "best:"


def teacher_rules(teacher: str) -> tuple[str, ...]:
    """The rules a teacher chooses among per module: `best:R1,R2,...` is clang's own
    decision (`default`, first, so a tie keeps it) and R1, R2, ...; any other teacher is
    that one rule."""
    if not teacher.startswith(BEST_OF_PREFIX):
        return (teacher,)
    rules = [r.strip() for r in teacher.removeprefix(BEST_OF_PREFIX).split(",") if r.strip()]
    default = HeuristicPolicy().name
    return (default, *dict.fromkeys(r for r in rules if r != default))


def check_teacher(teacher: str) -> None:
    """ConfigError unless every rule of `teacher` is a built-in that decides from the
    features (and a best-of teacher names at least one besides `default`)."""
    rules = teacher_rules(teacher)
    if teacher.startswith(BEST_OF_PREFIX) and len(rules) < 2:
        raise ConfigError(f"bc.teacher {teacher!r}: name the rules to choose among besides "
                          "default, e.g. best:shift:2:30:3,shift:2")
    for rule in rules:
        try:
            builtin_policy(rule)
        except ValueError as exc:
            raise ConfigError(f"bc.teacher must be a built-in policy that decides from the "
                              f"features, or best:RULE,...: {exc}") from None


# algorithms whose updates read only the decisions a policy made, never its probability of
# the forced ones: a window forces clang's decision outside it
WINDOW_ALGOS = ("bc", "il", "es")


# [policy] keys under which clang's own decision stands at some call sites, and where
_FORCING = {"window": "a window forces clang's decision outside it",
            "languages": "clang's decisions stand for the modules of other languages"}


def check_forced_decisions(config: TrainConfig) -> None:
    """ConfigError unless `policy.window` is empty or a shift rule, and each key of
    `_FORCING` that is set goes with an algorithm of `WINDOW_ALGOS` training a new policy."""
    if config.policy.window:
        try:
            shift_policy(config.policy.window)
        except ValueError as exc:
            raise ConfigError(f"policy.window: {exc}") from None
    for key, where in _FORCING.items():
        if not getattr(config.policy, key):
            continue
        if config.algo not in WINDOW_ALGOS:
            raise ConfigError(f"policy.{key}: algo {config.algo!r} learns from the "
                              f"probability of each decision, and {where}; use one of "
                              f"{', '.join(WINDOW_ALGOS)}")
        if config.policy_warmstart is not None:
            raise ConfigError(f"policy.{key} does not apply with a saved-policy warm start "
                              f"(it brings its own, if any); leave it out")


def best_rules(runs: list[Episode], rules: tuple[str, ...]) -> dict[str, str]:
    """Per module, the rule whose compile was smallest: `runs` are the compiles of rules[1:]
    (member k is rules[k + 1]); rules[0], clang's own, is the module's baseline, and wins
    ties and modules where a rule failed."""
    best: dict[str, tuple[float, str]] = {}
    for e in runs:
        if not e.ok or e.size is None:
            continue
        current = best.get(e.module, (e.baseline, rules[0]))
        if e.size < current[0]:
            current = (e.size, rules[e.member + 1])
        best[e.module] = current
    return {m: rule for m, (_, rule) in best.items()}


def _demonstrations(episodes: list[Episode], vocab: Vocab,
                    teacher: str | Mapping[str, str]) -> Demonstrations:
    """Raw inputs (embeddings included) and the label of every recorded call site: clang's
    decision, or what the built-in policy `teacher` (per module, when a mapping: modules it
    does not name get clang's) decides from its features."""
    ok = [e for e in episodes if e.ok and e.actions is not None and len(e.actions)]
    if not ok:
        return Demonstrations(np.zeros((0, vocab.raw_width)), np.zeros(0, dtype=np.float32))
    x = np.concatenate([inputs(vocab.raw_features, e) for e in ok])
    default = HeuristicPolicy().name
    per_module = {} if isinstance(teacher, str) else teacher
    rules: dict[str, Policy] = {}
    labels = []
    for e in ok:
        name = teacher if isinstance(teacher, str) else per_module.get(e.module, default)
        if name == default:
            labels.append(inputs((DEFAULT_FEATURE,), e)[:, 0])
        else:
            rule = rules.setdefault(name, builtin_policy(name))
            labels.append(_teacher_labels(rule, e))
    y = np.concatenate(labels)
    return Demonstrations(x=x, y=(y != 0).astype(np.float32))


def _teacher_labels(teacher: Policy, episode: Episode) -> np.ndarray:
    """The teacher's decision at each call site of a recorded episode."""
    missing = [f for f in teacher.required_features if f not in (episode.features or {})]
    if missing:
        raise TrainError(f"bc.teacher {teacher.name} reads {', '.join(missing)}, which the "
                         f"recorded decisions of {episode.module} do not have")
    decide = teacher.for_module(episode.module)
    columns = {f: np.asarray(episode.features[f]) for f in teacher.required_features}
    return np.array([decide({f: c[i:i + 1].reshape(-1) for f, c in columns.items()})
                     for i in range(len(episode.actions))], dtype=np.float32)


def _input_features(config: TrainConfig, episodes: list[Episode]) -> tuple[str, ...]:
    sent = _compiler_features(episodes)
    if (config.policy.features is None and config.policy.reads_default
            and DEFAULT_FEATURE not in sent):
        raise TrainError(f"policy.reads_default: the decisions recorded have no "
                         f"{DEFAULT_FEATURE} (a trace made without clang's decision?)")
    return policy_inputs(config, sent)


def _fit_embeddings(episodes: list[Episode], sent: tuple[str, ...]
                    ) -> tuple[EmbeddingInput, ...]:
    """The z-score normalization of clang's IR2Vec embeddings over the training decisions."""
    missing = [n for n in EMBEDDING_FEATURES if n not in sent]
    if missing:
        raise TrainError(f"clang sent no {', '.join(missing)}: the compiles did not get the "
                         f"IR2Vec vocabulary")
    return tuple(fit_embedding(name, np.concatenate(
        [np.asarray(e.features[name]).reshape(len(e.actions), -1) for e in episodes
         if e.ok and e.features and e.actions is not None and len(e.actions)]))
        for name in EMBEDDING_FEATURES)


def _carrying(policy: InliningPolicy, ir2vec: Path | None) -> InliningPolicy:
    """`policy` compiling with the run's own copy of its IR2Vec vocabulary (the same bytes)."""
    return policy if ir2vec is None else replace(policy, ir2vec_vocab=ir2vec)


def _run_ir2vec(out: Path, sources: Sources | None) -> Path | None:
    """The run's own copy of its IR2Vec vocabulary (OUTPUT_DIR/ir2vec.json), made when the
    run is set up; None for a run without embeddings. Its sha256 is in the run's identity
    (config.policy.ir2vec_vocab), so a resume with another file is refused by the trainer."""
    path = (out / IR2VEC_FILE).absolute()
    if sources is not None:  # a new setup: the configured file, or none
        if sources.ir2vec is None:
            path.unlink(missing_ok=True)  # left by an earlier attempt at another config
            return None
        data = sources.ir2vec.read_bytes()
        if not path.is_file() or path.read_bytes() != data:
            write_atomic(path, data)
        return path
    return path if path.is_file() else None


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
        # every key of TrainConfig applies to inlining; the teacher must be one of its rules
        if config.reward_weighting == "cost":
            raise ConfigError("reward_weighting = 'cost' weighs by the register allocator's "
                              "stock cost; inlining weighs by -Oz bytes: 'bytes'")
        check_teacher(config.bc.teacher)
        check_forced_decisions(config)
        if config.il.answers != ILConfig().answers:
            raise ConfigError("il.answers (other answers tried per decision) does nothing for "
                              "inlining: a call site has one other answer. Leave it out")

    def load_sources(self, config: TrainConfig, corpus: Corpus, compiler: Compiler) -> Sources:
        return load_sources(config, corpus, compiler.version)

    def compile_options(self, out: Path, sources: Sources | None) -> InliningOptions | None:
        ir2vec = _run_ir2vec(out, sources)
        return None if ir2vec is None else InliningOptions(ir2vec_vocab=ir2vec)

    def rebind(self, policy: InliningPolicy, options: Any) -> InliningPolicy:
        ir2vec = ir2vec_vocab_of(options)
        if policy.vocab.embeddings and ir2vec is None:
            raise TrainError(f"the run reads IR2Vec embeddings but its {IR2VEC_FILE} is gone; "
                             f"use a new --output_dir")
        return _carrying(policy, ir2vec)

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

        ir2vec = ir2vec_vocab_of(spec.options)
        initial: InliningPolicy
        if sources.warm is not None:
            if sources.warm.window and config.algo not in WINDOW_ALGOS:
                raise ConfigError(f"the warm start {config.warmstart} decides within the "
                                  f"window {sources.warm.window}; algo {config.algo!r} cannot "
                                  f"train such a policy (use one of {', '.join(WINDOW_ALGOS)})")
            if sources.warm.languages and config.algo not in WINDOW_ALGOS:
                raise ConfigError(f"the warm start {config.warmstart} decides only "
                                  f"{', '.join(sources.warm.languages)}; algo "
                                  f"{config.algo!r} cannot train such a policy (use one of "
                                  f"{', '.join(WINDOW_ALGOS)})")
            check_features(sources, config, compiler_features, None)
            initial = _carrying(sources.warm, ir2vec)
        else:
            vocab = sources.vocab
            if vocab is None:
                features = _input_features(config, train_eps)
                columns = {name: np.concatenate(
                    [np.asarray(e.features[name]).reshape(-1) for e in train_eps
                     if e.ok and e.features]) for name in features}
                try:
                    vocab = build_vocab(columns, quantiles=config.quantiles,
                                        features=features, tail=config.out_of_range,
                                        differences=config.policy.differences or ())
                except KeyError as exc:  # a difference of a feature the policy does not read
                    raise TrainError(f"policy.differences: {exc.args[0]}") from None
            elif config.out_of_range == "log":  # `mlgo vocab` writes "clip" vocabs
                vocab = replace(vocab, tail=config.out_of_range)
            check_features(sources, config, compiler_features, vocab)
            if ir2vec is not None and not vocab.embeddings:
                vocab = replace(vocab, embeddings=_fit_embeddings(train_eps, compiler_features))
            elif vocab.embeddings and ir2vec is None:
                raise TrainError(f"{config.vocab} normalizes IR2Vec embeddings: set "
                                 f"policy.ir2vec_vocab to the vocabulary they come from")
            rng = np.random.default_rng([config.seed, STREAM_INIT])
            params = init_mlp(vocab.input_dim, config.hidden, rng)
            initial = InliningPolicy(vocab=vocab, params=params, hidden=config.hidden,
                                     name=f"mlgo-{config.algo}", ir2vec_vocab=ir2vec,
                                     window=config.policy.window,
                                     languages=config.policy.languages)
        teacher: str | dict[str, str] = config.bc.teacher
        rules = teacher_rules(config.bc.teacher)
        if len(rules) > 1:
            # compiled once per run (setup.pkl keeps the demonstrations)
            say(f"bc.teacher {config.bc.teacher}: {', '.join(rules[1:])} compiled on "
                f"{len(usable)} modules, the smallest object's rule labels each")
            env = TrainEnv(executor, spec, jobs, baselines)
            runs = env.run([builtin_policy(r) for r in rules[1:]], usable)
            teacher = best_rules(runs, rules)
            picked = {r: sum(1 for m in usable if teacher.get(m, rules[0]) == r) for r in rules}
            say("teacher's choices: " + ", ".join(f"{r} {n}" for r, n in picked.items()))
        demos_train = _demonstrations(train_eps, initial.vocab, teacher)
        demos_val = _demonstrations(val_eps, initial.vocab, teacher) if val_eps else None
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
        random_start = sources.warm is None and not (config.warmstart == "bc"
                                                     and config.algo != "bc")
        return PolicySetup(decisions, demos_train, demos_val, initial, warm_scalars,
                           initial_is_random=random_start)

    def ppo_head(self) -> PPOHead:
        from pymlgo.train.heads import InliningHead

        return InliningHead()

    def behaviour_cloning(self, config: TrainConfig, demos_train: Any,
                          demos_validation: Any, initial: Any, seed: int) -> Any:
        from pymlgo.train.bc import BehaviourCloning

        return BehaviourCloning(config.bc, initial, demos_train, demos_validation, seed)

    def imitation(self, config: TrainConfig, initial: Any) -> Any:
        from pymlgo.train.bc import CallSiteImitator

        return CallSiteImitator(config.il, initial)


def training(problem: Problem) -> InliningTraining:
    return InliningTraining()
