"""`extract` and `make`: real objects from the bundled clang in, mlgo-utils corpora out."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pymlgo.cli.corpus import main as corpus_main
from pymlgo.corpus.command import recompile_args
from pymlgo.corpus.extract import (
    extract_objects,
    objects_for_local_thinlto,
    objects_from_compile_commands,
    objects_from_directory,
    objects_from_params,
)
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, load_corpus
from pymlgo.corpus.make import make_corpus
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.elf import read_sections
from pymlgo.toolchain.size import text_size
from tests.conftest import assert_one_error_line

TARGET = ("-target", "x86_64-linux-gnu", "-mcpu=baseline")
EMBED = ("-Xclang", "-fembed-bitcode=all")
SOURCES = {
    "src/a.c": "static int twice(int x) { return 2 * x; }\nint a(int x) { return twice(x) + 1; }\n",
    "src/b.c": "int a(int);\nint b(int y) { return a(y) * a(y + 1); }\n",
    "src/util/c.c": "int c(const char *s) { int n = 0; while (*s++) n++; return n; }\n",
}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory, compiler: Compiler) -> Path:
    """A build tree: three objects with embedded bitcode, one without, a compile database."""
    root = tmp_path_factory.mktemp("build")
    entries = []
    for rel, text in SOURCES.items():
        src = root / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        obj = rel[:-2] + ".o"
        args = [*compiler.cc_argv, "-c", *TARGET, "-Oz", *EMBED, rel, "-o", obj]
        subprocess.run(args, cwd=root, check=True)
        entries.append({"directory": str(root), "command": shlex.join(args), "file": rel})
    plain = root / "src/plain.c"
    plain.write_text("int plain(void) { return 7; }\n")
    args = [*compiler.cc_argv, "-c", *TARGET, "-Oz", "src/plain.c", "-o", "src/plain.o"]
    subprocess.run(args, cwd=root, check=True)
    entries.append({"directory": str(root), "arguments": args, "file": "src/plain.c"})
    (root / "compile_commands.json").write_text(json.dumps(entries))
    return root


def test_extract_from_compile_commands_writes_the_mlgo_utils_layout(build: Path,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    result = extract_objects(objects_from_compile_commands(build / "compile_commands.json"),
                             out, progress=False)

    assert result.modules == ["src/a", "src/b", "src/util/c"]
    assert result.no_bitcode == [str(build / "src/plain.o")]
    desc = json.loads((out / DESCRIPTION_FILE).read_text())
    assert desc == {"has_thinlto": False, "modules": ["src/a", "src/b", "src/util/c"]}
    assert (out / DESCRIPTION_FILE).read_text() == json.dumps(desc, indent=2)
    for name in desc["modules"]:
        sections = read_sections(build / f"{name}.o", (".llvmbc", ".llvmcmd"))
        # Byte-identical to what llvm-objcopy --dump-section would write.
        assert (out / f"{name}.cmd").read_bytes() == sections[".llvmcmd"]
        assert (out / f"{name}.bc").read_bytes() == sections[".llvmbc"]
        raw = (out / f"{name}.cmd").read_bytes()
        assert raw.startswith(b"-cc1\0") and raw.endswith(b"\0")
    assert sorted(p.name for p in out.iterdir()) == ["corpus_description.json", "src"]


def test_the_report_names_objects_without_bitcode(build: Path, tmp_path: Path) -> None:
    result = extract_objects(objects_from_compile_commands(build / "compile_commands.json"),
                             tmp_path / "c", progress=False)

    assert "1 had no embedded bitcode" in result.summary()
    assert "plain.o" in result.summary()
    assert "-fembed-bitcode=all" in result.summary()


def test_an_extracted_corpus_loads_and_recompiles(build: Path, tmp_path: Path,
                                                  compiler: Compiler) -> None:
    out = tmp_path / "corpus"
    extract_objects(objects_from_compile_commands(build / "compile_commands.json"), out,
                    progress=False)

    corpus = load_corpus(out)
    for m in corpus.modules:
        assert m.cmd[0] == "-cc1" and "-fembed-bitcode=all" in m.cmd
        obj = tmp_path / (m.name.replace("/", "_") + ".o")
        res = subprocess.run([*compiler.clang_argv, *recompile_args(
            m.cmd, input_bc=str(m.bc_path), output_obj=str(obj))], capture_output=True)
        assert res.returncode == 0, res.stderr
        assert text_size(obj) > 0
        assert read_sections(obj, (".llvmbc",))[".llvmbc"] is None  # not re-embedded


def test_extract_in_parallel_gives_the_same_corpus(build: Path, tmp_path: Path) -> None:
    objs = objects_from_directory(build) * 6  # repeated: duplicates collapse to one module
    one = extract_objects(objs, tmp_path / "one", num_workers=1, progress=False)
    two = extract_objects(objs, tmp_path / "two", num_workers=2, progress=False)

    assert one.modules == two.modules == ["src/a", "src/b", "src/util/c"]
    for name in one.modules:
        assert (tmp_path / "one" / f"{name}.bc").read_bytes() == (
            tmp_path / "two" / f"{name}.bc").read_bytes()


def test_extract_from_a_directory_of_objects(build: Path, tmp_path: Path) -> None:
    objs = objects_from_directory(build)
    assert sorted(o.name for o in objs) == ["src/a", "src/b", "src/plain", "src/util/c"]

    result = extract_objects(objs, tmp_path / "c", progress=False)
    assert result.modules == ["src/a", "src/b", "src/util/c"]


def test_extract_from_a_linker_parameters_file(build: Path, tmp_path: Path) -> None:
    params = tmp_path / "link.params"
    params.write_text("-o\nprog.o\n--gc-sections\nsrc/a.o\nsrc/util/c.o\n-lm\nlibz.a\n")

    objs = objects_from_params(params, obj_base_dir=build)

    assert [(o.name, o.path) for o in objs] == [("src/a", build / "src/a.o"),
                                               ("src/util/c", build / "src/util/c.o")]


def test_obj_base_dir_sets_the_root_of_module_names(build: Path, tmp_path: Path) -> None:
    objs = objects_from_compile_commands(build / "compile_commands.json",
                                         obj_base_dir=build / "src")
    assert sorted(o.name for o in objs) == ["a", "b", "plain", "util/c"]


def test_cmd_filter_matches_single_arguments_like_mlgo_utils(build: Path,
                                                             tmp_path: Path) -> None:
    objs = objects_from_compile_commands(build / "compile_commands.json")
    result = extract_objects(objs, tmp_path / "c", cmd_filter=r"^-Os$", progress=False)
    assert len(result.modules) == 3

    with pytest.raises(CorpusError, match="no module extracted"):
        extract_objects(objs, tmp_path / "d", cmd_filter=r"^-O3$", progress=False)
    assert not (tmp_path / "d").exists()


def test_non_elf_and_missing_objects_are_reported_not_fatal(build: Path,
                                                            tmp_path: Path) -> None:
    (tmp_path / "fake.o").write_bytes(b"!<arch>\nnot an object")
    entries = [
        {"directory": str(build), "arguments": ["cc", "-c", "src/a.c", "-o", "src/a.o"]},
        {"directory": str(tmp_path), "arguments": ["cc", "-c", "f.c", "-o", "fake.o"]},
        {"directory": str(tmp_path), "arguments": ["cc", "-c", "g.c", "-o", "gone.o"]},
        {"directory": str(tmp_path), "arguments": ["ld", "x.o"]},  # no -o: not a compile
    ]

    result = extract_objects(objects_from_compile_commands(entries), tmp_path / "c",
                             progress=False)

    assert result.modules == ["src/a"]
    assert result.not_elf == [str(tmp_path / "fake.o")]
    assert result.missing == [str(tmp_path / "gone.o")]
    assert "1 are not ELF objects" in result.summary()


def test_no_extractable_object_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "x.o").write_bytes(b"junk")
    with pytest.raises(CorpusError, match="no module extracted"):
        extract_objects(objects_from_directory(tmp_path), tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.o"]


def test_extract_refuses_a_non_empty_output_dir(build: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("x")

    with pytest.raises(CorpusError, match="not empty"):
        extract_objects(objects_from_directory(build), tmp_path / "out", progress=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine.txt"]


@pytest.fixture(scope="module")
def thinlto_build(tmp_path_factory: pytest.TempPathFactory, compiler: Compiler) -> Path:
    """A real distributed ThinLTO build: bitcode objects, lld's index-only link, and backend
    compiles that embed the post-import module and their command (with -fthinlto-index)."""
    root = tmp_path_factory.mktemp("thinlto")
    (root / "a.c").write_text("int b(int);\nstatic int sq(int x) { return x * x; }\n"
                              "int a(int x) { return b(sq(x)) + 1; }\n")
    (root / "b.c").write_text("int b(int x) { return x * 3; }\n")
    clang = [*compiler.clang_argv, "--target=x86_64-linux-gnu", "-O2"]
    for f in ("a", "b"):
        subprocess.run([*clang, "-flto=thin", "-c", f"{f}.c", "-o", f"{f}.o"], cwd=root,
                       check=True)
    lld = [str(compiler.path), "ld.lld"] if compiler.bundled else ["ld.lld"]
    subprocess.run([*lld, "--thinlto-index-only", "-shared", "a.o", "b.o", "-o", "libx.so"],
                   cwd=root, check=True)
    entries = []
    for f in ("a", "b"):
        args = [*clang, "-c", "-x", "ir", f"{f}.o", f"-fthinlto-index={f}.o.thinlto.bc",
                "-mllvm", "-lto-embed-bitcode=post-merge-pre-opt", "-o", f"{f}.native.o"]
        subprocess.run(args, cwd=root, check=True)
        entries.append({"directory": str(root), "arguments": args, "file": f"{f}.o"})
    (root / "compile_commands.json").write_text(json.dumps(entries))
    return root


def test_distributed_thinlto_copies_each_index_and_recompiles(
        thinlto_build: Path, tmp_path: Path, compiler: Compiler) -> None:
    objs = objects_from_compile_commands(thinlto_build / "compile_commands.json")
    result = extract_objects(objs, tmp_path / "c", thinlto_build="distributed",
                             obj_base_dir=thinlto_build, progress=False)

    assert result.modules == ["a.native", "b.native"]
    desc = json.loads((tmp_path / "c" / DESCRIPTION_FILE).read_text())
    assert desc == {"has_thinlto": True, "modules": ["a.native", "b.native"]}
    assert (tmp_path / "c/a.native.thinlto.bc").read_bytes() == (
        thinlto_build / "a.o.thinlto.bc").read_bytes()
    corpus = load_corpus(tmp_path / "c")
    for m in corpus.modules:
        assert f"-fthinlto-index={m.thinlto_index}" in m.cmd
        obj = tmp_path / "re.o"
        res = subprocess.run([*compiler.clang_argv, *recompile_args(
            m.cmd, input_bc=str(m.bc_path), output_obj=str(obj))], capture_output=True)
        assert res.returncode == 0, res.stderr
        assert text_size(obj) > 0


def test_distributed_thinlto_without_an_index_reports_the_object(build: Path,
                                                                 tmp_path: Path) -> None:
    objs = objects_from_directory(build)
    with pytest.raises(CorpusError, match="no -fthinlto-index"):
        extract_objects(objs, tmp_path / "c", thinlto_build="distributed", progress=False)


def test_local_thinlto_takes_lld_save_temps_files(tmp_path: Path) -> None:
    build = tmp_path / "build"
    (build / "obj").mkdir(parents=True)
    (build / "obj/m.o.3.import.bc").write_bytes(b"BC\xc0\xde module")
    (build / "obj/m.o.thinlto.bc").write_bytes(b"index")

    objs = objects_for_local_thinlto(build)
    result = extract_objects(objs, tmp_path / "c", thinlto_build="local", progress=False)

    assert result.modules == ["obj/m"]
    desc = json.loads((tmp_path / "c" / DESCRIPTION_FILE).read_text())
    assert desc == {"global_command_override": ["<UNSPECIFIED>"], "has_thinlto": True,
                    "modules": ["obj/m"]}
    assert (tmp_path / "c/obj/m.bc").read_bytes() == b"BC\xc0\xde module"
    assert (tmp_path / "c/obj/m.thinlto.bc").read_bytes() == b"index"


# --- make ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loose_bitcode(tmp_path_factory: pytest.TempPathFactory, compiler: Compiler) -> Path:
    root = tmp_path_factory.mktemp("loose")
    for rel, text in SOURCES.items():
        src = root / "src" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        bc = root / "bc" / (rel[:-2] + ".bc")
        bc.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*compiler.clang_argv, "-c", "-emit-llvm", "--target=x86_64-linux-gnu",
                        "-O1", "-Xclang", "-disable-llvm-passes", str(src), "-o", str(bc)],
                       check=True)
    (root / "bc" / "src" / "skip.thinlto.bc").write_bytes(b"not a module")
    return root / "bc"


def test_make_copies_bitcode_and_records_default_args(loose_bitcode: Path,
                                                      tmp_path: Path) -> None:
    names = make_corpus(loose_bitcode, tmp_path / "c", default_args=["-O2", "-c"])

    assert names == ["src/a", "src/b", "src/util/c"]
    text = (tmp_path / "c" / DESCRIPTION_FILE).read_text()
    assert text == json.dumps({"global_command_override": ["-O2", "-c"], "has_thinlto": False,
                               "modules": names}, indent=2)
    assert not list((tmp_path / "c").rglob("*.cmd"))


def test_a_made_corpus_with_no_default_args_compiles_with_clang_defaults(
        loose_bitcode: Path, tmp_path: Path, compiler: Compiler) -> None:
    make_corpus(loose_bitcode, tmp_path / "c")  # mlgo-utils' default: an empty override
    corpus = load_corpus(tmp_path / "c")

    assert corpus.global_command_override == ()
    for m in corpus.modules:
        obj = tmp_path / "out.o"
        subprocess.run([*compiler.clang_argv, *recompile_args(
            m.cmd, input_bc=str(m.bc_path), output_obj=str(obj))], check=True)
        assert text_size(obj) > 0


def test_make_without_bitcode_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"no \.bc files"):
        make_corpus(tmp_path / "empty", tmp_path / "c")
    assert not (tmp_path / "c").exists()


# --- the command line ----------------------------------------------------------------------------


def test_cli_extract_and_make_use_the_mlgo_utils_flag_names(build: Path, loose_bitcode: Path,
                                                            tmp_path: Path) -> None:
    assert corpus_main(["extract", "--input", str(build / "compile_commands.json"),
                        "--input_type", "json", "--output_dir", str(tmp_path / "e"),
                        "--num_workers", "2", "--cmd_filter", "^-Os$",
                        "--cmd_section_name", ".llvmcmd", "--bitcode_section_name", ".llvmbc",
                        "--llvm_objcopy_path", "/nonexistent/llvm-objcopy",
                        "--no_progress"]) == 0
    assert len(load_corpus(tmp_path / "e")) == 3

    assert corpus_main(["make", "--input_dir", str(loose_bitcode), "--output_dir",
                        str(tmp_path / "m"), "--default_args", "-O2 -c"]) == 0
    assert load_corpus(tmp_path / "m").global_command_override == ("-O2", "-c")


def test_cli_errors_are_one_clear_line_and_exit_1(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.corpus", "extract", "--input",
         str(tmp_path / "missing.json"), "--output_dir", str(tmp_path / "o")],
        capture_output=True, text=True,
    )
    assert res.returncode == 1
    assert res.stderr.startswith("mlgo corpus extract: error: cannot read compilation database")
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists()


def run_corpus_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m pymlgo.cli.corpus ...` in its own process, as a user would see it."""
    return subprocess.run([sys.executable, "-m", "pymlgo.cli.corpus", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_make_with_unbalanced_quotes_in_default_args_is_one_line_and_writes_nothing(
        loose_bitcode: Path, tmp_path: Path) -> None:
    res = run_corpus_cli("make", "--input_dir", str(loose_bitcode), "--output_dir",
                         str(tmp_path / "m"), "--default_args", "-O2 '-DX=1")

    assert_one_error_line(res, "mlgo corpus make: error: --default_args")
    assert "not a valid shell-quoted string" in res.stderr
    assert not (tmp_path / "m").exists()


def test_a_compile_command_with_unbalanced_quotes_is_named_and_writes_nothing(
        build: Path, tmp_path: Path) -> None:
    entries = json.loads((build / "compile_commands.json").read_text())
    entries[1] = {**entries[1], "command": entries[1]["command"] + ' "-DBROKEN'}
    db = tmp_path / "compile_commands.json"
    db.write_text(json.dumps(entries))

    res = run_corpus_cli("extract", "--input", str(db), "--output_dir", str(tmp_path / "o"),
                         "--no_progress")

    assert_one_error_line(res, "mlgo corpus extract: error: compile command #2 "
                               "(file 'src/b.c') has a malformed \"command\" string")
    assert not (tmp_path / "o").exists()
