"""Corpora from Debian source packages: `apt-get source`, a per-package library build, capture.

Each package is fetched once with `apt-get source` into `<cache>/src/<pkg>/` (needs a
`deb-src` line in the APT sources), copied to a scratch directory, and built through
`capture` (bundled clang, fixed target and baseline CPU, embedded bitcode) with a small
recipe that builds the package's LIBRARY only: no tests, tools, docs or shared variants,
at -Oz. Each package becomes the sub-corpus `OUT/<pkg>/`, and the sub-corpora are combined
into `OUT/`, so every module name starts with its package (`zlib/adler32`): the package is
the first path component, which is what train/held-out splits go by.

A package whose sub-corpus already exists with the same recipe and compiler is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pymlgo.corpus.capture import DEFAULT_CPU, DEFAULT_TARGET, CaptureError, capture
from pymlgo.corpus.combine import combine_corpora
from pymlgo.corpus.demo import cache_root
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, read_description
from pymlgo.toolchain.compiler import Compiler, find_compiler

# Bump when the build flags or the layout change for every package: it is in the cache key.
DEBIAN_FORMAT = 1
INFO_FILE = "debian_info.json"
OPT_LEVEL = "-Oz"
BUILD_DIR = "_mlgo_build"  # out-of-tree build dir of the CMake recipes, inside the copy
LOG_DIR = "_logs"  # build logs, next to the sub-corpora (not a corpus itself)


class DebianError(CorpusError):
    """A Debian source package could not be fetched or built."""


@dataclass(frozen=True)
class Recipe:
    """How to build one source package's library.

    `steps` run in order (each an argv, no shell) in `subdir` of a fresh copy of the
    package's source tree, as one captured build. Placeholders: `{jobs}` (parallel jobs),
    `{dep_<pkg>}` (the cached source tree of a package in `deps`, e.g. for headers).
    """

    package: str
    language: str  # "c" or "c++": what the library is written in
    steps: tuple[tuple[str, ...], ...]
    subdir: str = ""
    deps: tuple[str, ...] = ()
    note: str = ""
    env: tuple[tuple[str, str], ...] = ()

    def key(self) -> str:
        """Cache key of the recipe: any change rebuilds the package."""
        blob = json.dumps([DEBIAN_FORMAT, asdict(self)], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def cmake(*options: str, targets: Sequence[str] = ()) -> tuple[tuple[str, ...], ...]:
    """Configure out of tree as a static MinSizeRel (-Oz) build, then build `targets`."""
    configure = (
        "cmake", "-S", ".", "-B", BUILD_DIR, "-G", "Unix Makefiles",
        "-DCMAKE_BUILD_TYPE=MinSizeRel",
        f"-DCMAKE_C_FLAGS_MINSIZEREL={OPT_LEVEL} -DNDEBUG",
        f"-DCMAKE_CXX_FLAGS_MINSIZEREL={OPT_LEVEL} -DNDEBUG",
        "-DBUILD_SHARED_LIBS=OFF", "-DBUILD_TESTING=OFF",
        *options,
    )
    build = ("cmake", "--build", BUILD_DIR, "-j", "{jobs}",
             *(("--target", *targets) if targets else ()))
    return (configure, build)


def _between(steps: tuple[tuple[str, ...], ...],
             step: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """`step` inserted between CMake's configure and build steps."""
    configure, build = steps
    return (configure, step, build)


# One entry per allowed training package (Debian source package names).
RECIPES: dict[str, Recipe] = {r.package: r for r in (
    Recipe("zlib", "c", (("./configure", "--static"), ("make", "-j{jobs}", "libz.a"))),
    Recipe("libpng1.6", "c", cmake(
        "-DPNG_SHARED=OFF", "-DPNG_STATIC=ON", "-DPNG_TESTS=OFF", "-DPNG_EXECUTABLES=OFF",
        "-DZLIB_INCLUDE_DIR={dep_zlib}", "-DZLIB_LIBRARY={dep_zlib}/libz.a",
        targets=("png_static",)), deps=("zlib",),
        note="zlib headers from the zlib source package (nothing is linked)"),
    Recipe("expat", "c", _between(cmake(
        "-DEXPAT_BUILD_TOOLS=OFF", "-DEXPAT_BUILD_EXAMPLES=OFF", "-DEXPAT_BUILD_TESTS=OFF",
        "-DEXPAT_BUILD_DOCS=OFF", "-DEXPAT_SHARED_LIBS=OFF", "-DEXPAT_BUILD_FUZZERS=OFF",
        targets=("expat",)),
        # Debian's security patches test `#if XML_DTD == 1`, as autotools' config.h defines
        # it; CMake's template defines it empty.
        ("sed", "-i", "s/^#define XML_DTD$/#define XML_DTD 1/", f"{BUILD_DIR}/expat_config.h"),
    ), subdir="expat", note="XML_DTD defined to 1 as in Debian's autotools build"),
    Recipe("pcre2", "c", cmake(
        "-DPCRE2_BUILD_PCRE2GREP=OFF", "-DPCRE2_BUILD_TESTS=OFF", "-DBUILD_STATIC_LIBS=ON",
        "-DPCRE2_BUILD_PCRE2_8=ON", "-DPCRE2_BUILD_PCRE2_16=OFF",
        "-DPCRE2_BUILD_PCRE2_32=OFF"),
        note="8-bit library and POSIX wrapper; the 16/32-bit builds recompile the same "
        "sources"),
    Recipe("libyaml", "c", cmake("-DINSTALL_CMAKE_DIR=lib/cmake", targets=("yaml",))),
    Recipe("cjson", "c", cmake(
        "-DENABLE_CJSON_TEST=OFF", "-DENABLE_CJSON_UTILS=ON", "-DBUILD_SHARED_AND_STATIC_LIBS=OFF",
        "-DENABLE_CUSTOM_COMPILER_FLAGS=OFF", "-DENABLE_TARGET_EXPORT=OFF",
        targets=("cjson", "cjson_utils"))),
    Recipe("jansson", "c", cmake(
        "-DJANSSON_BUILD_DOCS=OFF", "-DJANSSON_WITHOUT_TESTS=ON", "-DJANSSON_EXAMPLES=OFF",
        targets=("jansson",))),
    Recipe("giflib", "c", (("make", "-j{jobs}", f"OFLAGS={OPT_LEVEL}", "libgif.a"),)),
    Recipe("libwebp", "c", cmake(
        "-DWEBP_BUILD_ANIM_UTILS=OFF", "-DWEBP_BUILD_CWEBP=OFF", "-DWEBP_BUILD_DWEBP=OFF",
        "-DWEBP_BUILD_GIF2WEBP=OFF", "-DWEBP_BUILD_IMG2WEBP=OFF", "-DWEBP_BUILD_VWEBP=OFF",
        "-DWEBP_BUILD_WEBPINFO=OFF", "-DWEBP_BUILD_WEBPMUX=OFF", "-DWEBP_BUILD_EXTRAS=OFF",
        "-DWEBP_BUILD_LIBWEBPMUX=ON",
        targets=("webp", "webpdemux", "libwebpmux"))),
    Recipe("libjpeg-turbo", "c", cmake(
        "-DENABLE_SHARED=OFF", "-DENABLE_STATIC=ON", "-DWITH_SIMD=OFF", "-DWITH_TURBOJPEG=OFF",
        targets=("jpeg-static",)),
        note="no SIMD (its kernels are NASM assembly); libturbojpeg recompiles the same sources"),
    Recipe("libxml2", "c", cmake(
        "-DLIBXML2_WITH_PYTHON=OFF", "-DLIBXML2_WITH_ZLIB=OFF", "-DLIBXML2_WITH_LZMA=OFF",
        "-DLIBXML2_WITH_ICU=OFF", "-DLIBXML2_WITH_TESTS=OFF", "-DLIBXML2_WITH_PROGRAMS=OFF",
        targets=("LibXml2",)), note="without zlib/lzma/ICU/Python"),
    Recipe("openssl", "c", (
        ("./Configure", "linux-x86_64", "no-asm", "no-shared", "no-module", "no-tests"),
        ("make", "-j{jobs}", "build_libs"),
    ), env=(("CFLAGS", OPT_LEVEL),), note="libcrypto + libssl, no assembly"),
    Recipe("fmtlib", "c++", cmake(
        "-DFMT_TEST=OFF", "-DFMT_DOC=OFF", "-DFMT_FUZZ=OFF", "-DFMT_INSTALL=OFF",
        targets=("fmt",))),
    Recipe("googletest", "c++", cmake(
        "-DBUILD_GMOCK=ON", "-DINSTALL_GTEST=OFF", targets=("gtest", "gmock"))),
    Recipe("snappy", "c++", cmake(
        "-DSNAPPY_BUILD_TESTS=OFF", "-DSNAPPY_BUILD_BENCHMARKS=OFF", "-DSNAPPY_INSTALL=OFF",
        targets=("snappy",))),
    Recipe("leveldb", "c++", cmake(
        "-DLEVELDB_BUILD_TESTS=OFF", "-DLEVELDB_BUILD_BENCHMARKS=OFF", "-DLEVELDB_INSTALL=OFF",
        targets=("leveldb",)), note="without snappy/crc32c/tcmalloc"),
    Recipe("protobuf", "c++", cmake(
        "-Dprotobuf_BUILD_TESTS=OFF", "-Dprotobuf_BUILD_PROTOC_BINARIES=OFF",
        "-Dprotobuf_WITH_ZLIB=OFF", "-Dprotobuf_BUILD_SHARED_LIBS=OFF",
        "-Dprotobuf_BUILD_LIBPROTOC=OFF",
        targets=("libprotobuf",)),
        note="libprotobuf (a superset of libprotobuf-lite's sources); no protoc, no libprotoc"),
)}

# Cheap and useful first, the big ones last.
DEFAULT_ORDER = (
    "zlib", "libpng1.6", "expat", "pcre2", "libyaml", "cjson", "jansson", "giflib", "libwebp",
    "libjpeg-turbo", "snappy", "leveldb", "fmtlib", "libxml2", "googletest", "openssl",
    "protobuf",
)


@dataclass(frozen=True)
class PackageResult:
    package: str
    status: str  # "built", "cached" or "failed"
    modules: int = 0
    seconds: float = 0.0
    error: str = ""


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


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"mlgo corpus debian: {msg}", file=sys.stderr, flush=True)


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


def fetch_source(package: str, src_cache: Path, *, version: str | None = None,
                 progress: bool = True) -> Path:
    """The package's unpacked source tree, fetched with `apt-get source` unless cached;
    `version` asks for that Debian version (cached separately) instead of the newest."""
    pkg_dir = src_cache / (package if version is None else f"{package}={version}")
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
        if pkg_dir.exists():
            shutil.rmtree(pkg_dir)
        os.rename(staging, pkg_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tree = find_source_tree(pkg_dir)
    assert tree is not None
    return tree


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- building ---------------------------------------------------------------------------------


def _expand(arg: str, values: dict[str, str]) -> str:
    try:
        return arg.format(**values)
    except (KeyError, IndexError) as exc:
        raise DebianError(f"recipe argument {arg!r} uses unknown placeholder {exc}") from exc


def write_build_script(recipe: Recipe, workdir: Path, *, jobs: int,
                       deps: dict[str, Path]) -> Path:
    """The recipe as a `set -e` shell script in `workdir`, so it runs as one captured build."""
    import shlex

    values = {"jobs": str(jobs)}
    values.update({f"dep_{name.replace('-', '_').replace('.', '_')}": str(path)
                   for name, path in deps.items()})
    lines = ["#!/bin/sh", "# Generated by pymlgo: the library build of "
             f"{recipe.package} (recipe {recipe.key()}).", "set -e", "set -x"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in recipe.env]
    if recipe.subdir:
        lines.append(f"cd {shlex.quote(recipe.subdir)}")
    lines += [shlex.join(_expand(a, values) for a in step) for step in recipe.steps]
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


def is_built(sub: Path, recipe: Recipe, compiler: Compiler, version: str | None = None) -> bool:
    """Built with this recipe and compiler (and, if one is asked for, this Debian version)."""
    info = _read_info(sub)
    return (info is not None and info.get("recipe") == recipe.key()
            and info.get("compiler") == compiler.version
            and (version is None or info.get("version") == version))


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
) -> int:
    """Build `recipe` on a scratch copy of `source_tree`, capturing the corpus at `out`.

    The copy is `build_root/<pkg>` (default `<cache>/build/debian/<pkg>`), removed afterwards.
    Returns the number of modules. Module names are object paths inside the copy; `out` is
    written completely or not at all (an existing corpus there is replaced).
    """
    started = time.monotonic()
    scratch = Path(build_root) if build_root is not None else cache_root() / "build" / "debian"
    workdir = scratch / recipe.package
    # A fixed path, not a random temp dir: the cc1 commands record the build directory, so a
    # rebuild gives the same corpus. A fresh copy each time: the build writes into the tree
    # (configure, in-tree objects), the cache stays pristine, and a rebuild starts clean.
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source_tree, workdir, symlinks=True)
    try:
        script = write_build_script(recipe, workdir, jobs=jobs, deps=deps or {})
        log_path = log_path or scratch / f"{recipe.package}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        # Configure scripts read these; CMake recipes set their own -Oz per build type.
        env["CFLAGS"] = env["CXXFLAGS"] = OPT_LEVEL
        env.pop("MAKEFLAGS", None)
        with log_path.open("w") as log:
            try:
                result = capture(
                    ["sh", script.name], out, cwd=workdir, target=DEFAULT_TARGET,
                    cpu=DEFAULT_CPU, clang=None if compiler.bundled else str(compiler.path),
                    num_workers=jobs, overwrite=True, progress=progress,
                    build_output=log.fileno(), env=env,
                )
            except CaptureError as exc:
                tail = log_path.read_text(errors="replace")[-2500:]
                raise DebianError(f"{recipe.package}: {exc}\n--- build log tail "
                                  f"({log_path}) ---\n{tail}") from exc
        modules = len(result.extract.modules)
        if modules == 0:
            raise DebianError(f"{recipe.package}: the build produced no module\n"
                              + result.extract.summary())
        info = {
            "package": recipe.package,
            "recipe": recipe.key(),
            "steps": [list(s) for s in recipe.steps],
            "subdir": recipe.subdir,
            "note": recipe.note,
            "source": source_tree.name,
            "version": source_version(source_tree),
            "compiler": compiler.version,
            "target": DEFAULT_TARGET,
            "cpu": DEFAULT_CPU,
            "opt_level": OPT_LEVEL,
            "modules": modules,
            "compiles": result.compiles,
            "build_seconds": round(time.monotonic() - started, 1),
        }
        (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        for pattern in ("COPYING*", "LICENSE*", "debian/copyright"):
            for lic in sorted(source_tree.glob(pattern)):
                if lic.is_file():
                    dest = out / "licenses" / lic.name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(lic, dest)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return modules


def build_debian_corpora(
    packages: Sequence[str],
    config: DebianConfig,
    *,
    recipes: dict[str, Recipe] | None = None,
    fetch: Callable[[str, Path], Path] | None = None,
    on_done: Callable[[PackageResult], None] | None = None,
) -> list[PackageResult]:
    """Build each package's sub-corpus under `config.output_dir` (skipping cached ones), going
    on after failures, then combine all sub-corpora into `config.output_dir`."""
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
    compiler = find_compiler(config.clang)
    out = _mkdir(config.output_dir.absolute())
    results: list[PackageResult] = []
    for i, pkg in enumerate(dict.fromkeys(packages), 1):
        recipe = recipes[pkg]
        sub = out / pkg
        tag = f"[{i}/{len(packages)}] {pkg}"
        if is_built(sub, recipe, compiler, versions.get(pkg)):
            info = _read_info(sub) or {}
            n = int(str(info.get("modules", 0)))
            _say(config.progress, f"{tag}: cached ({n} modules)")
            res = PackageResult(pkg, "cached", n, float(str(info.get("build_seconds", 0.0))))
        else:
            for stale in out.glob(f".{pkg}.*"):  # staging dirs of an interrupted run
                shutil.rmtree(stale, ignore_errors=True)
            started = time.monotonic()
            try:
                tree = fetch(pkg, config.src_cache)
                deps = {d: fetch(d, config.src_cache) for d in recipe.deps}
                _say(config.progress, f"{tag}: building {tree.name} ({recipe.language}"
                     f"{', ' + recipe.note if recipe.note else ''})")
                n = build_package(recipe, tree, sub, compiler=compiler, jobs=config.jobs,
                                  deps=deps, log_path=out / LOG_DIR / f"{pkg}.log",
                                  build_root=config.build_root, progress=config.progress)
                secs = time.monotonic() - started
                _say(config.progress, f"{tag}: {n} modules in {secs / 60:.1f} min")
                res = PackageResult(pkg, "built", n, secs)
            except (CorpusError, OSError) as exc:
                secs = time.monotonic() - started
                _say(config.progress, f"{tag}: FAILED after {secs / 60:.1f} min: {exc}")
                res = PackageResult(pkg, "failed", 0, secs, str(exc))
        results.append(res)
        if res.status != "failed":
            combine_corpora(out)  # after each package, so a long run is usable early
        if on_done is not None:
            on_done(res)
    if any((p / DESCRIPTION_FILE).is_file() for p in out.iterdir() if p.is_dir()):
        combine_corpora(out)
    return results
