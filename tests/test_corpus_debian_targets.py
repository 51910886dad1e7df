"""`mlgo corpus debian --target NAME`: Debian packages cross-built for another target with
the bundled toolchain (compiles, links and archives), cached and kept apart per target."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pymlgo.corpus.capture import DEFAULT_TARGET
from pymlgo.corpus.debian import (
    BUILD_DIR,
    INFO_FILE,
    RECIPES,
    SUMMARY_FILE,
    DebianConfig,
    PackageResult,
    Recipe,
    build_debian_corpora,
    build_key,
    cmake,
    fetch_source,
)
from pymlgo.corpus.debian_recipes import shell
from pymlgo.corpus.format import load_corpus
from pymlgo.corpus.targets import (
    HOST_TARGET,
    TARGETS,
    TargetError,
    hosted_alternative,
    named_target,
)
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.inlining import compile as inl
from pymlgo.toolchain.compiler import Compiler
from tests.test_corpus_debian import TINY, tiny_recipes, write_tree

SRC = Path.home() / ".cache/pymlgo/src"
AARCH64 = TARGETS["aarch64"]
EM_AARCH64 = 183
EM_X86_64 = 62


def e_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF", data[:16]
    return int.from_bytes(data[18:20], "little")


def archive_members(path: Path) -> dict[str, bytes]:
    """The members of a System V `ar` archive (`zig ar` writes GNU-style names)."""
    data = path.read_bytes()
    assert data[:8] == b"!<arch>\n"
    members: dict[str, bytes] = {}
    names = b""
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name, size = header[:16].decode().strip(), int(header[48:58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if name == "//":
            names = body
        elif name not in ("/", "/SYM64/"):
            if name.startswith("/") and name[1:].isdigit():
                start = int(name[1:])
                name = names[start:names.index(b"\n", start)].decode()
            members[name.rstrip("/")] = body
        pos += 60 + size + (size & 1)
    return members


# --- the target table --------------------------------------------------------------------


def test_the_demo_and_the_debian_builds_take_the_targets_of_one_table() -> None:
    import argparse

    from pymlgo.cli.corpus import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    for name in TARGETS:
        assert parser.parse_args(["corpus", "demo", "--target", name]).target == name
        assert parser.parse_args(["corpus", "debian", "zlib", "--output_dir", "o",
                                  "--target", name]).target == name
    for action in (["demo"], ["debian", "--output_dir", "o"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["corpus", *action, "--target", "sparc"])
    assert HOST_TARGET.triple == DEFAULT_TARGET and TARGETS["x86_64"] is HOST_TARGET


def test_every_target_has_its_own_name_and_a_triple_and_cpu() -> None:
    assert len({t.name for t in TARGETS.values()}) == len(TARGETS)
    assert len({(t.triple, t.cpu, t.flags) for t in TARGETS.values()}) == len(TARGETS)
    for name, target in TARGETS.items():
        assert named_target(name) is target
        assert target.describe().startswith(f"{target.triple} -mcpu={target.cpu}")
        assert target.as_json()["triple"] == target.triple


def test_the_bare_metal_cortex_m4_has_a_hosted_twin_with_the_same_cpu() -> None:
    bare, hosted = TARGETS["cortex-m4"], TARGETS["cortex-m4-musl"]
    assert bare.freestanding and not hosted.freestanding
    assert (hosted.triple, hosted.cpu) == ("thumb-linux-musleabi", "cortex_m4")
    assert hosted_alternative(bare) is hosted
    assert hosted_alternative(AARCH64) is None and hosted_alternative(hosted) is None
    # CMake knows 32-bit Arm as arm, whatever the instruction set
    assert hosted.cmake_processor == "arm" and AARCH64.cmake_processor == "aarch64"


def test_an_unknown_target_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(TargetError, match="x86_64, aarch64, .*cortex-m4-musl"):
        named_target("sparc")


def test_a_build_key_is_the_recipes_own_on_x86_64_and_differs_per_target() -> None:
    recipe = RECIPES["zlib"]
    assert build_key(recipe) == build_key(recipe, HOST_TARGET) == recipe.key()
    keys = {build_key(recipe, t) for t in TARGETS.values()}
    assert len(keys) == len(TARGETS)
    assert build_key(recipe, AARCH64) == build_key(RECIPES["zlib"], named_target("aarch64"))


def test_a_bare_metal_target_is_refused_pointing_at_its_hosted_twin(tmp_path: Path) -> None:
    config = DebianConfig(output_dir=tmp_path / "out", target=TARGETS["cortex-m4"],
                          progress=False)
    with pytest.raises(TargetError, match="no C library.*cortex-m4-musl"):
        build_debian_corpora(["zlib"], config)
    assert not (tmp_path / "out").exists()


# --- small real builds -------------------------------------------------------------------


def _config(tmp_path: Path, src: Path, target: str = "aarch64") -> DebianConfig:
    return DebianConfig(output_dir=tmp_path / "out", src_cache=src, target=TARGETS[target],
                        build_root=tmp_path / "build", progress=False)


def _local(pkg: str, cache: Path) -> Path:
    return fetch_source(pkg, cache, progress=False)


def test_a_recipe_that_cannot_cross_build_is_reported_and_the_next_one_builds(
        tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src / "tiny" / "tiny-1.0", TINY)
    write_tree(src / "dep" / "dep-2.0", {"debian/control": "", "dep.h": "#define DEP_BIAS 1\n"})
    recipes = {**tiny_recipes(),
               "x86only": Recipe("x86only", "c", (("make",),), cross="its Makefile says x86")}
    write_tree(src / "x86only" / "x86only-1", {"debian/control": "", "Makefile": "all:\n"})
    results = build_debian_corpora(["x86only", "tiny"], _config(tmp_path, src),
                                   recipes=recipes, fetch=_local)
    assert [(r.package, r.status, r.step) for r in results] == [
        ("x86only", "failed", "target"), ("tiny", "built", "")]
    assert "its Makefile says x86" in results[0].error
    for module in load_corpus(tmp_path / "out").modules:
        assert module.cmd[module.cmd.index("-triple") + 1].startswith("aarch64")


GEN = {
    "debian/control": "",
    "gen.c": '#include <stdio.h>\nint main(void) { for (int i = 0; i < 4; i++) '
             'printf("%d,", i * i); return 0; }\n',
    "lib.c": '#include "table.h"\nstatic const int squares[] = { TABLE };\n'
             "int square(int i) { return squares[i & 3]; }\n",
}
# A generator built with the build machine's compiler and run; then the library.
GEN_MAKEFILE = ("lib.o: lib.c table.h\n\t$(CC) $(CFLAGS) -c lib.c -o lib.o\n"
                "table.h: gen.c\n\t$({cc}) gen.c -o gen\n\t./gen > squares\n"
                "\techo \"#define TABLE $$(cat squares)\" > $@\n")


@pytest.mark.parametrize("cc", ["CC_FOR_BUILD", "CC"])
def test_a_program_the_build_runs_must_be_built_for_this_machine(cc: str, tmp_path: Path
                                                                  ) -> None:
    src = tmp_path / "src"
    write_tree(src / "gen" / "gen-1", {**GEN, "Makefile": GEN_MAKEFILE.format(cc=cc)})
    (res,) = build_debian_corpora(["gen"], _config(tmp_path, src),
                                  recipes={"gen": Recipe("gen", "c", (("make", "lib.o"),))},
                                  fetch=_local)
    if cc == "CC_FOR_BUILD":  # zig's cc for this machine: the generator runs
        assert res.status == "built", res.error
        (module,) = load_corpus(tmp_path / "out").modules
        assert module.name == "gen/lib"
    else:  # the target's compiler: an AArch64 program does not run here
        assert (res.status, res.step) == ("failed", "build")
        assert "it ran a program it had compiled for aarch64" in res.error
        assert "./gen" in res.error


def test_cmake_configures_a_cross_build_with_zigs_archiver(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src / "cm" / "cm-1", {
        "debian/control": "",
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.10)\nproject(cm C)\n"
                          'message(STATUS "mlgo: ${CMAKE_CROSSCOMPILING} '
                          '${CMAKE_SYSTEM_PROCESSOR} ${CMAKE_AR}")\n'
                          "add_library(cm lib.c)\nadd_executable(cmtool t.c)\n"
                          "target_link_libraries(cmtool cm)\n",
        "lib.c": "int cm_f(int x) { return x * 3; }\n",
        "t.c": "int cm_f(int);\nint main(int argc, char **argv) { return cm_f(argc); }\n",
    })
    keep = tmp_path / "keep"
    keep.mkdir()
    recipe = Recipe("cm", "c", (*cmake(), shell(f"cp {BUILD_DIR}/libcm.a {BUILD_DIR}/cmtool "
                                                f"{keep}")))
    (res,) = build_debian_corpora(["cm"], _config(tmp_path, src), recipes={"cm": recipe},
                                  fetch=_local)
    assert res.status == "built", res.error
    line = next(ln for ln in Path(res.log).read_text().splitlines() if "-- mlgo:" in ln)
    crosscompiling, processor, ar = line.split()[2:5]
    assert (crosscompiling, processor) == ("TRUE", "aarch64")
    assert Path(ar).name == "ar" and "mlgo-capture-" in ar  # the capture's zig ar
    assert e_machine((keep / "cmtool").read_bytes()) == EM_AARCH64
    assert [e_machine(b) for b in archive_members(keep / "libcm.a").values()] == [EM_AARCH64]


# --- a real Debian package ---------------------------------------------------------------


@dataclass
class Built:
    out: Path
    keep: Path
    result: PackageResult
    config: DebianConfig
    recipe: Recipe


@pytest.fixture(scope="module")
def zlib_aarch64(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """zlib's own recipe for aarch64, then its two test programs linked against the library
    (so the build archives and links), the outputs copied out before the copy is removed."""
    if not (SRC / "zlib").is_dir():
        pytest.skip("needs the cached zlib source package (apt-get source zlib)")
    tmp = tmp_path_factory.mktemp("zlib-aarch64")
    keep = tmp / "keep"
    keep.mkdir()
    recipe = Recipe("zlib", "c", (*RECIPES["zlib"].steps, ("make", "example", "minigzip"),
                                  shell(f"cp libz.a example minigzip {keep}")))
    config = _config(tmp, SRC)
    (res,) = build_debian_corpora(["zlib"], config, recipes={"zlib": recipe})
    assert res.status == "built", res.error
    return Built(tmp / "out", keep, res, config, recipe)


def test_zlib_builds_archives_and_links_for_aarch64_with_zigs_tools(zlib_aarch64: Built
                                                                     ) -> None:
    log = Path(zlib_aarch64.result.log).read_text(errors="replace")
    assert "bfd plugin" not in log and "emulation" not in log
    members = archive_members(zlib_aarch64.keep / "libz.a")
    assert {"deflate.o", "inflate.o", "adler32.o"} <= set(members)
    assert {e_machine(obj) for obj in members.values()} == {EM_AARCH64}
    for program in ("example", "minigzip"):
        assert e_machine((zlib_aarch64.keep / program).read_bytes()) == EM_AARCH64


def test_every_zlib_module_is_compiled_for_aarch64_and_says_so(
        zlib_aarch64: Built, compiler: Compiler, tmp_path: Path) -> None:
    corpus = load_corpus(zlib_aarch64.out)
    names = {m.name for m in corpus.modules}
    assert {"zlib/deflate", "zlib/inflate", "zlib/adler32"} <= names
    assert any(n.startswith("zlib/_unity/") for n in names)  # unity modules per target too
    for module in corpus.modules:
        assert module.cmd[module.cmd.index("-triple") + 1].startswith("aarch64-")
        assert "x86_64" not in " ".join(module.cmd)
    for job in corpus_jobs(corpus):
        obj = tmp_path / "m.o"
        res = inl.compile_baseline(compiler, job, keep_object=obj)
        assert res.error is None, (job.module, res.error)
        assert e_machine(obj.read_bytes()) == EM_AARCH64, job.module
    info = json.loads((zlib_aarch64.out / "zlib" / INFO_FILE).read_text())
    assert (info["target"], info["cpu"], info["target_name"]) == (
        "aarch64-linux-gnu", "baseline", "aarch64")
    summary = json.loads((zlib_aarch64.out / SUMMARY_FILE).read_text())
    assert summary["target"] == AARCH64.as_json()


def test_a_built_package_is_reused_for_its_target_and_other_targets_are_refused(
        zlib_aarch64: Built) -> None:
    config, recipes = zlib_aarch64.config, {"zlib": zlib_aarch64.recipe}
    info = json.loads((zlib_aarch64.out / "zlib" / INFO_FILE).read_text())
    assert info["recipe"] == build_key(zlib_aarch64.recipe, AARCH64)
    assert info["recipe"] != build_key(zlib_aarch64.recipe, HOST_TARGET)
    (again,) = build_debian_corpora(["zlib"], config, recipes=recipes)
    assert (again.status, again.modules) == ("cached", zlib_aarch64.result.modules)
    # the directory of an aarch64 corpus refuses every other target, and stays as it was
    for other in ("x86_64", "riscv64", "cortex-m4-musl"):
        with pytest.raises(TargetError, match=r"built for aarch64-linux-gnu -mcpu=baseline "
                           rf"\(zlib\); this run builds for {other}"):
            build_debian_corpora(["zlib"], DebianConfig(
                output_dir=config.output_dir, src_cache=config.src_cache,
                target=TARGETS[other], build_root=config.build_root, progress=False),
                recipes=recipes)
    assert json.loads((zlib_aarch64.out / "zlib" / INFO_FILE).read_text()) == info


def test_the_command_line_refuses_to_mix_targets_in_one_directory(zlib_aarch64: Built
                                                                  ) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.corpus", "debian", "zlib", "--no_progress",
         "--output_dir", str(zlib_aarch64.out)],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "one corpus never mixes targets" in proc.stderr and "x86_64" in proc.stderr
