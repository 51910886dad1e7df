"""A corpus is recorded at the level it is measured at: a captured `-Oz` build's bitcode is
`minsize`, so its `-Oz` baseline is the object `clang -Oz` ships, byte for byte; a corpus
recorded at another level is named in a warning."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pymlgo.corpus.capture_wrapper import plan
from pymlgo.corpus.command import format_cmd, parse_cmd
from pymlgo.corpus.format import load_corpus
from pymlgo.corpus.front_end_level import (
    level_warning,
    marks,
    mismatched_modules,
    recorded_level,
)
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import object_size

# A struct copy and a switch of constants: x86-64 generates them differently for minsize
# (-Oz) and optsize (-Os) functions, so the two levels give objects of different sizes.
SOURCE = """struct big { long a[6]; };
long pick(int k, struct big *b) {
  struct big c = *b;
  switch (k) { case 0: return 11; case 1: return c.a[2] * 3; case 2: return 12345;
               default: return c.a[k & 3] + 7; }
}
"""
TARGET = ["-target", "x86_64-linux-gnu", "-mcpu=baseline"]


def _allocated(obj: Path) -> int:
    s = object_size(obj)
    return s.code + s.rodata + s.unwind + s.eh_tables + s.data


def _ir_attributes(compiler: Compiler, bc: Path, tmp: Path) -> str:
    ll = tmp / (bc.stem + ".ll")
    subprocess.run([*compiler.clang_argv, "-target", "x86_64-linux-gnu", "-S", "-emit-llvm",
                    "-x", "ir", str(bc), "-Xclang", "-disable-llvm-passes",
                    "-Wno-override-module", "-o", str(ll)],
                   check=True, capture_output=True)
    return "\n".join(line for line in ll.read_text().splitlines()
                     if line.startswith("attributes #"))


@pytest.fixture(scope="module")
def oz_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A one-file make project at -Oz captured by `mlgo corpus capture` with zig's driver."""
    project = tmp_path_factory.mktemp("project")
    (project / "pick.c").write_text(SOURCE)
    (project / "Makefile").write_text("pick.o: pick.c\n\t$(CC) -Oz -c pick.c -o pick.o\n")
    out = tmp_path_factory.mktemp("corpora") / "pick"
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "corpus", "capture",
                          "--output_dir", str(out), "--no_progress", "--", "make"],
                         cwd=project, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return project, out


def test_a_captured_oz_compile_is_recorded_at_oz_with_minsize_functions(
        oz_corpus: tuple[Path, Path], compiler: Compiler, tmp_path: Path) -> None:
    (module,) = load_corpus(oz_corpus[1]).modules

    assert recorded_level(module.cmd) == "-Oz"
    attributes = _ir_attributes(compiler, module.bc_path, tmp_path)
    assert "minsize" in attributes and "optsize" in attributes


def test_the_oz_baseline_is_the_object_a_real_oz_build_ships(
        oz_corpus: tuple[Path, Path], compiler: Compiler, tmp_path: Path) -> None:
    project, corpus = oz_corpus
    report = tmp_path / "eval.json"
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "eval", "--corpus",
                          str(corpus), "--policy", "default", "--json", str(report),
                          "--workers", "1"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "recorded at another optimization level" not in res.stderr
    (module,) = json.loads(report.read_text())["modules"]

    def build(*flags: str) -> int:
        obj = tmp_path / f"pick{len(flags)}.o"
        subprocess.run([*compiler.cc_argv, *TARGET, *flags, "-c", str(project / "pick.c"),
                        "-o", str(obj)], check=True, capture_output=True)
        return _allocated(obj)

    real_oz = build("-Oz", "-Xclang", "-Oz")  # what `mlgo cc -Oz` and `clang -Oz` compile
    zig_oz = build("-Oz")  # zig's driver alone: cc1 at -Os
    assert zig_oz != real_oz  # the source tells the two levels apart
    assert module["baseline_bytes"] == module["policy_bytes"] == real_oz


def test_capture_adds_the_oz_flags_to_oz_compiles_only() -> None:
    oz = ["-Xclang", "-Oz"]

    def driver_args(*user: str) -> list[str]:
        return plan(list(user), Path.cwd(), target_flags=[], embed_flags=[], oz_flags=oz)[0]

    assert driver_args("-O2", "-Oz", "-c", "a.c", "-o", "a.o")[-2:] == oz
    assert driver_args("-Oz", "-Os", "-c", "a.c", "-o", "a.o")[-2:] != oz  # the last -O wins
    assert driver_args("-O2", "-c", "a.c", "-o", "a.o") == ["-O2", "-c", "a.c", "-o", "a.o"]
    # a link compiles nothing
    assert driver_args("-Oz", "a.o", "-o", "prog") == ["-Oz", "a.o", "-o", "prog"]


def test_the_recorded_level_is_cc1s_last_o_flag() -> None:
    assert recorded_level(["-cc1", "-Os", "-emit-obj", "-Oz"]) == "-Oz"
    assert recorded_level(["-cc1", "-O2"]) == "-O2"
    assert recorded_level(["-cc1", "-emit-obj"]) is None
    assert marks(None) == marks("-O0") == "optnone"
    assert marks("-O2") == marks("-O3") == ""


def test_modules_recorded_at_os_are_named_when_compiled_at_oz(
        oz_corpus: tuple[Path, Path], tmp_path: Path) -> None:
    corpus_dir = tmp_path / "os"
    shutil.copytree(oz_corpus[1], corpus_dir)
    (cmd_file,) = corpus_dir.rglob("*.cmd")
    cmd = ["-Os" if a == "-Oz" else a for a in parse_cmd(cmd_file.read_bytes())]
    cmd_file.write_bytes(format_cmd(cmd))
    corpus = load_corpus(corpus_dir)

    found = mismatched_modules(corpus.modules, "-Oz")

    assert found == {"-Os": ["pick"]}
    assert mismatched_modules(corpus.modules, "-Os") == {}
    warning = level_warning(found, "-Oz")
    assert warning is not None and "1 module(s)" in warning and "-Xclang -Oz" in warning
    assert level_warning({}, "-Oz") is None
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "eval", "--corpus",
                          str(corpus_dir), "--policy", "default", "--workers", "1"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "1 module(s) were recorded at another optimization level" in res.stderr


def test_a_forced_level_is_appended_after_the_builds_own() -> None:
    args, pairs = plan(["-O2", "-c", "a.c", "-o", "a.o"], Path.cwd(), target_flags=[],
                       embed_flags=[], oz_flags=["-Xclang", "-Oz"], level="-Oz")

    assert pairs == [("a.c", "a.o")]
    assert args == ["-O2", "-c", "a.c", "-o", "a.o", "-Oz", "-Xclang", "-Oz"]


def test_capture_with_opt_level_records_a_configure_picked_o2_at_oz(
        tmp_path: Path, compiler: Compiler) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pick.c").write_text(SOURCE)
    # as curl's configure does: its own -O2 after the user's CFLAGS
    (project / "Makefile").write_text("pick.o: pick.c\n\t$(CC) -Oz -O2 -c pick.c -o pick.o\n")
    out = tmp_path / "pick"
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "corpus", "capture",
                          "--output_dir", str(out), "--opt-level", "z", "--no_progress", "--",
                          "make"], cwd=project, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    (module,) = load_corpus(out).modules

    assert recorded_level(module.cmd) == "-Oz"
    assert "minsize" in _ir_attributes(compiler, module.bc_path, tmp_path)


def test_corpus_debian_records_every_compile_at_its_level_one_level_per_directory(
        tmp_path: Path) -> None:
    from pymlgo.corpus.debian import DebianConfig, build_debian_corpora, build_key, fetch_source
    from pymlgo.corpus.debian_recipes import Recipe
    from pymlgo.corpus.targets import HOST_TARGET, TargetError
    from tests.test_corpus_debian import write_tree

    # a package whose own Makefile picks -O2, as curl's configure does
    write_tree(tmp_path / "src" / "pick" / "pick-1", {
        "debian/control": "", "pick.c": SOURCE,
        "Makefile": "pick.o: pick.c\n\t$(CC) $(CFLAGS) -O2 -c pick.c -o pick.o\n"})
    recipes = {"pick": Recipe("pick", "c", (("make",),))}

    def build(out: str, level: str) -> list[str | None]:
        config = DebianConfig(output_dir=tmp_path / out, src_cache=tmp_path / "src",
                              build_root=tmp_path / "build", progress=False, level=level)
        (res,) = build_debian_corpora(["pick"], config, recipes=recipes,
                                      fetch=lambda p, c: fetch_source(p, c, progress=False))
        assert res.status in ("built", "cached"), res.error
        return [recorded_level(m.cmd) for m in load_corpus(tmp_path / out).modules]

    assert build("oz", "-Oz") == ["-Oz"]  # the default: the inlining problem's level
    assert build("o2", "-O2") == ["-O2"]  # register allocation's
    recipe = recipes["pick"]
    assert build_key(recipe, HOST_TARGET, "-Oz") == recipe.key()  # -Oz keys stand
    assert build_key(recipe, HOST_TARGET, "-O2") != recipe.key()
    with pytest.raises(TargetError, match="never mixes levels"):
        build("o2", "-Oz")
