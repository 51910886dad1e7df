"""Recipes of single Debian packages: each check runs the recipe's own step or reads the
cached source package it builds, so a recipe that no longer fits its package fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pymlgo.corpus.debian import BUILD_DIR, DEPS_DIR, OPT_LEVEL, RECIPES
from pymlgo.corpus.debian_recipes import _WOFF2_SOURCES

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
    make = next(s for s in recipe.steps if s[0] == "make")
    assert "--enable-cpp" in configure and "libpcrecpp.la" in make
    text = (tree / "Makefile.am").read_text()
    cpp_part = text.split("if WITH_PCRE_CPP\n\nlib_LTLIBRARIES += libpcrecpp.la")[1]
    cpp_part = cpp_part.split("endif # WITH_PCRE_CPP")[0]
    tests = re.findall(r"^noinst_PROGRAMS \+= (\S+)$", cpp_part, re.M)
    (extra,) = recipe.extra
    assert sorted(extra[2:]) == sorted(tests) and len(tests) == 3


def test_libconfig_builds_its_cxx_examples() -> None:
    tree = cached_tree("libconfig")
    recipe = RECIPES["libconfig"]
    assert "--enable-examples" in next(s for s in recipe.steps if s[0] == "./configure")
    (extra,) = recipe.extra
    assert extra[-2:] == ("-C", "examples/c++")
    programs = (tree / "examples" / "c++" / "Makefile.am").read_text()
    assert "noinst_PROGRAMS = example1 example2 example3 example4" in programs


def test_woff2_compiles_every_source_and_stops_at_the_first_that_fails(
    tmp_path: Path,
) -> None:
    tree = cached_tree("woff2")
    assert sorted(_WOFF2_SOURCES) == sorted(p.stem for p in (tree / "src").glob("*.cc"))
    recipe = RECIPES["woff2"]
    assert recipe.headers == ("brotli",) and "brotli" not in RECIPES
    (step,) = recipe.steps
    compiles = run_step(step, tmp_path, echoing_compiler(tmp_path), dep_brotli="B")
    assert compiles[-1] == "exit 0" and len(compiles) == len(_WOFF2_SOURCES) + 1
    first = compiles[0].split()
    assert OPT_LEVEL in first and "-IB/c/include" in first
    assert first[-3:] == ["src/font.cc", "-o", "src/font.o"]
    # One source that does not compile fails the package (they are its library).
    failing = run_step(step, tmp_path, echoing_compiler(tmp_path, fail="woff2_enc.cc"),
                       dep_brotli="B")
    assert failing[-1] == "exit 1" and failing[-2].endswith("src/woff2_enc.o")


def test_woff2_finds_brotlis_headers_in_its_source_package() -> None:
    tree = cached_tree("brotli")
    for header in ("encode.h", "decode.h"):
        assert (tree / "c" / "include" / "brotli" / header).is_file()


def test_tinyobjloaders_examples_are_compiled_one_by_one_and_may_fail(tmp_path: Path) -> None:
    tree = cached_tree("tinyobjloader")
    shutil.copytree(tree / "examples", tmp_path / "examples")
    recipe = RECIPES["tinyobjloader"]
    step = recipe.extra[-1]
    out = run_step(step, tmp_path, echoing_compiler(tmp_path, fail="callback_api"))
    assert out[-1] == "exit 0"  # a failing example is left out, not fatal
    assert [c.split()[-1] for c in out[:-1]] == [
        f"{BUILD_DIR}/examples/callback_api/main.o", f"{BUILD_DIR}/examples/skin_weight/main.o"]
    assert all((tmp_path / BUILD_DIR / "examples" / e).is_dir()
               for e in ("callback_api", "skin_weight"))
    configure = recipe.extra[0]
    assert configure[-1] == "-DBUILD_TESTING=ON"
    assert "if(BUILD_TESTING)" in (tree / "tests" / "CMakeLists.txt").read_text()


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
