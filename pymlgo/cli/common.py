"""Options and resolution steps several subcommands share (compiler, corpus, workers)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from pymlgo.corpus.format import Corpus, load_corpus
from pymlgo.problems.base import ModuleResult

if TYPE_CHECKING:  # `mlgo --help` should not import the training package
    from pymlgo.train.config import CompileConfig

DEMO_CORPUS = "demo"


def add_compiler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--clang",
        metavar="PATH",
        default=None,
        help="use this clang (>= 17) instead of the bundled zig clang 22; "
        "default: $MLGO_CLANG, else the bundled one",
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, metavar="S",
        help="seconds allowed per module compile (default: 300)",
    )


def add_worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help="compile worker processes (default: all cores)",
    )
    p.add_argument(
        "--cluster", default=None, metavar="SPEC",
        help="where compiles run: omitted = local pool; ray-local; ray://HOST:PORT; pool:NAME "
        "(a shared pool started with `mlgo pool serve`)",
    )


def add_corpus_arg(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument(
        "--corpus", default=None if required else DEMO_CORPUS, required=required, metavar="DIR",
        help="corpus directory with corpus_description.json, or 'demo' for the built-in "
        "demo corpus (zstd, brotli, lz4; downloaded and built once, then cached); "
        "'demo:TARGET' builds it for another target: aarch64, riscv64, thumb2 (32-bit Arm "
        "Linux), cortex-m4 (bare metal, its freestanding units only)"
        + ("" if required else " (default: demo)"),
    )


ALLOW_FLAGS_ENV = "MLGO_ALLOW_FLAGS"


def resolve_corpus(spec: str, *, command_override: Sequence[str] | None = None,
                   clang: str | None = None, level: str = "-Oz") -> Corpus:
    """Load the corpus at `spec` (or the demo one, built by `clang`: another clang
    cannot compile the bundled one's modules, and recorded at `level`, the problem's).
    $MLGO_ALLOW_FLAGS (space-separated) accepts cc1 flags outside the corpus flag allowlist
    that the user has checked. `command_override` replaces every module's command (driver
    flags are translated with `clang`, default: $MLGO_CLANG or the bundled one)."""
    allow = os.environ.get(ALLOW_FLAGS_ENV, "").split()
    root: str | Path = spec
    name, _, target = spec.partition(":")
    if name == DEMO_CORPUS and not Path(spec).exists():
        from pymlgo.corpus.demo import ensure_demo_corpus
        from pymlgo.corpus.targets import HOST_TARGET

        root = ensure_demo_corpus(target=target or HOST_TARGET, clang=clang, level=level)
    return load_corpus(root, allow_flags=allow, command_override=command_override,
                       clang=clang)


def warn_about_relaxation(prog: str, corpus: Corpus) -> None:
    """Say on stderr when modules are compiled with linker relaxation on: their sizes would
    overstate what the linked program carries (see corpus/relaxation.py)."""
    from pymlgo.corpus.relaxation import relaxation_warning, relaxing_modules

    warning = relaxation_warning(relaxing_modules(corpus.modules))
    if warning is not None:
        print(f"{prog}: {warning}", file=sys.stderr)


def warn_about_level(prog: str, corpus: Corpus, level: str) -> None:
    """Say on stderr when modules were recorded at another optimization level than `level`
    (the problem's): their function attributes are that level's (corpus/front_end_level.py)."""
    from pymlgo.corpus.front_end_level import level_warning, mismatched_modules

    warning = level_warning(mismatched_modules(corpus.modules, level), level)
    if warning is not None:
        print(f"{prog}: {warning}", file=sys.stderr)


def size_metric(args: argparse.Namespace) -> str:
    """The metric `--size-metric` chose, or the default (the option itself defaults to None,
    so that `mlgo train` can tell it apart from its config file's)."""
    from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC

    return args.size_metric or DEFAULT_SIZE_METRIC


def add_size_metric_arg(p: argparse.ArgumentParser) -> None:
    from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, METRIC_HELP, SIZE_METRICS

    p.add_argument("--size-metric", "--size_metric", dest="size_metric", default=None,
                   choices=SIZE_METRICS, metavar="METRIC",
                   help=f"what an object's size counts (default: {DEFAULT_SIZE_METRIC}): "
                   f"{METRIC_HELP}")


def add_flag_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "compile flags",
        "Your own changes to every module's cc1 command, made to the -Oz baseline and the "
        "policy compiles alike (baseline sizes are cached per flag set). They are yours, "
        "not the corpus': the edits below are applied after the corpus flag allowlist "
        "check, and after the size level (-Oz) is set, so they can change anything; "
        "--command-override replaces the recorded commands and is checked as the corpus' own "
        "commands are ($MLGO_ALLOW_FLAGS accepts more). Order: override, delete, replace, "
        "add. A value that starts with '-' is written with '=': --add-flag=-ffunction-sections.",
    )
    g.add_argument("--add-flag", "--add_flag", dest="add_flag", action="append", default=None,
                   metavar="FLAGS",
                   help="append FLAGS, split like a shell, e.g. --add-flag "
                   "'-mllvm -inline-threshold=100' (repeatable)")
    g.add_argument("--delete-flag", "--delete_flag", dest="delete_flag", action="append",
                   default=None, metavar="FLAG",
                   help="remove every argument equal to FLAG (repeatable)")
    g.add_argument("--replace-flag", "--replace_flag", dest="replace_flag", action="append",
                   default=None, metavar="OLD=NEW",
                   help="replace every argument equal to OLD by NEW (repeatable), e.g. "
                   "--replace-flag x86-64=haswell; split at the only '=', or, when the flags "
                   "hold '=' themselves, at the only '=-': "
                   "--replace-flag=-mframe-pointer=none=-mframe-pointer=all")
    g.add_argument("--command-override", "--command_override", dest="command_override",
                   default=None, metavar="ARGS",
                   help="compile every module with ARGS (one string, split like a shell) "
                   "instead of its recorded command, as mlgo-utils' global_command_override: "
                   "cc1 arguments starting with -cc1, or clang driver flags (e.g. "
                   "'-O2 -target x86_64-linux-gnu') translated with clang -###")


def parse_replacement(text: str) -> tuple[str, str]:
    """`OLD=NEW` -> (OLD, NEW): split at the only '=', else at the only '=-'."""
    cuts = [i for i, c in enumerate(text) if c == "="]
    if len(cuts) > 1:
        cuts = [i for i in cuts if text.startswith("=-", i)]
    if len(cuts) != 1 or cuts[0] in (0, len(text) - 1):
        raise ValueError(f"--replace-flag {text!r}: write OLD=NEW, one '=' between them (or, "
                         f"when the flags hold '=' themselves, one '=-' before NEW)")
    return text[: cuts[0]], text[cuts[0] + 1 :]


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The compile-flag options given on the command line, as config keys (CompileConfig)."""
    values: dict[str, Any] = {}
    if args.add_flag is not None:
        values["add_flags"] = [f for text in args.add_flag for f in _split(text, "--add-flag")]
    if args.delete_flag is not None:
        values["delete_flags"] = list(args.delete_flag)
    if args.replace_flag is not None:
        values["replace_flags"] = [list(parse_replacement(t)) for t in args.replace_flag]
    if args.command_override is not None:
        values["command_override"] = _split(args.command_override, "--command-override")
    return values


def compile_config(args: argparse.Namespace) -> CompileConfig:
    """The compile-flag options as one CompileConfig, parsed once (ValueError if malformed):
    `.flag_edits()` for the workers, `.command_override` for loading the corpus."""
    from pymlgo.train.config import CompileConfig

    values = flag_values(args)
    override = values.get("command_override")
    return CompileConfig(
        add_flags=tuple(values.get("add_flags", ())),
        delete_flags=tuple(values.get("delete_flags", ())),
        replace_flags=tuple(tuple(pair) for pair in values.get("replace_flags", ())),
        command_override=None if override is None else tuple(override),
    )


def has_flag_args(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) is not None
               for name in ("add_flag", "delete_flag", "replace_flag", "command_override"))


def _split(text: str, option: str) -> list[str]:
    try:
        parts = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from exc
    if not parts:
        raise ValueError(f"{option} needs at least one flag")
    return parts


def default_workers(requested: int | None) -> int:
    if requested is not None:
        if requested < 1:
            raise SystemExit("mlgo: --workers must be >= 1")
        return requested
    return os.cpu_count() or 1


def progress(total: int, desc: str) -> tuple[tqdm, Callable[[ModuleResult], None]]:
    """A progress bar and a callback that advances it, counting failures."""
    bar = tqdm(total=total, desc=desc, unit="mod", file=sys.stderr, dynamic_ncols=True)
    failures = 0

    def on_result(res: ModuleResult) -> None:
        nonlocal failures
        if res.error:
            failures += 1
            bar.set_postfix(failed=failures)
        bar.update(1)

    return bar, on_result


class OutputPathError(ValueError):
    """An output file cannot be written where the user asked for it."""


def check_writable(path: Path) -> None:
    """OutputPathError unless a file can be written at `path` (missing parent directories would be
    created); leaves nothing behind, so a run can check its output before it starts."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{path} is a directory, not a file name")
    parent = path.parent
    while not parent.exists():  # the nearest existing ancestor decides
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"cannot write {path}: {parent} is not a directory")
    try:
        if path.exists():
            os.close(os.open(path, os.O_WRONLY))  # opening for writing does not truncate
        else:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".mlgo-write-check-")
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise OutputPathError(f"cannot write {path}: {exc.strerror or exc}") from exc


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` whole or not at all (parent directories are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
