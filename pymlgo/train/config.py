"""Training configuration: typed, frozen dataclasses, optionally read from a TOML file.

One `TrainConfig` describes a run completely (together with the corpus); it is saved in
every checkpoint so a resumed run can refuse a changed configuration. TOML layout: the
scalar fields of `TrainConfig` at top level, one table per nested config:

    algo = "es"
    seed = 3
    problem = "regalloc-evict"    # default "inlining" (pymlgo.problems.registry)
    size_metric = "allocated"     # or "text", "llvm-size" (pymlgo.toolchain.size)
    vocab = "runs/vocab"          # from `mlgo vocab`
    reward_weighting = "bytes"    # each module's reward by its -Oz bytes (default: per algo)
    [split]
    by = "package"
    [policy]
    ir2vec_vocab = "v.json"       # the network also reads IR2Vec embeddings (`mlgo ir2vec`)
    [compile]
    add_flags = ["-mllvm", "-inline-threshold=100"]
    [es]
    population = 16

Unknown keys or tables are an error (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from pymlgo.corpus.command import FlagEdits
from pymlgo.problems import registry
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, SizeMetric

# A run (checkpoint, setup, saved policy) recorded before `size_metric` existed measured
# executable sections only.
LEGACY_SIZE_METRIC = "text"

ALGORITHMS = ("bc", "ppo", "es", "dqn", "il")
DEFAULT_ITERATIONS = 20
Algo = Literal["bc", "ppo", "es", "dqn", "il"]
PartialRewards = Literal["none", "ir2native"]
RewardWeighting = Literal["default", "module", "bytes", "cost"]
OutOfRange = Literal["clip", "log"]
SampleBy = Literal["module", "package", "baseline"]
SelectBy = Literal["total", "package"]

DEFAULT_HIDDEN = (40, 40, 20)
DEFAULT_PROBLEM = registry.DEFAULT.name
DEFAULT_QUANTILES = 1000


class ConfigError(ValueError):
    """A configuration value or key is invalid."""


@dataclass(frozen=True)
class SplitConfig:
    """How the corpus is split into train / validation / held-out (by module or package)."""

    by: Literal["module", "package"] = "module"
    validation: float = 0.15  # fraction of modules (or packages) used to pick the best policy
    heldout: float = 0.2  # never seen in training; `mlgo demo` and benchmarks report on it
    # by = "package" only: the held-out packages by name (instead of a seeded `heldout`
    # fraction), and validation as whole packages ("package") or sampled modules ("module")
    heldout_packages: tuple[str, ...] | None = None
    validation_by: Literal["module", "package"] = "module"
    # validation_by = "package" only: what `validation` is a fraction of. "modules": the
    # module count; "baseline": the module count and, as well, the baseline measure of the
    # packages left after held-out (-Oz bytes for inlining, the stock advisor's cost for
    # regalloc), where a few hot packages hold most of it and a draw by module count can
    # validate on almost none (`corpus.split._pick_weighted`).
    validation_weight: Literal["modules", "baseline"] = "modules"
    # the split's own seed (None: the run's `seed`), so that runs with other seeds can train
    # on the same split and be compared on the same validation and held-out modules
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.by != "package" and (self.heldout_packages is not None
                                     or self.validation_by != "module"):
            raise ConfigError("split.heldout_packages and split.validation_by need "
                              'split.by = "package"')
        if self.validation_weight != "modules" and self.validation_by != "package":
            raise ConfigError('split.validation_weight = "baseline" weighs whole validation '
                              'packages: it needs split.validation_by = "package"')


@dataclass(frozen=True)
class PolicyConfig:
    """Network shape and feature normalization (MLGO: MLP 40-40-20, 1000 quantiles).

    A key left out (None) takes its value from where the policy comes from: a saved-policy
    warm start brings its network and features, a `vocab` directory its features and
    quantiles; otherwise the defaults below. A key that is set must agree with them.
    """

    hidden: tuple[int, ...] | None = None  # None: DEFAULT_HIDDEN, or the warm start's
    quantiles: int | None = None  # None: DEFAULT_QUANTILES; must be unset with a vocab
    # None: every feature clang sends except its own decision (or the vocab's/warm start's)
    features: tuple[str, ...] | None = None
    # The network also reads clang's own decision (`inlining_default`) as an input, so it
    # learns where to depart from the heuristic instead of relearning the heuristic. Served
    # through the channel only (`mlgo cc`, eval): clang's release mode has no such input, so
    # such a policy cannot be exported to be compiled into clang.
    reads_default: bool = False
    # an IR2Vec vocabulary file (`mlgo ir2vec vocab`): compiles pass it to clang, and the
    # network also reads `callee_embedding` and `caller_embedding` (float[dim], z-scored by
    # the training decisions' mean and deviation); saved with the policy. Its sha256, not
    # its path, is part of the run's identity. None: no embeddings (or the warm start's)
    ir2vec_vocab: str | None = None
    # derived inputs "MINUEND-SUBTRAHEND" (pymlgo.policy.vocab), e.g.
    # "threshold-cost_estimate": the margin by which clang's own cost model clears its
    # threshold, which quantiles of the two features apart blur. Both must be inputs.
    # None: none (or the vocab's/warm start's)
    differences: tuple[str, ...] | None = None
    # A shift rule, e.g. "shift:2:30:3:0" (pymlgo.policy.inlining.InliningPolicy.window): the
    # network decides only the call sites that rule may flip, clang's own decision the rest.
    # Checked and applied by the inlining problem; "": the network decides every call site.
    window: str = ""
    # The source languages the network decides for, e.g. ["c++"]
    # (pymlgo.policy.inlining.InliningPolicy.languages): modules of the others get clang's
    # own decisions, in training, validation and every use of the saved policy.
    # []: every language.
    languages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from pymlgo.ir2vec.vocab_file import EMBEDDING_FEATURES
        from pymlgo.policy.vocab import difference_operands
        from pymlgo.toolchain.language import LANGUAGES

        if self.reads_default and self.features is not None:
            raise ConfigError("policy.reads_default applies to the default feature list; with "
                              "an explicit policy.features, list 'inlining_default' there")
        embedded = [f for f in self.features or () if f in EMBEDDING_FEATURES]
        if embedded:
            raise ConfigError(f"policy.features lists {', '.join(embedded)}: IR2Vec "
                              f"embeddings are read by setting policy.ir2vec_vocab")
        if self.ir2vec_vocab is not None and not self.ir2vec_vocab:
            raise ConfigError("policy.ir2vec_vocab must be a file path (leave it out for no "
                              "embeddings)")
        if self.hidden is not None and any(h < 1 for h in self.hidden):
            raise ConfigError("policy.hidden layer sizes must be >= 1")
        for name in self.differences or ():
            try:
                operands = difference_operands(name)
            except ValueError as exc:
                raise ConfigError(f"policy.differences: {exc}") from None
            unread = [f for f in operands if self.features is not None
                      and f not in self.features]
            if unread:
                raise ConfigError(f"policy.differences: {name!r} needs {', '.join(unread)} "
                                  f"in policy.features")
        if self.differences is not None and len(set(self.differences)) != len(
                self.differences):
            raise ConfigError("policy.differences lists a difference twice")
        if self.quantiles is not None and self.quantiles < 1:
            raise ConfigError("policy.quantiles must be >= 1")
        bad = [x for x in self.languages if x not in LANGUAGES]
        if bad or len(set(self.languages)) != len(self.languages):
            raise ConfigError(f"policy.languages must list distinct languages of "
                              f"{', '.join(LANGUAGES)}, not {list(self.languages)}")


@dataclass(frozen=True)
class CompileConfig:
    """The user's own edits to every module's cc1 command (baseline and policy compiles).

    `command_override` (a list of cc1 or clang driver arguments) replaces each module's
    recorded command, and is checked against the corpus flag allowlist as the corpus' own
    flags are; `delete_flags`, `replace_flags` ([old, new] pairs of single arguments) and
    `add_flags` are then applied, in that order, after the check and after the size level
    (-Oz) is set, so they can change anything.
    """

    add_flags: tuple[str, ...] = ()
    delete_flags: tuple[str, ...] = ()
    replace_flags: tuple[tuple[str, ...], ...] = ()
    command_override: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for pair in self.replace_flags:
            if len(pair) != 2:
                raise ConfigError(f"compile.replace_flags entries must be [old, new] pairs, "
                                  f"not {list(pair)!r}")
        if self.command_override is not None and not self.command_override:
            raise ConfigError("compile.command_override must not be empty (leave it out to "
                              "use each module's own command)")

    def flag_edits(self) -> FlagEdits:
        return FlagEdits(delete=self.delete_flags,
                         replace=tuple((old, new) for old, new in self.replace_flags),
                         add=self.add_flags)


@dataclass(frozen=True)
class BCConfig:
    """Behaviour cloning of clang's heuristic (`inlining_default`) from -Oz traces."""

    learning_rate: float = 3e-3
    batch_size: int = 256
    epochs_per_iteration: int = 2  # as the algorithm: epochs over the traces per iteration
    warmstart_epochs: int = 30  # as a warm start for ppo/es/dqn: epochs before iteration 1
    weight_decay: float = 0.0
    # > 0: the learning rate falls linearly to 0 over this many epochs of `algo = "bc"`
    # (and stays 0 after). At a constant rate the last network carries the noise of its
    # last minibatches: at stop 37 the shipped clone agreed with its teacher on 99.78% of
    # the training decisions, annealed over its 12 epochs on 99.99%. Counted in epochs, not
    # iterations, so that a run stopped and resumed with more iterations anneals the same.
    lr_anneal_epochs: int = 0
    # whose decisions are cloned: "default" (clang's own), or a built-in policy such as
    # "shift:2:30:3" that decides from the features: it labels every call site recorded
    # under -Oz. Those are -Oz's call sites, not the ones the teacher's own compiles would
    # meet (the first step of DAgger); a rule is a start, search and training go on from it.
    # "best:R1,R2,..." chooses per module: clang's own decisions and each rule are compiled
    # on every training and validation module once, and the one whose object is smallest
    # labels that module (clang's on a tie), so the teacher grows no module it labels.
    # (checked by the problem's training hooks: inlining's built-ins; regalloc has none)
    teacher: str = "default"


@dataclass(frozen=True)
class PPOConfig:
    """Clipped policy gradient; one episode = one module compile, reward at the end."""

    modules_per_iteration: int = 16
    samples_per_module: int = 4  # sampled compiles per module per iteration (>= 2 for "group")
    learning_rate: float = 1e-3
    epochs: int = 4
    minibatch_size: int = 512
    clip: float = 0.2
    entropy_coef: float = 0.0
    max_grad_norm: float = 1.0
    # group: mean reward of the other samples of the same module this iteration;
    # moving_average: per-module exponential average of past rewards; oz: 0 (the -Oz size)
    baseline: Literal["group", "moving_average", "oz"] = "group"
    moving_average_decay: float = 0.8
    normalize_advantages: bool = True


@dataclass(frozen=True)
class ESConfig:
    """Antithetic evolution strategies on the flat MLP parameters, Adam on the estimate."""

    population: int = 8  # antithetic pairs per iteration (2x compiles per module)
    sigma: float = 0.02
    learning_rate: float = 0.01
    modules_per_iteration: int = 16
    rank_fitness: bool = True  # centered ranks: robust to a few modules dominating bytes
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999


@dataclass(frozen=True)
class ILConfig:
    """Imitation learning from search (`train/il.py`): search from the policy, clone the
    best decisions found, repeat."""

    budget: int = 16  # compiles per searched module per iteration (`mlgo search --budget`)
    modules_per_iteration: int = 0  # training modules searched per iteration; 0: all
    search_batch: int = 8  # flips per module compiled together in one search round
    moves: Literal["single", "callee"] = "single"  # `mlgo search --moves`
    answers: int = 3  # `mlgo search --answers`: other answers per decision (an eviction's)
    epochs_per_iteration: int = 4  # passes over the whole dataset after each search
    batch_size: int = 256
    learning_rate: float = 3e-3
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if (self.budget < 1 or self.search_batch < 1 or self.answers < 1
                or self.epochs_per_iteration < 0):
            raise ConfigError("il.budget, il.search_batch and il.answers must be >= 1, "
                              "il.epochs_per_iteration >= 0")
        if self.modules_per_iteration < 0:
            raise ConfigError("il.modules_per_iteration must be >= 0 (0: every module)")


@dataclass(frozen=True)
class DQNConfig:
    """Q-values for (don't inline, inline) regressed on the episode's return."""

    modules_per_iteration: int = 16
    buffer_size: int = 50_000
    batch_size: int = 256
    learning_rate: float = 1e-3
    updates_per_iteration: int = 100
    epsilon_start: float = 0.2
    epsilon_end: float = 0.02
    epsilon_decay_iterations: int = 20
    # subtract the module's -Oz-relative moving average so Q learns what a decision changes,
    # not how compressible the module is
    per_module_baseline: bool = True
    moving_average_decay: float = 0.8
    reward_scale: float = 100.0  # rewards are fractions of a percent; scale to ~1


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained policy (with the corpus and the compiler)."""

    algo: Algo = "es"
    seed: int = 0
    # what the reward, the -Oz baselines and the choice of best/ count (`toolchain.size`):
    # "allocated" (every allocated section: what ships), "text" (executable sections
    # only, what runs measured before this key existed) or "llvm-size" (Berkeley text)
    size_metric: SizeMetric = DEFAULT_SIZE_METRIC
    # stop after this many iterations and/or minutes; neither given: DEFAULT_ITERATIONS
    iterations: int | None = None
    time_budget_minutes: float | None = None
    # "bc": behaviour-clone clang's heuristic first; "" (or "none", as the CLI spells it)
    # for none; or a saved MLP policy as
    # `--policy` takes it (a directory or pretrained:NAME)
    warmstart: str = "bc"
    # a directory written by `mlgo vocab`: the feature normalization of a new network
    vocab: str = ""
    # a directory written by `mlgo trace --policy default` on this corpus: clang's decisions,
    # read instead of recorded again at setup (inlining: every run's setup; others: bc's)
    traces: str = ""
    eval_every: int = 1  # validation compile every N iterations (and after the last)
    # training batches: "module" (uniform over modules), "package" (each package equally
    # often, so one big project does not dominate the batches) or "baseline" (a module's
    # chance grows with its baseline measure, -Oz bytes or the stock advisor's cost, so that
    # batches go where an evaluation's total is)
    sample_by: SampleBy = "module"
    # how validation picks best/: "total" (the lowest total size or cost over the
    # validation modules) or "package" (the lowest mean of the validation packages' own
    # total changes, every package counting the same: a total that one package holds picks
    # what fits that package, stops 54 and 55 of the regalloc-evict README)
    select_by: SelectBy = "total"
    # "ir2native": ppo credits each decision with its caller's IR2Native-estimated size
    # change (pymlgo.train.shaping); "none": every decision shares the module's reward
    partial_rewards: PartialRewards = "none"
    # the IR2Native model (`mlgo ir2native train`); "": fit one on the training split
    ir2native_model: str = ""
    # how modules of different sizes count in the objective (pymlgo.train.env.objective):
    # "module": every module equally (mean of 1 - size/-Oz); "bytes": each by its -Oz bytes,
    # as users count (ppo/dqn: a module's reward times its -Oz bytes over the training
    # modules' mean); "default": what each algorithm always did (ppo, dqn: "module"; es:
    # "bytes", its fitness being the batch's total size). Register allocation: "default" and
    # "module" (ES: the mean log cost ratio); "cost" (es only): each module by its stock cost,
    # the fitness being the batch's total cost, as the evaluation's total counts it
    reward_weighting: RewardWeighting = "default"
    # a new vocab's values beyond its last quantile (pymlgo.policy.vocab): "clip" to 1.0,
    # or "log": extrapolated in log space. A saved-policy warm start brings its own
    out_of_range: OutOfRange = "clip"
    split: SplitConfig = field(default_factory=SplitConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    es: ESConfig = field(default_factory=ESConfig)
    dqn: DQNConfig = field(default_factory=DQNConfig)
    il: ILConfig = field(default_factory=ILConfig)
    # what is learned (`problems.registry`: a name or an alias, kept as the canonical name);
    # what each problem trains with and which keys apply to it: `train/hooks.py`
    problem: str = DEFAULT_PROBLEM

    def __post_init__(self) -> None:
        if self.warmstart == "none":  # as the command line spells no warm start
            object.__setattr__(self, "warmstart", "")
        if self.algo not in ALGORITHMS:
            raise ConfigError(f"algo must be one of {', '.join(ALGORITHMS)}, not {self.algo!r}")
        try:
            problem = registry.problem(self.problem)
        except registry.UnknownProblemError as exc:
            raise ConfigError(str(exc)) from None
        object.__setattr__(self, "problem", problem.name)
        if self.time_budget_minutes is not None and self.time_budget_minutes <= 0:
            raise ConfigError("time_budget_minutes must be > 0")
        if self.iterations is not None and self.iterations < 0:
            raise ConfigError("iterations must be >= 0")
        _check_choice("sample_by", self.sample_by, SampleBy)
        _check_choice("select_by", self.select_by, SelectBy)
        if self.eval_every < 1:
            raise ConfigError("eval_every must be >= 1")
        _check_choice("partial_rewards", self.partial_rewards, PartialRewards)
        if self.partial_rewards != "none":
            if self.algo != "ppo":
                raise ConfigError(f"partial_rewards = {self.partial_rewards!r} needs algo = "
                                  f"'ppo' ({self.algo} learns from whole-module rewards only)")
            if self.ppo.baseline == "moving_average":
                raise ConfigError("partial_rewards needs ppo.baseline = 'group' or 'oz' (a "
                                  "per-module moving average has no per-decision meaning)")
        elif self.ir2native_model:
            raise ConfigError("ir2native_model is only used with partial_rewards = 'ir2native'")
        _check_choice("reward_weighting", self.reward_weighting, RewardWeighting)
        _check_choice("out_of_range", self.out_of_range, OutOfRange)
        if self.reward_weighting != "default" and self.algo == "bc":
            raise ConfigError("reward_weighting does not apply to algo = 'bc' (it learns "
                              "from clang's decisions, not from sizes)")
        if self.out_of_range != "clip" and self.warmstart not in ("", "bc"):
            raise ConfigError("out_of_range does not apply with a saved-policy warm start "
                              "(it brings its own normalization); leave it out")
        if not 0 <= self.split.validation < 1 or not 0 <= self.split.heldout < 1:
            raise ConfigError("split fractions must be in [0, 1)")
        if self.vocab and self.policy.quantiles is not None:
            raise ConfigError("policy.quantiles does not apply with a vocab (its quantiles "
                              "are computed already); leave it out")
        if self.vocab and self.warmstart not in ("", "bc"):
            raise ConfigError("give a vocab or a saved-policy warm start, not both (the "
                              "warm-start policy brings its own vocab)")
        if self.warmstart not in ("", "bc") and self.policy.quantiles is not None:
            raise ConfigError("policy.quantiles does not apply with a saved-policy warm "
                              "start (it brings its own vocab); leave it out")
        if self.policy.ir2vec_vocab is not None and self.policy_warmstart is not None:
            raise ConfigError("policy.ir2vec_vocab does not apply with a saved-policy warm "
                              "start (it brings its own IR2Vec vocabulary, if it reads "
                              "embeddings); leave it out")
        if self.bc.lr_anneal_epochs < 0:
            raise ConfigError("bc.lr_anneal_epochs must be >= 0 (0: a constant rate)")
        if self.bc.lr_anneal_epochs and self.algo != "bc":
            raise ConfigError("bc.lr_anneal_epochs anneals behaviour cloning as the "
                              "algorithm (algo = 'bc'); a warm start keeps a constant rate")
        if self.bc.teacher != BCConfig().teacher and self.warmstart != "bc" and (
                self.algo != "bc"):
            raise ConfigError("bc.teacher is only used for behaviour cloning: with algo = "
                              "'bc' or warmstart = 'bc'")
        from pymlgo.train.hooks import training_of  # the hooks read this module's types

        training_of(problem).check(self)

    @property
    def max_iterations(self) -> int | None:
        if self.iterations is None and self.time_budget_minutes is None:
            return DEFAULT_ITERATIONS
        return self.iterations

    @property
    def hidden(self) -> tuple[int, ...]:
        """The network of a new policy (a saved-policy warm start brings its own): by
        default the problem's (inlining: DEFAULT_HIDDEN)."""
        if self.policy.hidden is not None:
            return self.policy.hidden
        from pymlgo.train.hooks import training_of

        return training_of(registry.problem(self.problem)).default_hidden

    @property
    def quantiles(self) -> int:
        """Quantiles of a vocab built from the training modules' recorded decisions."""
        return self.policy.quantiles if self.policy.quantiles is not None else DEFAULT_QUANTILES

    def provenance(self) -> dict[str, Any]:
        """The config as saved with its policies and checked on resume: `to_dict`, with
        the [policy] defaults filled in where no warm start or vocab provides the value (so
        a run that leaves them out saves and checks what it always did)."""
        from_warm = self.policy_warmstart is not None
        policy = dataclasses.replace(
            self.policy,
            hidden=self.policy.hidden if from_warm else self.hidden,
            quantiles=self.policy.quantiles if from_warm or self.vocab else self.quantiles)
        d = to_dict(self) | {"policy": _policy_dict(policy)}
        # A trace is a cache of clang's -Oz decisions on this corpus (checked against the -Oz
        # sizes when read): the policy must not depend on where it was kept, or on whether a
        # run recorded the decisions itself instead.
        d.pop("traces", None)
        return d

    @property
    def policy_warmstart(self) -> str | None:
        """The saved-policy spec to start from, if the warm start is one."""
        return None if self.warmstart in ("", "bc") else self.warmstart

    def setup_identity(self) -> dict[str, Any]:
        """The fields the one-time setup (split, vocab, warm start) depends on."""
        d = self.provenance()
        keep = ("seed", "size_metric", "warmstart", "split", "policy", "bc", "vocab",
                "compile", "out_of_range")
        identity = {k: d[k] for k in keep if k in d}
        if self.traces:  # not in the provenance, but the setup read its decisions from it
            identity["traces"] = self.traces
        return identity | {"bc_warmstart": self.warmstart == "bc" and self.algo != "bc"}

    def identity(self) -> dict[str, Any]:
        """The fields a resumed run must share with its checkpoint (the budget may grow)."""
        d = self.provenance()
        del d["iterations"], d["time_budget_minutes"]
        return d


IR2VEC_SHA_PREFIX = "sha256:"


def _check_choice(name: str, value: object, choices: Any) -> None:
    """ConfigError unless `value` is one of the `Literal` `choices` (a config built in code
    skips the TOML loader's type check; the values are read from the type, so adding one
    never needs a second edit here)."""
    allowed = typing.get_args(choices)
    if value not in allowed:
        spelled = [repr(a) for a in allowed]
        listing = f"{', '.join(spelled[:-1])} or {spelled[-1]}"
        raise ConfigError(f"{name} must be {listing}, not {value!r}")


def _policy_dict(policy: PolicyConfig) -> dict[str, Any]:
    """[policy] as provenance: the IR2Vec vocabulary by its content (a run resumed with
    another file is refused, the same file elsewhere is the same run), left out when unset
    (runs without embeddings keep the provenance they always had)."""
    d = to_dict(policy)
    path = d.pop("ir2vec_vocab", None)  # left out by to_dict when unset
    if path is not None:
        from pymlgo.ir2vec.vocab_file import file_sha256

        try:
            d["ir2vec_vocab"] = IR2VEC_SHA_PREFIX + file_sha256(Path(path))
        except OSError as exc:
            raise ConfigError(f"policy.ir2vec_vocab: cannot read {path} "
                              f"({exc.strerror or exc})") from exc
    return d


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain dict (tuples as lists), as TOML and JSON would hold it."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    d = plain(dataclasses.asdict(cfg))
    if isinstance(cfg, TrainConfig):
        for table in ("split", "policy", "il", "bc"):  # with keys left out at default
            d[table] = to_dict(getattr(cfg, table))
        for key, default in _omitted_at_default().items():
            if d.get(key) == default:
                del d[key]
    for key, default in _TABLE_KEYS_OMITTED_AT_DEFAULT.get(type(cfg), {}).items():
        if d.get(key) == default:
            del d[key]
    return d


# table keys added after policies were published, left out at their default (as above)
_TABLE_KEYS_OMITTED_AT_DEFAULT: dict[type, dict[str, Any]] = {
    SplitConfig: {"heldout_packages": None, "validation_by": "module",
                  "validation_weight": "modules", "seed": None},
    PolicyConfig: {"reads_default": False, "ir2vec_vocab": None, "differences": None,
                   "window": "", "languages": []},
    ILConfig: {"moves": "single", "answers": 3},
    BCConfig: {"teacher": "default", "lr_anneal_epochs": 0}}


def _omitted_at_default() -> dict[str, Any]:
    """Fields added after policies were published: at their default they are left out of
    `to_dict`, so a run that does not use them keeps the provenance (and bytes) it had."""
    return {"partial_rewards": "none", "ir2native_model": "", "vocab": "", "traces": "",
            "compile": to_dict(CompileConfig()), "il": to_dict(ILConfig()),
            "reward_weighting": "default", "select_by": "total",
            "out_of_range": "clip", "problem": DEFAULT_PROBLEM}


def _check_value(where: str, value: Any, hint: Any) -> Any:
    """`value` converted to the annotated type, or ConfigError saying what was expected."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_value(where, value, arg)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError("; ".join(errors))
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ConfigError(f"{where} must be one of {list(allowed)}, not {value!r}")
        return value
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, not {value!r}")
        return tuple(_check_value(f"{where}[{i}]", v, item) for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {hint!r}")  # pragma: no cover


def from_dict(cls: type[Any], data: Mapping[str, Any], where: str = "") -> Any:
    """Build dataclass `cls` from `data`; unknown keys and wrong types are ConfigError."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(where + k for k in unknown)}; "
            f"valid here: {', '.join(sorted(names))}"
        )
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}{key} must be a table")
            kwargs[key] = from_dict(hint, value, f"{where}{key}.")
        else:
            kwargs[key] = _check_value(where + key, value, hint)
    try:
        return cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - every field has a default
        raise ConfigError(str(exc)) from exc


def read_toml(path: str | Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def load_config(path: str | Path, **overrides: Any) -> TrainConfig:
    """Read a TOML config; `overrides` (e.g. from the command line) replace its top-level keys."""
    data = read_toml(path) | overrides
    try:
        return from_dict(TrainConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def make_config(**values: Any) -> TrainConfig:
    """A TrainConfig from plain values (nested configs as dicts), with the same checks."""
    return from_dict(TrainConfig, values)
