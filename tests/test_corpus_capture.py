"""`mlgo corpus capture`: any build, run through recording wrappers, becomes a corpus."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pymlgo.cli.corpus import register
from pymlgo.corpus.capture import capture
from pymlgo.corpus.capture_wrapper import plan
from pymlgo.corpus.command import recompile_args
from pymlgo.corpus.extract import extract_objects, objects_from_compile_commands
from pymlgo.corpus.format import DESCRIPTION_FILE, load_corpus
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import text_size
from tests.conftest import assert_one_error_line, clang_behind_script

HEADER = """#ifndef SHAPES_H
#define SHAPES_H
struct point { int x, y; };
int area(struct point a, struct point b);
int perimeter(struct point a, struct point b);
static inline int absval(int v) { return v < 0 ? -v : v; }
#endif
"""
FILES = {
    "include/shapes.h": HEADER,
    "src/area.c": '#include "shapes.h"\n'
                  "int area(struct point a, struct point b) {\n"
                  "  return absval(b.x - a.x) * absval(b.y - a.y);\n}\n",
    "src/perimeter.c": '#include "shapes.h"\n'
                       "int perimeter(struct point a, struct point b) {\n"
                       "  return 2 * (absval(b.x - a.x) + absval(b.y - a.y));\n}\n",
    "src/report.c": '#include <stdio.h>\n#include "shapes.h"\n'
                    "void report(struct point a, struct point b) {\n"
                    '  printf("%d %d\\n", area(a, b), perimeter(a, b));\n}\n',
    "src/main.c": '#include "shapes.h"\n'
                  "void report(struct point a, struct point b);\n"
                  "int main(void) { struct point a = {1, 2}, b = {4, 6};\n"
                  "  report(a, b); return area(a, b) == 12 ? 0 : 1; }\n",
    "Makefile": "CFLAGS = -Oz -Iinclude\n"
                "OBJS = src/area.o src/perimeter.o src/report.o src/main.o\n"
                "shapes: $(OBJS)\n\t$(CC) $(OBJS) -o shapes\n"
                "src/%.o: src/%.c include/shapes.h\n\t$(CC) $(CFLAGS) -c $< -o $@\n"
                "clean:\n\trm -f $(OBJS) shapes\n",
}
MODULES = ["src/area", "src/main", "src/perimeter", "src/report"]


def write_project(root: Path, files: dict[str, str] = FILES) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def mlgo_corpus(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`mlgo corpus ...` as a user runs it, in a separate process."""
    return subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "corpus", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The C project above built with `make` through `mlgo corpus capture`."""
    project = write_project(tmp_path_factory.mktemp("project"))
    out = tmp_path_factory.mktemp("corpora") / "shapes"
    res = mlgo_corpus("capture", "--output_dir", str(out), "--no_progress", "--",
                      "make", "-j2", cwd=project)
    assert res.returncode == 0, res.stderr
    assert "4 compile(s) recorded" in res.stderr
    return project, out


def test_a_make_project_becomes_a_corpus_that_recompiles(captured: tuple[Path, Path],
                                                         compiler: Compiler,
                                                         tmp_path: Path) -> None:
    project, out = captured
    assert (project / "shapes").is_file()  # the link step ran too, and produced a program
    assert subprocess.run([str(project / "shapes")], capture_output=True).stdout == b"12 14\n"

    corpus = load_corpus(out)

    assert list(corpus.names) == MODULES
    for m in corpus.modules:
        obj = tmp_path / (m.name.replace("/", "_") + ".o")
        res = subprocess.run([*compiler.clang_argv, *recompile_args(
            m.cmd, input_bc=str(m.bc_path), output_obj=str(obj))], capture_output=True)
        assert res.returncode == 0, res.stderr
        assert text_size(obj) > 0


def test_a_captured_corpus_evaluates_and_default_equals_plain_oz(
        captured: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "eval", "--corpus",
                          str(captured[1]), "--policy", "default", "--json", str(out),
                          "--workers", "1"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    assert [m["name"] for m in report["modules"]] == MODULES
    assert all(m["error"] is None and m["baseline_bytes"] > 0 for m in report["modules"])
    assert all(m["policy_bytes"] == m["baseline_bytes"] for m in report["modules"])


def test_captured_commands_have_the_fixed_target_and_baseline_cpu(
        captured: tuple[Path, Path]) -> None:
    corpus = load_corpus(captured[1])
    for m in corpus.modules:
        triple = m.cmd[m.cmd.index("-triple") + 1]
        assert triple.startswith("x86_64-") and "-linux" in triple and "gnu" in triple
        cpu = m.cmd[m.cmd.index("-target-cpu") + 1]
        assert cpu == "x86-64"  # the generic baseline, never the build host's CPU


def test_the_recorded_compile_commands_extract_to_the_same_corpus(
        captured: tuple[Path, Path], tmp_path: Path) -> None:
    project, out = captured
    entries = json.loads((out / "compile_commands.json").read_text())
    assert sorted(e["file"] for e in entries) == [f"{m}.c" for m in MODULES]
    assert all(e["directory"] == str(project) and "-fembed-bitcode=all" in e["arguments"]
               for e in entries)

    extract_objects(objects_from_compile_commands(entries, obj_base_dir=project),
                    tmp_path / "again", progress=False)

    assert (tmp_path / "again" / DESCRIPTION_FILE).read_bytes() == (
        out / DESCRIPTION_FILE).read_bytes()
    for m in MODULES:
        assert (tmp_path / "again" / f"{m}.cmd").read_bytes() == (out / f"{m}.cmd").read_bytes()


def test_a_build_with_nothing_to_compile_is_a_clear_error(captured: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    project, _ = captured  # already built: make has nothing to do
    res = mlgo_corpus("capture", "--output_dir", str(tmp_path / "c"), "--", "make", cwd=project)

    assert res.returncode == 1
    assert "ran no compile-only (-c) command" in res.stderr
    assert not (tmp_path / "c").exists()


def test_a_failing_build_writes_nothing(tmp_path: Path) -> None:
    files = {**FILES, "src/area.c": "int area(void) { return syntax error; }\n"}
    project = write_project(tmp_path / "p", files)

    res = mlgo_corpus("capture", "--output_dir", str(tmp_path / "c"), "--", "make", "-k",
                      cwd=project)

    assert res.returncode == 1
    assert "failed with exit code" in res.stderr and "no corpus written" in res.stderr
    assert not (tmp_path / "c").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_capture_without_a_build_command_explains_the_usage(tmp_path: Path) -> None:
    res = mlgo_corpus("capture", "--output_dir", str(tmp_path / "c"), cwd=tmp_path)
    assert res.returncode == 1
    assert "after --" in res.stderr


def test_parallel_compiles_are_all_recorded(tmp_path: Path) -> None:
    # Many compilers append to the log at once; the lock keeps every line whole.
    files = {f"u/m{i:02d}.c": f"int f{i}(int x) {{ return x * {i} + {i}; }}\n"
             for i in range(24)}
    objs = " ".join(f"u/m{i:02d}.o" for i in range(24))
    files["Makefile"] = f"all: {objs}\nu/%.o: u/%.c\n\t$(CC) -Oz -c $< -o $@\n"
    project = write_project(tmp_path / "p", files)

    result = capture(["make", "-j8"], tmp_path / "c", cwd=project, progress=False,
                     build_output=subprocess.DEVNULL)

    assert result.compiles == 24
    assert len(load_corpus(tmp_path / "c")) == 24


def test_another_clang_can_be_chosen_with_clang_path(tmp_path: Path,
                                                     compiler: Compiler) -> None:
    # A plain clang driver (zig's clang binary behind a script): no zig defaults, so the
    # target comes from --target and the CPU is the target's generic one.
    script = clang_behind_script(compiler, tmp_path / "bin")
    files = {"k.c": "int k(int x) { return x << 2; }\n",
             "l.c": "int k(int); int l(int y) { return k(y) - 1; }\n",
             "Makefile": "all: k.o l.o\n%.o: %.c\n\t$(CC) -O2 -c $< -o $@\n"}
    project = write_project(tmp_path / "p", files)

    result = capture(["make"], tmp_path / "c", cwd=project, clang=script,
                     target="aarch64-linux-gnu", progress=False,
                     build_output=subprocess.DEVNULL)

    assert not result.compiler.bundled and result.compiler.path == script
    corpus = load_corpus(tmp_path / "c")
    assert corpus.names == ("k", "l")
    for m in corpus.modules:
        assert m.cmd[m.cmd.index("-triple") + 1].startswith("aarch64")


def test_cmake_probe_objects_are_left_out(tmp_path: Path) -> None:
    files = {
        "app.c": "int app(int x) { return x + 42; }\n",
        "CMakeFiles/3.28/CompilerIdC/CMakeCCompilerId.c": "int id;\n",
        "Makefile": "all: app.o CMakeFiles/3.28/CompilerIdC/CMakeCCompilerId.o\n"
                    "%.o: %.c\n\t$(CC) -c $< -o $@\n",
    }
    project = write_project(tmp_path / "p", files)

    capture(["make"], tmp_path / "c", cwd=project, progress=False,
            build_output=subprocess.DEVNULL)

    assert load_corpus(tmp_path / "c").names == ("app",)


def test_cmakes_lto_probe_does_not_make_a_plain_build_a_thinlto_one(tmp_path: Path) -> None:
    # CheckIPOSupported compiles a probe with -flto=thin; ninja's build then used no LTO, and
    # the probe's bitcode object made the capture refuse every other module (stop 35)
    probe = "_build/CMakeFiles/_CMakeLTOTest-CXX/bin/CMakeFiles/foo.dir/foo"
    files = {
        "app.c": "int app(int x) { return x + 42; }\n",
        f"{probe}.c": "int foo(void) { return 2; }\n",
        "Makefile": f"all: app.o {probe}.o\n"
                    f"{probe}.o: {probe}.c\n\t$(CC) -flto=thin -c $< -o $@\n"
                    "app.o: app.c\n\t$(CC) -c $< -o $@\n",
    }
    project = write_project(tmp_path / "p", files)

    capture(["make"], tmp_path / "c", cwd=project, progress=False,
            build_output=subprocess.DEVNULL)

    assert load_corpus(tmp_path / "c").names == ("app",)


# --- the wrapper's decisions, one invocation at a time -----------------------------------------

TARGET = ["-target", "x86_64-linux-gnu", "-mcpu=baseline"]
EMBED = ["-Xclang", "-fembed-bitcode=all"]


def decide(*args: str) -> tuple[list[str], list[tuple[str, str]]]:
    return plan(list(args), Path.cwd(), target_flags=TARGET, embed_flags=EMBED)


def test_a_compile_gets_the_target_and_embedded_bitcode_and_is_recorded() -> None:
    argv, record = decide("-O2", "-c", "a.c", "-o", "out/a.o")
    assert argv == [*TARGET, *EMBED, "-O2", "-c", "a.c", "-o", "out/a.o"]
    assert record == [("a.c", "out/a.o")]


def test_without_o_each_source_makes_its_object_in_the_current_dir() -> None:
    _, record = decide("-c", "src/a.c", "lib/b.cpp", "-Iinclude", "-DX=1")
    assert record == [("src/a.c", "a.o"), ("lib/b.cpp", "b.o")]


def test_a_link_is_passed_through_with_the_same_target_only() -> None:
    argv, record = decide("a.o", "b.o", "-o", "prog", "-lm")
    assert argv == [*TARGET, "a.o", "b.o", "-o", "prog", "-lm"]
    assert record == []


@pytest.mark.parametrize("extra", [["-E"], ["-S"], ["-M"], ["-fsyntax-only"], ["-emit-llvm"]])
def test_invocations_that_make_no_object_are_not_recorded(extra: list[str]) -> None:
    argv, record = decide("-c", "a.c", *extra)
    assert record == [] and "-fembed-bitcode=all" not in argv


def test_assembly_gets_no_bitcode_flags() -> None:
    argv, record = decide("-c", "start.S", "-o", "start.o")
    assert record == [] and "-fembed-bitcode=all" not in argv


def test_native_cpu_and_foreign_targets_are_replaced_by_the_fixed_target() -> None:
    argv, _ = decide("-march=native", "-mtune=native", "--target=arm-none-eabi", "-target",
                     "riscv64-linux", "-c", "a.c")
    assert argv == [*TARGET, *EMBED, "-c", "a.c"]


def test_option_values_are_not_mistaken_for_sources() -> None:
    _, record = decide("-c", "-include", "pre.h", "-MF", "dep.d", "-x", "c", "weird.src")
    assert record == [("weird.src", "weird.o")]


def test_response_files_are_read_to_find_the_compile(tmp_path: Path) -> None:
    (tmp_path / "args.rsp").write_text('-c "my src.c" -o obj.o\n')
    argv, record = plan(["@args.rsp"], tmp_path, target_flags=TARGET, embed_flags=EMBED)
    assert argv == [*TARGET, *EMBED, "@args.rsp"]
    assert record == [("my src.c", "obj.o")]


def test_a_badly_quoted_response_file_is_left_for_the_compiler_to_report(tmp_path: Path) -> None:
    (tmp_path / "bad.rsp").write_text('-c "a.c -o a.o\n')
    argv, record = plan(["-c", "b.c", "@bad.rsp"], tmp_path, target_flags=TARGET,
                        embed_flags=EMBED)
    assert argv[-3:] == ["-c", "b.c", "@bad.rsp"]
    assert record == [("b.c", "b.o")]


# --- the command line --------------------------------------------------------------------------


def test_register_adds_every_corpus_action_with_help() -> None:
    parser = argparse.ArgumentParser(prog="mlgo")
    register(parser.add_subparsers(dest="command"))
    for action in ("extract", "make", "combine", "capture", "demo", "info"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["corpus", action, "--help"])
        assert exit_info.value.code == 0
    args = parser.parse_args(["corpus", "capture", "--output_dir", "o", "--", "make", "-j4"])
    assert callable(args.func) and args.build[-2:] == ["make", "-j4"]


def test_corpus_info_reports_modules_per_package(captured: tuple[Path, Path]) -> None:
    res = mlgo_corpus("info", "--json", str(captured[1]), cwd=Path(os.sep))
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["modules"] == 4 and info["packages"] == {"src": 4}


def test_an_invalid_exclude_regex_is_refused_before_the_build_runs(tmp_path: Path) -> None:
    project = write_project(tmp_path / "p")

    res = mlgo_corpus("capture", "--output_dir", str(tmp_path / "c"), "--exclude", "src/(",
                      "--no_progress", "--", "sh", "-c", "touch build-ran && make", cwd=project)

    assert_one_error_line(res, "mlgo corpus capture: error: --exclude 'src/(' is not a "
                               "valid regex")
    assert not (project / "build-ran").exists()
    assert not list(project.rglob("*.o"))
    assert not (tmp_path / "c").exists()


def test_a_stopped_capture_leaves_no_build_process_behind(tmp_path: Path) -> None:
    """SIGTERM to `mlgo corpus capture` (what `kill` and `timeout` send) ends the build's
    whole process group, not only pymlgo: a killed make leaves its compiles running."""
    import signal
    import time

    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "still-running"
    # a "compile" that outlives its make unless its process group is ended
    (project / "Makefile").write_text(
        f"all:\n\tsh -c 'sleep 3; touch {marker}' & sleep 60\n")
    proc = subprocess.Popen([sys.executable, "-m", "pymlgo.cli.main", "corpus", "capture",
                             "--output_dir", str(tmp_path / "out"), "--no_progress", "--",
                             "make"], cwd=project, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    time.sleep(3)

    assert proc.returncode != 0
    assert not marker.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
