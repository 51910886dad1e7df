"""Regenerate a shipped pretrained policy (`pretrained:inlining-oz`,
`pretrained:regalloc-evict`) byte for byte.

    python -m pymlgo.deploy.pretrained [--name NAME] --output_dir out/pretrained-NAME \
        [--traces T]

snapshots the corpora of `configs/pretrained-NAME.corpus` (the demo corpus and the Debian
packages it names, recorded at the problem's level: -Oz for inlining, -O2 for register
allocation; the same packages and held-out split for every policy) into OUT/corpus, runs `mlgo train
--config configs/pretrained-NAME.toml --corpus OUT/corpus --output_dir OUT/train`, then copies
the saved policy of `OUT/train/best` into `pymlgo/policy/pretrained/NAME/`, then an
evaluation of that policy on the training, validation and held-out modules of the same split
(`OUT/numbers.json`, the README's numbers). Training is deterministic for a seed and a
budget in iterations (not minutes), and saving is byte-deterministic, so the same config,
corpus and compiler give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymlgo.policy.store import (
    POLICY_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
    available_pretrained,
    pretrained_root,
)

if TYPE_CHECKING:
    from pymlgo.train.config import TrainConfig

NAME = "inlining-oz"
CORPUS_LIST_NAME = "configs/pretrained-NAME.corpus"  # per policy: its problem's -O level
# the files a saved policy may have: an inlining policy all three, a regalloc one policy.json
POLICY_FILES = (POLICY_FILE, WEIGHTS_FILE, VOCAB_FILE)
NUMBERS_FILE = "numbers.json"


def shipped_names() -> list[str]:
    """The shipped policies of every problem (`pymlgo/policy/pretrained/NAME`), each
    regenerated from its configs/pretrained-NAME.toml."""
    return available_pretrained(None)


def repo_config(name: str = NAME) -> Path:
    """The config of shipped policy `name` in a source checkout (the package itself does not
    ship it)."""
    return Path(__file__).resolve().parents[2] / "configs" / f"pretrained-{name}.toml"


def repo_corpus_list(name: str = NAME) -> Path:
    """The shipped policy's corpus list in a source checkout."""
    return repo_config(name).with_suffix(".corpus")


def problem_level(config: TrainConfig) -> str:
    """The -O level the config's problem compiles at (a `demo` source is recorded at it)."""
    from pymlgo.problems import registry

    return registry.problem(config.problem).opt_level


def install_policy(source: Path, dest: Path) -> None:
    """Copy a saved policy's files into `dest`, replacing it only once complete."""
    if not (source / POLICY_FILE).is_file():
        raise FileNotFoundError(f"{source}: not a saved policy (missing {POLICY_FILE})")
    files = [f for f in POLICY_FILES if (source / f).is_file()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        for f in files:
            shutil.copyfile(source / f, staging / f)
            (staging / f).chmod(0o644)
        staging.chmod(0o755)
        old = dest.with_name(f".{dest.name}.old")
        if dest.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
        os.replace(staging, dest)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def training_corpus(sources: Sequence[str], output_dir: Path, level: str = "-Oz") -> str:
    """The one corpus to train on: the source itself, or a snapshot of several (`demo`
    recorded at `level`)."""
    if len(sources) == 1:
        return sources[0]
    from pymlgo.corpus.snapshot import snapshot_corpora

    snap = snapshot_corpora(sources, output_dir / "corpus", level=level)
    for spec, why in snap.skipped.items():
        print(f"pretrained: left out {spec}: {why[:200]}", file=sys.stderr)
    return str(output_dir / "corpus")


def read_corpus_list(path: Path) -> list[str]:
    """Corpus specs, one per line (`demo`, `DIR` or `PKG=DIR`, `~` expanded), `#` comments:
    the exact set of packages a shipped policy was trained on, so that a machine whose
    corpus build made more (or fewer) packages still regenerates the same policy."""
    specs = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, where = line.rpartition("=")
        specs.append(f"{name}{sep}{os.path.expanduser(where)}" if sep else
                     os.path.expanduser(line))
    if not specs:
        raise ValueError(f"{path}: no corpus listed")
    return specs


def train_command(config: Path, corpus: str, train_dir: Path, workers: int | None,
                  traces: Path | None = None) -> list[str]:
    """The `mlgo train` arguments this regeneration runs (also what the README shows)."""
    argv = ["train", "--config", str(config), "--corpus", corpus, "--output_dir", str(train_dir),
            "--no-tensorboard"]
    argv += ["--traces", str(traces)] if traces is not None else []
    return argv + (["--workers", str(workers)] if workers else [])


SPLIT_PARTS = ("train", "validation", "heldout")


def evaluate_split(config_path: Path, corpus_spec: str, policy_dir: Path,
                   workers: int | None, parts: Sequence[str] = SPLIT_PARTS) -> dict[str, Any]:
    """The policy against its problem's baseline (inlining: -Oz; regalloc: the stock
    advisor) on the training, validation and held-out modules of the split the training
    run used (a function of the config's seed, fractions and held-out packages): totals, by
    section group and metric, by module-size bucket, by package, the worst package, the big
    module (>= 64 KiB at the baseline) the policy grew most, and the problem's own measures
    (regalloc: the weighted spill/reload/copy cost) in total and per package."""
    from pymlgo.cli import common
    from pymlgo.evaluate.eval import corpus_jobs, evaluate
    from pymlgo.policy.store import load_policy
    from pymlgo.toolchain.compiler import find_compiler
    from pymlgo.train import config as cfg
    from pymlgo.train.trainer import measured_split
    from pymlgo.workers import WorkSpec, make_executor

    config = cfg.load_config(config_path)
    corpus = common.resolve_corpus(corpus_spec, level=problem_level(config))
    compiler = find_compiler(None)
    policy = load_policy(str(policy_dir), problem=config.problem)
    out: dict[str, Any] = {"compiler": compiler.describe(), "problem": config.problem,
                           "size_metric": config.size_metric}
    spec = WorkSpec(problem=config.problem, size_metric=config.size_metric)
    with make_executor(None, common.default_workers(workers)) as ex:
        split = measured_split(config, corpus, ex, compiler, spec)
        for name, modules in (("train", split.train), ("validation", split.validation),
                              ("heldout", split.heldout)):
            if name not in parts:
                continue
            rep = evaluate(ex, compiler, corpus_jobs(corpus, modules), policy, spec=spec)
            packages = rep.by_package()
            worst = max(packages, key=lambda k: packages[k]["change"], default=None)
            out[name] = {"modules": len(rep.ok_modules), "baseline_bytes": rep.baseline_total,
                         "policy_bytes": rep.policy_total, "change": rep.change,
                         "by_metric": rep.by_metric(), "by_group": rep.by_group(),
                         "by_bucket": rep.by_bucket(), "by_package": packages,
                         "worst_package": worst,
                         "worst_package_change": packages[worst]["change"] if worst else None,
                         "largest_growth_of_a_big_module": rep.largest_big_growth(),
                         "package_interval": rep.package_intervals()}
            for m in rep.measures:
                summary = rep.measure_summary(m)
                out[name][m.field] = {k: summary[k] for k in ("baseline", "policy")}
                out[name][f"{m.field}_change"] = summary["change"]
                out[name][f"{m.field}_by_package"] = rep.measure_by_package(m)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pymlgo.deploy.pretrained",
        description="Regenerate a shipped policy, pymlgo/policy/pretrained/NAME: train with "
        "its pinned config, install train/best, and measure it on the training, validation "
        "and held-out modules.",
    )
    p.add_argument("--name", choices=shipped_names(), default=NAME,
                   help="which shipped policy (its config is configs/pretrained-NAME.toml; "
                   f"default: {NAME})")
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", type=Path, required=True,
                   metavar="DIR", help="run directory (DIR/train is the `mlgo train` output)")
    p.add_argument("--config", type=Path, default=None,
                   help="training config (default: configs/pretrained-NAME.toml of this "
                   "checkout)")
    p.add_argument("--corpus", action="append", default=None, metavar="[PREFIX=]DIR|demo",
                   help="corpus; given more than once, the corpora are frozen into one with "
                   "`mlgo corpus snapshot` at DIR/corpus first (kept for reruns)")
    p.add_argument("--corpus-list", dest="corpus_list", type=Path, default=None,
                   metavar="FILE", help="corpus specs, one per line (as --corpus), "
                   f"added after any --corpus (with neither: {CORPUS_LIST_NAME} of this "
                   "checkout, the shipped policy's)")
    p.add_argument("--install-to", dest="install_to", type=Path, default=None, metavar="DIR",
                   help="where the policy goes (default: the package's pretrained/NAME)")
    p.add_argument("--no-eval", dest="evaluate", action="store_false",
                   help="skip measuring the installed policy")
    p.add_argument("--eval-on", dest="eval_on", default=",".join(SPLIT_PARTS),
                   metavar="PARTS", help="which parts of the split to measure the installed "
                   f"policy on, comma-separated (default: {','.join(SPLIT_PARTS)}; the "
                   "training part costs a compile of every training module)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="compile workers (does not change the result)")
    p.add_argument("--traces", type=Path, default=None, metavar="DIR",
                   help="inlining only: clang's -Oz decisions on this corpus, traced before "
                   "(`mlgo trace --policy default`, or a policy_quality run's OUTPUT/trace): "
                   "read instead of recorded again; does not change the result")
    args = p.parse_args(argv)
    parts = [x for x in args.eval_on.split(",") if x]
    if not parts or set(parts) - set(SPLIT_PARTS):
        p.error(f"--eval-on: comma-separated parts of {', '.join(SPLIT_PARTS)}, not "
                f"{args.eval_on!r}")

    from pymlgo.cli.main import main as mlgo

    config = args.config or repo_config(args.name)
    if not config.is_file():
        print(f"pretrained: config {config} not found (pass --config)", file=sys.stderr)
        return 2
    specs = list(args.corpus or [])
    if args.corpus_list is None and not specs:
        args.corpus_list = repo_corpus_list(args.name)
    if args.corpus_list is not None:
        try:
            specs += read_corpus_list(args.corpus_list)
        except (OSError, ValueError) as exc:
            print(f"pretrained: --corpus-list: {exc}", file=sys.stderr)
            return 2
    from pymlgo.train import config as cfg

    try:
        level = problem_level(cfg.load_config(config))
    except (OSError, ValueError) as exc:  # a config that does not load or names no problem
        print(f"pretrained: {config}: {exc}", file=sys.stderr)
        return 2
    corpus = training_corpus(specs, args.output_dir, level)
    train_dir = args.output_dir / "train"
    rc = mlgo(train_command(config, corpus, train_dir, args.workers, args.traces))
    if rc != 0:
        return rc
    dest = args.install_to or pretrained_root() / args.name
    install_policy(train_dir / "best", dest)
    print(f"installed {train_dir / 'best'} -> {dest}")
    if args.evaluate:
        numbers = evaluate_split(config, corpus, dest, args.workers, parts)
        text = json.dumps(numbers, indent=2) + "\n"
        (args.output_dir / NUMBERS_FILE).write_text(text)
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
