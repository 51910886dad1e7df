"""`mlgo corpus debian`: Debian source packages become per-package sub-corpora, combined."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pymlgo.corpus.command import parse_cmd
from pymlgo.corpus.debian import (
    BUILD_DIR,
    DEFAULT_ORDER,
    INFO_FILE,
    OPT_LEVEL,
    RECIPES,
    DebianConfig,
    DebianError,
    Recipe,
    build_debian_corpora,
    cmake,
    fetch_source,
    parse_package_spec,
    source_version,
)
from pymlgo.corpus.format import load_corpus

# The training allowlist: these and only these packages may be built into the corpus.
ALLOWED_C = {
    "zlib", "libpng1.6", "expat", "pcre2", "pcre3", "libyaml", "cjson", "jansson", "giflib",
    "libwebp", "libjpeg-turbo", "libxml2", "libxslt", "openssl", "curl", "xz-utils",
    "libsodium", "jq", "libonig", "libuv1", "libevent", "nghttp2", "c-ares", "tiff",
    "freetype", "libarchive", "lmdb", "libgit2", "cmark", "pixman", "libffi", "flac", "opus",
    "libogg", "libvorbis", "speex", "libsndfile", "lzo2", "libssh2", "libzip", "json-c",
    "libconfig", "libtasn1-6", "nettle", "gmp", "mpfr4", "libunistring", "libidn2",
}
ALLOWED_CXX = {
    "fmtlib", "googletest", "snappy", "leveldb", "protobuf", "re2", "abseil",
    "double-conversion", "gflags", "google-glog", "benchmark", "flatbuffers", "capnproto",
    "spdlog", "zeromq3", "ninja-build", "taglib", "harfbuzz", "graphite2", "woff2", "openexr",
    "libebml", "libmatroska", "tinyobjloader", "cppcheck", "ccache",
}

# A tiny "source package": a library of two units, a test program that must not be built,
# and a header it takes from a dependency's source tree.
TINY = {
    "debian/control": "Source: tiny\n",
    "Makefile": "OBJS = src/add.o src/mul.o\n"
                "libtiny.a: $(OBJS)\n\tar rcs $@ $(OBJS)\n"
                "src/%.o: src/%.c\n\t$(CC) $(CFLAGS) -I$(DEP) -c $< -o $@\n"
                "check: tests/t.o\n",
    "src/add.c": '#include "dep.h"\nint tiny_add(int a, int b) { return a + b + DEP_BIAS; }\n',
    "src/mul.c": "static int sq(int x) { return x * x; }\n"
                 "int tiny_mul(int a, int b) { return a * b + sq(a); }\n",
    "tests/t.c": "int main(void) { return 0; }\n",
}
DEP = {"debian/control": "Source: dep\n", "dep.h": "#define DEP_BIAS 1\n"}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def tiny_recipes() -> dict[str, Recipe]:
    return {
        "tiny": Recipe("tiny", "c", (("make", "-j{jobs}", "DEP={dep_dep}", "libtiny.a"),),
                       deps=("dep",)),
        "broken": Recipe("broken", "c", (("make", "no-such-target"),)),
    }


def c_library(src_cache: Path, name: str, sources: dict[str, str]) -> Recipe:
    """A one-directory source package NAME-1.0 in `src_cache` whose Makefile archives its C
    `sources` into libNAME.a, and the recipe that builds it."""
    objects = " ".join(f.removesuffix(".c") + ".o" for f in sources)
    write_tree(src_cache / name / f"{name}-1.0", {
        "debian/control": "",
        "Makefile": f"lib{name}.a: {objects}\n\tar rcs $@ $^\n"
                    "%.o: %.c\n\t$(CC) $(CFLAGS) -c $< -o $@\n",
        **sources})
    return Recipe(name, "c", (("make", f"lib{name}.a"),))


def plain_config(out: Path, src_cache: Path, tmp_path: Path) -> DebianConfig:
    return DebianConfig(output_dir=out, src_cache=src_cache, build_root=tmp_path / "build",
                        progress=False)


@pytest.fixture()
def src_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "src"
    write_tree(cache / "tiny" / "tiny-1.0", TINY)
    write_tree(cache / "dep" / "dep-2.0", DEP)
    write_tree(cache / "broken" / "broken-0.1", {"debian/control": "", "Makefile": "all:\n"})
    return cache


def test_recipes_cover_exactly_the_allowed_training_packages() -> None:
    assert set(RECIPES) == ALLOWED_C | ALLOWED_CXX
    assert set(DEFAULT_ORDER) == set(RECIPES) and len(DEFAULT_ORDER) == len(RECIPES)
    assert {p for p, r in RECIPES.items() if r.language == "c++"} == ALLOWED_CXX
    for recipe in RECIPES.values():
        assert set(recipe.deps) <= set(RECIPES)
        assert not set(recipe.headers) & set(RECIPES)  # headers only from off the list
        assert not set(recipe.helpers) & set(RECIPES)  # as are helper builds
        flat = [a for step in recipe.steps for a in step]
        # Every recipe builds at -Oz: through CMake's MinSizeRel flags, or CFLAGS for the
        # configure/make ones (set by build_package, or by the recipe's own env).
        assert any(OPT_LEVEL in a for a in flat) or recipe.steps[0][0] != "cmake"
        if recipe.steps[0][0] == "cmake":
            assert "-DBUILD_SHARED_LIBS=OFF" in flat and "-DBUILD_TESTING=OFF" in flat


def test_recipe_key_changes_with_the_recipe() -> None:
    a = Recipe("x", "c", (("make",),))
    assert a.key() == Recipe("x", "c", (("make",),)).key()
    assert a.key() != Recipe("x", "c", (("make", "-j2"),)).key()
    assert a.key() != Recipe("x", "c", (("make",),), headers=("h",)).key()
    assert a.key() != Recipe("x", "c", (("make",),), helpers=("h",)).key()


def test_a_package_becomes_a_sub_corpus_named_by_the_package(
    src_cache: Path, tmp_path: Path
) -> None:
    out = tmp_path / "corpora"
    config = DebianConfig(output_dir=out, jobs=2, src_cache=src_cache,
                          build_root=tmp_path / "build", progress=False)
    results = build_debian_corpora(["broken", "tiny"], config, recipes=tiny_recipes(),
                                   fetch=lambda pkg, cache: fetch_source(pkg, cache))
    # The failing package is reported and the next one still builds.
    assert [(r.package, r.status) for r in results] == [("broken", "failed"), ("tiny", "built")]
    assert "no-such-target" in results[0].error
    assert results[1].modules == 2

    corpus = load_corpus(out)  # the combined corpus
    assert [m.name for m in corpus.modules] == ["tiny/src/add", "tiny/src/mul"]
    assert corpus.packages == ("tiny",)  # the test program was not built
    sub = load_corpus(out / "tiny")
    for module in sub.modules:
        cmd = parse_cmd((out / "tiny" / f"{module.name}.cmd").read_bytes())
        assert cmd[0] == "-cc1"
        assert cmd[cmd.index("-target-cpu") + 1] == "x86-64"  # baseline, not the host's CPU
        assert "-Os" in cmd  # what the driver passes to cc1 for -Oz
        assert module.read_bitcode()[:4] == b"BC\xc0\xde"
    info = json.loads((out / "tiny" / INFO_FILE).read_text())
    assert info["modules"] == 2 and info["recipe"] == tiny_recipes()["tiny"].key()
    assert (out / "_logs" / "broken.log").is_file()
    assert not (tmp_path / "build" / "tiny").exists()  # the scratch copy is gone

    # Built packages are skipped on the next run; a changed recipe rebuilds.
    again = build_debian_corpora(["tiny"], config, recipes=tiny_recipes())
    assert [(r.package, r.status, r.modules) for r in again] == [("tiny", "cached", 2)]
    changed = {"tiny": Recipe("tiny", "c", (("make", "-j1", "DEP={dep_dep}", "libtiny.a"),),
                              deps=("dep",))}
    assert build_debian_corpora(["tiny"], config, recipes=changed)[0].status == "built"


def test_a_cmake_recipe_builds_only_its_library_at_oz(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "src" / "cm" / "cm-1.0", {
        "debian/control": "",
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.10)\nproject(cm C)\n"
                          "add_library(cm lib.c)\nadd_executable(cmtest t.c)\n",
        "lib.c": "int cm_f(int x) { return x * 3; }\n",
        "t.c": "int main(void) { return 0; }\n",
    })
    assert tree.is_dir()
    out = tmp_path / "corpora"
    recipes = {"cm": Recipe("cm", "c", cmake(targets=("cm",)))}
    config = DebianConfig(output_dir=out, src_cache=tmp_path / "src",
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["cm"], config, recipes=recipes,
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built", res.error
    corpus = load_corpus(out)
    assert [m.name for m in corpus.modules] == [f"cm/{BUILD_DIR}/CMakeFiles/cm.dir/lib.c"]
    cmd = parse_cmd((out / "cm" / f"{BUILD_DIR}/CMakeFiles/cm.dir/lib.c.cmd").read_bytes())
    assert "-Os" in cmd and "NDEBUG" in cmd


@pytest.mark.skipif(not (Path.home() / ".cache/pymlgo/src/zlib").is_dir(),
                    reason="needs the cached zlib source package (apt-get source zlib)")
def test_the_real_zlib_recipe_builds_zlib_library(tmp_path: Path) -> None:
    out = tmp_path / "corpora"
    config = DebianConfig(output_dir=out, src_cache=Path.home() / ".cache/pymlgo/src",
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["zlib"], config)
    assert res.status == "built", res.error
    names = {m.name for m in load_corpus(out).modules}
    assert {"zlib/deflate", "zlib/inflate", "zlib/adler32"} <= names
    assert all(n.startswith("zlib/") and "example" not in n for n in names)


def test_without_apt_get_or_deb_src_the_error_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(DebianError, match="apt-get is not available"):
        fetch_source("zlib", tmp_path / "src")
    # An apt-get whose sources have no deb-src line answers like this one.
    for name, body in (
        ("apt-get", "echo \"E: You must put some 'deb-src' URIs in your sources.list\" >&2\n"
                    "exit 100\n"),
        ("dpkg-source", "exit 0\n"),
    ):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    if shutil.which("apt-get") != str(bin_dir / "apt-get"):
        pytest.skip("cannot put a stand-in apt-get first in PATH")
    with pytest.raises(DebianError, match="deb-src http://deb.debian.org"):
        fetch_source("zlib", tmp_path / "src")
    assert not any((tmp_path / "src").iterdir())  # nothing half-fetched is left


def test_cli_rejects_a_package_without_recipe(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.corpus", "debian", "no-such-package",
         "--output_dir", str(tmp_path / "c")],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 1
    assert "no recipe for no-such-package" in proc.stderr


def stand_in_apt_get(bin_dir: Path, calls: Path, *, fail_without_version: bool) -> None:
    """An `apt-get source` that records its argument and unpacks a one-file tree whose
    changelog names the version asked for (or 2.0-1); it can refuse the newest version, as
    a mirror that lacks its files does."""
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$2" >> "{calls}"\n'
        'case "$2" in *=*) v="${2#*=}" ;; *) v=2.0-1 ;; esac\n'
        + ('case "$2" in *=*) ;; *) echo "E: Failed to fetch x.dsc  404  Not Found" >&2; '
           "exit 100 ;; esac\n" if fail_without_version else "")
        + 'mkdir -p "tiny-${v%-*}/debian"\n'
        'echo "tiny (${v}) bookworm; urgency=medium" > "tiny-${v%-*}/debian/changelog"\n')
    (bin_dir / "apt-get").chmod(0o755)
    (bin_dir / "dpkg-source").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "dpkg-source").chmod(0o755)


def test_a_package_version_can_be_asked_for_and_is_cached_apart(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    stand_in_apt_get(tmp_path / "bin", calls, fail_without_version=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "src"
    # the newest version's files are missing: the error says how to ask for another one
    with pytest.raises(DebianError, match=r"mlgo corpus debian tiny=VERSION"):
        fetch_source("tiny", cache, progress=False)
    tree = fetch_source("tiny", cache, version="1.5-2+deb12u1", progress=False)
    assert tree.parent == cache / "tiny=1.5-2+deb12u1"
    assert source_version(tree) == "1.5-2+deb12u1"
    assert fetch_source("tiny", cache, version="1.5-2+deb12u1", progress=False) == tree
    assert calls.read_text().split() == ["tiny", "tiny=1.5-2+deb12u1"]  # then cached


def test_package_specs_name_a_package_and_optionally_a_version():
    assert parse_package_spec("openssl") == ("openssl", None)
    assert parse_package_spec("openssl=3.0.17-1~deb12u2") == ("openssl", "3.0.17-1~deb12u2")
    assert parse_package_spec("libpng1.6=1.6.39-2+deb12u5") == ("libpng1.6", "1.6.39-2+deb12u5")
    for bad in ("openssl=", "=1.0", "zlib=1.0;rm -rf /", "zlib=1 2"):
        with pytest.raises(DebianError, match="PKG=VERSION"):
            parse_package_spec(bad)


def test_the_command_line_passes_a_version_to_apt_get(tmp_path):
    calls = tmp_path / "calls"
    stand_in_apt_get(tmp_path / "bin", calls, fail_without_version=True)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "MLGO_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.corpus", "debian", "zlib=1.2.13.dfsg-1",
         "--output_dir", str(tmp_path / "c"), "--no_progress"],
        capture_output=True, text=True, check=False, env=env,
    )
    # The stand-in tree has nothing to build, so the build fails; the fetch was versioned.
    assert calls.read_text().split() == ["zlib=1.2.13.dfsg-1"]
    assert proc.returncode == 1
    bad = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.corpus", "debian", "zlib=",
         "--output_dir", str(tmp_path / "c")], capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "PKG=VERSION" in bad.stderr


def test_a_package_that_fails_to_compile_does_not_stop_the_others(
    src_cache: Path, tmp_path: Path
) -> None:
    """With the real compiler: a compile error half-way through one package's build is
    reported (step, log) and the packages after it still build; the summary says so."""
    recipes = {**tiny_recipes(), "bad": c_library(src_cache, "bad", {
        "ok.c": "int ok(int x) { return x + 1; }\n",
        "broken.c": "int broken(int x) { return x + ; }\n"})}
    out = tmp_path / "corpora"
    config = plain_config(out, src_cache, tmp_path)
    results = build_debian_corpora(["bad", "tiny"], config, recipes=recipes,
                                   fetch=lambda pkg, cache: fetch_source(pkg, cache))
    bad, tiny = results
    assert (bad.status, bad.step, tiny.status, tiny.modules) == ("failed", "build", "built", 2)
    assert "expected expression" in Path(bad.log).read_text()  # clang's error, in the log
    assert "broken.c" in bad.error
    assert [m.name for m in load_corpus(out).modules] == ["tiny/src/add", "tiny/src/mul"]
    assert not (out / "bad").exists() and not (out / "_staging").exists()
    summary = json.loads((out / "debian_summary.json").read_text())
    assert summary["failed"] == {"bad": {"step": "build", "log": bad.log}}
    assert summary["packages"]["tiny"]["modules"] == 2
    assert summary["modules"] == 2 and summary["languages"] == {"c": 2}
    assert summary["disk_bytes"] > 0


def test_a_run_that_adds_packages_keeps_the_earlier_ones_in_the_summary(
    src_cache: Path, tmp_path: Path
) -> None:
    """The summary describes the whole directory, as the combined corpus does: a second run
    building other packages counts the first run's as cached instead of dropping them."""
    recipes = {**tiny_recipes(), "other": c_library(src_cache, "other", {
        "o.c": "int o(int x) { return x * 3; }\n"})}
    out = tmp_path / "corpora"
    config = plain_config(out, src_cache, tmp_path)
    fetch = lambda pkg, cache: fetch_source(pkg, cache)  # noqa: E731
    build_debian_corpora(["tiny"], config, recipes=recipes, fetch=fetch)
    build_debian_corpora(["other"], config, recipes=recipes, fetch=fetch)
    summary = json.loads((out / "debian_summary.json").read_text())
    assert {k: (v["status"], v["modules"]) for k, v in summary["packages"].items()} == {
        "other": ("built", 1), "tiny": ("cached", 2)}
    assert summary["modules"] == 3 == len(load_corpus(out).modules)
    assert summary["built"] == ["other"] and summary["cached"] == ["tiny"]


def test_a_package_whose_captured_flags_would_be_refused_at_load_fails_at_build(
    src_cache: Path, tmp_path: Path
) -> None:
    """With the real compiler: a build whose commands carry a flag the corpus loader refuses
    (here -ftime-trace, which writes a file) fails as step "validate", naming the flag,
    instead of writing a sub-corpus that every later snapshot would skip."""
    write_tree(src_cache / "traced" / "traced-1.0", {
        "debian/control": "",
        "Makefile": "libt.a: t.o\n\tar rcs $@ $^\n"
                    "%.o: %.c\n\t$(CC) $(CFLAGS) -ftime-trace -c $< -o $@\n",
        "t.c": "int t(int x) { return x + 1; }\n",
    })
    recipes = {**tiny_recipes(), "traced": Recipe("traced", "c", (("make", "libt.a"),))}
    out = tmp_path / "corpora"
    config = plain_config(out, src_cache, tmp_path)
    traced, tiny = build_debian_corpora(["traced", "tiny"], config, recipes=recipes,
                                        fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert (traced.status, traced.step, tiny.status) == ("failed", "validate", "built")
    assert "-ftime-trace" in traced.error
    assert not (out / "traced").exists()


def _filler(prefix: str, size: int) -> str:
    """C source of about `size` bytes: many small distinct functions."""
    lines, i = [], 0
    while sum(map(len, lines)) < size:
        lines.append(f"int {prefix}_f{i}(int x) {{ return x * {i + 3} + (x >> {i % 7}); }}\n")
        i += 1
    return "".join(lines)


def _build_u(tmp_path: Path, files: dict[str, str]) -> Any:
    """Package `u` (`make libu.a` over `files`) built into tmp_path/corpora, unity included."""
    write_tree(tmp_path / "src" / "u" / "u-1.0", files)
    config = DebianConfig(output_dir=tmp_path / "corpora", src_cache=tmp_path / "src",
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["u"], config,
                                  recipes={"u": Recipe("u", "c", (("make", "libu.a"),))},
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built", res.error
    return res


def test_unity_modules_belong_to_their_package_and_skip_sources_that_clash(
    tmp_path: Path
) -> None:
    # a.c and b.c both define a static `helper`: they cannot share a unity module.
    helper = "static int helper(int x) { return x; }\n"
    files = {"debian/control": "",
             "Makefile": "OBJS = a.o b.o c.o d.o\nlibu.a: $(OBJS)\n\tar rcs $@ $(OBJS)\n"
                         "%.o: %.c\n\t$(CC) $(CFLAGS) -c $< -o $@\n"}
    for name in "abcd":
        files[f"{name}.c"] = (helper if name in "ab" else "") + _filler(name, 26_000)
    out = tmp_path / "corpora"
    res = _build_u(tmp_path, files)
    names = [m.name for m in load_corpus(out).modules]
    unity = [n for n in names if n.startswith("u/_unity/")]
    assert sorted(set(names) - set(unity)) == ["u/a", "u/b", "u/c", "u/d"]
    assert len(unity) == 1 and res.unity_modules == 1
    text = (out / "u" / "compile_commands.json").read_text()
    assert "/_unity/" not in text  # the package's own compiles only
    cmd = parse_cmd((out / f"{unity[0]}.cmd").read_bytes())
    assert cmd[cmd.index("-target-cpu") + 1] == "x86-64" and "-Os" in cmd
    info = json.loads((out / "u" / INFO_FILE).read_text())
    assert info["unity"]["modules"] == 1 and info["unity"]["sources"] == 3  # b.c, c.c, d.c
    # Without unity modules, only the package's own.
    config2 = DebianConfig(output_dir=tmp_path / "plain", src_cache=tmp_path / "src",
                           build_root=tmp_path / "build", progress=False, unity=False)
    (res2,) = build_debian_corpora(["u"], config2,
                                   recipes={"u": Recipe("u", "c", (("make", "libu.a"),))},
                                   fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert (res2.modules, res2.unity_modules) == (4, 0)


def test_a_missing_build_tool_is_named_before_the_build(src_cache: Path, tmp_path: Path) -> None:
    recipes = {"tiny": Recipe("tiny", "c", (("no-such-build-tool", "x"),))}
    config = DebianConfig(output_dir=tmp_path / "c", src_cache=src_cache,
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["tiny"], config, recipes=recipes,
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert (res.status, res.step) == ("failed", "tools")
    assert "no-such-build-tool" in res.error and "install" in res.error


def test_optional_steps_may_fail_and_are_recorded(src_cache: Path, tmp_path: Path) -> None:
    recipes = {"tiny": Recipe("tiny", "c", (("make", "DEP={dep_dep}", "libtiny.a"),),
                              deps=("dep",), extra=(("make", "no-such-target"),))}
    config = DebianConfig(output_dir=tmp_path / "c", src_cache=src_cache,
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["tiny"], config, recipes=recipes,
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built" and res.modules == 2
    info = json.loads((tmp_path / "c" / "tiny" / INFO_FILE).read_text())
    assert info["optional_steps_failed"] == ["make no-such-target"]


def test_a_helper_package_is_built_in_deps_and_none_of_its_code_is_a_module(
    src_cache: Path, tmp_path: Path
) -> None:
    # A helper (a package off the allowlist the build needs compiled, as openexr needs
    # Imath) is fetched like a dependency; what the recipe compiles of it in _deps/ is
    # not the package's code.
    write_tree(src_cache / "helper" / "helper-1.0", {
        "debian/control": "", "helper.c": "int helper_twice(int x) { return 2 * x; }\n"})
    recipes = {"tiny": Recipe("tiny", "c", (
        ("mkdir", "-p", "_deps"),
        ("sh", "-c", "$CC -Oz -c {dep_helper}/helper.c -o _deps/helper.o"),
        ("make", "DEP={dep_dep}", "libtiny.a")), deps=("dep",), helpers=("helper",))}
    config = DebianConfig(output_dir=tmp_path / "c", src_cache=src_cache,
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["tiny"], config, recipes=recipes,
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built", res.error  # the helper compiled (a failing step fails)
    assert "helper-1.0/helper.c" in (tmp_path / "c" / "_logs" / "tiny.log").read_text()
    assert sorted(m.name for m in load_corpus(tmp_path / "c").modules) == [
        "tiny/src/add", "tiny/src/mul"]  # ... and is not a module


@pytest.mark.skipif(not (Path.home() / ".cache/pymlgo/src/harfbuzz").is_dir(),
                    reason="needs the cached harfbuzz source package (apt-get source harfbuzz)")
def test_harfbuzz_compiles_each_source_instead_of_its_amalgamation(tmp_path: Path) -> None:
    (tree,) = (Path.home() / ".cache/pymlgo/src/harfbuzz").glob("harfbuzz-*")
    shutil.copy(tree / "CMakeLists.txt", tmp_path)
    (step,) = [s for s in RECIPES["harfbuzz"].steps if s[0] == "sed"]
    subprocess.run([a.format() for a in step], cwd=tmp_path, check=True)
    text = (tmp_path / "CMakeLists.txt").read_text()
    assert "src/harfbuzz.cc" not in text
    assert "set (project_sources ${HB_BASE_sources})" in text
    # The list it reads names the sources one by one, as harfbuzz.cc #includes them.
    listed = (tree / "src" / "Makefile.sources").read_text().split("HB_BASE_sources =")[1]
    amalgam = (tree / "src" / "harfbuzz.cc").read_text()
    sources = [w for w in listed.split("$(NULL)")[0].split() if w.endswith(".cc")]
    assert len(sources) > 40 and all(f'"{s}"' in amalgam for s in sources)

    # The test programs meson builds are appended as targets; each names a real source.
    (append,) = [s for s in RECIPES["harfbuzz"].steps if "mlgo-hb-tests" in s[-1]]
    subprocess.run([a.format() for a in append], cwd=tmp_path, check=True)
    text = (tmp_path / "CMakeLists.txt").read_text()
    names = text.split("foreach (source ")[-1].split(")")[0].split()
    assert len(names) == 25
    assert all((tree / "src" / f"{n}.cc").is_file() for n in names)
    assert "mlgo-hb-tests" in RECIPES["harfbuzz"].extra[0]  # best effort: may fail


@pytest.mark.skipif(not (Path.home() / ".cache/pymlgo/src/spdlog").is_dir(),
                    reason="needs the cached spdlog source package (apt-get source spdlog)")
def test_spdlogs_tests_include_the_catch_header_of_its_own_tarball(tmp_path: Path) -> None:
    (tree,) = (Path.home() / ".cache/pymlgo/src/spdlog").glob("spdlog-*")
    shutil.copytree(tree / "tests", tmp_path / "tests")
    (step,) = [s for s in RECIPES["spdlog"].extra if s[0] == "sed"]
    subprocess.run([a.format() for a in step], cwd=tmp_path, check=True)
    for name in ("includes.h", "main.cpp"):
        text = (tmp_path / "tests" / name).read_text()
        assert '#include "catch.hpp"' in text and "catch2/" not in text
    assert (tmp_path / "tests" / "catch.hpp").is_file()  # found beside the includer
    # main.cpp is Catch2's implementation, not spdlog's code: never a module.
    assert re.search(RECIPES["spdlog"].exclude,
                     f"{BUILD_DIR}/tests/CMakeFiles/spdlog-utests.dir/main.cpp.o")
    assert not re.search(RECIPES["spdlog"].exclude,
                         f"{BUILD_DIR}/tests/CMakeFiles/spdlog-utests.dir/test_misc.cpp.o")


@pytest.mark.skipif(not (Path.home() / ".cache/pymlgo/src/abseil").is_dir(),
                    reason="needs the cached abseil source package (apt-get source abseil)")
def test_abseils_benchmarks_are_compiled_one_by_one_and_may_fail(tmp_path: Path) -> None:
    (tree,) = (Path.home() / ".cache/pymlgo/src/abseil").glob("abseil-*")
    shutil.copytree(tree / "absl", tmp_path / "absl")
    (step,) = [s for s in RECIPES["abseil"].extra if "benchmark" in s[-1]]
    argv = [a.format(dep_benchmark="B", dep_googletest="G") for a in step]
    # A compiler that echoes its arguments and fails: every source is still tried.
    fake = tmp_path / "cxx"
    fake.write_text('#!/bin/sh\necho "$@"\nexit 1\n')
    fake.chmod(0o755)
    out = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "CXX": str(fake)},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    compiles = [line for line in out if line.startswith("-std=c++17")]
    assert len(compiles) >= 40 and len(compiles) == sum(
        line.startswith("not compiled: ") for line in out)
    first = compiles[0].split()
    assert "-Oz" in first and "B/include" in first and first[-4] == "-c"
    assert first[-1] == f"{BUILD_DIR}/benchmarks/absl/algorithm/equal_benchmark.o"


def test_cli_help_explains_all_and_unity() -> None:
    proc = subprocess.run([sys.executable, "-m", "pymlgo.cli.corpus", "debian", "--help"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    for word in ("--all", "--no_unity", "_unity", "debian_summary.json", "abseil", "autoconf"):
        assert word in proc.stdout


def test_a_source_compiled_twice_with_the_same_flags_is_one_module(tmp_path: Path) -> None:
    # A helper built into two test programs: two objects, identical bitcode.
    write_tree(tmp_path / "src" / "twice" / "twice-1.0", {
        "debian/control": "",
        "Makefile": "all: one/h.o two/h.o other.o\n"
                    "one/h.o two/h.o: h.c\n\tmkdir -p $(@D) && $(CC) $(CFLAGS) -c h.c -o $@\n"
                    "other.o: other.c\n\t$(CC) $(CFLAGS) -c other.c -o $@\n",
        "h.c": "int helper(int x) { return x * 2; }\n",
        "other.c": "int other(int x) { return x - 2; }\n",
    })
    config = DebianConfig(output_dir=tmp_path / "c", src_cache=tmp_path / "src",
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["twice"], config,
                                  recipes={"twice": Recipe("twice", "c", (("make",),))},
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built" and res.modules == 2
    assert [m.name for m in load_corpus(tmp_path / "c").modules] == ["twice/one/h",
                                                                       "twice/other"]
    info = json.loads((tmp_path / "c" / "twice" / INFO_FILE).read_text())
    assert info["duplicates_dropped"] == 1


def test_a_unity_module_with_too_much_code_is_split(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pymlgo.corpus import debian_unity

    files = {"debian/control": "",
             "Makefile": "OBJS = a.o b.o c.o d.o\nlibu.a: $(OBJS)\n\tar rcs $@ $(OBJS)\n"
                         "%.o: %.c\n\t$(CC) $(CFLAGS) -c $< -o $@\n"}
    for name in "abcd":
        files[f"{name}.c"] = _filler(name, 26_000)
    write_tree(tmp_path / "src" / "u" / "u-1.0", files)
    # Two sources' code fits, four do not: the batch of four becomes two modules of two.
    monkeypatch.setattr(debian_unity, "MIN_BATCH_BYTES", 1024)
    monkeypatch.setattr(debian_unity, "MAX_CODE_BYTES", 25_000)  # one source: ~8.4 KB
    config = DebianConfig(output_dir=tmp_path / "c", src_cache=tmp_path / "src",
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["u"], config,
                                  recipes={"u": Recipe("u", "c", (("make", "libu.a"),))},
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built", res.error
    assert res.unity_modules == 2


def test_two_unity_groups_in_one_output_directory_each_keep_their_module(
    tmp_path: Path
) -> None:
    # One directory compiled twice with other defines (openssl's providers): two groups of
    # sources with one output directory. A clash in the second group must not take the
    # first group's unity source with it (it did: both were named unity0).
    helper = "static int helper(int x) { return x; }\n"
    files = {"debian/control": "",
             "Makefile": "libu.a: a.o b.o c.o d.o e.o f.o\n\tar rcs $@ $^\n"
                         "a.o b.o: %.o: %.c\n\t$(CC) $(CFLAGS) -c $< -o $@\n"
                         "c.o d.o e.o f.o: %.o: %.c\n\t$(CC) $(CFLAGS) -DVARIANT=2 -c $< -o $@\n"}
    for name in "abcdef":
        files[f"{name}.c"] = (helper if name in "cd" else "") + _filler(name, 26_000)
    out = tmp_path / "corpora"
    res = _build_u(tmp_path, files)
    unity = sorted(m.name for m in load_corpus(out).modules if "/_unity/" in m.name)
    assert len(unity) == 2 and res.unity_modules == 2, unity
    assert len({n.rsplit("/", 1)[1] for n in unity}) == 2  # two names in one directory


@pytest.mark.skipif(shutil.which("perl") is None, reason="needs perl (a build tool of re2)")
def test_re2s_unicode_data_is_written_from_perls_database_in_the_files_re2_reads(
    tmp_path: Path,
) -> None:
    # Debian's re2 tarball lacks the generated tables; its recipe writes the Unicode data
    # files the generators read, from perl's own copy of the Unicode database.
    (perl,) = [s for s in RECIPES["re2"].steps if s[:2] == ("perl", "-e")]
    subprocess.run(["perl", "-e", perl[2].format(), str(tmp_path)], check=True)

    def rows(name: str) -> list[list[str]]:
        return [[f.strip() for f in line.split(";")]
                for line in (tmp_path / name).read_text().splitlines()]

    categories = rows("UnicodeData.txt")
    assert all(len(r) == 15 for r in categories)  # as many fields as the real file
    category = {r[0]: r[2] for r in categories}
    assert category["0041..005A"] == "Lu" and category["00AA"] == "Lo"
    assert "0378" not in category  # unassigned: not listed, as in the real file
    assert not set(category.values()) & {"Cn", ""}
    scripts = {r[0]: r[1] for r in rows("Scripts.txt")}
    assert scripts["0370..0373"] == "Greek"
    assert scripts["00AA"] == "Latin"  # one code point: no range
    assert "Anatolian_Hieroglyphs" in scripts.values()  # the long names, as Scripts.txt
    assert "Unknown" not in scripts.values()
    folds = {r[0]: r[1:3] for r in rows("CaseFolding.txt")}
    assert folds["0041"] == ["C", "0061"]
    assert folds["1E9E"] == ["C", "00DF"]  # the simple folding where a full one exists
    assert "00DF" not in folds  # only a full folding (to "ss"): re2 uses simple ones


def test_a_run_leaves_the_half_made_sub_corpora_of_other_packages_alone(
    src_cache: Path, tmp_path: Path
) -> None:
    # Another run, building another package into the same directory, stages it there.
    other = tmp_path / "c" / "_staging" / "other"
    other.mkdir(parents=True)
    (other / "module.bc").write_bytes(b"BC")
    config = DebianConfig(output_dir=tmp_path / "c", src_cache=src_cache,
                          build_root=tmp_path / "build", progress=False)
    (res,) = build_debian_corpora(["tiny"], config, recipes=tiny_recipes(),
                                  fetch=lambda pkg, cache: fetch_source(pkg, cache))
    assert res.status == "built"
    assert (other / "module.bc").read_bytes() == b"BC"
