"""Recipes of single Debian packages: each check runs the recipe's own step or reads the
cached source package it builds, so a recipe that no longer fits its package fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pymlgo.corpus.debian import DEPS_DIR, OPT_LEVEL, RECIPES
from pymlgo.corpus.debian_recipes import (
    _FLATBUFFERS_MORE,
    _SNAPPY_MORE,
    _SPDLOG_BENCH,
    _TINYOBJ_EXAMPLES,
    _WOFF2_CORE,
    _WOFF2_FLAGS,
    _WOFF2_MORE,
    _WOFF2_NEED_BROTLI,
    compile_each,
)

SRC = Path.home() / ".cache/pymlgo/src"


def cached_tree(package: str) -> Path:
    """The unpacked source tree of a cached package; the test is skipped without it."""
    trees = sorted(p for p in (SRC / package).glob("*") if (p / "debian").is_dir())
    if not trees:
        pytest.skip(f"needs the cached {package} source package (apt-get source {package})")
    return trees[0]


def echoing_compiler(tmp_path: Path, *, fail: str = "") -> Path:
    """A stand-in $CXX that prints its arguments; it fails for sources matching `fail`."""
    fake = tmp_path / "cxx"
    fake.write_text('#!/bin/sh\necho "CXX $*"\n'
                    + (f'case "$*" in *{fail}*) exit 1;; esac\n' if fail else "")
                    + "exit 0\n")
    fake.chmod(0o755)
    return fake


def run_step(step: tuple[str, ...], cwd: Path, cxx: Path, **values: str) -> list[str]:
    argv = [a.format(**values) for a in step]
    proc = subprocess.run(argv, cwd=cwd, env={**os.environ, "CXX": str(cxx)},
                          capture_output=True, text=True, check=False)
    return [line for line in proc.stdout.splitlines() if line.startswith("CXX ")] + [
        f"exit {proc.returncode}"]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_taglibs_tests_find_cppunit_built_in_deps_without_cppunit_config(
    tmp_path: Path,
) -> None:
    tree = cached_tree("taglib")
    recipe = RECIPES["taglib"]
    assert recipe.helpers == ("cppunit",) and "cppunit" not in RECIPES  # never modules
    (build,) = [s for s in recipe.extra if "{dep_cppunit}" in s[-1]]
    assert f"{DEPS_DIR}/cppunit" in build[-1] and "--disable-shared" in build[-1]
    # Built from regenerated autotools files: with the tarball's, make stops at "version
    # mismatch" (it wants to rerun automake 1.16.1 after Debian's patches).
    assert build[-1].index("autoreconf -fi") < build[-1].index("./configure")
    (configure,) = [s for s in recipe.extra if s[:2] == ("cmake", "-S")]
    assert "-DBUILD_TESTING=ON" in configure
    cppunit = [a.format(src=str(tmp_path)) for a in configure if a.startswith("-DCPPUNIT_")]
    assert all(f"={tmp_path}/{DEPS_DIR}/cppunit/" in a for a in cppunit[:2])

    # taglib's own FindCppUnit, given what the recipe gives it, and no cppunit-config.
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(probe NONE)\n"
        f'list(APPEND CMAKE_MODULE_PATH "{tree}/cmake/modules")\n'
        'find_package(CppUnit)\nmessage(STATUS "found: ${CppUnit_FOUND}")\n')

    def found(options: list[str]) -> bool:
        build_dir = tmp_path / f"b{len(options)}"
        proc = subprocess.run(["cmake", "-S", str(probe), "-B", str(build_dir), *options],
                              capture_output=True, text=True, check=False)
        return proc.returncode == 0 and "found: TRUE" in proc.stdout

    assert found(cppunit)
    # Without the version, its version check fails ("CppUnit version is too old: found
    # installed"): it asks cppunit-config for the version, which only an install has.
    assert not found([a for a in cppunit if not a.startswith("-DCPPUNIT_INSTALLED_VERSION")])


def test_gmp_builds_its_cxx_wrapper_and_its_tests_without_running_them() -> None:
    tree = cached_tree("gmp")
    recipe = RECIPES["gmp"]
    configure = next(s for s in recipe.steps if s[0] == "./configure")
    assert "--enable-cxx" in configure and "--disable-cxx" not in configure
    (libtests, cxx_tests) = recipe.extra
    assert libtests[-2:] == ("tests", "libtests.la")
    assert cxx_tests[-3:] == ("tests/cxx", "check", "TESTS=")
    # `TESTS=` empties the list `make check` runs, not the programs it builds: they are
    # check_PROGRAMS, each a C++ source of the tarball.
    text = (tree / "tests" / "cxx" / "Makefile.am").read_text()
    assert "TESTS = $(check_PROGRAMS)" in text
    programs = text.split("check_PROGRAMS =")[1].split("\n\n")[0].replace("\\", " ").split()
    assert len(programs) >= 20
    assert all((tree / "tests" / "cxx" / f"{p}.cc").is_file() for p in programs)


def test_pcre3_builds_the_cxx_wrapper_and_its_unit_tests() -> None:
    tree = cached_tree("pcre3")
    recipe = RECIPES["pcre3"]
    configure = next(s for s in recipe.steps if s[0] == "./configure")
    assert "--enable-cpp" in configure
    (wrapper, extra) = recipe.extra  # best effort: the C library stands without them
    assert wrapper[-1] == "libpcrecpp.la"
    text = (tree / "Makefile.am").read_text()
    cpp_part = text.split("if WITH_PCRE_CPP\n\nlib_LTLIBRARIES += libpcrecpp.la")[1]
    cpp_part = cpp_part.split("endif # WITH_PCRE_CPP")[0]
    tests = re.findall(r"^noinst_PROGRAMS \+= (\S+)$", cpp_part, re.M)
    assert sorted(extra[2:]) == sorted(tests) and len(tests) == 3


def test_libconfig_builds_its_cxx_examples() -> None:
    tree = cached_tree("libconfig")
    recipe = RECIPES["libconfig"]
    assert "--enable-examples" in next(s for s in recipe.steps if s[0] == "./configure")
    (extra,) = recipe.extra
    assert extra[-2:] == ("-C", "examples/c++")
    programs = (tree / "examples" / "c++" / "Makefile.am").read_text()
    assert "noinst_PROGRAMS = example1 example2 example3 example4" in programs


def test_compile_each_compiles_every_source_on_its_own_at_oz(tmp_path: Path) -> None:
    step = compile_each(("a/x.cc", "y.cpp"), "-I{dep_pkg}/include", out_dir="out")
    compiles = run_step(step, tmp_path, echoing_compiler(tmp_path, fail="x.cc"), dep_pkg="P")
    # Not fatal: a source that does not compile is left out, the others are compiled.
    assert compiles[-1] == "exit 0"
    assert [c.split()[1:] for c in compiles[:-1]] == [
        [OPT_LEVEL, "-DNDEBUG", "-IP/include", "-c", "a/x.cc", "-o", "out/a/x.o"],
        [OPT_LEVEL, "-DNDEBUG", "-IP/include", "-c", "y.cpp", "-o", "out/y.o"]]
    assert (tmp_path / "out" / "a").is_dir()  # each object's directory is made
    # Fatal: the first source that does not compile fails the step.
    fatal = compile_each(("a/x.cc", "y.cpp"), "", fatal=True)
    compiles = run_step(fatal, tmp_path, echoing_compiler(tmp_path, fail="x.cc"))
    assert compiles[-1] == "exit 1" and len(compiles) == 2
    assert compiles[0].split()[-1] == "a/x.o"


def test_woff2_compiles_every_source_of_its_src_dir_that_does_not_need_brotli() -> None:
    tree = cached_tree("woff2")
    listed = sorted(p.relative_to(tree).as_posix() for p in (tree / "src").glob("*.cc"))
    assert sorted(_WOFF2_CORE + _WOFF2_MORE + _WOFF2_NEED_BROTLI) == listed
    for source in _WOFF2_NEED_BROTLI:
        assert "#include <brotli/" in (tree / source).read_text()
    assert not any("brotli" in (tree / s).read_text() for s in _WOFF2_CORE + _WOFF2_MORE)
    recipe = RECIPES["woff2"]
    # The font-table code is the library: a source of it that fails fails the package.
    assert recipe.steps == (compile_each(_WOFF2_CORE, _WOFF2_FLAGS, fatal=True),)
    assert recipe.extra == (compile_each(_WOFF2_MORE, _WOFF2_FLAGS),)


@pytest.mark.parametrize(("package", "step"), [
    ("tinyobjloader", _TINYOBJ_EXAMPLES), ("snappy", _SNAPPY_MORE),
    ("spdlog", _SPDLOG_BENCH), ("flatbuffers", _FLATBUFFERS_MORE)])
def test_sources_compiled_on_their_own_are_in_the_package_and_its_build(
    package: str, step: tuple[str, ...]
) -> None:
    tree = cached_tree(package)
    recipe = RECIPES[package]
    assert step in recipe.extra  # best effort
    sources = re.findall(r"; c (\S+) ", step[-1])
    assert sources and all((tree / s).is_file() for s in sources)
    # Every package whose headers the flags name is one the recipe fetches.
    placeholders = set(re.findall(r"\{(dep_\w+)\}", step[-1]))
    assert placeholders <= {f"dep_{d}" for d in (*recipe.deps, *recipe.headers)}


def test_tinyobjloaders_tester_is_built_by_its_cmake_tests() -> None:
    tree = cached_tree("tinyobjloader")
    configure = RECIPES["tinyobjloader"].extra[0]
    assert configure[-1] == "-DBUILD_TESTING=ON"
    assert "add_executable(tester tester.cc)" in (tree / "tests" / "CMakeLists.txt").read_text()


def test_flac_builds_its_cxx_examples_and_tests() -> None:
    tree = cached_tree("flac")
    configure, build = RECIPES["flac"].extra
    assert "-DBUILD_EXAMPLES=ON" in configure and "-DBUILD_TESTING=ON" in configure
    targets = build[build.index("--target") + 1:build.index("--")]
    cmake_text = "".join(p.read_text() for p in tree.rglob("CMakeLists.txt"))
    assert all(f"add_executable({t}" in cmake_text for t in targets)


def test_harfbuzz_builds_the_fuzz_targets_meson_builds(tmp_path: Path) -> None:
    tree = cached_tree("harfbuzz")
    shutil.copy(tree / "CMakeLists.txt", tmp_path)
    (append,) = [s for s in RECIPES["harfbuzz"].steps if "mlgo-hb-tests" in s[-1]]
    subprocess.run([a.format() for a in append], cwd=tmp_path, check=True)
    text = (tmp_path / "CMakeLists.txt").read_text()
    fuzzers = text.split("foreach (name ")[-1].split(")")[0].split()
    meson = (tree / "test" / "fuzzing" / "meson.build").read_text()
    default = meson.split("tests = [")[1].split("]")[0]
    assert sorted(fuzzers) == sorted(re.findall(r"'([\w-]+)\.cc'", default))
    assert all((tree / "test" / "fuzzing" / f"{f}.cc").is_file() for f in fuzzers)
    assert "test/fuzzing/main.cc" in text
