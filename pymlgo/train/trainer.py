"""The loop every algorithm and every problem shares: setup, iterations, validation,
checkpoints, logging. What differs per problem (`config.problem`) comes from its training
hooks (`hooks.py`): below, "size" and "-Oz" are inlining's; register allocation measures the
allocator's weighted spill cost against the stock advisor (`cost_change/...` scalars).

Output directory layout:
- `setup.pkl` — written once: the split, -Oz sizes, vocab, heuristic demonstrations and
  the initial (warm-start) policy, so a resumed run never recompiles them;
- `checkpoint.pkl` — after every iteration (atomic): iteration count, algorithm state
  (parameters, optimizer, RNG states), best-so-far, elapsed time;
- `best/` — the policy with the lowest validation size so far, by total or by the mean of
  the validation packages' changes (`select_by`; of equal ones the later;
  a start drawn at random, bc's without a warm start, is no candidate unless no iteration
  runs, and `best/` appears at the first validation after it); `final/` — the last one
  (both loadable with `mlgo eval --policy DIR`); `validated/iteration-NNNN/` — every policy
  validated, so that another one than `best/` can be picked later without training again;
- `scalars.jsonl` — one JSON object per iteration; TensorBoard event files (`tensorboard/`)
  with the same tags as well when tensorboard is installed. Every iteration logs
  `reward/train` (mean 1 - size/-Oz size of its training compiles), `size_change/train`,
  `size_change/validation` (the total change vs -Oz, in the size metric in force; for
  bc, which compiles nothing to learn,
  both only on iterations that validate, see `eval_every`, and the training figure over a
  seeded sample of at most TRAIN_CHECK_MODULES training modules: all of a broad corpus's
  would take longer than the iteration),
  `size_change/validation_package_mean` (each validation package's own total change,
  averaged), `size_change/validation_best` (the total of `best/`, from the first candidate
  on), `compiles`, `failures`
  and `decisions_per_second` (over every compile of the iteration: training and
  validation), `time/iteration_seconds`,
  and the algorithm's own (`bc/...`, `ppo/...`, `es/...`, `dqn/...`); iteration 0 holds
  the starting policy's validation size and the bc warm start's scalars;
- `ir2native-model.json` — with `partial_rewards = "ir2native"` and no model given: the
  IR2Native model fitted on the training split's modules (reused on resume);
- what the problem keeps for its compiles (`ProblemTraining.compile_options`): inlining's
  `ir2vec.json`, the run's copy of its IR2Vec vocabulary (`policy.ir2vec_vocab`, or a warm
  start's that reads embeddings), which every compile of the run passes to clang.

An output directory that holds a checkpoint is resumed: the run continues at the next
iteration with the saved state, and ends with the bytes an uninterrupted run would give.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import math
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pymlgo.corpus.format import Corpus, package_of
from pymlgo.corpus.sample import sample_uniformly
from pymlgo.corpus.split import Split, split_by_module, split_by_package
from pymlgo.evaluate.baseline import baseline_results
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.ir2native.estimates import from_extra
from pymlgo.ir2native.model import IR2NativeModel
from pymlgo.problems import registry
from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Problem
from pymlgo.problems.inlining.problem import InliningOptions
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.train.config import LEGACY_SIZE_METRIC, TrainConfig
from pymlgo.train.env import Demonstrations, RunStats, TrainEnv, size_change
from pymlgo.train.hooks import (
    STREAM_ALGO,
    STREAM_TRAIN_CHECK,
    ProblemTraining,
    TrainError,
    stream_seed,
    training_of,
)
from pymlgo.train.shaping import IR2NativeShaper
from pymlgo.train.sources import SourceError, Sources
from pymlgo.workers.protocol import Executor, WorkSpec

SETUP_FILE, CHECKPOINT_FILE, SCALARS_FILE = "setup.pkl", "checkpoint.pkl", "scalars.jsonl"
IR2NATIVE_FILE = "ir2native-model.json"
BEST_DIR, FINAL_DIR, VALIDATED_DIR = "best", "final", "validated"
CHECKPOINT_FORMAT = 1

__all__ = ["TrainError"]  # defined in hooks.py, where the problems' hooks raise it too


class Algorithm(Protocol):
    """What the trainer needs from bc / ppo / es / dqn."""

    def policy(self) -> Policy: ...

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
    baselines: Mapping[str, float]  # baseline measure (-Oz bytes), train + validation
    # decisions per module (inlining: clang's call sites); only modules with > 0 train
    decisions: Mapping[str, int]
    demos_train: Demonstrations | None  # clang's own decisions (problems that send them)
    demos_validation: Demonstrations | None
    initial: Any  # the problem's policy
    warmstart_scalars: Mapping[str, float]
    identity: Mapping[str, Any]  # TrainConfig.setup_identity() it was made for
    # the baseline compiles' results, for problems that train on more than the measure
    baseline_results: Mapping[str, ModuleResult] | None = None
    initial_is_random: bool = False  # PolicySetup's; older setup.pkl files lack it


@dataclass(frozen=True)
class TrainResult:
    output_dir: Path
    split: Split
    iterations: int  # completed
    best_iteration: int
    # `best/`'s total change on validation vs the problem's baseline (-Oz bytes, stock cost)
    best_validation_change: float
    final_validation_change: float
    # what chose best/ (`TrainConfig.select_by`): its total again, or its package mean
    best_score: float
    select_by: str
    minutes: float  # training time, setup included, summed over resumed runs
    resumed_from: int | None  # iteration of the checkpoint this run resumed from

    @property
    def best_figures(self) -> str:
        """`best/`'s validation total, and beside it the package mean when that chose it."""
        mean = f", package mean {self.best_score:+.2%}" if self.select_by == "package" else ""
        return f"{self.best_validation_change:+.2%}{mean}"

    @property
    def best_warning(self) -> str | None:
        """What to say when the package mean chose a `best/` whose total is above the
        baseline's: the mean can keep falling while the total rises (stop 58 of the
        regalloc-evict README), and the other validated policies are there to pick from."""
        if self.select_by != "package" or self.best_validation_change <= 0:
            return None
        return (f"warning: best/ was chosen by the validation package mean, and its validation "
                f"total ({self.best_validation_change:+.2%}) is above the baseline's; every "
                f"validated policy is in {self.output_dir / VALIDATED_DIR}")

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


def _save_policy(policy: Policy, directory: Path, problem: Problem) -> None:
    with _writing_to(directory):
        save_policy_dir(policy, directory, problem)


def validated_dir(out: Path, iteration: int) -> Path:
    """Where a run in `out` keeps the policy it validated after `iteration`."""
    return out / VALIDATED_DIR / f"iteration-{iteration:04d}"


def _load_pickle(path: Path) -> Any | None:
    if not path.is_file():
        return None
    with path.open("rb") as f:
        return pickle.load(f)


def save_policy_dir(policy: Policy, directory: Path,
                    problem: Problem = registry.DEFAULT) -> None:
    """Replace `directory` with a saved policy of `problem` (its codec's format); a crash
    leaves the old or the new one."""
    staging = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    importlib.import_module(problem.policy_codec).save_policy(policy, staging)
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


def make_split(config: TrainConfig, corpus: Corpus,
               baselines: Mapping[str, float] | None = None) -> Split:
    """The run's split. With `split.validation_weight = "baseline"` the validation packages
    are weighed by `baselines` (module -> baseline measure; required then)."""
    s = config.split
    seed = config.seed if s.seed is None else s.seed
    if s.by == "package":
        weights = None
        if s.validation_weight == "baseline":
            if baselines is None:
                raise TrainError('split.validation_weight = "baseline" needs the baselines')
            weights = {}
            for m in corpus.modules:
                weights[m.package] = weights.get(m.package, 0.0) + baselines.get(m.name, 0.0)
        return split_by_package(corpus, seed=seed, validation=s.validation,
                                heldout=s.heldout, heldout_packages=s.heldout_packages,
                                validation_by=s.validation_by, validation_weights=weights)
    return split_by_module(corpus, seed=seed, validation=s.validation,
                           heldout=s.heldout)


def _outside_heldout(config: TrainConfig) -> TrainConfig:
    """The config whose split puts every module outside held-out in training."""
    return replace(config, split=replace(config.split, validation=0.0,
                                         validation_weight="modules"))


def _baselines(executor: Executor, jobs: Sequence[CompileJob], compiler: Compiler,
               spec: WorkSpec) -> tuple[dict[str, ModuleResult], dict[str, float]]:
    """Each module's baseline result and measure (the problem's scoring), where it has one."""
    scoring = training_of(spec.problem).scoring
    results: dict[str, ModuleResult] = {}
    baselines: dict[str, float] = {}
    for r in baseline_results(executor, jobs, compiler, spec=spec):
        value = scoring.value(r) if r.ok else None
        if value is not None:
            results[r.module], baselines[r.module] = r, value
    return results, baselines


def measured_split(config: TrainConfig, corpus: Corpus, executor: Executor,
                   compiler: Compiler, spec: WorkSpec) -> Split:
    """`make_split`, measuring the baselines outside held-out first when validation is
    weighed by them (cached, so after a training run this compiles nothing)."""
    if config.split.validation_weight != "baseline":
        return make_split(config, corpus)
    outside = make_split(_outside_heldout(config), corpus)
    _, baselines = _baselines(executor, corpus_jobs(corpus, outside.train), compiler, spec)
    return make_split(config, corpus, baselines)


def prepare(
    config: TrainConfig,
    corpus: Corpus,
    executor: Executor,
    compiler: Compiler,
    spec: WorkSpec,
    say: Callable[[str], None],
    sources: Sources | None = None,
) -> Setup:
    """Split, baseline measures (-Oz sizes), then the problem's part (`hooks.py`): for
    inlining heuristic decisions (recorded, or read from `config.traces`), vocab, and the
    warm-start policy."""
    training = training_of(spec.problem)
    if sources is None:
        sources = _load_sources(config, corpus, compiler)
    weighed = config.split.validation_weight == "baseline"
    # weighed: train + validation are every module outside held-out however validation is
    # drawn, so their baselines come first and validation is drawn by them after
    split = make_split(_outside_heldout(config) if weighed else config, corpus)
    if not split.train:
        raise TrainError("the split leaves no training modules")
    names = (*split.train, *split.validation)
    jobs = {j.module: j for j in corpus_jobs(corpus, names)}
    scoring = training.scoring
    say(f"{spec.problem.baseline_label} baseline {scoring.name}s of {len(jobs)} modules")
    results, baselines = _baselines(executor, list(jobs.values()), compiler, spec)
    if weighed:
        split = make_split(config, corpus, baselines)
        if not split.train:
            raise TrainError("the split leaves no training modules")
        share = sum(baselines.get(m, 0.0) for m in split.validation) / max(
            sum(baselines.values()), 1e-300)
        modules = len(split.validation) / len(names)
        packages = sorted({package_of(m) for m in split.validation})
        say(f"validation: {', '.join(packages)} ({modules:.1%} of the modules and {share:.1%} "
            f"of the baseline {scoring.name}s outside held-out)")
    try:
        made = training.setup(config, split, baselines, jobs, executor, spec, sources, say)
    except SourceError as exc:
        raise TrainError(str(exc)) from exc
    return Setup(split, baselines, made.decisions, made.demos_train, made.demos_validation,
                 made.initial, made.warmstart_scalars, config.setup_identity(),
                 results if training.keep_baseline_results else None, made.initial_is_random)


def _load_sources(config: TrainConfig, corpus: Corpus, compiler: Compiler) -> Sources:
    try:
        return _training(config).load_sources(config, corpus, compiler)
    except SourceError as exc:
        raise TrainError(str(exc)) from exc


def _training(config: TrainConfig) -> ProblemTraining:
    return training_of(registry.problem(config.problem))


def _seed(config: TrainConfig, stream: int) -> int:
    return stream_seed(config.seed, stream)


def make_algorithm(config: TrainConfig, setup: Setup,
                   shaper: IR2NativeShaper | None = None) -> Algorithm:
    seed = _seed(config, STREAM_ALGO)
    if config.algo == "bc":
        algo: Algorithm = _training(config).behaviour_cloning(
            config, setup.demos_train, setup.demos_validation, setup.initial, seed)
        return algo
    if config.algo == "ppo":
        from pymlgo.train.ppo import PPO

        return PPO(config.ppo, setup.initial, seed, shaper=shaper,
                   weighting=config.reward_weighting, head=_training(config).ppo_head())
    if config.algo == "es":
        from pymlgo.train.es import EvolutionStrategies

        return EvolutionStrategies(config.es, setup.initial, seed,
                                   weighting=config.reward_weighting)
    if config.algo == "il":
        from pymlgo.train.il import ImitationLearning

        return ImitationLearning(config.il, _training(config).imitation(config, setup.initial),
                                 seed)
    from pymlgo.train.dqn import DQN

    return DQN(config.dqn, setup.initial, seed, weighting=config.reward_weighting)


def make_envs(setup: Setup, corpus: Corpus, executor: Executor, spec: WorkSpec,
              sample_by: str = "module") -> tuple[TrainEnv, TrainEnv, list[str]]:
    """(training env, validation env, validation module names)."""
    jobs = {j.module: j for j in corpus_jobs(corpus, (*setup.split.train,
                                                      *setup.split.validation))}
    scoring = training_of(spec.problem).scoring
    references = setup.baseline_results or {}
    # modules without a single decision teach nothing: never compile them
    env = TrainEnv(executor, spec, {n: jobs[n] for n in setup.split.train
                                    if setup.decisions.get(n, 0) > 0}, setup.baselines,
                   sample_by=sample_by, scoring=scoring, references=references)
    val_env = TrainEnv(executor, spec, jobs, setup.baselines, scoring=scoring,
                       references=references)
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


TRAIN_CHECK_MODULES = 256


def _train_check_names(names: Sequence[str], seed: int) -> list[str]:
    """The training modules an algorithm that compiles nothing (bc) is measured on after
    an iteration: all of them, or a seeded sample of TRAIN_CHECK_MODULES."""
    rng = np.random.default_rng(stream_seed(seed, STREAM_TRAIN_CHECK))
    return sample_uniformly(names, TRAIN_CHECK_MODULES, rng)


def partial_reward_shaper(env: TrainEnv, model: IR2NativeModel,
                          say: Callable[[str], None]) -> IR2NativeShaper:
    """Switch `env` to compiles that report per-function estimates and decision callers;
    the shaper holds the -Oz estimates of every training module."""
    options = env.spec.options
    if not isinstance(options, InliningOptions):
        options = InliningOptions()
    env.spec = replace(env.spec, options=replace(options, estimator=model))  # IR2Vec kept
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


def _stamp(policy: Policy, config: TrainConfig, iteration: int) -> Policy:
    """Name and provenance saved with the policy (nothing run-specific: same seed, same
    bytes)."""
    hyper = {"algo": config.algo, "seed": config.seed, "iteration": iteration,
             "warmstart": config.warmstart, "size_metric": config.size_metric,
             "config": config.provenance()}
    return replace(policy, name=f"mlgo-{config.algo}",  # type: ignore[type-var]
                   hyperparameters=hyper)


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

    problem = registry.problem(config.problem)
    training = training_of(problem)
    change = f"{training.scoring.name}_change"  # scalar names: size_change/validation, ...
    spec = WorkSpec(problem=problem, clang=None if compiler.bundled else str(compiler.path),
                    timeout=options.timeout, edits=config.compile.flag_edits(),
                    size_metric=config.size_metric,
                    options=training.compile_options(out, sources))
    with _executor_for(options, executor) as ex:
        setup: Setup | None = _load_pickle(out / SETUP_FILE)
        if setup is not None:
            _check_size_metric(out, setup.identity, config)
        if setup is not None and setup.identity != config.setup_identity():
            raise TrainError(
                f"{out} was set up for another configuration; use a new --output_dir "
                f"(changed: {_diff(setup.identity, config.setup_identity())})"
            )
        if setup is not None:  # saved by an earlier process; the directory may have moved
            setup = replace(setup, initial=training.rebind(setup.initial, spec.options))
        if setup is None:
            setup = prepare(config, corpus, ex, compiler, spec, say, sources)
            _write_atomic(out / SETUP_FILE, pickle.dumps(setup, protocol=5))
        env, val_env, val_names = make_envs(setup, corpus, ex, spec, config.sample_by)
        shaper = None
        if config.partial_rewards == "ir2native":
            model = ir2native_model(config, setup, corpus, ex, compiler, out, say)
            shaper = partial_reward_shaper(env, model, say)
        algo = make_algorithm(config, setup, shaper)

        def validate(policy: Any, iteration: int) -> tuple[float, float, float]:
            figures = val_env.validate(policy, val_names, config.select_by)
            _save_policy(policy, validated_dir(out, iteration), problem)
            return figures

        if checkpoint is not None:
            algo.load_state_dict(checkpoint["algo"])
            iteration, elapsed = checkpoint["iteration"], checkpoint["elapsed"]
            best_it, best_score, best_policy = checkpoint["best"]
            # checkpoints before select_by chose by the total, so the score was the total
            best_change = checkpoint.get("best_total", best_score)
            if best_policy is not None:
                best_policy = training.rebind(best_policy, spec.options)
                # provenance as this run's: a budget raised on resume must not leave the
                # old one in best/ (an uninterrupted run with this budget would not have it)
                best_policy = _stamp(best_policy, config, best_it)
            last_change, last_eval = checkpoint["last_validation"]
            last_score = checkpoint.get("last_score", last_change)
            resumed_from: int | None = iteration
            say(f"resuming {out} at iteration {iteration + 1}")
        else:
            iteration, elapsed, resumed_from = 0, 0.0, None
            start = _stamp(algo.policy(), config, 0)
            last_change, last_mean, last_score = validate(start, 0)
            last_eval = 0
            best_it, best_change, best_score, best_policy = 0, last_change, last_score, start
            if setup.initial_is_random:
                # validated and logged, but no candidate: that a random network measures
                # well says nothing learned (a stop-40 k-fold fold shipped bc's untrained
                # start, which validated 0.2 points better than its trained network)
                best_change, best_score, best_policy = math.inf, math.inf, None
        log = ScalarLog(out, iteration, options.tensorboard)
        say(log.note)
        if checkpoint is None:
            log.write(0, {f"{change}/validation": last_change,
                          f"{change}/validation_package_mean": last_mean,
                          **setup.warmstart_scalars})
        if best_policy is not None:
            _save_policy(best_policy, out / BEST_DIR, problem)

        def save_checkpoint() -> None:
            state = {"format": CHECKPOINT_FORMAT, "config": config.identity(),
                     "modules": list(corpus.names), "iteration": iteration,
                     "elapsed": elapsed + time.monotonic() - started,
                     "algo": algo.state_dict(), "best": (best_it, best_score, best_policy),
                     "best_total": best_change,
                     "last_validation": (last_change, last_eval), "last_score": last_score}
            _write_atomic(out / CHECKPOINT_FILE, pickle.dumps(state, protocol=5))

        if checkpoint is None:
            save_checkpoint()
        budget_s = (config.time_budget_minutes * 60.0 if config.time_budget_minutes else None)
        max_it = config.max_iterations

        def spent() -> float:
            return elapsed + time.monotonic() - started

        train_check = _train_check_names(env.names, config.seed)
        bar = _progress_bar(options.progress, max_it, iteration)
        last_train: float | None = None
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
                    last_change, last_mean, last_score = validate(policy, iteration)
                    last_eval = iteration
                    scalars[f"{change}/validation"] = last_change
                    scalars[f"{change}/validation_package_mean"] = last_mean
                    if f"{change}/train" not in scalars:  # bc compiles nothing itself
                        eps = env.run([policy], train_check)
                        scalars[f"{change}/train"] = size_change(eps)
                        scalars["reward/train"] = float(np.mean([e.reward for e in eps
                                                                 if e.ok] or [0.0]))
                    # a tie goes to the later, longer-trained policy: equal validation
                    # bytes say nothing (e.g. validation modules a policy leaves to clang)
                    if last_score <= best_score:
                        best_it, best_change, best_score, best_policy = (
                            iteration, last_change, last_score, policy)
                        _save_policy(best_policy, out / BEST_DIR, problem)
                # every compile of the iteration: training, validation, bc's size check
                scalars |= (env.stats + val_env.stats).as_scalars()
                if best_policy is not None:
                    scalars[f"{change}/validation_best"] = best_change
                scalars["time/iteration_seconds"] = time.monotonic() - t0
                log.write(iteration, scalars)
                save_checkpoint()
                last_iter_s = time.monotonic() - t0
                if bar is not None:
                    bar.update(1)
                    # bc measures training only when it validates: show its last figure
                    # then, not +0.00% in between
                    last_train = scalars.get(f"{change}/train", last_train)
                    bar.set_postfix(train="-" if last_train is None else f"{last_train:+.2%}",
                                    val=f"{last_change:+.2%}",
                                    best="-" if best_policy is None else f"{best_change:+.2%}")
            if last_eval != iteration:  # stopped by the budget between validations
                policy = _stamp(algo.policy(), config, iteration)
                last_change, last_mean, last_score = validate(policy, iteration)
                last_eval = iteration
                if last_score <= best_score:  # a tie: the later policy, as above
                    best_it, best_change, best_score, best_policy = (
                        iteration, last_change, last_score, policy)
                    _save_policy(best_policy, out / BEST_DIR, problem)
                save_checkpoint()
            if best_policy is None:
                # no iteration ran (iterations = 0, or a budget spent on the setup): the
                # random start is the only policy there is
                best_it, best_change, best_score = iteration, last_change, last_score
                best_policy = _stamp(algo.policy(), config, iteration)
                _save_policy(best_policy, out / BEST_DIR, problem)
                save_checkpoint()
        finally:
            if bar is not None:
                bar.close()
            log.close()
        _save_policy(_stamp(algo.policy(), config, iteration), out / FINAL_DIR, problem)
    total = elapsed + time.monotonic() - started
    result = TrainResult(out, setup.split, iteration, best_it, best_change, last_change,
                         best_score, config.select_by, total / 60.0, resumed_from)
    say(f"{iteration} iterations, {total / 60:.1f} min; best: iteration {best_it}, "
        f"validation {result.best_figures} vs {problem.baseline_label} ({out / BEST_DIR})")
    return result


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
