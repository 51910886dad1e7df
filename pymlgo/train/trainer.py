"""The loop every algorithm shares: setup, iterations, validation, checkpoints, logging.

Output directory layout:
- `setup.pkl` — written once: the split, -Oz sizes, vocab, heuristic demonstrations and
  the initial (warm-start) policy, so a resumed run never recompiles them;
- `checkpoint.pkl` — after every iteration (atomic): iteration count, algorithm state
  (parameters, optimizer, RNG states), best-so-far, elapsed time;
- `best/` — the policy with the lowest validation size so far; `final/` — the last one
  (both loadable with `mlgo eval --policy DIR`);
- `scalars.jsonl` — one JSON object per iteration; TensorBoard event files (`tensorboard/`)
  with the same tags as well when tensorboard is installed. Every iteration logs
  `reward/train` (mean 1 - size/-Oz size of its training compiles), `size_change/train`,
  `size_change/validation` (total .text vs -Oz; for bc, which compiles nothing to learn,
  both only on iterations that validate, see `eval_every`),
  `size_change/validation_best`, `compiles`, `failures` and `decisions_per_second` (over
  every compile of the iteration: training and validation), `time/iteration_seconds`,
  and the algorithm's own (`bc/...`, `ppo/...`, `es/...`, `dqn/...`); iteration 0 holds
  the starting policy's validation size and the bc warm start's scalars;
- `ir2native-model.json` — with `partial_rewards = "ir2native"` and no model given: the
  IR2Native model fitted on the training split's modules (reused on resume);
- `ir2vec.json` — with `policy.ir2vec_vocab` (or a warm start that reads embeddings): the
  run's copy of the IR2Vec vocabulary every compile of the run passes to clang.

An output directory that holds a checkpoint is resumed: the run continues at the next
iteration with the saved state, and ends with the bytes an uninterrupted run would give.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pymlgo.corpus.format import Corpus
from pymlgo.corpus.split import Split, split_by_module, split_by_package
from pymlgo.evaluate.baseline import baseline_sizes
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.ir2native.estimates import from_extra
from pymlgo.ir2native.model import IR2NativeModel
from pymlgo.ir2vec.vocab_file import EMBEDDING_FEATURES
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.store import IR2VEC_FILE, save_policy
from pymlgo.policy.vocab import EmbeddingInput, Vocab, build_vocab, fit_embedding
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE, HeuristicPolicy
from pymlgo.problems.inlining.problem import INLINING, InliningOptions, ir2vec_vocab_of
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.train.config import LEGACY_SIZE_METRIC, TrainConfig
from pymlgo.train.env import Demonstrations, Episode, RunStats, TrainEnv, inputs, size_change
from pymlgo.train.shaping import IR2NativeShaper
from pymlgo.train.sources import SourceError, Sources, check_features, load_sources
from pymlgo.workers.protocol import Executor, WorkSpec

SETUP_FILE, CHECKPOINT_FILE, SCALARS_FILE = "setup.pkl", "checkpoint.pkl", "scalars.jsonl"
IR2NATIVE_FILE = "ir2native-model.json"
BEST_DIR, FINAL_DIR = "best", "final"
CHECKPOINT_FORMAT = 1

# Independent random streams per purpose, all derived from the one seed.
_STREAM_INIT, _STREAM_WARMSTART, _STREAM_ALGO = 1, 2, 3


class TrainError(RuntimeError):
    """The run cannot start or continue (say, the output directory holds another run)."""


class Algorithm(Protocol):
    """What the trainer needs from bc / ppo / es / dqn."""

    def policy(self) -> InliningPolicy: ...

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """How to run, not what to learn: none of this changes the trained policy."""

    workers: int | None = None
    cluster: str | None = None
    clang: str | None = None  # None: $MLGO_CLANG, else the bundled clang
    timeout: float = 300.0  # per module compile
    progress: bool = True  # progress bar on stderr
    tensorboard: bool = True  # event files too, when tensorboard is installed


@dataclass(frozen=True, eq=False)
class Setup:
    """Everything computed once before iteration 1 (saved in `setup.pkl`)."""

    split: Split
    baselines: Mapping[str, int]  # -Oz bytes, train + validation modules
    decisions: Mapping[str, int]  # inlining decisions clang asks for, per module
    demos_train: Demonstrations
    demos_validation: Demonstrations | None
    initial: InliningPolicy
    warmstart_scalars: Mapping[str, float]
    identity: Mapping[str, Any]  # TrainConfig.setup_identity() it was made for


@dataclass(frozen=True)
class TrainResult:
    output_dir: Path
    split: Split
    iterations: int  # completed
    best_iteration: int
    best_validation_change: float  # total size change vs -Oz of `best/` on validation
    final_validation_change: float
    minutes: float  # training time, setup included, summed over resumed runs
    resumed_from: int | None  # iteration of the checkpoint this run resumed from

    @property
    def best_dir(self) -> Path:
        return self.output_dir / BEST_DIR

    @property
    def final_dir(self) -> Path:
        return self.output_dir / FINAL_DIR


# --- files ------------------------------------------------------------------------------


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a crash must leave the old checkpoint or the new one
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# A write that fails for want of space (or quota, or the file-size limit) is the user's to
# fix, not a bug: say so on one line, and that re-running resumes.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class DiskFullError(TrainError):
    """A checkpoint, policy or log could not be written: no space left."""


@contextlib.contextmanager
def _writing_to(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        raise DiskFullError(
            f"cannot write {path}: {exc.strerror or exc} (disk full, over quota or over the "
            f"file-size limit); everything written before, the last checkpoint included, is "
            f"intact: free space and run the same command again to resume") from exc


def _write_atomic(path: Path, data: bytes) -> None:
    with _writing_to(path):
        _atomic_write_bytes(path, data)


def _save_policy(policy: InliningPolicy, directory: Path) -> None:
    with _writing_to(directory):
        save_policy_dir(policy, directory)


def _load_pickle(path: Path) -> Any | None:
    if not path.is_file():
        return None
    with path.open("rb") as f:
        return pickle.load(f)


def save_policy_dir(policy: InliningPolicy, directory: Path) -> None:
    """Replace `directory` with a saved policy; a crash leaves the old or the new one."""
    staging = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    save_policy(policy, staging)
    old = directory.with_name(f".{directory.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        os.rename(directory, old)
    os.rename(staging, directory)
    shutil.rmtree(old, ignore_errors=True)


class ScalarLog:
    """`scalars.jsonl` (always) plus TensorBoard (if installed and wanted).

    On resume, entries of iterations after the checkpoint (written before a crash) are
    dropped, so the log reads as if the run had never stopped.
    """

    def __init__(self, directory: Path, resume_after: int, tensorboard: bool) -> None:
        self.path = directory / SCALARS_FILE
        if self.path.exists():
            kept = [json.dumps(row) for row in _parse_scalars(self.path)
                    if row["iteration"] <= resume_after]
            _write_atomic(self.path, "".join(ln + "\n" for ln in kept).encode())
        self.writer: Any = None
        self.note = f"scalars: {self.path}"
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self.note += " (tensorboard is not installed: no event files)"
            else:
                # purge_step drops events a crashed run wrote after its last checkpoint
                self.writer = SummaryWriter(str(directory / "tensorboard"),
                                            purge_step=resume_after + 1)
                self.note += f"; tensorboard --logdir {directory / 'tensorboard'}"

    def write(self, iteration: int, scalars: Mapping[str, float]) -> None:
        row = {"iteration": iteration, **{k: float(v) for k, v in sorted(scalars.items())}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for name, value in sorted(scalars.items()):
                self.writer.add_scalar(name, value, iteration)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_scalars(output_dir: Path) -> list[dict[str, float]]:
    path = Path(output_dir) / SCALARS_FILE
    return _parse_scalars(path) if path.is_file() else []


def _parse_scalars(path: Path) -> list[dict[str, float]]:
    rows = []
    for ln in path.read_text().splitlines():
        try:
            rows.append(json.loads(ln))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash or a full disk; its checkpoint never came
    return rows


# --- setup ------------------------------------------------------------------------------


def make_split(config: TrainConfig, corpus: Corpus) -> Split:
    s = config.split
    if s.by == "package":
        return split_by_package(corpus, seed=config.seed, validation=s.validation,
                                heldout=s.heldout, heldout_packages=s.heldout_packages,
                                validation_by=s.validation_by)
    return split_by_module(corpus, seed=config.seed, validation=s.validation,
                           heldout=s.heldout)


def _demonstrations(episodes: list[Episode], vocab: Vocab) -> Demonstrations:
    """Raw inputs (embeddings included) and clang's decision (the label) of every recorded
    call site."""
    ok = [e for e in episodes if e.ok and e.actions is not None and len(e.actions)]
    if not ok:
        return Demonstrations(np.zeros((0, vocab.raw_width)), np.zeros(0, dtype=np.float32))
    x = np.concatenate([inputs(vocab.raw_features, e) for e in ok])
    y = np.concatenate([inputs((DEFAULT_FEATURE,), e)[:, 0] for e in ok])
    return Demonstrations(x=x, y=(y != 0).astype(np.float32))


def _input_features(config: TrainConfig, episodes: list[Episode]) -> tuple[str, ...]:
    if config.policy.features is not None:
        return config.policy.features
    # clang's own decision is the label, never an input (as in MLGO); IR2Vec embeddings
    # (float[dim], from traces made with --ir2vec) are not quantile inputs
    return tuple(n for n in _compiler_features(episodes)
                 if n != DEFAULT_FEATURE and n not in EMBEDDING_FEATURES)


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
    """`policy` compiling with the run's own copy of its IR2Vec vocabulary (same bytes:
    the run directory keeps one, so a moved or deleted original does not matter)."""
    return policy if ir2vec is None else replace(policy, ir2vec_vocab=ir2vec)


def _compiler_features(episodes: list[Episode]) -> tuple[str, ...]:
    """The features clang sent, in its order (from the first module with decisions)."""
    for e in episodes:
        if e.ok and e.features:
            return tuple(e.features)
    raise TrainError("no training module produced a single inlining decision")


def prepare(
    config: TrainConfig,
    corpus: Corpus,
    executor: Executor,
    compiler: Compiler,
    spec: WorkSpec,
    say: Callable[[str], None],
    sources: Sources | None = None,
) -> Setup:
    """Split, -Oz sizes, heuristic decisions (recorded, or read from `config.traces`),
    vocab, and the warm-start policy."""
    if sources is None:
        sources = _load_sources(config, corpus, compiler)
    split = make_split(config, corpus)
    if not split.train:
        raise TrainError("the split leaves no training modules")
    names = (*split.train, *split.validation)
    jobs = {j.module: j for j in corpus_jobs(corpus, names)}
    say(f"-Oz baseline sizes of {len(jobs)} modules")
    baselines = baseline_sizes(executor, list(jobs.values()), compiler, spec=spec)
    usable = sorted(n for n in names if n in baselines)
    try:
        if sources.traces is not None:
            say(f"clang's decisions on {len(usable)} modules from {sources.traces.directory}")
            episodes = sources.traces.episodes(usable, baselines)
        else:
            say(f"recording clang's decisions on {len(jobs)} modules")
            env = TrainEnv(executor, spec, jobs, baselines)
            episodes = env.run([HeuristicPolicy()], usable, record=True)
        train_eps = [e for e in episodes if e.module in set(split.train)]
        val_eps = [e for e in episodes if e.module in set(split.validation)]
        compiler_features = _compiler_features(train_eps)

        ir2vec = ir2vec_vocab_of(spec.options)
        if sources.warm is not None:
            check_features(sources, config, compiler_features, None)
            initial = _carrying(sources.warm, ir2vec)
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
            if ir2vec is not None and not vocab.embeddings:
                vocab = replace(vocab, embeddings=_fit_embeddings(train_eps, compiler_features))
            elif vocab.embeddings and ir2vec is None:
                raise TrainError(f"{config.vocab} normalizes IR2Vec embeddings: set "
                                 f"policy.ir2vec_vocab to the vocabulary they come from")
            rng = np.random.default_rng([config.seed, _STREAM_INIT])
            params = init_mlp(vocab.input_dim, config.hidden, rng)
            initial = InliningPolicy(vocab=vocab, params=params, hidden=config.hidden,
                                     name=f"mlgo-{config.algo}", ir2vec_vocab=ir2vec)
    except SourceError as exc:
        raise TrainError(str(exc)) from exc
    demos_train = _demonstrations(train_eps, initial.vocab)
    demos_val = _demonstrations(val_eps, initial.vocab) if val_eps else None
    warm_scalars: dict[str, float] = {}
    if config.warmstart == "bc" and config.algo != "bc":
        from pymlgo.train.bc import BehaviourCloning

        say(f"behaviour cloning warm start: {len(demos_train)} decisions, "
            f"{config.bc.warmstart_epochs} epochs")
        bc = BehaviourCloning(config.bc, initial, demos_train, demos_val,
                              seed=_seed(config, _STREAM_WARMSTART))
        warm_scalars = bc.fit(config.bc.warmstart_epochs)
        initial = bc.policy()
    decisions = {e.module: e.decisions for e in episodes if e.ok}
    return Setup(split, baselines, decisions, demos_train, demos_val, initial, warm_scalars,
                 config.setup_identity())


def _load_sources(config: TrainConfig, corpus: Corpus, compiler: Compiler) -> Sources:
    try:
        return load_sources(config, corpus, compiler.version)
    except SourceError as exc:
        raise TrainError(str(exc)) from exc


def _seed(config: TrainConfig, stream: int) -> int:
    return int(np.random.default_rng([config.seed, stream]).integers(0, 2**62))


def make_algorithm(config: TrainConfig, setup: Setup,
                   shaper: IR2NativeShaper | None = None) -> Algorithm:
    seed = _seed(config, _STREAM_ALGO)
    if config.algo == "bc":
        from pymlgo.train.bc import BehaviourCloning

        return BehaviourCloning(config.bc, setup.initial, setup.demos_train,
                                setup.demos_validation, seed)
    if config.algo == "ppo":
        from pymlgo.train.ppo import PPO

        return PPO(config.ppo, setup.initial, seed, shaper=shaper,
                   weighting=config.reward_weighting)
    if config.algo == "es":
        from pymlgo.train.es import EvolutionStrategies

        return EvolutionStrategies(config.es, setup.initial, seed,
                                   weighting=config.reward_weighting)
    if config.algo == "il":
        from pymlgo.train.il import ImitationLearning

        return ImitationLearning(config.il, setup.initial, seed)
    from pymlgo.train.dqn import DQN

    return DQN(config.dqn, setup.initial, seed, weighting=config.reward_weighting)


def make_envs(setup: Setup, corpus: Corpus, executor: Executor, spec: WorkSpec,
              sample_by: str = "module") -> tuple[TrainEnv, TrainEnv, list[str]]:
    """(training env, validation env, validation module names)."""
    jobs = {j.module: j for j in corpus_jobs(corpus, (*setup.split.train,
                                                      *setup.split.validation))}
    # modules without a single inlining decision teach nothing: never compile them
    env = TrainEnv(executor, spec, {n: jobs[n] for n in setup.split.train
                                    if setup.decisions.get(n, 0) > 0}, setup.baselines,
                   sample_by=sample_by)
    val_env = TrainEnv(executor, spec, jobs, setup.baselines)
    # no validation modules (tiny corpora): pick the best on the training modules
    validation = set(setup.split.validation)
    val_names = [n for n in val_env.names if n in validation] or list(env.names)
    return env, val_env, val_names


def load_ir2native(path: Path) -> IR2NativeModel:
    from pymlgo.ir2native.model import load_model

    try:
        return load_model(path)
    except ValueError as exc:
        raise TrainError(f"{exc}; make one with `mlgo ir2native dataset` and `mlgo ir2native "
                         f"train`, or leave --ir2native-model out to fit one on the training "
                         f"split") from exc


def ir2native_model(config: TrainConfig, setup: Setup, corpus: Corpus, executor: Executor,
                    compiler: Compiler, out: Path, say: Callable[[str], None]) -> IR2NativeModel:
    """The configured IR2Native model, or one fitted on the training split (saved in `out`)."""
    path = Path(config.ir2native_model) if config.ir2native_model else out / IR2NATIVE_FILE
    if config.ir2native_model or path.is_file():
        return load_ir2native(path)
    from pymlgo.ir2native.dataset import build_dataset
    from pymlgo.ir2native.train import fit

    jobs = corpus_jobs(corpus, setup.split.train)
    say(f"fitting IR2Native on the {len(jobs)} training modules (-Oz, per-function sizes)")
    ds = build_dataset(compiler, jobs, workers=max(1, executor.num_workers))
    try:
        model = fit(ds)
    except ValueError as exc:
        raise TrainError(f"cannot fit IR2Native on the training split: {exc}; give a model "
                         f"made by `mlgo ir2native dataset/train` instead") from exc
    model.save(path)
    return model


def partial_reward_shaper(env: TrainEnv, model: IR2NativeModel,
                          say: Callable[[str], None]) -> IR2NativeShaper:
    """Switch `env` to compiles that report per-function estimates and decision callers;
    the shaper holds the -Oz estimates of every training module."""
    env.spec = replace(env.spec, options=InliningOptions(
        estimator=model, ir2vec_vocab=ir2vec_vocab_of(env.spec.options)))
    names = list(env.names)
    say(f"IR2Native estimates of -Oz on {len(names)} training modules")
    spec = replace(env.spec, policy=None, record=False)
    oz = {res.module: from_extra(res.extra)
          for res in env.executor.run(spec, [env.jobs[n] for n in names]) if res.ok}
    return IR2NativeShaper(oz)


def _needs_torch(config: TrainConfig) -> bool:
    return config.algo != "es" or config.warmstart == "bc"


# --- the loop ---------------------------------------------------------------------------


@contextlib.contextmanager
def _executor_for(options: RunOptions, executor: Executor | None) -> Iterator[Executor]:
    if executor is not None:
        yield executor
        return
    from pymlgo.workers import make_executor

    with make_executor(options.cluster, options.workers) as ex:
        yield ex


def _stamp(policy: InliningPolicy, config: TrainConfig, iteration: int) -> InliningPolicy:
    """Name and provenance saved with the policy (nothing run-specific: same seed, same
    bytes)."""
    hyper = {"algo": config.algo, "seed": config.seed, "iteration": iteration,
             "warmstart": config.warmstart, "size_metric": config.size_metric,
             "config": config.provenance()}
    return replace(policy, name=f"mlgo-{config.algo}", hyperparameters=hyper)


def train(
    config: TrainConfig,
    corpus: Corpus,
    output_dir: str | os.PathLike[str],
    *,
    options: RunOptions = RunOptions(),
    executor: Executor | None = None,
) -> TrainResult:
    """Train (or resume training) a policy into `output_dir`; see the module docstring."""
    out = Path(output_dir)
    # everything given from outside fails before anything is written
    if config.ir2native_model:
        load_ir2native(Path(config.ir2native_model))
    override = config.compile.command_override
    if override is not None and corpus.global_command_override != override:
        raise TrainError("compile.command_override is set but the corpus was loaded without "
                         "it: load it with load_corpus(root, command_override=...), as "
                         "`mlgo train` does")
    compiler = find_compiler(options.clang)
    fresh_setup = not (out / SETUP_FILE).is_file()
    sources = _load_sources(config, corpus, compiler) if fresh_setup else None
    created = not out.exists()
    with _writing_to(out):
        out.mkdir(parents=True, exist_ok=True)
    try:
        with _writing_to(out):  # disk full anywhere else: tensorboard, caches, scalars
            return _train(config, corpus, out, options, executor, compiler, sources)
    except BaseException:
        if created and not any(out.iterdir()):  # failed before writing anything
            out.rmdir()
        raise


def _train(config: TrainConfig, corpus: Corpus, out: Path, options: RunOptions,
           executor: Executor | None, compiler: Compiler, sources: Sources | None
           ) -> TrainResult:
    started = time.monotonic()

    def say(msg: str) -> None:
        if options.progress:
            print(f"mlgo train [{time.monotonic() - started:5.0f}s]: {msg}", file=sys.stderr,
                  flush=True)

    checkpoint = _load_pickle(out / CHECKPOINT_FILE)
    if checkpoint is not None:
        if checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise TrainError(f"{out / CHECKPOINT_FILE}: unknown checkpoint format")
        _check_size_metric(out, checkpoint["config"], config)
        if checkpoint["config"] != config.identity():
            raise TrainError(
                f"{out} holds a run with another configuration; use a new --output_dir "
                f"(changed: {_diff(checkpoint['config'], config.identity())})"
            )
        if checkpoint["modules"] != list(corpus.names):
            raise TrainError(f"{out} holds a run on another corpus; use a new --output_dir")
    if _needs_torch(config):
        from pymlgo.train.nets import make_deterministic

        make_deterministic(config.seed)

    ir2vec = _run_ir2vec(out, sources)
    spec = WorkSpec(problem=INLINING, clang=None if compiler.bundled else str(compiler.path),
                    timeout=options.timeout, edits=config.compile.flag_edits(),
                    size_metric=config.size_metric,
                    options=None if ir2vec is None else InliningOptions(ir2vec_vocab=ir2vec))
    with _executor_for(options, executor) as ex:
        setup: Setup | None = _load_pickle(out / SETUP_FILE)
        if setup is not None:  # the run directory may have moved since
            if setup.initial.vocab.embeddings and ir2vec is None:
                raise TrainError(f"{out} reads IR2Vec embeddings but its {IR2VEC_FILE} is "
                                 f"gone; use a new --output_dir")
            setup = replace(setup, initial=_carrying(setup.initial, ir2vec))
        if setup is not None:
            _check_size_metric(out, setup.identity, config)
        if setup is not None and setup.identity != config.setup_identity():
            raise TrainError(
                f"{out} was set up for another configuration; use a new --output_dir "
                f"(changed: {_diff(setup.identity, config.setup_identity())})"
            )
        if setup is None:
            setup = prepare(config, corpus, ex, compiler, spec, say, sources)
            _write_atomic(out / SETUP_FILE, pickle.dumps(setup, protocol=5))
        env, val_env, val_names = make_envs(setup, corpus, ex, spec, config.sample_by)
        shaper = None
        if config.partial_rewards == "ir2native":
            model = ir2native_model(config, setup, corpus, ex, compiler, out, say)
            shaper = partial_reward_shaper(env, model, say)
        algo = make_algorithm(config, setup, shaper)

        if checkpoint is not None:
            algo.load_state_dict(checkpoint["algo"])
            iteration, elapsed = checkpoint["iteration"], checkpoint["elapsed"]
            best_it, best_change, best_policy = checkpoint["best"]
            best_policy = _carrying(best_policy, ir2vec)
            # provenance as this run's: a budget raised on resume must not leave the old
            # one in best/ (an uninterrupted run with this budget would not have it)
            best_policy = _stamp(best_policy, config, best_it)
            last_change, last_eval = checkpoint["last_validation"]
            resumed_from: int | None = iteration
            say(f"resuming {out} at iteration {iteration + 1}")
        else:
            iteration, elapsed, resumed_from = 0, 0.0, None
            best_it, best_policy = 0, _stamp(algo.policy(), config, 0)
            best_change = last_change = val_env.evaluate(best_policy, val_names)
            last_eval = 0
        log = ScalarLog(out, iteration, options.tensorboard)
        say(log.note)
        if checkpoint is None:
            log.write(0, {"size_change/validation": best_change, **setup.warmstart_scalars})
        _save_policy(best_policy, out / BEST_DIR)

        def save_checkpoint() -> None:
            state = {"format": CHECKPOINT_FORMAT, "config": config.identity(),
                     "modules": list(corpus.names), "iteration": iteration,
                     "elapsed": elapsed + time.monotonic() - started,
                     "algo": algo.state_dict(), "best": (best_it, best_change, best_policy),
                     "last_validation": (last_change, last_eval)}
            _write_atomic(out / CHECKPOINT_FILE, pickle.dumps(state, protocol=5))

        if checkpoint is None:
            save_checkpoint()
        budget_s = (config.time_budget_minutes * 60.0 if config.time_budget_minutes else None)
        max_it = config.max_iterations

        def spent() -> float:
            return elapsed + time.monotonic() - started

        bar = _progress_bar(options.progress, max_it, iteration)
        last_iter_s = 0.0
        try:
            while max_it is None or iteration < max_it:
                # stop before an iteration that would overrun the budget, not after it
                if budget_s is not None and spent() + last_iter_s > budget_s:
                    break
                t0 = time.monotonic()
                iteration += 1
                env.stats, val_env.stats = RunStats(), RunStats()
                scalars = algo.iterate(env, iteration)
                final_due = max_it is not None and iteration == max_it
                if iteration % config.eval_every == 0 or final_due:
                    policy = _stamp(algo.policy(), config, iteration)
                    last_change, last_eval = val_env.evaluate(policy, val_names), iteration
                    scalars["size_change/validation"] = last_change
                    if "size_change/train" not in scalars:  # bc compiles nothing itself
                        eps = env.run([policy], env.names)
                        scalars["size_change/train"] = size_change(eps)
                        scalars["reward/train"] = float(np.mean([e.reward for e in eps
                                                                 if e.ok] or [0.0]))
                    if last_change < best_change:
                        best_it, best_change, best_policy = iteration, last_change, policy
                        _save_policy(best_policy, out / BEST_DIR)
                # every compile of the iteration: training, validation, bc's size check
                scalars |= (env.stats + val_env.stats).as_scalars()
                scalars["size_change/validation_best"] = best_change
                scalars["time/iteration_seconds"] = time.monotonic() - t0
                log.write(iteration, scalars)
                save_checkpoint()
                last_iter_s = time.monotonic() - t0
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(train=f"{scalars.get('size_change/train', 0.0):+.2%}",
                                    val=f"{last_change:+.2%}", best=f"{best_change:+.2%}")
            if last_eval != iteration:  # stopped by the budget between validations
                policy = _stamp(algo.policy(), config, iteration)
                last_change, last_eval = val_env.evaluate(policy, val_names), iteration
                if last_change < best_change:
                    best_it, best_change, best_policy = iteration, last_change, policy
                    _save_policy(best_policy, out / BEST_DIR)
                save_checkpoint()
        finally:
            if bar is not None:
                bar.close()
            log.close()
        _save_policy(_stamp(algo.policy(), config, iteration), out / FINAL_DIR)
    total = elapsed + time.monotonic() - started
    say(f"{iteration} iterations, {total / 60:.1f} min; best: iteration {best_it}, "
        f"validation {best_change:+.2%} vs -Oz ({out / BEST_DIR})")
    return TrainResult(out, setup.split, iteration, best_it, best_change, last_change,
                       total / 60.0, resumed_from)


def _run_ir2vec(out: Path, sources: Sources | None) -> Path | None:
    """The run's own copy of its IR2Vec vocabulary (OUTPUT_DIR/ir2vec.json), made when the
    run is set up; None for a run without embeddings. Its sha256 is in the run's identity
    (config.policy.ir2vec_vocab), so a resume with another file is refused before this."""
    path = (out / IR2VEC_FILE).absolute()
    if sources is not None:  # a new setup: the configured file, or none
        if sources.ir2vec is None:
            path.unlink(missing_ok=True)  # left by an earlier attempt at another config
            return None
        data = sources.ir2vec.read_bytes()
        if not path.is_file() or path.read_bytes() != data:
            _write_atomic(path, data)
        return path
    return path if path.is_file() else None


def _progress_bar(enabled: bool, total: int | None, start: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=start, desc="train", unit="it", file=sys.stderr,
                dynamic_ncols=True)


def _check_size_metric(out: Path, recorded: Mapping[str, Any], config: TrainConfig) -> None:
    """Refuse to resume a run measured by another size metric: its rewards, -Oz baselines
    and best/ validation size count other bytes, and mixing them would compare unlike
    numbers without a word."""
    was = recorded.get("size_metric", LEGACY_SIZE_METRIC)
    if was != config.size_metric:
        legacy = "" if "size_metric" in recorded else " (it predates size metrics)"
        raise TrainError(
            f"{out} holds a run measured by size metric {was!r}{legacy}, but this run "
            f"measures {config.size_metric!r}: its rewards, -Oz baselines and the size that "
            f"chose best/ count other bytes and cannot be continued under another metric. "
            f"Resume it with --size-metric {was}, or use a new --output_dir")


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> str:
    changed = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            inner = _diff(x, y, f"{prefix}{key}.")
            if inner:
                changed.append(inner)
        elif x != y:
            changed.append(f"{prefix}{key}: {x!r} -> {y!r}")
    return ", ".join(changed)
