"""What a policy does to the size of real programs: linked binaries, plain -Oz vs `mlgo cc`.

Builds each program twice from its real sources with `make -jJOBS`, every time for the fixed
target `-target x86_64-linux-gnu -mcpu=baseline`:
- plain: the bundled clang driver, `zig cc`/`zig c++ -Oz -Xclang -Oz` (zig's driver alone
  runs cc1 at -Os; `mlgo cc` adds the same `-Xclang -Oz`);
- policy: `mlgo cc`/`mlgo c++ --mlgo-policy P -Oz` (default P: `pretrained:inlining-oz`).
Every build gets a fresh `-DPYMLGO_BENCH_RUN=<token>`, so zig's object cache never answers a
plain compile (a policy compile never hits it: its channel path is new every time). zig's
runtime libraries (libc stubs, compiler-rt, libc++) are built into zig's cache before any
timed build, so no build pays for them; they are linked into both builds alike.

Programs (sources only from the demo corpus' PyPI sdists and the allowlisted Debian
packages, cached under $MLGO_CACHE_DIR or ~/.cache/pymlgo):
- brotli: the `brotli` tool (c/tools/brotli.c) of the Brotli 1.1.0 sdist; tests: brotli's
  compatibility test (decompress every tests/testdata/*.compressed* file and compare with
  the original) and its round-trip test (4 files and 3 of its sources at qualities 1/6/9/11);
- zstd: the zstd library of the zstandard 0.23.0 sdist (which ships no tool), split back
  into its translation units, and benchmarks/c/zstd_files.c: one-shot, streaming (2 worker
  threads) and dictionary round trips over zstd's own sources;
- lz4: the lz4 library of the lz4 4.3.3 sdist (no tool either) and benchmarks/c/lz4_files.c:
  block (fast, HC), frame and streaming-frame round trips over lz4's own sources;
- ninja: Debian's ninja-build source, the `ninja` binary and its own `ninja_test`; tests:
  ninja_test, then the built ninja runs a real build twice (the second must do no work);
- double-conversion: Debian's double-conversion source as a shared library
  (libdouble-conversion.so.3) and its `cctest` linked against it; tests: every cctest test.

Sizes are the linked binaries' (executables and shared libraries) bytes by section group
(`pymlgo.toolchain.size`: code, rodata, unwind, eh_tables, data; bss reported, never
counted) and every size metric, summed over a program's binaries; the objects' sums are
given too (the code the inliner changed, without zig's runtime libraries). Every binary is
checked against llvm-size's Berkeley columns. Prints JSON (also written to
OUTPUT_DIR/binary_size.json with --output_dir).

    python benchmarks/binary_size.py [--policy P] [--programs lz4 zstd ...] [--jobs 2]
        [--output_dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymlgo.corpus.capture import DEFAULT_CPU, DEFAULT_TARGET
from pymlgo.corpus.debian import fetch_source, source_version
from pymlgo.corpus.demo import SDISTS, cache_root, download_sdists, prepare_sources
from pymlgo.deploy.cc_server import stop_servers
from pymlgo.toolchain.compiler import bundled_zig, find_compiler
from pymlgo.toolchain.size import ObjectSize, object_size, total

DEFAULT_POLICY = "pretrained:inlining-oz"
TARGET_FLAGS = ("-target", DEFAULT_TARGET, f"-mcpu={DEFAULT_CPU}")
LLVM_SIZE = "/usr/lib/llvm-19/bin/llvm-size"
DRIVERS = Path(__file__).resolve().parent / "c"
CXX_SUFFIXES = (".cc", ".cpp", ".cxx")
TEST_TIMEOUT_S = 900.0
BUILD_TIMEOUT_S = 3600.0


# --- what a program is -----------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One translation unit: a source path relative to the build dir and its own flags."""

    source: str
    flags: tuple[str, ...] = ()

    @property
    def obj(self) -> str:
        return f"obj/{self.source.rsplit('.', 1)[0]}.o"

    @property
    def cxx(self) -> bool:
        return self.source.endswith(CXX_SUFFIXES)


@dataclass(frozen=True)
class Link:
    """One linked binary: its path, the units whose objects go in, what follows them on the
    link line, and whether it is a shared library."""

    output: str
    sources: tuple[str, ...]
    libs: tuple[str, ...] = ()
    shared: bool = False
    after: tuple[str, ...] = ()  # binaries that must be linked first (a library it uses)


@dataclass(frozen=True)
class Recipe:
    units: tuple[Unit, ...]
    links: tuple[Link, ...]


@dataclass(frozen=True)
class TestResult:
    passed: bool
    detail: str


@dataclass(frozen=True)
class Program:
    name: str
    origin: str  # where the sources come from, for the report
    tests: str  # what the test run checks, for the report
    # Writes the sources into the (empty) build dir and says what to build.
    prepare: Callable[[Path], Recipe]
    # Runs the program's tests on the built tree (build dir, a scratch dir).
    test: Callable[[Path, Path], TestResult]


# --- sources ---------------------------------------------------------------------------------


def _sdist(package: str) -> Path:
    return download_sdists(cache_root() / "sdists", progress=False)[package]


def _sdist_label(package: str) -> str:
    s = next(s for s in SDISTS if s.package == package)
    return f"PyPI sdist {s.filename} (sha256 {s.sha256[:12]}...)"


def _extract(tar_path: Path, dest: Path, keep: Callable[[str], bool]) -> Path:
    """Extract the members whose path below the top directory passes `keep` into `dest`
    (the top directory itself is dropped)."""
    with tarfile.open(tar_path) as tar:
        for m in tar.getmembers():
            top, _, rel = m.name.partition("/")
            if not m.isfile() or not rel or not keep(rel):
                continue
            out = dest / rel
            if ".." in Path(rel).parts:
                raise ValueError(f"{tar_path}: unsafe member {m.name!r}")
            out.parent.mkdir(parents=True, exist_ok=True)
            f = tar.extractfile(m)
            assert f is not None
            out.write_bytes(f.read())
    return dest


def _debian_tree(package: str) -> Path:
    # fetch_source caches the unpacked `apt-get source` tree under <cache>/src/<package>.
    return fetch_source(package, cache_root() / "src", progress=False)


def _copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)


def _copy_driver(name: str, dest: Path) -> str:
    shutil.copyfile(DRIVERS / name, dest / name)
    return name


# --- the programs ----------------------------------------------------------------------------


def _run(argv: Sequence[str], cwd: Path, timeout: float = TEST_TIMEOUT_S,
         **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, timeout=timeout,
                          check=False, **kw)


def _tail(proc: subprocess.CompletedProcess[bytes]) -> str:
    return (proc.stdout + proc.stderr).decode(errors="replace").strip()[-600:]


def prepare_brotli(dest: Path) -> Recipe:
    _extract(_sdist("brotli"), dest,
             lambda rel: rel.startswith(("c/common/", "c/dec/", "c/enc/", "c/tools/",
                                         "tests/testdata/", "c/include/")))
    sources = sorted(str(p.relative_to(dest)) for d in ("common", "dec", "enc", "tools")
                     for p in (dest / "c" / d).glob("*.c"))
    units = tuple(Unit(s, ("-Ic/include",)) for s in sources)
    return Recipe(units, (Link("brotli", tuple(sources), ("-lm",)),))


# brotli's tests/roundtrip_test.sh: these inputs at these qualities.
_BROTLI_ROUNDTRIP = ("tests/testdata/alice29.txt", "tests/testdata/asyoulik.txt",
                     "tests/testdata/lcet10.txt", "tests/testdata/plrabn12.txt",
                     "c/enc/encode.c", "c/common/dictionary.h", "c/dec/decode.c")


def test_brotli(build: Path, scratch: Path) -> TestResult:
    exe = str(build / "brotli")
    data = build / "tests" / "testdata"
    checked = 0
    # Compatibility: every stored stream decodes to its original.
    for packed in sorted(data.glob("*.compressed*")):
        original = data / packed.name.split(".compressed", 1)[0]
        if not original.is_file():
            continue
        proc = _run([exe, "-d", "-c", str(packed)], scratch)
        if proc.returncode != 0 or proc.stdout != original.read_bytes():
            return TestResult(False, f"compatibility: {packed.name}: {_tail(proc)[-200:]}")
        checked += 1
    if checked < 20:
        return TestResult(False, f"compatibility: only {checked} test streams found")
    trips = 0
    for rel in _BROTLI_ROUNDTRIP:
        original = build / rel
        for quality in (1, 6, 9, 11):
            packed, unpacked = scratch / "t.br", scratch / "t.out"
            a = _run([exe, "-f", "-q", str(quality), "-o", str(packed), str(original)], scratch)
            b = _run([exe, "-d", "-f", "-o", str(unpacked), str(packed)], scratch)
            if a.returncode or b.returncode or unpacked.read_bytes() != original.read_bytes():
                return TestResult(False, f"round trip {rel} q{quality}: {_tail(a)} {_tail(b)}")
            trips += 1
    return TestResult(True, f"{checked} compatibility streams decoded, {trips} round trips")


def prepare_zstd(dest: Path) -> Recipe:
    # demo.prepare_sources restores zstd's lib/ tree from the sdist's amalgamation, with the
    # configuration the amalgamation bakes in (multithreaded, no asm, no legacy formats).
    lib = prepare_sources({"zstd": _sdist("zstd")}, dest)
    driver = _copy_driver("zstd_files.c", dest)
    units = (*(Unit(u.source, u.flags) for u in lib), Unit(driver))
    return Recipe(units, (Link("zstd_files", tuple(u.source for u in units), ("-lpthread",)),))


def _sources_as_data(build: Path, pattern: str) -> list[str]:
    return sorted(str(p) for p in build.glob(pattern) if p.is_file())


def _driver_test(exe: str, files: list[str], build: Path, scratch: Path) -> TestResult:
    if len(files) < 4:
        return TestResult(False, f"only {len(files)} input files")
    proc = _run([str(build / exe), *files], scratch)
    out = proc.stdout.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not out or not out[-1].startswith("ok"):
        return TestResult(False, f"exit {proc.returncode}: {_tail(proc)}")
    size = sum(Path(f).stat().st_size for f in files)
    return TestResult(True, f"round trips over {len(files)} files ({size} bytes): {out[-1]}")


def test_zstd(build: Path, scratch: Path) -> TestResult:
    return _driver_test("zstd_files", _sources_as_data(build, "zstd/lib/*/*.c"), build,
                        scratch)


def prepare_lz4(dest: Path) -> Recipe:
    lib = prepare_sources({"lz4": _sdist("lz4")}, dest)
    driver = _copy_driver("lz4_files.c", dest)
    units = (*(Unit(u.source, u.flags) for u in lib), Unit(driver))
    return Recipe(units, (Link("lz4_files", tuple(u.source for u in units)),))


def test_lz4(build: Path, scratch: Path) -> TestResult:
    return _driver_test("lz4_files", _sources_as_data(build, "lz4/lz4libs/*.[ch]"), build,
                        scratch)


# ninja 1.11's configure.py on Linux: the library's units, then the test units.
_NINJA_LIB = ("build", "build_log", "clean", "clparser", "debug_flags", "depfile_parser",
              "deps_log", "disk_interface", "dyndep", "dyndep_parser", "edit_distance",
              "eval_env", "graph", "graphviz", "json", "lexer", "line_printer",
              "manifest_parser", "metrics", "missing_deps", "parser", "state", "status",
              "string_piece_util", "util", "version", "subprocess-posix", "browse")
_NINJA_TESTS = ("build_log_test", "build_test", "clean_test", "clparser_test",
                "depfile_parser_test", "deps_log_test", "dyndep_parser_test",
                "disk_interface_test", "edit_distance_test", "graph_test", "json_test",
                "lexer_test", "manifest_parser_test", "missing_deps_test", "ninja_test",
                "state_test", "status_test", "string_piece_util_test", "subprocess_test",
                "test", "util_test")
# configure.py's release flags for gcc/clang (-O2 replaced by the build's -Oz; no -g).
_NINJA_FLAGS = ("-Wno-deprecated", "-Wno-missing-field-initializers",
                "-Wno-unused-parameter", "-fno-rtti", "-fno-exceptions",
                "-fvisibility=hidden", '-DNINJA_PYTHON="python3"', "-DNDEBUG", "-DUSE_PPOLL",
                "-DNINJA_HAVE_BROWSE", "-I.")


def prepare_ninja(dest: Path) -> Recipe:
    tree = _debian_tree("ninja-build")
    _copy_tree(tree / "src", dest / "src")
    # `ninja -t browse` embeds browse.py as a C string; configure.py makes that header with
    # the project's own inline.sh, and so does this.
    (dest / "build").mkdir()
    with (dest / "src" / "browse.py").open("rb") as src, \
            (dest / "build" / "browse_py.h").open("wb") as out:
        subprocess.run(["sh", str(dest / "src" / "inline.sh"), "kBrowsePy"], stdin=src,
                       stdout=out, check=True)
    lib = tuple(f"src/{n}.cc" for n in _NINJA_LIB)
    tests = tuple(f"src/{n}.cc" for n in _NINJA_TESTS)
    units = tuple(Unit(s, _NINJA_FLAGS) for s in (*lib, "src/ninja.cc", *tests))
    return Recipe(units, (Link("ninja", (*lib, "src/ninja.cc")),
                          Link("ninja_test", (*lib, *tests))))


_NINJA_MANIFEST = """\
rule cat
  command = cat $in > $out
rule upper
  command = tr a-z A-Z < $in > $out
build gen/ab.txt: cat a.txt b.txt
build gen/AB.txt: upper gen/ab.txt
default gen/AB.txt
"""


def test_ninja(build: Path, scratch: Path) -> TestResult:
    unit = _run([str(build / "ninja_test")], scratch)
    last = _tail(unit).splitlines()[-1:] or [""]
    if unit.returncode != 0:
        return TestResult(False, f"ninja_test exit {unit.returncode}: {_tail(unit)}")
    # A real build with the built ninja: two edges, then a no-op rebuild.
    work = scratch / "ninja-build"
    work.mkdir()
    (work / "build.ninja").write_text(_NINJA_MANIFEST)
    (work / "a.txt").write_text("hello ")
    (work / "b.txt").write_text("ninja\n")
    first = _run([str(build / "ninja"), "-C", str(work)], scratch)
    got = (work / "gen" / "AB.txt").read_text() if (work / "gen" / "AB.txt").exists() else ""
    second = _run([str(build / "ninja"), "-C", str(work)], scratch)
    if first.returncode or got != "HELLO NINJA\n":
        return TestResult(False, f"ninja build: {_tail(first)}")
    if second.returncode or b"no work to do" not in second.stdout:
        return TestResult(False, f"ninja rebuild was not a no-op: {_tail(second)}")
    return TestResult(True, f"ninja_test: {last[0].strip()}; a real 2-edge build and a "
                      "no-op rebuild with the built ninja")


_DC_SONAME = "libdouble-conversion.so.3"


def prepare_double_conversion(dest: Path) -> Recipe:
    tree = _debian_tree("double-conversion")
    _copy_tree(tree / "double-conversion", dest / "double-conversion")
    _copy_tree(tree / "test", dest / "test")
    lib = tuple(sorted(str(p.relative_to(dest))
                       for p in (dest / "double-conversion").glob("*.cc")))
    tests = tuple(sorted(str(p.relative_to(dest)) for p in (dest / "test/cctest").glob("*.cc")))
    units = (*(Unit(s, ("-fPIC", "-I.")) for s in lib), *(Unit(s, ("-I.",)) for s in tests))
    # Like Debian's package: the library shared (with its soname), the tests linked to it;
    # $ORIGIN lets cctest find the library beside it.
    return Recipe(units, (
        Link(_DC_SONAME, lib, (f"-Wl,-soname,{_DC_SONAME}",), shared=True),
        Link("cctest", tests, (_DC_SONAME, "-Wl,-rpath,$ORIGIN"), after=(_DC_SONAME,)),
    ))


def test_double_conversion(build: Path, scratch: Path) -> TestResult:
    listed = _run([str(build / "cctest"), "--list"], scratch)
    names = [x for x in listed.stdout.decode(errors="replace").split() if "/" in x]
    proc = _run([str(build / "cctest")], scratch)  # no arguments: every enabled test
    if listed.returncode or proc.returncode or len(names) < 50:
        return TestResult(False, f"cctest exit {proc.returncode} ({len(names)} tests "
                          f"listed): {_tail(proc)}")
    summary = (_tail(proc).splitlines() or [""])[-1].strip()
    return TestResult(True, f"cctest: all {len(names)} listed tests run and passed ({summary})")


def _debian_label(package: str) -> str:
    try:
        version = source_version(_debian_tree(package))
    except Exception:  # the label must not be what stops a run; the build says what failed
        version = None
    return f"Debian source package {package} {version or '(version unknown)'} (apt-get source)"


PROGRAMS: dict[str, Program] = {p.name: p for p in (
    Program("brotli", "brotli", "brotli's compatibility and round-trip tests",
            prepare_brotli, test_brotli),
    Program("zstd", "zstd", "zstd_files.c round trips over zstd's sources",
            prepare_zstd, test_zstd),
    Program("lz4", "lz4", "lz4_files.c round trips over lz4's sources",
            prepare_lz4, test_lz4),
    Program("ninja", "ninja-build", "ninja_test, then a real build with the built ninja",
            prepare_ninja, test_ninja),
    Program("double-conversion", "double-conversion", "cctest (every test)",
            prepare_double_conversion, test_double_conversion),
)}


def origin_label(program: Program) -> str:
    if program.origin in ("brotli", "zstd", "lz4"):
        return _sdist_label(program.origin)
    return _debian_label(program.origin)


# --- building --------------------------------------------------------------------------------


def _mk(arg: str) -> str:
    """One shell word in a Makefile recipe: quoted for the shell, `$` escaped for make."""
    return shlex.quote(arg).replace("$", "$$")


def write_makefile(dest: Path, recipe: Recipe) -> None:
    """A Makefile compiling every unit with $(CC) $(CFLAGS) or $(CXX) $(CXXFLAGS) and linking
    every binary with the same driver and flags (a C++ binary with $(CXX))."""
    by_source = {u.source: u for u in recipe.units}
    rules = ["# Generated by benchmarks/binary_size.py", ".PHONY: all",
             "all: " + " ".join(_mk(x.output) for x in recipe.links), ""]
    for u in recipe.units:
        cc, flags = ("$(CXX)", "$(CXXFLAGS)") if u.cxx else ("$(CC)", "$(CFLAGS)")
        parent = str(Path(u.obj).parent)
        rules += [f"{u.obj}: {u.source}",
                  f"\t@mkdir -p {_mk(parent)}",
                  f"\t{cc} {flags} {' '.join(_mk(f) for f in u.flags)} -c {u.source} "
                  f"-o {u.obj}", ""]
    for link in recipe.links:
        objs = [by_source[s].obj for s in link.sources]
        cxx = any(by_source[s].cxx for s in link.sources)
        cc, flags = ("$(CXX)", "$(CXXFLAGS)") if cxx else ("$(CC)", "$(CFLAGS)")
        shared = " -shared" if link.shared else ""
        deps = " ".join([*objs, *(_mk(a) for a in link.after)])
        rules += [f"{_mk(link.output)}: {deps}",
                  f"\t{cc} {flags}{shared} -o {_mk(link.output)} {' '.join(objs)} "
                  f"{' '.join(_mk(a) for a in link.libs)}", ""]
    (dest / "Makefile").write_text("\n".join(rules))


def mlgo_command() -> list[str]:
    script = Path(sys.executable).with_name("mlgo")  # the venv's console script
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pymlgo.cli.main"]


@dataclass
class Toolchain:
    """The two ways of building: make variables for the plain and the policy build."""

    zig: str
    policy: str
    guard: bool = False  # `mlgo cc --mlgo-guard`: per object the smaller of policy and plain
    mlgo: list[str] = field(default_factory=mlgo_command)

    def make_vars(self, variant: str, token: str) -> dict[str, str]:
        common = [*TARGET_FLAGS, "-Oz", f"-DPYMLGO_BENCH_RUN={token}"]
        if variant == "plain":
            cc, cxx = [self.zig, "cc"], [self.zig, "c++"]
            flags = [*common, "-Xclang", "-Oz"]  # what mlgo cc adds to reach cc1 at -Oz
        else:
            pol = ["--mlgo-policy", self.policy, *(["--mlgo-guard"] if self.guard else [])]
            cc, cxx = [*self.mlgo, "cc", *pol], [*self.mlgo, "c++", *pol]
            flags = common
        return {"CC": shlex.join(cc), "CXX": shlex.join(cxx),
                "CFLAGS": shlex.join(flags), "CXXFLAGS": shlex.join(flags)}


def warm_runtime_caches(tools: Toolchain, scratch: Path) -> None:
    """Link a trivial C program, C++ program and C++ shared library both ways once, so zig
    builds its runtime libraries (libc stubs, crt, compiler-rt, libc++) into its cache here
    and not inside the first timed build."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "w.c").write_text("int main(void) { return 0; }\n")
    (scratch / "w.cc").write_text("#include <string>\nint f(const std::string &s) "
                                  "{ return (int)s.size(); }\nint main() { return f(\"x\"); }\n")
    driver = {"CC": [tools.zig, "cc"], "CXX": [tools.zig, "c++"]}
    for variant in ("plain", "policy"):
        v = tools.make_vars(variant, f"warm{time.time_ns()}")
        for tool, src, extra in (("CC", "w.c", []), ("CXX", "w.cc", []),
                                 ("CXX", "w.cc", ["-fPIC", "-shared"])):
            out = scratch / f"w-{variant}-{tool}{'.so' if extra else ''}"
            # zig's own driver both ways: only zig's cache matters here, and it keys the
            # runtime libraries on the link's target and flags, which these are.
            flags = shlex.split(v["CFLAGS" if tool == "CC" else "CXXFLAGS"])
            subprocess.run([*driver[tool], *flags, *extra, src, "-o", str(out)], cwd=scratch,
                           check=True, capture_output=True)


@dataclass
class Build:
    variant: str
    seconds: float
    binaries: dict[str, ObjectSize]
    objects: ObjectSize
    test: TestResult
    log: list[dict[str, Any]]


@dataclass
class Tree:
    """One program built one way: its build dir, what was linked, how long make took, the
    `mlgo cc` log of the build and the program's test result."""

    build: Path
    recipe: Recipe
    seconds: float
    binaries: dict[str, ObjectSize]
    log: list[dict[str, Any]]
    test: TestResult


def build_tree(program: Program, variant: str, make_vars: dict[str, str], root: Path,
               jobs: int, runtime_parent: Path) -> Tree:
    """Unpack, build (timed) with `make_vars`, measure the linked binaries and test one
    program in `root/variant`."""
    build = root / variant
    build.mkdir(parents=True)
    recipe = program.prepare(build)
    write_makefile(build, recipe)
    cc_log = root / f"{variant}-mlgo-cc.jsonl"
    # A fresh runtime dir per build: the build starts its own policy server, as on a fresh
    # machine, and only that server is stopped afterwards. Kept short: it holds a socket.
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir=runtime_parent))
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLGO_POLICY", "MLGO_CC_LOG", "MLGO_CC_SERVER", "MLGO_RUNTIME_DIR",
                        "MAKEFLAGS", "MFLAGS")}
    env.update({"MLGO_CC_LOG": str(cc_log), "MLGO_RUNTIME_DIR": str(runtime)})
    argv = ["make", "-s", f"-j{jobs}", *(f"{k}={v}" for k, v in make_vars.items()), "all"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=build, env=env, capture_output=True,
                              timeout=BUILD_TIMEOUT_S, check=False)
    finally:
        stop_servers(runtime)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{program.name} ({variant}): make failed (exit "
                           f"{proc.returncode}):\n{_tail(proc)}")
    binaries = {x.output: object_size(build / x.output) for x in recipe.links}
    log = ([json.loads(line) for line in cc_log.read_text().splitlines()]
           if cc_log.exists() else [])
    scratch = root / f"{variant}-scratch"
    scratch.mkdir()
    try:
        test = program.test(build, scratch)
    except (OSError, subprocess.TimeoutExpired) as exc:
        test = TestResult(False, f"{type(exc).__name__}: {exc}")
    return Tree(build, recipe, seconds, binaries, log, test)


def build_variant(program: Program, variant: str, tools: Toolchain, root: Path, jobs: int,
                  runtime_parent: Path) -> Build:
    """Unpack, build (timed), measure and test one program one way in `root/variant`."""
    tree = build_tree(program, variant, tools.make_vars(variant, f"{time.time_ns()}"), root,
                      jobs, runtime_parent)
    objects = total(object_size(tree.build / u.obj) for u in tree.recipe.units)
    return Build(variant, tree.seconds, tree.binaries, objects, tree.test, tree.log)


def _sizes(s: ObjectSize) -> dict[str, Any]:
    return {"groups": s.groups(), "bss": s.bss, "metrics": s.metrics()}


def _change(plain: int, policy: int) -> dict[str, float | int]:
    return {"bytes": policy - plain,
            "ratio": round(policy / plain - 1, 6) if plain else 0.0}


def guard_kept(log: list[dict[str, Any]]) -> dict[str, int]:
    """How many objects the guarded compiles of `mlgo cc`'s log kept from each side
    ("policy", "plain"), and how many compiles it could not weigh ("unguarded")."""
    kept: list[str] = []
    for rec in log:
        g = rec.get("guard")
        if not isinstance(g, dict):
            continue
        if not g.get("applied"):
            kept.append("unguarded")
        kept += [str(o.get("kept")) for o in g.get("objects") or ()]
    return {k: kept.count(k) for k in sorted(set(kept))}


def measure_program(program: Program, policy: str, root: Path, jobs: int = 2,
                    runtime_parent: Path | None = None,
                    order: tuple[str, str] = ("plain", "policy"),
                    guard: bool = False) -> dict[str, Any]:
    """Build `program` plain and with `policy` under `root` (in `order`; the policy build
    through `--mlgo-guard` with `guard`), run its tests on both builds, and return its report
    (sizes summed over its linked binaries)."""
    tools = Toolchain(str(bundled_zig()), policy, guard)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlgo-bs-") as rt:
        runtime = runtime_parent or Path(rt)
        built = {v: build_variant(program, v, tools, root / program.name, jobs, runtime)
                 for v in order}
    builds = {v: built[v] for v in ("plain", "policy")}
    out: dict[str, Any] = {"sources": origin_label(program), "tests": program.tests,
                           "binaries": list(builds["plain"].binaries),
                           "built_first": order[0]}
    for v, b in builds.items():
        linked = total(b.binaries.values())
        entry: dict[str, Any] = {
            **_sizes(linked),
            "per_binary_allocated": {k: s.allocated for k, s in b.binaries.items()},
            "objects": _sizes(b.objects),
            "tests_passed": b.test.passed,
            "test_detail": b.test.detail,
            "build_seconds": round(b.seconds, 2),
        }
        if v == "policy":
            served = [r for r in b.log if r.get("served")]
            entry["compiles_served"] = len(served)
            entry["compiles_served_by"] = sorted({str(r.get("served_by")) for r in served})
            entry["decisions_served"] = sum(r.get("decisions") or 0 for r in served)
            entry["inlined"] = sum(r.get("inlined") or 0 for r in served)
            entry["uncounted_compiles"] = sum(1 for r in served if r.get("decisions") is None)
            entry["failed_commands"] = sum(1 for r in b.log if r.get("returncode"))
            if guard:
                entry["guard_kept"] = guard_kept(b.log)
        out[v] = entry
    plain, pol = (total(builds[v].binaries.values()) for v in ("plain", "policy"))
    po, pp = builds["plain"].objects, builds["policy"].objects
    out["change"] = {
        "allocated": _change(plain.allocated, pol.allocated),
        "text": _change(plain.code, pol.code),
        "unwind": _change(plain.unwind, pol.unwind),
        "llvm-size": _change(plain.berkeley_text, pol.berkeley_text),
        "objects_allocated": _change(po.allocated, pp.allocated),
        "objects_text": _change(po.code, pp.code),
    }
    out["llvm_size_check"] = {
        f"{v}/{name}": check_llvm_size(root / program.name / v / name)
        for v in ("plain", "policy") for name in builds[v].binaries}
    return out


def total_change(results: dict[str, Any]) -> dict[str, Any]:
    """Plain vs policy summed over every program's linked binaries, by metric and group."""
    out: dict[str, Any] = {}
    for key in ("allocated", "text", "llvm-size"):
        a, b = (sum(r[v]["metrics"][key] for r in results.values())
                for v in ("plain", "policy"))
        out[key] = {"plain": a, "policy": b, **_change(a, b)}
    a, b = (sum(r[v]["groups"]["unwind"] for r in results.values())
            for v in ("plain", "policy"))
    out["unwind"] = {"plain": a, "policy": b, **_change(a, b)}
    return out


def check_llvm_size(path: Path) -> str:
    """Compare our groups with llvm-size's Berkeley columns: text = code + rodata + unwind +
    eh_tables (on x86-64 nothing read-only lacks contents), data = data, bss = bss, and our
    berkeley_text = text. "ok", or what differs (or why it could not run)."""
    if not Path(LLVM_SIZE).is_file():
        return f"skipped: {LLVM_SIZE} not found"
    proc = subprocess.run([LLVM_SIZE, "--format=berkeley", str(path)], capture_output=True,
                          text=True, check=False)
    rows = proc.stdout.splitlines()
    if proc.returncode or len(rows) < 2:
        return f"llvm-size failed: {proc.stderr.strip()[-200:]}"
    text, data, bss = (int(x) for x in rows[1].split()[:3])
    s = object_size(path)
    ours = {"text": s.code + s.rodata + s.unwind + s.eh_tables, "data": s.data, "bss": s.bss,
            "berkeley_text": s.berkeley_text}
    theirs = {"text": text, "data": data, "bss": bss, "berkeley_text": text}
    bad = [f"{k}: ours {ours[k]} llvm-size {theirs[k]}" for k in ours if ours[k] != theirs[k]]
    return "ok" if not bad else "; ".join(bad)


# --- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default=DEFAULT_POLICY,
                   help=f"the policy for `mlgo cc --mlgo-policy` (default: {DEFAULT_POLICY})")
    p.add_argument("--programs", nargs="+", choices=list(PROGRAMS), default=list(PROGRAMS),
                   metavar="NAME", help="build only these (default: all of "
                   f"{', '.join(PROGRAMS)})")
    p.add_argument("--jobs", type=int, default=2, help="make -j (default: 2)")
    p.add_argument("--output_dir", type=Path, default=None,
                   help="also write the JSON to OUTPUT_DIR/binary_size.json")
    p.add_argument("--keep", action="store_true",
                   help="keep the build directories (their path goes to stderr)")
    p.add_argument("--guard", action="store_true",
                   help="build the policy side with `mlgo cc --mlgo-guard`: every object the "
                   "smaller of the policy's and plain -Oz's (two compiles each), as a user "
                   "who wants no object to grow would")
    args = p.parse_args(argv)

    started = time.perf_counter()
    compiler = find_compiler(None)
    tools = Toolchain(str(bundled_zig()), args.policy, args.guard)
    root = Path(tempfile.mkdtemp(prefix="pymlgo-binary-size-"))
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    load_before = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="mlgo-bs-") as rt:
            warm_runtime_caches(tools, root / "warm")
            for i, name in enumerate(args.programs):
                print(f"binary_size: {name} ...", file=sys.stderr, flush=True)
                # Which build goes first alternates: on a busy machine the load drifts, and
                # a fixed order would put the drift on one side.
                order = ("plain", "policy") if i % 2 == 0 else ("policy", "plain")
                try:
                    r = measure_program(PROGRAMS[name], args.policy, root, args.jobs,
                                        Path(rt), order, args.guard)
                except Exception as exc:  # one program that fails to build: report, go on
                    failed[name] = f"{type(exc).__name__}: {exc}"
                    print(f"binary_size: {name}: {failed[name]}", file=sys.stderr, flush=True)
                    continue
                results[name] = r
                print(f"binary_size: {name}: allocated {r['plain']['metrics']['allocated']} "
                      f"-> {r['policy']['metrics']['allocated']}, tests "
                      f"{r['plain']['tests_passed']}/{r['policy']['tests_passed']}",
                      file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"binary_size: build directories kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)

    result = {
        "policy": args.policy,
        "compiler": compiler.describe(),
        "target": " ".join(TARGET_FLAGS),
        "plain": f"zig cc/c++ {' '.join(TARGET_FLAGS)} -Oz -Xclang -Oz",
        "with_policy": f"mlgo cc/c++ --mlgo-policy {args.policy}"
                       f"{' --mlgo-guard' if args.guard else ''} {' '.join(TARGET_FLAGS)} -Oz",
        "guard": args.guard,
        "jobs": args.jobs,
        "programs": results,
        "failed": failed,
        "total": total_change(results),
        "policy_never_larger_allocated": not failed and all(
            r["policy"]["metrics"]["allocated"] <= r["plain"]["metrics"]["allocated"]
            for r in results.values()),
        "all_tests_passed": not failed and all(r[v]["tests_passed"] for r in results.values()
                                for v in ("plain", "policy")),
        "llvm_size_agrees": all(c == "ok" for r in results.values()
                                for c in r["llvm_size_check"].values()),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpus": os.cpu_count(),
        # Build seconds are only comparable on a quiet machine: the load says how quiet.
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / "binary_size.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
