"""Corpora from Debian source packages: `apt-get source`, a per-package build, capture.

Each package is fetched once with `apt-get source` into `<cache>/src/<pkg>/` (needs a
`deb-src` line in the APT sources), copied to a scratch directory, and built through
`capture` (bundled clang, embedded bitcode, for x86-64 with the baseline CPU or another
named target of `corpus/targets.py`, see `cross_build`) with a small recipe
(`debian_recipes`): C packages build their library, C++ packages also their tools and tests
where those build offline; static, no docs, at -Oz. Each package becomes the
sub-corpus `OUT/<pkg>/`, and the sub-corpora are combined into `OUT/`, so every module name
starts with its package (`zlib/adler32`): the package is the first path component, which is
what train/held-out splits go by.

A package whose sub-corpus already exists with the same recipe, compiler and target is
skipped. One output directory holds one target: a run for another target is refused there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymlgo.corpus.capture import (
    DEFAULT_CPU,
    DEFAULT_EXCLUDE,
    DEFAULT_TARGET,
    CaptureError,
    capture,
)
from pymlgo.corpus.combine import combine_corpora
from pymlgo.corpus.cross_build import CROSS_DIR, CROSS_FORMAT, cross_build_env
from pymlgo.corpus.debian_recipes import (
    BUILD_DIR,
    DEBIAN_FORMAT,
    DEFAULT_ORDER,
    DEPS_DIR,
    OPT_LEVEL,
    RECIPES,
    TOOL_PACKAGES,
    Recipe,
    cmake,
)
from pymlgo.corpus.debian_unity import build_unity_modules
from pymlgo.corpus.demo import cache_root
from pymlgo.corpus.extract import extract_objects, objects_from_compile_commands
from pymlgo.corpus.format import (
    DESCRIPTION_FILE,
    CorpusError,
    load_corpus,
    read_description,
    write_description_dict,
)
from pymlgo.corpus.targets import HOST_TARGET, Target, TargetError, hosted_alternative
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.toolchain.cross import is_cross
from pymlgo.toolchain.language import cc1_language

__all__ = [
    "BUILD_DIR", "DEBIAN_FORMAT", "DEFAULT_ORDER", "DEPS_DIR", "OPT_LEVEL", "RECIPES",
    "DebianConfig", "DebianError", "PackageResult", "Recipe", "build_debian_corpora",
    "build_package", "cmake", "fetch_source", "parse_package_spec", "source_version",
]

INFO_FILE = "debian_info.json"
SUMMARY_FILE = "debian_summary.json"
LOG_DIR = "_logs"  # build logs, next to the sub-corpora (not a corpus itself)
STAGING_DIR = "_staging"  # a package's sub-corpus while it is made (renamed when complete)
OPTIONAL_FAILED = "_mlgo_optional_failed"  # the build script lists failed `extra` steps here
# What the shell says when the build runs a program made for another architecture.
_RAN_TARGET_PROGRAM = "Exec format error"


class DebianError(CorpusError):
    """A Debian source package could not be fetched or built; `step` says where."""

    def __init__(self, message: str, step: str = "") -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True)
class PackageResult:
    package: str
    status: str  # "built", "cached" or "failed"
    modules: int = 0
    seconds: float = 0.0
    error: str = ""
    step: str = ""  # where a failure happened: fetch, tools, build, unity, ...
    log: str = ""  # the package's build log
    languages: tuple[tuple[str, int], ...] = ()  # modules per language ("c", "c++")
    unity_modules: int = 0


@dataclass(frozen=True)
class DebianConfig:
    output_dir: Path
    jobs: int = 2
    src_cache: Path = field(default_factory=lambda: cache_root() / "src")
    clang: str | None = None
    build_root: Path | None = None  # scratch copies (default <cache>/build/debian)
    progress: bool = True
    # (package, Debian version) pairs: fetch that version instead of the newest
    versions: tuple[tuple[str, str], ...] = ()
    unity: bool = True  # also build each recipe's unity modules
    target: Target = HOST_TARGET
    level: str = OPT_LEVEL  # every compile recorded at it (-O2 for register allocation)


def _say(progress: bool, msg: str) -> None:
    if progress:
        # tqdm.write keeps the package progress bar below the messages.
        from tqdm import tqdm

        tqdm.write(f"mlgo corpus debian: {msg}", file=sys.stderr)


# --- sources ---------------------------------------------------------------------------------


_DEB_SRC_HELP = (
    "add a deb-src line for your release, e.g. in /etc/apt/sources.list:\n"
    "  deb-src http://deb.debian.org/debian bookworm main\n"
    "(or add 'deb-src' to the Types: line of /etc/apt/sources.list.d/debian.sources), "
    "then run `apt-get update`"
)


def find_source_tree(pkg_dir: Path) -> Path | None:
    """The unpacked source tree `apt-get source` left in `pkg_dir` (the dir with debian/)."""
    if not pkg_dir.is_dir():
        return None
    trees = sorted(p for p in pkg_dir.iterdir() if p.is_dir() and (p / "debian").is_dir())
    return trees[-1] if trees else None


def parse_package_spec(spec: str) -> tuple[str, str | None]:
    """`PKG` or `PKG=VERSION` (a Debian version, as `apt-cache showsrc PKG` lists them)."""
    package, sep, version = spec.partition("=")
    if not package or (sep and not version) or not all(
            c.isalnum() or c in "+-.~:" for c in version):
        raise DebianError(f"bad package {spec!r}: use PKG or PKG=VERSION, e.g. "
                          "openssl=3.0.17-1~deb12u2")
    return package, version or None


def source_version(tree: Path) -> str | None:
    """The Debian version of an unpacked source tree: the top entry of debian/changelog,
    `PKG (VERSION) DIST; urgency=...`."""
    try:
        with open(tree / "debian" / "changelog", encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    start, end = first.find("("), first.find(")")
    return first[start + 1:end] if 0 <= start < end else None


def listed_versions(package: str) -> list[str]:
    """The Debian versions `apt-cache showsrc` lists for `package`, newest first."""
    import functools

    apt_cache = shutil.which("apt-cache")
    if apt_cache is None:
        return []
    proc = subprocess.run([apt_cache, "showsrc", package], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False)
    versions = list(dict.fromkeys(
        line.split(":", 1)[1].strip() for line in proc.stdout.splitlines()
        if line.startswith("Version:")))

    def compare(a: str, b: str) -> int:
        # dpkg's own ordering (epochs, ~, +debNNuK): no reimplementation to get wrong.
        lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False)
        return -1 if lt.returncode == 0 else (0 if a == b else 1)

    if shutil.which("dpkg") is None:
        return versions
    return sorted(versions, key=functools.cmp_to_key(compare), reverse=True)


def fetch_source(package: str, src_cache: Path, *, version: str | None = None,
                 progress: bool = True) -> Path:
    """The package's unpacked source tree, fetched with `apt-get source` unless cached;
    `version` asks for that Debian version (cached separately) instead of the newest.

    Without a version, a failed fetch of the newest one tries the older versions that
    `apt-cache showsrc` lists, newest first (mirrors here often lack the files of the newest
    security update); the tree is still cached as `<cache>/<pkg>/`, and its debian/changelog
    says which version it is."""
    if version is None and find_source_tree(src_cache / package) is None:
        try:
            return _fetch_one(package, src_cache, version=None, progress=progress)
        except DebianError as exc:
            if "source URIs" in str(exc) or "deb-src" in str(exc) or "not available" in str(
                    exc) or "dpkg-source" in str(exc):
                raise
            first = exc
        listed = listed_versions(package)
        for older in listed[1:]:
            _say(progress, f"{package}: newest version not fetched; trying {older}")
            try:
                return _fetch_one(package, src_cache, version=older, progress=progress,
                                  cache_as=package)
            except DebianError:
                continue
        if listed:
            try:
                return _fetch_upstream_tarball(package, listed[0], src_cache, progress=progress)
            except DebianError:
                pass
        raise first
    return _fetch_one(package, src_cache, version=version, progress=progress)


def _install_tree(staging: Path, pkg_dir: Path) -> Path:
    """Put a fetched, unpacked package in place of any older copy; its source tree."""
    if pkg_dir.exists():
        shutil.rmtree(pkg_dir)
    os.rename(staging, pkg_dir)
    tree = find_source_tree(pkg_dir)
    assert tree is not None
    return tree


def _fetch_one(package: str, src_cache: Path, *, version: str | None, progress: bool,
               cache_as: str | None = None) -> Path:
    pkg_dir = src_cache / (cache_as or (package if version is None else f"{package}={version}"))
    tree = find_source_tree(pkg_dir)
    if tree is not None:
        return tree
    apt = shutil.which("apt-get")
    if apt is None:
        raise DebianError(f"{package}: not in the source cache {pkg_dir} and apt-get is not "
                          "available (needs a Debian/Ubuntu system with deb-src enabled)")
    if shutil.which("dpkg-source") is None:
        raise DebianError(f"{package}: apt-get source needs dpkg-source to unpack; "
                          "install it with `apt-get install dpkg-dev`")
    _say(progress, f"{package}: apt-get source {package} -> {pkg_dir}")
    staging = Path(tempfile.mkdtemp(prefix=f".{package}.", dir=_mkdir(src_cache)))
    try:
        what = package if version is None else f"{package}={version}"
        proc = subprocess.run([apt, "source", what], cwd=staging, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, check=False)
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            if "deb-src" in out or "source URIs" in out:
                raise DebianError(f"{package}: apt-get source found no source packages; "
                                  + _DEB_SRC_HELP)
            # Seen here: a mirror that had the newest security update's tarball but not its
            # .dsc; an older version of the release fetched fine.
            hint = ("" if version is not None else
                    f"\nIf your mirror lacks files of the newest version, ask for another "
                    f"one: `mlgo corpus debian {package}=VERSION` (versions: `apt-cache "
                    f"showsrc {package} | grep ^Version`)")
            raise DebianError(f"{package}: apt-get source {what} failed "
                              f"(exit {proc.returncode}):\n{out[-1500:]}{hint}")
        (staging / "log.txt").write_text(out + "\n", encoding="utf-8")
        if find_source_tree(staging) is None:
            raise DebianError(f"{package}: apt-get source left no unpacked source tree")
        return _install_tree(staging, pkg_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


ORIG_ONLY_MARKER = "mlgo-orig-only"


def _fetch_upstream_tarball(package: str, version: str, src_cache: Path, *,
                            progress: bool) -> Path:
    """Last resort when no listed version fetches whole: the upstream tarball alone
    (`apt-get source --tar-only`; seen here: a mirror with a package's .orig.tar but not its
    Debian patch files). Unpacked with a stand-in debian/ that says so: no Debian patches."""
    pkg_dir = src_cache / package
    _say(progress, f"{package}: no version fetched whole; trying the upstream tarball of "
         f"{version} without Debian's patches")
    staging = Path(tempfile.mkdtemp(prefix=f".{package}.", dir=_mkdir(src_cache)))
    try:
        proc = subprocess.run(["apt-get", "source", "--tar-only", f"{package}={version}"],
                              cwd=staging, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, check=False)
        tars = sorted(staging.glob("*.orig.tar.*"))
        if proc.returncode != 0 or not tars:
            raise DebianError(f"{package}: apt-get source --tar-only failed:\n"
                              f"{(proc.stdout + proc.stderr)[-800:]}", step="fetch")
        unpack = staging / "unpack"
        unpack.mkdir()
        tar = subprocess.run(["tar", "-xf", str(tars[0]), "-C", str(unpack)],
                             capture_output=True, text=True, check=False)
        tops = [p for p in unpack.iterdir() if p.is_dir()]
        if tar.returncode != 0 or len(tops) != 1:
            raise DebianError(f"{package}: cannot unpack {tars[0].name}: {tar.stderr[-500:]}",
                              step="fetch")
        tree = staging / f"{package}-{version.split(':')[-1].rsplit('-', 1)[0]}"
        os.rename(tops[0], tree)
        (tree / "debian").mkdir(exist_ok=True)
        (tree / "debian" / "changelog").write_text(
            f"{package} ({version}) unreleased; urgency=low\n\n"
            "  * pymlgo: the upstream tarball only; Debian's patches were not available.\n",
            encoding="utf-8")
        (tree / "debian" / ORIG_ONLY_MARKER).write_text(tars[0].name + "\n", encoding="utf-8")
        shutil.rmtree(unpack)
        for tarball in tars:
            tarball.unlink()
        return _install_tree(staging, pkg_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- building ---------------------------------------------------------------------------------


def _expand(arg: str, values: dict[str, str]) -> str:
    try:
        return arg.format(**values)
    except (KeyError, IndexError) as exc:
        raise DebianError(f"recipe argument {arg!r} uses unknown placeholder {exc}",
                          step="recipe") from exc


def dep_placeholder(name: str) -> str:
    return f"dep_{name.replace('-', '_').replace('.', '_')}"


def write_build_script(recipe: Recipe, workdir: Path, *, jobs: int,
                       deps: dict[str, Path]) -> Path:
    """The recipe as a `set -e` shell script in `workdir`, so it runs as one captured build.

    `extra` steps may fail: the script notes them in OPTIONAL_FAILED and goes on."""
    import shlex

    values = {"jobs": str(jobs), "src": str(workdir.absolute())}
    values.update({dep_placeholder(name): str(path) for name, path in deps.items()})
    lines = ["#!/bin/sh", "# Generated by pymlgo: the build of "
             f"{recipe.package} (recipe {recipe.key()}).", "set -e", "set -x"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in recipe.env]
    if recipe.subdir:
        lines.append(f"cd {shlex.quote(recipe.subdir)}")
    lines += [shlex.join(_expand(a, values) for a in step) for step in recipe.steps]
    marker = shlex.quote(str(workdir.absolute() / OPTIONAL_FAILED))
    for step in recipe.extra:
        cmd = shlex.join(_expand(a, values) for a in step)
        lines.append(f"{cmd} || echo {shlex.quote(cmd)} >> {marker}")
    script = workdir / "_mlgo_build.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return script


def _read_info(sub: Path) -> dict[str, object] | None:
    try:
        info = json.loads((sub / INFO_FILE).read_text(encoding="utf-8"))
        read_description(sub)
    except (OSError, ValueError, CorpusError):
        return None
    return info if isinstance(info, dict) else None


def build_key(recipe: Recipe, target: Target = HOST_TARGET, level: str = OPT_LEVEL) -> str:
    """Cache key of a package's build: its recipe, for another target than x86-64 the
    target and how builds are made to cross-compile, and for another level than -Oz the
    level (x86-64 -Oz keys stay the recipe's own, so sub-corpora built before targets and
    levels existed stand)."""
    if target == HOST_TARGET and level == OPT_LEVEL:
        return recipe.key()
    parts: list[object] = [recipe.key()]
    if target != HOST_TARGET:
        parts += [CROSS_FORMAT, target.as_json()]
    if level != OPT_LEVEL:
        parts += ["level", level]
    blob = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def info_target(info: dict[str, object]) -> tuple[str, str, tuple[str, ...]]:
    """(triple, CPU, flags) a sub-corpus was built for; info files from before targets
    existed are x86-64's."""
    flags = info.get("target_flags") or ()
    return (str(info.get("target", DEFAULT_TARGET)), str(info.get("cpu", DEFAULT_CPU)),
            tuple(str(f) for f in flags) if isinstance(flags, list) else ())


def is_built(sub: Path, recipe: Recipe, compiler: Compiler, version: str | None = None,
             target: Target = HOST_TARGET, level: str = OPT_LEVEL) -> bool:
    """Built with this recipe, compiler, target and level (and, if one is asked for, this
    Debian version)."""
    info = _read_info(sub)
    return (info is not None and info.get("recipe") == build_key(recipe, target, level)
            and info.get("opt_level", OPT_LEVEL) == level
            and info.get("compiler") == compiler.version
            and info_target(info) == target.codegen
            and (version is None or info.get("version") == version))


def check_output(out: Path, target: Target, level: str) -> None:
    """Refuse an output directory whose sub-corpora were built for another target or
    recorded at another level: one corpus never mixes targets (a policy would be trained and
    measured on both) nor levels (each problem compiles at its own,
    `corpus/front_end_level.py`). Each sub-corpus' info is read once for both."""
    if not out.is_dir():
        return
    built = [(sub.name, info) for sub in sorted(out.iterdir())
             if sub.is_dir() and (info := _read_info(sub)) is not None]
    others: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for name, info in built:
        if (made_for_target := info_target(info)) != target.codegen:
            others.setdefault(made_for_target, []).append(name)
    if others:
        (triple, cpu, flags), pkgs = next(iter(others.items()))
        made_for = " ".join([triple, f"-mcpu={cpu}", *flags])
        raise TargetError(
            f"{out} holds sub-corpora built for {made_for} ({', '.join(pkgs[:5])}"
            f"{', ...' if len(pkgs) > 5 else ''}); this run builds for {target.name} "
            f"({target.describe()}), and one corpus never mixes targets: choose another "
            "--output_dir for this target")
    at_other = [name for name, info in built if info.get("opt_level", OPT_LEVEL) != level]
    if at_other:
        raise TargetError(
            f"{out} holds sub-corpora recorded at another level than {level} "
            f"({', '.join(at_other[:5])}{', ...' if len(at_other) > 5 else ''}), and one "
            "corpus never mixes levels: choose another --output_dir for this level")


def missing_tools(recipe: Recipe) -> list[str]:
    """Build programs the recipe runs that are not on PATH."""
    return [t for t in recipe.tools() if shutil.which(t) is None]


def module_language(cmd: bytes) -> str:
    """"c++" or "c" for a module's cc1 command (a corpus .cmd file: NUL-separated)."""
    return cc1_language(cmd.decode(errors="replace").split("\0"))


def count_languages(sub: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in read_description(sub)["modules"]:
        try:
            lang = module_language((sub / f"{name}.cmd").read_bytes())
        except OSError:
            continue
        counts[lang] = counts.get(lang, 0) + 1
    return dict(sorted(counts.items()))


def drop_duplicate_modules(corpus: Path) -> int:
    """Remove modules whose bitcode is byte-identical to an earlier module's (by name order).

    Builds compile one source many times with the same flags (e.g. a test helper linked into
    every test program, each with its own object); the copies would weigh that code several
    times in training and could land on both sides of a split by module. Returns how many."""
    import hashlib

    desc = read_description(corpus)
    seen: set[str] = set()
    keep: list[str] = []
    dropped: list[str] = []
    for name in sorted(desc["modules"]):
        digest = hashlib.sha256((corpus / f"{name}.bc").read_bytes()).hexdigest()
        (dropped if digest in seen else keep).append(name)
        seen.add(digest)
    if dropped:
        kept = set(keep)
        desc["modules"] = [n for n in desc["modules"] if n in kept]
        write_description_dict(corpus, desc)
        for name in dropped:
            for suffix in (".bc", ".cmd"):
                (corpus / f"{name}{suffix}").unlink(missing_ok=True)
    return len(dropped)


def _dedupe_cached(sub: Path, info: dict[str, object]) -> None:
    """Sub-corpora built before duplicates were dropped get the same treatment once."""
    if "duplicates_dropped" in info:
        return
    info["duplicates_dropped"] = drop_duplicate_modules(sub)
    info["modules"] = len(read_description(sub)["modules"])
    info["languages"] = count_languages(sub)
    (sub / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def _merge_into(corpus: Path, extra: Path) -> int:
    """Move the modules of corpus `extra` into `corpus` (names unchanged); returns how many."""
    desc = read_description(corpus)
    names = list(read_description(extra)["modules"])
    for name in names:
        for suffix in (".bc", ".cmd"):
            dest = corpus / f"{name}{suffix}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(extra / f"{name}{suffix}", dest)
    desc["modules"] = [*desc["modules"], *names]
    write_description_dict(corpus, desc)
    return len(names)


def build_package(
    recipe: Recipe,
    source_tree: Path,
    out: Path,
    *,
    compiler: Compiler,
    jobs: int = 2,
    deps: dict[str, Path] | None = None,
    log_path: Path | None = None,
    build_root: Path | None = None,
    progress: bool = True,
    unity: bool = True,
    target: Target = HOST_TARGET,
    level: str = OPT_LEVEL,
) -> int:
    """Build `recipe` on a scratch copy of `source_tree`, capturing the corpus at `out`,
    every compile recorded at `level`.

    The copy is `build_root/<pkg>` (default `<cache>/build/debian/<pkg>`, for another target
    `<cache>/build/debian-<target>/<pkg>`), removed afterwards.
    `target`: what to build for; another one than this machine's gets `cross_build`'s
    environment, and a recipe that says it cannot cross-build fails at step "target".
    Returns the number of modules. Module names are object paths inside the copy; unity
    modules are `_unity/...`. `out` is written completely or not at all (it is made in
    `out/../_staging/<pkg>` and renamed; an existing corpus there is replaced).
    """
    started = time.monotonic()
    cross = is_cross(target.triple)
    if cross and recipe.cross:
        raise DebianError(f"{recipe.package} does not build for another target than the host "
                          f"({target.name}): {recipe.cross}", step="target")
    missing = missing_tools(recipe)
    if missing:
        apt = sorted({TOOL_PACKAGES.get(t, t) for t in missing})
        raise DebianError(f"{recipe.package}: build tool(s) not found: {', '.join(missing)}; "
                          f"install them, e.g. `apt-get install {' '.join(apt)}`", step="tools")
    # Per target, so a build for another target never shares a scratch copy with x86-64's.
    scratch = Path(build_root) if build_root is not None else cache_root() / "build" / (
        "debian" if target == HOST_TARGET else f"debian-{target.name}")
    workdir = scratch / recipe.package
    staging = out.parent / STAGING_DIR / out.name
    # A fixed path, not a random temp dir: the cc1 commands record the build directory, so a
    # rebuild gives the same corpus. A fresh copy each time: the build writes into the tree
    # (configure, in-tree objects), the cache stays pristine, and a rebuild starts clean.
    for stale in (workdir, staging):
        if stale.exists():
            shutil.rmtree(stale)
    workdir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source_tree, workdir, symlinks=True)
    log_path = log_path or scratch / f"{recipe.package}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        script = write_build_script(recipe, workdir, jobs=jobs, deps=deps or {})
        env = dict(os.environ)
        # Configure scripts read these; CMake recipes set their own -Oz per build type.
        env["CFLAGS"] = env["CXXFLAGS"] = level
        env.pop("MAKEFLAGS", None)
        # pkg-config must not hand the build the host's libraries (see debian_recipes).
        env["PKG_CONFIG_LIBDIR"] = str(workdir / DEPS_DIR / "pkgconfig")
        env.pop("PKG_CONFIG_PATH", None)
        if cross:
            env.update(cross_build_env(target, workdir / CROSS_DIR))
        exclude = DEFAULT_EXCLUDE + rf"|(^|/){DEPS_DIR}/"
        if recipe.exclude:
            exclude += f"|{recipe.exclude}"
        with log_path.open("w") as log:
            try:
                result = capture(
                    ["sh", script.name], staging, cwd=workdir, target=target.triple,
                    cpu=target.cpu, flags=target.flags,
                    clang=None if compiler.bundled else str(compiler.path),
                    num_workers=jobs, overwrite=True, progress=False,
                    build_output=log.fileno(), env=env, exclude=exclude, level=level,
                )
            except CaptureError as exc:
                log.flush()
                text = log_path.read_text(errors="replace")
                why = ""
                if cross and _RAN_TARGET_PROGRAM in text:
                    why = (f" (it ran a program it had compiled for {target.name} with $CC: "
                           "that does not run on this machine, so the package does not "
                           "cross-build as it is)")
                raise DebianError(f"{recipe.package}: {exc}{why}\n--- build log tail "
                                  f"({log_path}) ---\n{text[-2500:]}", step="build") from exc
            modules = len(result.extract.modules)
            if modules == 0:
                raise DebianError(f"{recipe.package}: the build produced no module\n"
                                  + result.extract.summary(), step="extract")
            optional_failed = []
            if (workdir / OPTIONAL_FAILED).is_file():
                optional_failed = (workdir / OPTIONAL_FAILED).read_text().splitlines()
            duplicates = drop_duplicate_modules(staging)
            unity_info: dict[str, object] = {"modules": 0}
            if unity and recipe.unity:
                try:
                    unity_info = _add_unity(recipe, workdir, staging, compiler, jobs, log,
                                            target)
                except (OSError, ValueError, subprocess.SubprocessError, CorpusError) as exc:
                    # unity modules are extra data: the package's own build stands without
                    unity_info = {"modules": 0, "error": f"{type(exc).__name__}: {exc}"}
                    print(f"mlgo: unity modules of {recipe.package} left out: {exc}",
                          file=log, flush=True)
        try:
            # What training will load: a module whose flags the loader refuses must fail
            # the build here, named, not vanish from every snapshot later.
            load_corpus(staging)
        except CorpusError as exc:
            raise DebianError(f"{recipe.package}: the captured corpus does not load: {exc}",
                              step="validate") from exc
        info = {
            "package": recipe.package,
            "recipe": build_key(recipe, target, level),
            "language": recipe.language,
            "steps": [list(s) for s in recipe.steps],
            "extra_steps": [list(s) for s in recipe.extra],
            "optional_steps_failed": optional_failed,
            "subdir": recipe.subdir,
            "note": recipe.note,
            "source": source_tree.name,
            "version": source_version(source_tree),
            "debian_patches": not (source_tree / "debian" / ORIG_ONLY_MARKER).exists(),
            "compiler": compiler.version,
            "target": target.triple,
            "cpu": target.cpu,
            **({"target_flags": list(target.flags)} if target.flags else {}),
            "target_name": target.name,
            "opt_level": level,
            "modules": len(read_description(staging)["modules"]),
            "languages": count_languages(staging),
            "duplicates_dropped": duplicates,
            "unity": unity_info,
            "compiles": result.compiles,
            "build_seconds": round(time.monotonic() - started, 1),
        }
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        for pattern in ("COPYING*", "LICENSE*", "debian/copyright"):
            for lic in sorted(source_tree.glob(pattern)):
                if lic.is_file():
                    dest = staging / "licenses" / lic.name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(lic, dest)
        if out.exists():
            shutil.rmtree(out)
        os.rename(staging, out)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            staging.parent.rmdir()  # only when no other package is staged there
    return int(str(info["modules"]))


def _add_unity(recipe: Recipe, workdir: Path, corpus: Path, compiler: Compiler, jobs: int,
               log: Any, target: Target) -> dict[str, object]:
    """Compile the build's unity modules and add them to the sub-corpus at `corpus`."""
    started = time.monotonic()
    entries = json.loads((corpus / "compile_commands.json").read_text(encoding="utf-8"))
    print(f"mlgo: unity modules of {recipe.package}", file=log, flush=True)
    made, counts = build_unity_modules(entries, workdir, compiler, jobs=jobs, log=log,
                                       target=target.triple, cpu=target.cpu)
    info: dict[str, object] = {"modules": 0, "sources": counts.sources,
                               "failed_batches": counts.failed_batches}
    if made:
        extra = corpus.parent / f"{corpus.name}.unity"
        try:
            extract_objects(objects_from_compile_commands(made, obj_base_dir=workdir), extra,
                            num_workers=jobs, overwrite=True, progress=False)
            info["modules"] = _merge_into(corpus, extra)
        finally:
            shutil.rmtree(extra, ignore_errors=True)
    info["seconds"] = round(time.monotonic() - started, 1)
    print(f"mlgo: unity: {info}", file=log, flush=True)
    return info


def _result_from_info(pkg: str, status: str, info: dict[str, object], seconds: float,
                      log: str, sub: Path | None = None) -> PackageResult:
    # Counted again from the modules: a cheap read, and right even for older info files.
    langs = count_languages(sub) if sub is not None else info.get("languages")
    unity = info.get("unity")
    return PackageResult(
        pkg, status, int(str(info.get("modules", 0))), seconds, log=log,
        languages=tuple(sorted((str(k), int(v)) for k, v in langs.items()))
        if isinstance(langs, dict) else (),
        unity_modules=int(str(unity.get("modules", 0))) if isinstance(unity, dict) else 0)


def _disk_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def write_summary(out: Path, results: Sequence[PackageResult], wall_seconds: float,
                  target: Target = HOST_TARGET, level: str = OPT_LEVEL) -> Path:
    """`OUT/debian_summary.json`: the target and level, modules per package, the C/C++
    split, failures, time, disk; for this run's `results` and every sub-corpus earlier runs
    left in `out`, which the combined corpus holds too."""
    results = [*results, *_built_before(out, {r.package for r in results})]
    langs: dict[str, int] = {}
    for r in results:
        for lang, n in r.languages:
            langs[lang] = langs.get(lang, 0) + n
    total = sum(r.modules for r in results if r.status != "failed")
    summary = {
        "output_dir": str(out),
        "target": target.as_json(),
        "opt_level": level,
        "packages": {r.package: {
            "status": r.status, "modules": r.modules, "unity_modules": r.unity_modules,
            "languages": dict(r.languages), "build_minutes": round(r.seconds / 60, 2),
            **({"step": r.step, "error": r.error[:2000], "log": r.log}
               if r.status == "failed" else {}),
        } for r in results},
        "modules": total,
        "languages": dict(sorted(langs.items())),
        "cxx_share": round(langs.get("c++", 0) / total, 4) if total else 0.0,
        "unity_modules": sum(r.unity_modules for r in results),
        "built": sorted(r.package for r in results if r.status == "built"),
        "cached": sorted(r.package for r in results if r.status == "cached"),
        "failed": {r.package: {"step": r.step, "log": r.log} for r in results
                   if r.status == "failed"},
        "build_minutes_total": round(sum(r.seconds for r in results) / 60, 1),
        "wall_minutes_this_run": round(wall_seconds / 60, 1),
        "disk_bytes": _disk_bytes(out),
    }
    path = out / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def build_debian_corpora(
    packages: Sequence[str],
    config: DebianConfig,
    *,
    recipes: dict[str, Recipe] | None = None,
    fetch: Callable[[str, Path], Path] | None = None,
    on_done: Callable[[PackageResult], None] | None = None,
) -> list[PackageResult]:
    """Build each package's sub-corpus under `config.output_dir` (skipping cached ones), going
    on after failures, then combine all sub-corpora into `config.output_dir` and write
    `debian_summary.json` there."""
    from tqdm import tqdm

    recipes = RECIPES if recipes is None else recipes
    versions = dict(config.versions)
    unknown = [p for p in [*packages, *versions] if p not in recipes]
    if unknown:
        raise DebianError(f"no recipe for {', '.join(unknown)}; known: "
                          + ", ".join(sorted(recipes)))
    if not packages:
        raise DebianError("no package given")
    fetch = fetch or (lambda pkg, cache: fetch_source(pkg, cache, version=versions.get(pkg),
                                                      progress=config.progress))
    target = config.target
    if target.freestanding:
        hosted = hosted_alternative(target)
        raise TargetError(
            f"target {target.name} ({target.triple}) is bare metal, with no C library, and "
            "Debian packages need a C library's headers"
            + (f": build for {hosted.name} ({hosted.describe()}), the same code generation "
               "with a C library's headers" if hosted else ""))
    compiler = find_compiler(config.clang)
    check_output(config.output_dir.absolute(), target, config.level)
    out = _mkdir(config.output_dir.absolute())
    run_started = time.monotonic()
    results: list[PackageResult] = []
    todo = list(dict.fromkeys(packages))
    # Left by an interrupted run; only this run's packages: another run building other
    # packages into the same directory has its half-made sub-corpora there.
    for pkg in todo:
        shutil.rmtree(out / STAGING_DIR / pkg, ignore_errors=True)
    bar = tqdm(todo, desc="packages", unit="pkg", disable=not config.progress, file=sys.stderr,
               dynamic_ncols=True)
    for i, pkg in enumerate(bar, 1):
        recipe = recipes[pkg]
        sub = out / pkg
        tag = f"[{i}/{len(todo)}] {pkg}"
        log_path = out / LOG_DIR / f"{pkg}.log"
        bar.set_postfix_str(pkg)
        if is_built(sub, recipe, compiler, versions.get(pkg), target, config.level):
            info = _read_info(sub) or {}
            _dedupe_cached(sub, info)
            res = _result_from_info(pkg, "cached", info,
                                    float(str(info.get("build_seconds", 0.0))), str(log_path),
                                    sub)
            _say(config.progress, f"{tag}: cached ({res.modules} modules)")
        else:
            started = time.monotonic()
            step = "fetch"
            try:
                tree = fetch(pkg, config.src_cache)
                deps = {d: fetch(d, config.src_cache)
                        for d in (*recipe.deps, *recipe.headers, *recipe.helpers)}
                step = "build"
                _say(config.progress, f"{tag}: building {tree.name} ({recipe.language}"
                     f"{', ' + recipe.note if recipe.note else ''})")
                build_package(recipe, tree, sub, compiler=compiler, jobs=config.jobs,
                              deps=deps, log_path=log_path, build_root=config.build_root,
                              progress=config.progress, unity=config.unity, target=target,
                              level=config.level)
                secs = time.monotonic() - started
                res = _result_from_info(pkg, "built", _read_info(sub) or {}, secs,
                                        str(log_path), sub)
                _say(config.progress, f"{tag}: {res.modules} modules ({res.unity_modules} "
                     f"unity) in {secs / 60:.1f} min")
            except (CorpusError, OSError, subprocess.SubprocessError) as exc:
                secs = time.monotonic() - started
                where = getattr(exc, "step", "") or step
                _say(config.progress, f"{tag}: FAILED at {where} after {secs / 60:.1f} min "
                     f"(log: {log_path}): {str(exc)[:1500]}")
                res = PackageResult(pkg, "failed", 0, secs, str(exc), step=where,
                                    log=str(log_path))
        results.append(res)
        if res.status != "failed":
            combine_corpora(out)  # after each package, so a long run is usable early
        write_summary(out, results, time.monotonic() - run_started, target, config.level)
        if on_done is not None:
            on_done(res)
    bar.close()
    if any((p / DESCRIPTION_FILE).is_file() for p in out.iterdir() if p.is_dir()):
        combine_corpora(out)
    write_summary(out, results, time.monotonic() - run_started, target, config.level)
    return results


def _built_before(out: Path, this_run: set[str]) -> list[PackageResult]:
    """The sub-corpora in `out` other than `this_run`'s packages, as "cached" results: a run
    that adds packages never drops the others from the summary."""
    found = []
    for sub in sorted(p for p in out.iterdir() if p.is_dir() and p.name not in this_run):
        info = _read_info(sub)
        if info is not None:
            found.append(_result_from_info(
                sub.name, "cached", info, float(str(info.get("build_seconds", 0.0))),
                str(out / LOG_DIR / f"{sub.name}.log"), sub))
    return found
