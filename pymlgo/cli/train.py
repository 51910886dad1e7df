"""`mlgo train`: train a policy of any registered problem (`--problem`) with the one
trainer (`train/trainer.py`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymlgo.cli import common
from pymlgo.problems import registry

if TYPE_CHECKING:  # torch-free, but `mlgo --help` should not import the trainer
    from pymlgo.train.config import TrainConfig

_ALGOS = ("bc", "ppo", "es", "dqn", "il")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a policy (bc, ppo, es, dqn, il); checkpoints, resume, TensorBoard",
        description=(
            "Train a policy on the training split of a corpus: by default an inlining-"
            "for-size policy; --problem regalloc-evict learns the register allocator's "
            "eviction advisor (es or ppo) against the stock advisor's weighted spill cost, "
            "--problem regalloc-priority its queue priorities (es or ppo) likewise. Every "
            "iteration is checkpointed to OUTPUT_DIR; rerunning the same command on an "
            "OUTPUT_DIR that holds a checkpoint resumes it. The policy with the smallest "
            "total size (--size-metric; default: every allocated section, what ships) on "
            "the validation split is kept in OUTPUT_DIR/best, the last one in "
            "OUTPUT_DIR/final (use either with `mlgo eval --policy DIR`). Scalars go to "
            "OUTPUT_DIR/scalars.jsonl and, with tensorboard installed, to "
            "OUTPUT_DIR/tensorboard. A run bounded by --iterations (not --time-budget) "
            "is reproducible: the same seed, config, corpus and compiler give the same "
            "policy bytes, whatever the number of workers and whether the run was stopped "
            "and resumed (unless compiles hit --timeout). With --time-budget the number "
            "of iterations depends on the machine's speed and load, and with it the bytes."
        ),
    )
    common.add_corpus_arg(p)
    p.add_argument("--algo", choices=_ALGOS, default=None,
                   help="bc: imitate clang's heuristic; ppo: policy gradient; es: evolution "
                   "strategies; dqn: Q-learning; il: imitation learning from search (search "
                   "from the policy for smaller decisions, clone them, repeat) (required "
                   "unless --config sets algo)")
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", type=Path, required=True,
                   metavar="DIR", help="run directory (resumed if it holds a checkpoint)")
    p.add_argument("--seed", type=int, default=None, help="seed of everything random "
                   "(split, initialization, sampling; default: 0)")
    p.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="number of iterations (default: 20 unless a time budget is given)")
    p.add_argument("--time-budget", "--time_budget", dest="time_budget", type=float,
                   default=None, metavar="MIN",
                   help="stop starting iterations after MIN minutes in total (setup included)")
    p.add_argument("--warmstart", default=None, metavar="P",
                   help="bc (default where clang sends its own decision, i.e. inlining: "
                   "behaviour-clone clang's heuristic first; elsewhere none: a new policy), "
                   "none, or a saved policy to start from as --policy takes it (a directory, e.g. "
                   "OTHER_RUN/best, or pretrained:NAME); its network and features are used "
                   "as they are, so [policy] keys that disagree with them are an error")
    p.add_argument("--vocab", default=None, metavar="DIR",
                   help="feature normalization of the new network from DIR/vocab.json, "
                   "written by `mlgo vocab` (default: quantiles of the training modules' "
                   "recorded features); its features must be the ones the policy reads")
    p.add_argument("--ir2vec", default=None, metavar="FILE",
                   help="IR2Vec vocabulary (`mlgo ir2vec vocab`; sets [policy] ir2vec_vocab): "
                   "every compile passes it to clang, and the network also reads "
                   "callee_embedding and caller_embedding (float[dim], z-scored per dimension "
                   "by the training decisions' mean and deviation). The policy saves the file "
                   "and always compiles with it; its sha256 is part of the run, so resuming "
                   "with another file is refused")
    p.add_argument("--traces", default=None, metavar="DIR",
                   help="clang's decisions from DIR, written by `mlgo trace --policy "
                   "default` on this corpus with the same compiler and flags, instead of "
                   "recording them again at setup (inlining: any algorithm and warm start, "
                   "for the vocab, the bc warm start or teacher, and which modules have "
                   "decisions; regalloc: --algo bc only)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                   help="TOML file with TrainConfig fields (top-level keys such as seed, "
                   "warmstart, vocab, traces; tables [split], [policy], [compile], [bc], "
                   "[ppo], [es], [dqn], [il]); unknown keys are an error; flags override it (a "
                   "compile flag option replaces that [compile] list)")
    p.add_argument("--partial-rewards", "--partial_rewards", dest="partial_rewards",
                   choices=["none", "ir2native"], default=None,
                   help="ppo only. none (default): every decision of a module compile shares "
                   "its reward 1 - size/size(-Oz). ir2native: each decision is also credited "
                   "with its caller's size change vs -Oz as estimated by an IR2Native model "
                   "(per-decision rewards that still sum to the module's reward)")
    p.add_argument("--ir2native-model", "--ir2native_model", dest="ir2native_model",
                   default=None, metavar="MODEL.json",
                   help="IR2Native model for --partial-rewards ir2native, made by `mlgo "
                   "ir2native dataset --corpus C --output D.json` then `mlgo ir2native train "
                   "--dataset D.json --output MODEL.json`; default: fit one on the training "
                   "split's modules (saved as OUTPUT_DIR/ir2native-model.json)")
    p.add_argument("--problem", default=None, choices=registry.names(),
                   help=f"default: the config's problem, else {registry.DEFAULT.name}. "
                   f"{registry.help_text()}. Register allocation (both advisors) trains with "
                   "--algo es or ppo; the inlining-only keys (--partial-rewards, --vocab, "
                   "--traces, ...) are refused there")
    p.add_argument("--no-tensorboard", dest="tensorboard", action="store_false",
                   help="write scalars.jsonl only")
    common.add_size_metric_arg(p)
    common.add_worker_args(p)
    common.add_compiler_args(p)
    common.add_flag_args(p)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig: the TOML file if any, with the command-line flags on top."""
    from pymlgo.train import config as cfg

    data: dict[str, Any] = {}
    if args.config is not None:
        data = cfg.read_toml(args.config)
    if args.algo is not None:
        data["algo"] = args.algo
    if args.seed is not None:
        data["seed"] = args.seed
    if args.iterations is not None:
        data["iterations"] = args.iterations
    if args.time_budget is not None:
        data["time_budget_minutes"] = args.time_budget
    if args.warmstart is not None:
        data["warmstart"] = args.warmstart
    if args.partial_rewards is not None:
        data["partial_rewards"] = args.partial_rewards
    if args.ir2native_model is not None:
        data["ir2native_model"] = args.ir2native_model
    if args.vocab is not None:
        data["vocab"] = args.vocab
    if args.traces is not None:
        data["traces"] = args.traces
    if args.ir2vec is not None:
        table = data.get("policy", {})
        if not isinstance(table, dict):
            raise cfg.ConfigError(f"{args.config}: policy must be a table")
        data["policy"] = {**table, "ir2vec_vocab": args.ir2vec}
    if args.size_metric is not None:
        data["size_metric"] = args.size_metric
    if args.problem is not None:
        data["problem"] = args.problem
    if "warmstart" not in data:  # bc where the problem has it, else a new policy
        from pymlgo.train.hooks import training_of

        name = data.get("problem", registry.DEFAULT.name)
        try:
            bc = training_of(registry.problem(name)).bc_warmstart if isinstance(name, str) \
                else True
        except registry.UnknownProblemError as exc:
            raise cfg.ConfigError(str(exc)) from None
        if not bc:
            data["warmstart"] = ""
    flags = common.flag_values(args)
    if flags:
        table = data.get("compile", {})
        if not isinstance(table, dict):
            raise cfg.ConfigError(f"{args.config}: compile must be a table")
        data["compile"] = {**table, **flags}
    if "algo" not in data:
        raise cfg.ConfigError("give --algo {bc,ppo,es,dqn,il} (or a --config file that sets algo)")
    try:
        return cfg.make_config(**data)
    except cfg.ConfigError as exc:
        raise cfg.ConfigError(f"{args.config}: {exc}" if args.config else str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    from pymlgo.corpus.format import CorpusError
    from pymlgo.policy.store import PolicyLoadError
    from pymlgo.toolchain.compiler import CompilerError
    from pymlgo.train.config import ConfigError
    from pymlgo.train.hooks import training_of
    from pymlgo.train.trainer import RunOptions, TrainError, train
    from pymlgo.workers import ExecutorError

    try:
        config = config_from_args(args)
        workers = common.default_workers(args.workers) if args.cluster is None else args.workers
        override = config.compile.command_override
        level = registry.problem(config.problem).opt_level
        corpus = common.resolve_corpus(args.corpus, clang=args.clang,
                                       command_override=override, level=level)
        common.warn_about_relaxation("mlgo train", corpus)
        common.warn_about_level("mlgo train", corpus, level)
        options = RunOptions(workers=workers, cluster=args.cluster, clang=args.clang,
                             timeout=args.timeout, tensorboard=args.tensorboard)
        result = train(config, corpus, args.output_dir, options=options)
    except (ConfigError, TrainError, CorpusError, CompilerError, PolicyLoadError,
            ExecutorError, ValueError, OSError) as exc:
        print(f"mlgo train: {exc}", file=sys.stderr)
        return 2
    problem = registry.problem(config.problem)
    what = f"{training_of(problem).scoring.name} vs {problem.baseline_label}"
    print(f"best policy: {result.best_dir} (iteration {result.best_iteration}, validation "
          f"{result.best_figures} {what})")
    print(f"final policy: {result.final_dir} (iteration {result.iterations}, validation "
          f"{result.final_validation_change:+.2%} {what})")
    if result.best_warning:
        print(result.best_warning, file=sys.stderr)
    return 0
