"""Policy quality: ES and PPO (each warm-started from behaviour cloning) vs -Oz.

Snapshots the allowed training data (the demo corpus and the Debian corpora, or the
corpora given) into one corpus whose package is each module name's first component.

Single split (`--folds 1`, the default): splits it by package (seeded: the held-out
packages share no source with training), trains each of `--algos` for an equal share of
`--minutes` (setup included; later runs reuse the setup the first computed when it is
identical: same split, vocab and warm start), and compiles the training and held-out
modules with each algorithm's best-by-validation policy.

K-fold by package (`--folds K`, K >= 2): the packages are dealt into K seeded folds of
about equal module counts; fold i holds out its packages, and every algorithm trains on
the other folds' packages (minus a validation slice of 10% of the modules, which picks
`best/`) and is evaluated on fold i's held-out packages only. Every package is held out
exactly once, so the pooled totals cover the whole corpus. `--minutes` is then the total
budget: each algorithm gets `minutes / (folds * algorithms)` of training per fold (or
`--run-minutes` each, which overrides); the fold's setup (clang's decisions, the vocab and
the bc warm start) runs once before, on no algorithm's clock. Reported per fold and
pooled: the held-out change (allocated and text side by side), the guarded total (per
module the smaller of policy and -Oz), the module-size buckets, per held-out package
changes and the worst package; and over folds the mean and the worst fold.

An algorithm is `ALGO[:WEIGHTING]` (`ppo`, `ppo:bytes`, `es:module`; WEIGHTING sets
`reward_weighting`). `--tails clip,log` evaluates each trained policy with both ways of
normalizing feature values beyond its vocab (the weights are the same; `log` extrapolates
what `clip` saturates, see `pymlgo.policy.vocab`), and `out_of_range` reports, per
module-size bucket, how many of clang's held-out decisions have a feature beyond the vocab.
`search_limit`: what `pymlgo.evaluate.search` finds with `--search-budget` compiles per
module on a seeded sample of each fold's held-out modules (`--search-modules`), starting
from the fold's trained policy that is best on validation (search never ends above its
start, so the limit is at least that policy); null when the budget is 0. Each policy's
share of the limit is the bytes it saves over the bytes search saves, on those modules.

An explicit split (`--heldout-packages P,Q,...`): one fold whose held-out packages are
those named (the shipped model's own split, say), reported like a k-fold run of one fold:
the same training, evaluation, search limit and shares. Validation (what picks each
algorithm's `best/`) is drawn from the training packages, by package (`--validation-by
package`, the default: whole packages the policy did not train on, as held-out code is) or
by module.

Prints JSON (also written to OUTPUT_DIR/policy_quality.json) and, on stderr, markdown
tables of the same figures.

    python benchmarks/policy_quality.py [--minutes 60] [--corpus demo --corpus DIR ...]
        [--output_dir DIR] [--seed 0] [--heldout 0.25] [--workers 2] [--algos es,ppo]
        [--folds 4 [--run-minutes 3] [--tails clip,log] [--search-budget 8]]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import random
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pymlgo.cli.common import ALLOW_FLAGS_ENV
from pymlgo.corpus.format import Corpus, CorpusError, package_of
from pymlgo.corpus.snapshot import snapshot_corpora
from pymlgo.evaluate.eval import SIZE_BUCKETS, EvalReport, corpus_jobs, evaluate
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.store import IR2VEC_FILE, load_policy_dir, load_spec
from pymlgo.policy.vocab import Vocab
from pymlgo.problems.base import CompileJob, Policy, Trajectory
from pymlgo.problems.inlining.policies import HeuristicPolicy
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.train.config import TrainConfig, make_config
from pymlgo.train.trainer import SETUP_FILE, RunOptions, train
from pymlgo.workers import WorkSpec, make_executor

ALGOS = ("es", "ppo", "dqn", "il")  # what --algos trains (each from the bc warm start)
# a variant may also be bc itself (e.g. cloning a rule: `bc.teacher`, the shipped model's
# algorithm); the plain bc warm start is always reported as "bc"
VARIANT_ALGOS = (*ALGOS, "bc")
TARGET_HELDOUT = -0.03  # total held-out .text change vs -Oz
TARGET_TRAIN = -0.05
TARGET_WORST_PACKAGE = 0.005  # no held-out package worse than this
DEBIAN = Path.home() / ".cache" / "pymlgo" / "corpora" / "debian"


def default_corpora() -> list[str]:
    """The demo corpus and each Debian package's sub-corpus (as `PKG=DIR`: one broken or
    half-built package must not take the others down)."""
    subs = sorted(d for d in DEBIAN.glob("*") if (d / "corpus_description.json").is_file())
    return ["demo", *(f"{d.name}={d}" for d in subs)]


def quality_config(algo: str, seed: int, minutes: float, heldout: float,
                   weighting: str = "default", overrides: Mapping[str, Any] | None = None,
                   traces: str = "") -> TrainConfig:
    """Hyperparameters for a 2-core, tens-of-minutes run (see the note in the report).

    Batches are uniform over modules, although openssl is about 70% of them. Measured with
    `sample_by = "package"` (seed 0): the packages with one or two training modules
    (fmtlib, expat) are then in every batch, ES fits them, and validation went from -0.83%
    (the bc warm start) to +0.52% in 22 iterations while the batches improved by ~0.8%."""
    values: dict[str, Any] = dict(
        algo=algo, seed=seed, time_budget_minutes=minutes, warmstart="bc",
        reward_weighting=weighting, traces=traces,
        split={"by": "package", "validation": 0.1, "heldout": heldout},
        bc={"warmstart_epochs": 30},
        es={"population": 6, "sigma": 0.05, "learning_rate": 0.02,
            "modules_per_iteration": 16},
        ppo={"modules_per_iteration": 12, "samples_per_module": 4, "entropy_coef": 0.001},
    )
    if algo == "il":  # a few minutes per fold: search a sample of modules, not all of them
        values["il"] = {"budget": 8, "modules_per_iteration": 24}
    return make_config(**_merged(values, overrides or {}))


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s keys replacing its own; tables are merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def load_variants(path: Path) -> dict[str, dict[str, Any]]:
    """Named training variants from a TOML file: each table is one variant, its `algo`
    (es, ppo, dqn, il) plus any `mlgo train` config keys that differ from `quality_config`'s,
    for example a feature set:

        [ppo-local]
        algo = "ppo"
        policy.features = ["sroa_savings", ...]

    A variant is then named in `--algos` like an algorithm."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"--variants {path}: {exc}") from exc
    for name, table in data.items():
        if not isinstance(table, dict) or table.get("algo") not in VARIANT_ALGOS:
            raise SystemExit(f"--variants {path}: [{name}] needs algo = one of "
                             f"{', '.join(VARIANT_ALGOS)}")
        if ":" in name or "," in name:
            raise SystemExit(f"--variants {path}: variant name {name!r} may not hold : or ,")
    return data


def summary(report: EvalReport) -> dict[str, Any]:
    base = report.baseline_total
    guarded = report.guarded_total
    metrics = report.by_metric() if report.ok_modules else {}
    return {"change": report.change, "baseline_bytes": base,
            "policy_bytes": report.policy_total, "modules": len(report.ok_modules),
            "failed": len(report.modules) - len(report.ok_modules),
            "guarded_bytes": guarded, "guarded_change": guarded / base - 1.0 if base else 0.0,
            # allocated (what ships) and text (code only) side by side
            "by_metric": {k: v["change"] for k, v in metrics.items()},
            "by_bucket": report.by_bucket(),
            "largest_growth_of_a_big_module": report.largest_big_growth()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0,
                    help="training budget for all algorithms together (default 60)")
    ap.add_argument("--corpus", action="append", default=None, metavar="[PREFIX=]DIR|demo",
                    help="a corpus to train/evaluate on, its module names under PREFIX/ if "
                    f"given (repeatable; default: demo and every {DEBIAN}/PKG as PKG=...)")
    ap.add_argument("--output_dir", type=Path, default=Path("policy-quality"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout", type=float, default=0.25,
                    help="fraction of modules in held-out packages (default 0.25)")
    ap.add_argument("--algos", default="es,ppo",
                    help="comma-separated ALGO[:WEIGHTING], ALGO in es, ppo, dqn, il, WEIGHTING "
                    "in module, bytes (reward_weighting; default es,ppo)")
    ap.add_argument("--policies", default="", metavar="SPEC,...",
                    help="with --folds or --heldout-packages: policies evaluated as they are "
                    "(no training) on every fold's held-out packages beside the trained ones: "
                    "built-ins such as shift:2:30:3, pretrained:NAME or saved directories; "
                    "with them --algos may be empty")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--folds", type=int, default=1,
                    help="K >= 2: K-fold by package (see above); 1: one seeded split")
    ap.add_argument("--run-minutes", type=float, default=None,
                    help="with --folds: minutes per algorithm per fold (default: --minutes "
                    "/ (folds * algorithms))")
    ap.add_argument("--tails", default="clip",
                    help="with --folds: comma-separated feature tails (clip, log) to "
                    "evaluate every trained policy with (default clip)")
    ap.add_argument("--search-modules", type=int, default=40, metavar="N",
                    help="with --search-budget: search a seeded sample of N held-out modules "
                    "per fold (0: all; default 40), from the trained policy best on "
                    "validation (with no --algos, the first of --policies); each policy's "
                    "share of the limit is over those modules")
    ap.add_argument("--search-budget", type=int, default=0,
                    help="with --folds: compiles per held-out module for the search limit "
                    "(pymlgo.evaluate.search from clang's decisions); 0: not searched")
    ap.add_argument("--search-moves", choices=("single", "callee"), default="single",
                    help="with --search-budget: the search's moves (`mlgo search --moves`)")
    ap.add_argument("--only-folds", default=None, metavar="I,J",
                    help="with --folds: run only these folds (0-based); the others are "
                    "taken from OUTPUT_DIR when an earlier run finished them with the same "
                    "settings (so folds can run as separate processes), else left out")
    ap.add_argument("--variants", type=Path, default=None, metavar="TOML",
                    help="named training variants (a table each: algo plus config keys, "
                    "see load_variants) that --algos may name like algorithms")
    ap.add_argument("--heldout-packages", default=None, metavar="P,Q,...",
                    help="hold out exactly these packages (one fold, reported like --folds; "
                    "overrides --folds and --heldout)")
    ap.add_argument("--validation-by", choices=("package", "module"), default="package",
                    help="validation slice of the training packages: whole packages "
                    "(default) or modules (split.validation_by)")
    ap.add_argument("--no-shared-trace", action="store_true",
                    help="with --folds: record clang's decisions in every fold's setup "
                    "instead of tracing the whole corpus once (OUTPUT_DIR/trace) and "
                    "reading each fold's training modules from it")
    args = ap.parse_args(argv)
    variants = args.variant_tables = load_variants(args.variants) if args.variants else {}
    algos = [a for a in args.algos.split(",") if a]
    fixed = list(dict.fromkeys(p for p in args.policies.split(",") if p))
    if fixed and args.folds == 1 and args.heldout_packages is None:
        ap.error("--policies: needs --folds K or --heldout-packages (the single split comes "
                 "from a training run)")
    for spec in fixed:
        try:
            load_spec(spec)
        except (ValueError, OSError) as exc:
            ap.error(f"--policies: {exc}")
    args.fixed_policies = fixed
    if ((not algos and not fixed) or any(not _valid_algo(a, variants) for a in algos)
            or len(set(algos)) < len(algos)):
        ap.error("--algos: a comma-separated list of es, ppo, dqn, il, each optionally with "
                 ":module or :bytes, or variant names from --variants, each once")
    if args.folds < 1:
        ap.error("--folds must be >= 1")
    tails = [t for t in args.tails.split(",") if t]
    if not tails or set(tails) - {"clip", "log"} or len(set(tails)) < len(tails):
        ap.error("--tails: a comma-separated list of clip, log")

    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    corpora = args.corpus or default_corpora()
    try:
        frozen = snapshot_corpora(corpora, out / "corpus",
                                  allow_flags=os.environ.get(ALLOW_FLAGS_ENV, "").split())
    except CorpusError as exc:
        raise SystemExit(f"policy_quality: {exc}") from exc
    for spec, why in frozen.skipped.items():
        print(f"policy_quality: skipped {spec}: {why[:200]}", file=sys.stderr)
    corpus, skipped = frozen.corpus, frozen.skipped
    if args.heldout_packages is not None:
        held = sorted({p for p in args.heldout_packages.split(",") if p})
        unknown = sorted(set(held) - set(corpus.packages))
        if not held or unknown:
            raise SystemExit(f"policy_quality: --heldout-packages: not in the corpus: {unknown}"
                             if unknown else "policy_quality: --heldout-packages is empty")
        return kfold(args, algos, tails, corpus, corpora, skipped, argv, heldout=held)
    if args.folds > 1:
        return kfold(args, algos, tails, corpus, corpora, skipped, argv)
    compiler = find_compiler(None)
    spec = WorkSpec(clang=None, timeout=600.0)
    per_algo = args.minutes / len(algos)
    results: dict[str, Any] = {}
    with make_executor(None, args.workers) as executor:
        runs = {}
        for i, name in enumerate(algos):
            config = _config(name, variants, args.seed, per_algo, args.heldout)
            run_dir = out / _run_name(name)
            run_dir.mkdir(parents=True, exist_ok=True)
            first = out / _run_name(algos[0]) / SETUP_FILE
            if i and first.is_file() and not (run_dir / SETUP_FILE).exists():
                shutil.copyfile(first, run_dir / SETUP_FILE)  # same split/vocab/warm start
            started = time.monotonic()
            runs[name] = train(config, corpus, run_dir, options=RunOptions(workers=args.workers),
                               executor=executor)
            print(f"policy_quality: {name} trained in {(time.monotonic() - started) / 60:.1f} "
                  "min", file=sys.stderr, flush=True)
        split = next(iter(runs.values())).split
        train_jobs = corpus_jobs(corpus, split.train)
        held_jobs = corpus_jobs(corpus, split.heldout)
        policies: dict[str, tuple[InliningPolicy, Any]] = {}
        warm = _warm_start(_setup(out / _run_name(algos[0])))
        if warm is not None:
            policies["bc"] = (warm, None)
        for algo, res in runs.items():
            policies[algo] = (load_policy_dir(res.best_dir), res)
        for name, (policy, res) in policies.items():
            print(f"policy_quality: evaluating {name}", file=sys.stderr, flush=True)
            tr = evaluate(executor, compiler, train_jobs, policy, spec=spec)
            ho = evaluate(executor, compiler, held_jobs, policy, spec=spec)
            packages = ho.by_package()
            worst = max(packages.items(), key=lambda kv: kv[1]["change"]) if packages else None
            entry: dict[str, Any] = {
                "train": summary(tr), "heldout": summary(ho), "heldout_packages": packages,
                "worst_heldout_package": worst[0] if worst else None,
                "targets_met": {
                    "heldout_total": ho.change <= TARGET_HELDOUT,
                    "train_total": tr.change <= TARGET_TRAIN,
                    "no_heldout_package_above_0.5pct":
                        worst is None or worst[1]["change"] <= TARGET_WORST_PACKAGE,
                },
            }
            if res is not None:
                entry |= {"training_minutes": res.minutes, "iterations": res.iterations,
                          "best_iteration": res.best_iteration,
                          "best_validation_change": res.best_validation_change,
                          "policy_dir": str(res.best_dir.resolve())}
            results[name] = entry
    trained = [a for a in algos if a in results]
    best = min(trained, key=lambda a: results[a]["heldout"]["change"]) if trained else None
    report = {
        "benchmark": "policy_quality",
        "command": " ".join([os.path.basename(sys.argv[0]), *(argv or sys.argv[1:])]),
        "budget_minutes": args.minutes,
        "seed": args.seed,
        "corpora": corpora,
        "skipped_corpora": skipped,
        "compiler": compiler.describe(),
        "modules": len(corpus),
        "split": {"by": "package",
                  "train_packages": sorted({package_of(n) for n in split.train}),
                  "validation_modules": len(split.validation),
                  "heldout_packages": sorted({package_of(n) for n in split.heldout}),
                  "train_modules": len(split.train), "heldout_modules": len(split.heldout)},
        "targets": {"heldout_total": TARGET_HELDOUT, "train_total": TARGET_TRAIN,
                    "worst_heldout_package": TARGET_WORST_PACKAGE},
        "algorithms": results,
        "best_algorithm": best,
    }
    _write_report(out, report)
    return 0


def _write_report(out: Path, report: Mapping[str, Any]) -> None:
    text = json.dumps(report, indent=2)
    tmp = out / "policy_quality.json.tmp"
    tmp.write_text(text + "\n")
    os.replace(tmp, out / "policy_quality.json")
    print(text)


Variants = Mapping[str, Mapping[str, Any]]  # --variants: name -> its table


def _valid_algo(spec: str, variants: Variants) -> bool:
    algo, _, weighting = spec.partition(":")
    return (algo in ALGOS or algo in variants) and weighting in (
        "", "module", "bytes")


def _parse_algo(spec: str, variants: Variants | None = None) -> tuple[str, str]:
    """`ppo:bytes` -> ("ppo", "bytes"); `ppo` -> ("ppo", "default"); a variant -> its algo."""
    algo, _, weighting = spec.partition(":")
    if variants and algo in variants:
        algo = variants[algo]["algo"]
    return algo, weighting or "default"


def _config(spec: str, variants: Variants, seed: int, minutes: float, heldout: float,
            traces: str = "", validation_by: str = "module") -> TrainConfig:
    """The training config of `--algos` entry `spec` (an algorithm or a variant)."""
    algo, weighting = _parse_algo(spec, variants)
    overrides = {k: v for k, v in variants.get(spec.partition(":")[0], {}).items()
                 if k != "algo"}
    if validation_by != "module":
        overrides = _merged({"split": {"validation_by": validation_by}}, overrides)
    return quality_config(algo, seed, minutes, heldout, weighting, overrides, traces)


def _run_name(spec: str) -> str:
    return spec.replace(":", "-")


def _setup(run_dir: Path) -> Any:
    """The run's one-time setup (split, vocab, warm start), None if it has none yet."""
    path = run_dir / SETUP_FILE
    if not path.is_file():
        return None
    with path.open("rb") as f:
        return pickle.load(f)


def _warm_start(setup: Any, name: str = "bc-warmstart") -> InliningPolicy | None:
    """The bc warm start (the policy every algorithm began from), from a run's setup."""
    return None if setup is None else replace(setup.initial.greedy(), name=name)



# --- k-fold by package -------------------------------------------------------------------


def package_folds(corpus: Corpus, folds: int, seed: int) -> list[list[str]]:
    """Packages dealt into `folds` groups of about equal module counts: biggest first (ties
    in a seeded shuffle) to the fold with the fewest modules so far (ties: the lowest)."""
    sizes: dict[str, int] = {}
    for m in corpus.modules:
        sizes[m.package] = sizes.get(m.package, 0) + 1
    if len(sizes) < folds:
        raise SystemExit(f"--folds {folds}: the corpus has only {len(sizes)} packages")
    order = sorted(sizes)
    random.Random(f"folds:{seed}").shuffle(order)
    order.sort(key=lambda pkg: -sizes[pkg])  # stable: equal sizes keep the shuffle
    groups: list[list[str]] = [[] for _ in range(folds)]
    totals = [0] * folds
    for pkg in order:
        i = min(range(folds), key=lambda j: (totals[j], j))
        groups[i].append(pkg)
        totals[i] += sizes[pkg]
    return [sorted(g) for g in groups]


def shared_trace(executor: Any, compiler: Compiler, corpus: Corpus, directory: Path,
                 spec: WorkSpec) -> Path:
    """clang's own decisions on every module of the snapshot, traced once (`mlgo trace
    --policy default`) and kept in `directory`: each fold's setup reads its training modules
    from it instead of compiling them again (the vocab and the warm start still see only the
    fold's training modules). Resumable: a stopped run's traced modules are kept
    (`DIRECTORY.partial/`) and the next run traces only the others."""
    from pymlgo.evaluate.trace import TRACE_FILE, trace_corpus

    if not (directory / TRACE_FILE).is_file():
        print(f"policy_quality: tracing clang's decisions on {len(corpus)} modules once "
              f"into {directory}", file=sys.stderr, flush=True)
        trace_corpus(executor, compiler, corpus_jobs(corpus), HeuristicPolicy(), directory,
                     spec=spec, overwrite=True, progress=True,
                     metadata={"policy_spec": "default", "corpus": str(corpus.root)})
    return directory


def _recorded(executor: Any, jobs: Sequence[CompileJob],
              traces: str) -> Iterator[tuple[str, Trajectory]]:
    """clang's own decisions on `jobs`: read from the shared trace, or compiled."""
    if traces:
        from pymlgo.evaluate.trace import load_traces

        wanted = {j.module for j in jobs}
        for module, traj, _ in load_traces(Path(traces)):
            if module in wanted:
                yield module, traj
        return
    spec = WorkSpec(clang=None, timeout=600.0, policy=HeuristicPolicy(), record=True)
    for res in executor.run(spec, list(jobs)):
        if res.ok and res.trajectory is not None:
            yield res.module, res.trajectory


def out_of_range(executor: Any, jobs: Sequence[CompileJob], vocab: Vocab,
                 baselines: Mapping[str, int], traces: str = "") -> dict[str, Any]:
    """Per module-size bucket: clang's own decisions on `jobs` (one recorded -Oz compile
    each, or the shared trace) whose features lie beyond `vocab`'s last boundary, where a
    "clip" vocab sees 1.0 whatever the value."""
    tops = [float(b[-1]) if b.size else None for b in vocab.boundaries]
    rows: dict[str, dict[str, Any]] = {
        name: {"modules": 0, "decisions": 0, "beyond": 0, "features": {}}
        for name, _, _ in SIZE_BUCKETS}
    for module, trajectory in _recorded(executor, jobs, traces):
        base = baselines.get(module)
        if base is None:
            continue
        bucket = next(n for n, lo, hi in SIZE_BUCKETS if base >= lo and (hi is None or base < hi))
        row = rows[bucket]
        row["modules"] += 1
        feats = trajectory.features
        n = len(trajectory.advice)
        any_beyond = [False] * n
        for name, top in zip(vocab.features, tops, strict=True):
            if top is None or name not in feats:
                continue
            col = [float(v) for v in list(feats[name].reshape(-1))]
            hits = [v > top for v in col]
            if any(hits):
                row["features"][name] = row["features"].get(name, 0) + sum(hits)
                any_beyond = [a or h for a, h in zip(any_beyond, hits, strict=True)]
        row["decisions"] += n
        row["beyond"] += sum(any_beyond)
    for row in rows.values():
        d = row["decisions"]
        row["beyond_fraction"] = row["beyond"] / d if d else 0.0
        row["features"] = {k: v / d for k, v in sorted(row["features"].items(),
                                                         key=lambda kv: -kv[1])}
    return rows


def search_sample(names: Sequence[str], n: int, seed: int, fold: int) -> list[str]:
    """A seeded sample of `n` held-out modules to search (all of them if n <= 0 or fewer)."""
    ordered = sorted(names)
    if n <= 0 or n >= len(ordered):
        return ordered
    return sorted(random.Random(f"search:{seed}:{fold}").sample(ordered, n))


def search_limit(executor: Any, compiler: Compiler, jobs: Sequence[CompileJob],
                 budget: int, seed: int, spec: WorkSpec, start: Policy | None = None,
                 output_dir: Path | None = None, moves: str = "single"
                 ) -> dict[str, Any] | None:
    """The saving `pymlgo.evaluate.search` finds on `jobs` from `start`'s decisions (clang's
    own by default): the best decision sequences per module in `budget` compiles each, an
    upper reference for what a policy could reach there. Resumable in `output_dir`. None if
    search is not available or not asked."""
    if budget < 1 or importlib.util.find_spec("pymlgo.evaluate.search") is None:
        return None
    from pymlgo.evaluate import search as search_mod

    fn = getattr(search_mod, "search", None)
    if fn is None:
        return None
    report = fn(executor, compiler, list(jobs), start or HeuristicPolicy(), budget=budget,
                seed=seed, spec=spec, output_dir=output_dir, moves=moves)
    totals = dict(report.totals())
    totals["budget"] = budget
    totals["best"] = {m.module: m.best_bytes for m in report.ok_modules}
    return totals


def best_known(limit: dict[str, Any], reports: Iterable[EvalReport]) -> dict[str, Any]:
    """`limit` (a search result) with each searched module's best bytes lowered to the
    smallest known for it: any evaluated policy's, or -Oz's own; its totals recomputed. A
    policy's share of the limit is then at most 1."""
    best = dict(limit["best"])
    for rep in reports:
        for m in rep.ok_modules:
            if m.name in best and m.policy_bytes is not None and best[m.name] is not None:
                best[m.name] = min(best[m.name], m.policy_bytes, m.baseline_bytes or
                                   m.policy_bytes)
    base = limit["baseline_bytes"]
    known = sum(b for b in best.values() if b is not None)
    return limit | {"best": best, "search_best_bytes": limit["best_bytes"],
                    "search_change": limit["change"], "best_bytes": known,
                    "saved_bytes": base - known, "change": known / base - 1.0 if base else 0.0}


def _share_of_search(report: EvalReport, limit: Mapping[str, Any] | None) -> float | None:
    """Bytes a policy saves over the bytes search saves, on the modules both measured."""
    if not limit:
        return None
    best: Mapping[str, int | None] = limit["best"]
    rows = [m for m in report.ok_modules if best.get(m.name) is not None]
    base = sum(m.baseline_bytes or 0 for m in rows)
    found = base - sum(best[m.name] or 0 for m in rows)
    saved = base - sum(m.policy_bytes or 0 for m in rows)
    return saved / found if found > 0 else None


def _packages(report: EvalReport) -> tuple[dict[str, dict[str, Any]], str | None]:
    packages = report.by_package()
    worst = max(packages.items(), key=lambda kv: kv[1]["change"])[0] if packages else None
    return packages, worst


def _heldout_entry(report: EvalReport, limit: Mapping[str, Any] | None) -> dict[str, Any]:
    packages, worst = _packages(report)
    return {"heldout": summary(report), "heldout_packages": packages,
            "worst_heldout_package": worst,
            "worst_heldout_package_change": packages[worst]["change"] if worst else None,
            "share_of_search_limit": _share_of_search(report, limit)}


def kfold(args: argparse.Namespace, algos: list[str], tails: list[str], corpus: Corpus,
          corpora: Sequence[str], skipped: Mapping[str, str],
          argv: Sequence[str] | None, heldout: list[str] | None = None) -> int:
    """Train and evaluate every algorithm on every fold (module docstring); report. With
    `heldout`, one fold that holds out exactly those packages (`--heldout-packages`)."""
    out: Path = args.output_dir
    groups = [heldout] if heldout else package_folds(corpus, args.folds, args.seed)
    minutes = (args.run_minutes if args.run_minutes is not None
               else args.minutes / (len(groups) * max(1, len(algos))))
    compiler = find_compiler(None)
    spec = WorkSpec(clang=None, timeout=600.0)
    # policy label ("bc", "ppo", "ppo:bytes", each "+log" when evaluated with a log tail)
    # -> per fold its held-out report
    reports: dict[str, list[EvalReport]] = {}
    folds_out: list[dict[str, Any]] = []
    only = (set(range(len(groups))) if args.only_folds is None
            else {int(i) for i in args.only_folds.split(",") if i})
    variants: Variants = args.variant_tables
    fixed: list[str] = args.fixed_policies
    settings = {"algos": algos, "tails": tails, "search_budget": args.search_budget,
                **({"policies": fixed} if fixed else {}),
                "search_modules": args.search_modules,
                **({"search_moves": args.search_moves} if args.search_moves != "single"
                   else {}),
                "minutes": minutes, "seed": args.seed, "modules": len(corpus),
                "validation_by": args.validation_by,
                "variants": {a: variants[a.partition(":")[0]] for a in algos
                             if a.partition(":")[0] in variants}}
    with make_executor(None, args.workers) as executor:
        # clang's decisions feed training only: a run of fixed policies needs no trace
        traces = "" if args.no_shared_trace or not algos else str(shared_trace(
            executor, compiler, corpus, out / "trace", spec))
        for k, held in enumerate(groups):
            done = out / f"fold{k}" / "fold.pkl"
            if done.is_file():  # finished by an earlier run (or another process)
                with done.open("rb") as f:
                    saved = pickle.load(f)
                if saved["settings"] == settings | {"heldout": held}:
                    folds_out.append(saved["entry"])
                    for label, rep in saved["reports"].items():
                        reports.setdefault(label, []).append(rep)
                    continue
            if k not in only:
                continue
            fold_reports: dict[str, EvalReport] = {}
            held_set = set(held)
            train_corpus = replace(corpus, modules=tuple(
                m for m in corpus.modules if m.package not in held_set))
            held_names = [m.name for m in corpus.modules if m.package in held_set]
            held_jobs = corpus_jobs(corpus, held_names)
            fold_dir = out / f"fold{k}"
            runs: dict[str, Any] = {}
            # The setup (split, -Oz sizes, clang's decisions, vocab, bc warm start) runs once
            # per fold, outside every algorithm's clock: each gets the same training time.
            setup_dir = fold_dir / "setup"
            configs = {name: _config(name, variants, args.seed, minutes, 0.0, traces,
                                     args.validation_by) for name in algos}
            started = time.monotonic()
            if algos:
                first = configs[algos[0]]
                train(replace(first, iterations=0, time_budget_minutes=None), train_corpus,
                      setup_dir, options=RunOptions(workers=args.workers, progress=False),
                      executor=executor)
            setup_minutes = (time.monotonic() - started) / 60
            for name, config in configs.items():
                run_dir = fold_dir / _run_name(name)
                run_dir.mkdir(parents=True, exist_ok=True)
                if not (run_dir / SETUP_FILE).exists():
                    own_setup = setup_dir
                    if config.setup_identity() != first.setup_identity():
                        # a variant with its own setup (say, IR2Vec embeddings recorded) makes
                        # it off the clock too, or it eats the variant's training time
                        own_setup = fold_dir / f"setup-{_run_name(name)}"
                        train(replace(config, iterations=0, time_budget_minutes=None),
                              train_corpus, own_setup,
                              options=RunOptions(workers=args.workers, progress=False),
                              executor=executor)
                    for kept in (SETUP_FILE, IR2VEC_FILE):  # the vocabulary the run compiles with
                        if (own_setup / kept).exists():
                            shutil.copyfile(own_setup / kept, run_dir / kept)
                started = time.monotonic()
                runs[name] = train(config, train_corpus, run_dir,
                                   options=RunOptions(workers=args.workers, progress=False),
                                   executor=executor)
                print(f"policy_quality: fold {k} {name} trained in "
                      f"{(time.monotonic() - started) / 60:.1f} min", file=sys.stderr,
                      flush=True)
            policies: dict[str, Policy] = {}
            shared = _setup(setup_dir) if algos else None
            warm = _warm_start(shared)
            # bc itself does not start from a warm start (an untrained network then): one is
            # reported only when an algorithm trains on from it
            if warm is not None and any(c.algo != "bc" for c in configs.values()):
                policies["bc"] = warm
            for name, res in runs.items():
                # a variant with its own setup (other features, say) had its own warm start;
                # a bc variant's is its untrained network, not worth a held-out evaluation
                own = _setup(fold_dir / _run_name(name))
                if own is not None and configs[name].algo != "bc" and (
                        shared is None or own.identity != shared.identity):
                    policies[f"{name}:bc"] = replace(own.initial.greedy(),
                                                     name=f"{name}-bc-warmstart")
                policies[name] = load_policy_dir(res.best_dir)
            for spec_name in fixed:
                policies[spec_name] = load_spec(spec_name, seed=args.seed)
            entry: dict[str, Any] = {
                "fold": k, "heldout_packages": held, "heldout_modules": len(held_names),
                "train_packages": sorted(train_corpus.packages),
                "train_modules": len(train_corpus), "setup_minutes": setup_minutes,
                "policies": {}}
            baselines: dict[str, int] = {}
            for label, policy in policies.items():
                own_tail = policy.vocab.tail if isinstance(policy, InliningPolicy) else None
                for tail in tails if own_tail is not None else [None]:
                    if tail != own_tail and label == "bc" and len(tails) > 1:
                        continue  # the warm start is the reference; once is enough
                    shown = label if tail == own_tail else f"{label}+{tail}"
                    pol = (policy if tail == own_tail else replace(
                        policy, vocab=replace(policy.vocab, tail=tail)))  # type: ignore
                    print(f"policy_quality: fold {k} evaluating {shown}", file=sys.stderr,
                          flush=True)
                    rep = evaluate(executor, compiler, held_jobs, pol, spec=spec)
                    baselines = {m.name: m.baseline_bytes for m in rep.ok_modules
                                 if m.baseline_bytes is not None}
                    reports.setdefault(shown, []).append(rep)
                    fold_reports[shown] = rep
            # The search starts from the trained policy best on validation (never chosen by
            # held-out bytes) and never ends above it; the limit per module is the smallest
            # object known for it: search's, or any evaluated policy's.
            # (with no training, from the first fixed policy: chosen before any held-out byte)
            chosen = (min(runs, key=lambda n: runs[n].best_validation_change) if runs
                      else fixed[0] if fixed else None)
            start = policies[chosen] if chosen is not None else HeuristicPolicy()
            sample = search_sample(held_names, args.search_modules, args.seed, k)
            limit = search_limit(executor, compiler, corpus_jobs(corpus, sample),
                                 args.search_budget, args.seed, spec, start,
                                 fold_dir / "search", args.search_moves)
            if limit is not None:
                limit["start"] = chosen or "default"
                limit = best_known(limit, fold_reports.values())
            entry["search_limit"] = (None if limit is None
                                     else {k2: v for k2, v in limit.items() if k2 != "best"})
            for shown, rep in fold_reports.items():
                e = _heldout_entry(rep, limit)
                res = runs.get(shown.split("+")[0])
                if res is not None:
                    e |= {"training_minutes": res.minutes, "iterations": res.iterations,
                          "best_iteration": res.best_iteration,
                          "best_validation_change": res.best_validation_change}
                entry["policies"][shown] = e
            if warm is not None:
                entry["out_of_range"] = out_of_range(executor, held_jobs, warm.vocab, baselines,
                                                     traces=traces)
            folds_out.append(entry)
            tmp = done.with_suffix(".tmp")
            tmp.parent.mkdir(parents=True, exist_ok=True)  # no training run made it
            with tmp.open("wb") as f:
                pickle.dump({"settings": settings | {"heldout": held}, "entry": entry,
                             "reports": fold_reports}, f)
            os.replace(tmp, done)
    if not folds_out:
        raise SystemExit("policy_quality: no fold finished (see --only-folds)")
    overall = {label: overall_entry(label, reps, [
        f["policies"][label]["share_of_search_limit"] for f in folds_out
        if label in f["policies"]]) for label, reps in reports.items()}
    report = {
        "benchmark": "policy_quality",
        "mode": "explicit-split" if heldout else "kfold-by-package",
        "validation_by": args.validation_by,
        "command": " ".join([os.path.basename(sys.argv[0]), *(argv or sys.argv[1:])]),
        "folds": len(groups), "folds_reported": [f["fold"] for f in folds_out],
        "seed": args.seed,
        "minutes_per_algorithm_per_fold": minutes,
        "algorithms": algos, "fixed_policies": fixed, "tails": tails,
        "search_budget": args.search_budget, "search_moves": args.search_moves,
        "corpora": list(corpora), "skipped_corpora": dict(skipped),
        "compiler": compiler.describe(), "modules": len(corpus),
        "fold_results": folds_out,
        "overall": overall,
    }
    print(markdown(report), file=sys.stderr)
    _write_report(out, report)
    return 0


def overall_entry(label: str, reps: Sequence[EvalReport],
                  shares: Sequence[float | None]) -> dict[str, Any]:
    """One policy over the folds: each fold's held-out change and big-module bucket, their
    mean and worst, and the pooled report (every module once, by its own fold's policy)."""
    pooled = EvalReport(reps[0].problem, label, reps[0].compiler,
                        tuple(m for r in reps for m in r.modules),
                        size_metric=reps[0].size_metric)
    changes = [r.change for r in reps]
    worst_fold = max(range(len(reps)), key=lambda i: changes[i])
    packages, worst = _packages(pooled)
    big = SIZE_BUCKETS[-1][0]
    return {
        "fold_changes": changes,
        "mean_fold_change": sum(changes) / len(changes),
        "worst_fold": worst_fold, "worst_fold_change": changes[worst_fold],
        # issue 24: the big-module bucket must not grow in any fold
        "fold_big_bucket_changes": [r.by_bucket()[big]["change"] for r in reps],
        "pooled": summary(pooled),
        "packages": packages, "worst_package": worst,
        "worst_package_change": packages[worst]["change"] if worst else None,
        "mean_share_of_search_limit": (sum(x for x in shares if x is not None) / len(shares)
                                       if shares and None not in shares else None),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def markdown(report: Mapping[str, Any]) -> str:
    """The k-fold report's figures as markdown tables (per fold, overall, buckets)."""
    labels = list(report["overall"])
    lines = ["| policy | " + " | ".join(f"fold {f['fold']}" for f in report["fold_results"])
             + " | mean | worst fold | pooled | pooled text | guarded | worst package |",
             "| --- |" + " ---: |" * (len(report["fold_results"]) + 5) + " --- |"]
    for label in labels:
        o = report["overall"][label]
        pooled = o["pooled"]
        lines.append(
            f"| {label} | " + " | ".join(_pct(c) for c in o["fold_changes"])
            + f" | {_pct(o['mean_fold_change'])} | {_pct(o['worst_fold_change'])} | "
            f"{_pct(pooled['change'])} | {_pct(pooled['by_metric'].get('text'))} | "
            f"{_pct(pooled['guarded_change'])} | {o['worst_package']} "
            f"{_pct(o['worst_package_change'])} |")
    buckets = list(next(iter(report["overall"].values()))["pooled"]["by_bucket"]) if labels \
        else []
    lines += ["", "| policy (pooled) | " + " | ".join(buckets)
              + " | big bucket, worst fold | big module grown most |",
              "| --- |" + " ---: |" * len(buckets) + " ---: | --- |"]
    for label in labels:
        o = report["overall"][label]
        b = o["pooled"]["by_bucket"]
        grown = o["pooled"].get("largest_growth_of_a_big_module")
        folds = o.get("fold_big_bucket_changes") or []
        lines.append(f"| {label} | " + " | ".join(
            f"{_pct(b[k]['change'])} ({b[k]['modules']})" for k in buckets)
            + f" | {_pct(max(folds)) if folds else 'n/a'} | "
            + (f"{grown['module']} {_pct(grown['change'])}" if grown else "n/a") + " |")
    return "\n".join(lines)

if __name__ == "__main__":
    sys.exit(main())
