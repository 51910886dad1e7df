"""Capture a corpus from any C/C++ build: run it with a recording CC/CXX, then extract.

The build (make, cmake, ninja, a shell script, ...) runs with wrapper scripts named `cc`,
`c++`, `gcc`, `g++`, `clang`, `clang++` first in PATH and as $CC/$CXX. Each compile-only
invocation is compiled by the chosen clang for a fixed target with bitcode embedded, and
recorded; afterwards the recorded objects are extracted into a corpus.

A ThinLTO build (`-flto=thin` compiles) keeps its bitcode objects, and its links record
which bitcode they read; afterwards each module is compiled as its ThinLTO backend would
(corpus/thinlto.py) and the corpus is extracted as a distributed ThinLTO one. A full-LTO
build is refused, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymlgo.corpus import capture_wrapper
from pymlgo.corpus.extract import ExtractResult, extract_objects, objects_from_compile_commands
from pymlgo.corpus.format import CorpusError
from pymlgo.toolchain.compiler import Compiler, CompilerError, find_compiler
from pymlgo.toolchain.cross import CrossTools, CrossToolsError, cross_tools, is_cross

DEFAULT_TARGET = "x86_64-linux-gnu"
DEFAULT_CPU = "baseline"
EMBED_FLAGS = ("-Xclang", "-fembed-bitcode=all")
ZIG_OZ_FLAGS = ("-Xclang", "-Oz")
# Objects that configure steps compile to probe the compiler; never part of the program.
# CMake's probes (try_compile scratch, compiler id, CheckIPOSupported's _CMakeLTOTest-LANG
# project: a -flto=thin compile in a build that may then use no LTO) and autoconf's conftest.
DEFAULT_EXCLUDE = (r"(^|/)(CMakeFiles/CMakeScratch/|CMakeFiles/[^/]+/CompilerId|"
                   r"CMakeFiles/_CMakeLTOTest-|conftest)")
_C_NAMES = ("cc", "gcc", "clang")
_CXX_NAMES = ("c++", "g++", "clang++")


class CaptureError(CorpusError):
    """The build failed or recorded nothing; no corpus was written."""


@dataclass(frozen=True)
class CaptureResult:
    extract: ExtractResult
    compiles: int
    build_seconds: float
    compiler: Compiler


def target_flags(compiler: Compiler, target: str, cpu: str) -> list[str]:
    """Driver flags that pin the target and CPU.

    zig's driver defaults to the host's native CPU, so it gets `-mcpu`; a stock clang with an
    explicit `--target` already uses the generic CPU, and does not know zig's `baseline`.
    """
    if compiler.zig:
        return ["-target", target, f"-mcpu={cpu}"]
    flags = [f"--target={target}"]
    if cpu != DEFAULT_CPU:
        flags.append(f"-mcpu={cpu}")
    return flags


def write_shims(
    shim_dir: Path, compiler: Compiler, *, flags: Sequence[str], log: Path,
    cross: CrossTools | None = None, target: str = DEFAULT_TARGET, level: str | None = None,
) -> dict[str, str]:
    """Write the wrapper scripts and their config; returns the env vars the build needs.

    With `cross` (a build for another target than the host), `ar`, `ranlib` and `ld` (also
    under their `TARGET-` names) run zig's archiver and linker, and a stock clang's links
    run through zig's linker driver for the target."""
    config: dict[str, Any] = {
        "drivers": {"c": list(compiler.cc_argv), "c++": list(compiler.cxx_argv)},
        "target_flags": [*flags, *(cross.compile_flags if cross is not None else ())],
        "embed_flags": list(EMBED_FLAGS),
        # zig's driver runs cc1 at -Os for -Oz (capture_wrapper.size_level_flags)
        "oz_flags": list(ZIG_OZ_FLAGS) if compiler.zig else [],
        "level": level,  # appended to every recorded compile (None: the build's own)
        "log": str(log),
    }
    env: dict[str, str] = {}
    if cross is not None:
        if not compiler.zig:  # zig's own driver links for the target already
            config["link"] = {"drivers": {"c": list(cross.link_c), "c++": list(cross.link_cxx)},
                              "target_flags": list(cross.link_flags)}
        for tool, argv in cross.tools.items():
            for name in (tool, f"{target}-{tool}"):
                script = shim_dir / name
                script.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n',
                                  encoding="utf-8")
                script.chmod(0o755)
            env[tool.upper()] = str(shim_dir / tool)
    config_path = shim_dir / "capture_config.json"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    wrapper = Path(capture_wrapper.__file__).resolve()
    for names, lang in ((_C_NAMES, "c"), (_CXX_NAMES, "c++")):
        # -E -S: the wrapper needs only the stdlib; skipping site and PYTHON* vars makes
        # each of the build's many compiler invocations start faster and predictably.
        line = shlex.join([sys.executable, "-E", "-S", str(wrapper), "--config",
                           str(config_path), "--lang", lang, "--"])
        for name in names:
            script = shim_dir / name
            script.write_text(f'#!/bin/sh\nexec {line} "$@"\n', encoding="utf-8")
            script.chmod(0o755)
    return {
        "PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "CC": str(shim_dir / "cc"),
        "CXX": str(shim_dir / "c++"),
        **env,
    }


def compile_exclude(exclude: str | None) -> re.Pattern[str] | None:
    """The --exclude regex, or a CaptureError naming it (checked before any build runs)."""
    if not exclude:
        return None
    try:
        return re.compile(exclude)
    except re.error as exc:
        raise CaptureError(f"--exclude {exclude!r} is not a valid regex: {exc}") from exc


def read_log(log: Path, *, exclude: str | None = DEFAULT_EXCLUDE) -> list[dict[str, Any]]:
    """Recorded compiles as compile_commands.json entries: one per object (the last compile
    of an object wins), in object-path order, without configure probes."""
    rx = compile_exclude(exclude)
    if not log.exists():
        return []
    by_output: dict[str, dict[str, Any]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            if "output" in entry:  # (a link's entry has none)
                by_output[entry["output"]] = entry
    return [
        by_output[k] for k in sorted(by_output)
        if rx is None or not rx.search(Path(k).as_posix())
    ]


def read_links(log: Path) -> list[dict[str, Any]]:
    """The recorded LTO links, in build order: the bitcode each read ("link", absolute
    paths), where it ran ("directory") and its driver and arguments."""
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, filter(str.strip, lines)) if "link" in e]


def _thinlto(compiler: Compiler, entries: list[dict[str, Any]], log: Path, workdir: Path,
             scratch: Path, target: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """For a ThinLTO build: the backend compiles' entries (see corpus/thinlto.py) in place
    of the recorded compiles, and the modules left out. A full-LTO build is refused."""
    from pymlgo.corpus.thinlto import compile_backends

    full = [e["output"] for e in entries if e.get("lto") == "full"]
    if full:
        raise CaptureError(
            f"{len(full)} compile(s) used full LTO (-flto), e.g. {full[0]}: LLVM's link-time "
            "inliner of full LTO cannot be served by a policy, and a merged-module corpus is "
            "not made; capture the build with -flto=thin (or without LTO)")
    thin = [e for e in entries if e.get("lto") == "thin"]
    backends = compile_backends(compiler, thin, read_links(log), workdir, scratch, target)
    if backends.approximate:
        why = next(iter(backends.approximate.values()))
        print(f"capture: {len(backends.approximate)} ThinLTO module(s) indexed without their "
              f"link's own command ({why}): every symbol kept, so they may inline and import "
              "other than the real link's backends did", file=sys.stderr)
    for e in entries:
        if e.get("lto") is None:  # every module of a ThinLTO corpus has an index
            backends.skipped[os.path.relpath(e["output"], workdir)] = (
                "compiled without -flto=thin in a ThinLTO build")
    return backends.entries, backends.skipped


def run_build(command: list[str], *, cwd: Path, env: Mapping[str, str],
              output: int | None) -> subprocess.CompletedProcess[bytes]:
    """Run a build in its own process group, and end the whole group if pymlgo is stopped
    (Ctrl-C, or SIGTERM as `kill` and `timeout` send): a killed `make` leaves its running
    compiles behind otherwise, and they go on using the cores."""
    proc = subprocess.Popen(command, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=output, stderr=subprocess.STDOUT if output else None,
                            start_new_session=True)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, stop)
    try:
        proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return subprocess.CompletedProcess(command, proc.returncode)


def capture(
    build_command: Sequence[str],
    output_dir: str | os.PathLike[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    target: str = DEFAULT_TARGET,
    cpu: str = DEFAULT_CPU,
    flags: Sequence[str] = (),
    clang: str | os.PathLike[str] | None = None,
    num_workers: int | None = None,
    exclude: str | None = DEFAULT_EXCLUDE,
    overwrite: bool = False,
    progress: bool = True,
    build_output: int | None = None,
    env: Mapping[str, str] | None = None,
    level: str | None = None,
) -> CaptureResult:
    """Run `build_command` in `cwd` through the recording wrappers, then extract the corpus.

    Module names are object paths relative to `cwd`. `flags` are driver flags the target
    adds to every compile (e.g. `-mthumb`), after the target and CPU. `level` (e.g. `-Oz`)
    is appended to every compile, overriding the build's own `-O` flags (a configure script
    that picks `-O2` would otherwise leave its package at -O2); None keeps them. `build_output` is
    passed to subprocess as the build's stdout/stderr (None: inherit, so the user sees it).
    A failed build, or one that compiled nothing, raises CaptureError and writes nothing.
    """
    if not build_command:
        raise CaptureError("no build command given (put it after `--`)")
    compile_exclude(exclude)  # a bad regex must not cost a whole build first
    out = Path(output_dir).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise CaptureError(f"output directory {out} is not empty; choose another or --overwrite")
    workdir = Path(cwd).absolute() if cwd is not None else Path.cwd()
    compiler = find_compiler(clang)
    cross = None
    if is_cross(target):
        try:
            cross = cross_tools(compiler, target, cpu)
        except (CrossToolsError, CompilerError, OSError, subprocess.TimeoutExpired) as exc:
            raise CaptureError(f"no linker and archiver for {target}: {exc}") from exc
    with tempfile.TemporaryDirectory(prefix="mlgo-capture-") as tmp:
        shim_dir = Path(tmp)
        log = shim_dir / "compiles.jsonl"
        build_env = dict(os.environ if env is None else env)
        build_env.update(write_shims(
            shim_dir, compiler, flags=[*target_flags(compiler, target, cpu), *flags], log=log,
            cross=cross,
            target=target,
            level=level,
        ))
        started = time.monotonic()
        try:
            proc = run_build(list(build_command), cwd=workdir, env=build_env,
                             output=build_output)
        except OSError as exc:
            raise CaptureError(f"cannot run build command {build_command[0]!r}: {exc}") from exc
        build_seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise CaptureError(
                f"build command {shlex.join(build_command)!r} failed with exit code "
                f"{proc.returncode}; no corpus written"
            )
        entries = read_log(log, exclude=exclude)
        if not entries:
            raise CaptureError(
                "the build ran no compile-only (-c) command through $CC/$CXX; does it use "
                "them (or cc/gcc/clang from PATH)? Was it already built (run `make clean` "
                "first)?"
            )
        thinlto = any(e.get("lto") for e in entries)
        skipped: dict[str, str] = {}
        base = workdir
        if thinlto:
            scratch = shim_dir / "thinlto"
            entries, skipped = _thinlto(compiler, entries, log, workdir, scratch, target)
            base = scratch / "native"
            if not entries:
                raise CaptureError("no module of the ThinLTO build could be compiled as its "
                                   "backend: " + "; ".join(f"{k}: {v}" for k, v in
                                                           list(skipped.items())[:3]))
        objects = objects_from_compile_commands(entries, obj_base_dir=base)
        result = extract_objects(
            objects, out, num_workers=num_workers, overwrite=overwrite, progress=progress,
            thinlto_build="distributed" if thinlto else None,
            obj_base_dir=base if thinlto else None,
            extra_files={"compile_commands.json": json.dumps(entries, indent=2).encode()},
        )
    if skipped:
        print(f"capture: {len(skipped)} ThinLTO module(s) left out: " + "; ".join(
            f"{k}: {v}" for k, v in list(skipped.items())[:5]), file=sys.stderr)
    return CaptureResult(
        extract=result, compiles=len(entries), build_seconds=build_seconds, compiler=compiler
    )
