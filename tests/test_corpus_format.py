"""Reading corpora in the mlgo-utils layout: what loads, what is refused, and why."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pymlgo.corpus.command import FlagEdits, format_cmd, recompile_args
from pymlgo.corpus.format import (
    DESCRIPTION_FILE,
    Corpus,
    CorpusError,
    Module,
    check_module_name,
    load_corpus,
    staged_dir,
    write_corpus_description,
)
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import text_size

CC1 = ("-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj", "-Os")


def write_module(root: Path, name: str, cmd: tuple[str, ...] | bytes | None = CC1,
                 bc: bytes = b"BC\xc0\xde") -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name + ".bc").write_bytes(bc)
    if cmd is not None:
        raw = cmd if isinstance(cmd, bytes) else format_cmd(cmd)
        path.with_name(path.name + ".cmd").write_bytes(raw)


def write_description(root: Path, desc: dict) -> None:
    (root / DESCRIPTION_FILE).write_text(json.dumps(desc))


def hand_written(root: Path) -> Path:
    """A corpus as LLVM's extract_ir writes it: raw NUL-terminated .cmd, indent-2 JSON."""
    write_module(root, "lib/a.o", CC1)
    write_module(root, "lib/sub/b.o", CC1 + ("-DX=1",))
    write_module(root, "tool/main.o", CC1)
    write_description(root, {"has_thinlto": False,
                             "modules": ["lib/a.o", "lib/sub/b.o", "tool/main.o"]})
    return root


def test_a_hand_written_mlgo_utils_corpus_is_read(tmp_path: Path) -> None:
    corpus = load_corpus(hand_written(tmp_path))

    assert corpus.root == tmp_path.absolute()
    assert corpus.names == ("lib/a.o", "lib/sub/b.o", "tool/main.o")
    b = corpus.module("lib/sub/b.o")
    assert b.cmd == (*CC1, "-DX=1")
    assert b.bc_path == tmp_path / "lib/sub/b.o.bc"
    assert b.read_bitcode() == b"BC\xc0\xde"
    assert not corpus.has_thinlto and corpus.global_command_override is None


def test_the_package_is_the_first_path_component(tmp_path: Path) -> None:
    corpus = load_corpus(hand_written(tmp_path))

    assert [m.package for m in corpus.modules] == ["lib", "lib", "tool"]
    assert corpus.packages == ("lib", "tool")


def test_a_cmd_separated_but_not_terminated_by_nul_is_read_the_same(tmp_path: Path) -> None:
    write_module(tmp_path, "m", b"\0".join(a.encode() for a in CC1))
    write_description(tmp_path, {"modules": ["m"], "has_thinlto": False})

    assert load_corpus(tmp_path).modules[0].cmd == CC1


def test_written_description_has_mlgo_utils_keys_order_and_indent(tmp_path: Path) -> None:
    write_corpus_description(tmp_path, ["a/b", "c"])
    text = (tmp_path / DESCRIPTION_FILE).read_text()
    assert text == json.dumps({"has_thinlto": False, "modules": ["a/b", "c"]}, indent=2)

    write_corpus_description(tmp_path, ["a"], global_command_override=["-O2"])
    assert list(json.loads((tmp_path / DESCRIPTION_FILE).read_text())) == [
        "global_command_override", "has_thinlto", "modules"]


def test_subset_keeps_corpus_order_and_rejects_unknown_names(tmp_path: Path) -> None:
    corpus = load_corpus(hand_written(tmp_path))

    sub = corpus.subset(["tool/main.o", "lib/a.o"])
    assert isinstance(sub, Corpus)
    assert sub.names == ("lib/a.o", "tool/main.o")
    with pytest.raises(CorpusError, match="not in corpus.*nope"):
        corpus.subset(["lib/a.o", "nope"])


def test_flag_edits_delete_replace_and_add_in_every_module(tmp_path: Path) -> None:
    edits = FlagEdits(delete=("-DX=1",), replace=(("-Os", "-O2"),), add=("-DY",))

    corpus = load_corpus(hand_written(tmp_path), edits=edits)
    same = load_corpus(tmp_path).with_edits(edits)

    edited = ("-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj", "-O2", "-DY")
    assert {m.cmd for m in corpus.modules} == {edited}
    assert corpus.modules == same.modules


def test_flag_edits_delete_from_the_recorded_command_before_replacing() -> None:
    # A replacement's result is not deleted again, and an added flag survives the delete.
    edits = FlagEdits(delete=("-O2",), replace=(("-Os", "-O2"),), add=("-O2",))

    assert edits.apply(["-cc1", "-O2", "-Os"]) == ["-cc1", "-O2", "-O2"]


def test_a_cc1_global_command_override_replaces_every_cmd(tmp_path: Path) -> None:
    write_module(tmp_path, "m1", cmd=None)
    write_module(tmp_path, "m2", cmd=("-cc1", "-ignored"))
    override = ["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj"]
    write_description(tmp_path, {"global_command_override": override, "has_thinlto": False,
                                 "modules": ["m1", "m2"]})

    corpus = load_corpus(tmp_path)

    assert corpus.global_command_override == tuple(override)
    assert {m.cmd for m in corpus.modules} == {tuple(override)}


def test_command_override_argument_beats_the_corpus_own(tmp_path: Path) -> None:
    corpus = load_corpus(hand_written(tmp_path), command_override=["-cc1", "-emit-obj"])

    assert {m.cmd for m in corpus.modules} == {("-cc1", "-emit-obj")}


def test_a_driver_style_override_is_turned_into_cc1_by_clang(tmp_path: Path) -> None:
    # What ml-compiler-opt users write: driver flags, e.g. from make_corpus --default_args.
    write_module(tmp_path, "m", cmd=None)
    write_description(tmp_path, {"global_command_override": ["--target=aarch64-linux-gnu",
                                                             "-O2"],
                                 "has_thinlto": False, "modules": ["m"]})

    cmd = load_corpus(tmp_path).modules[0].cmd

    assert cmd[0] == "-cc1"
    assert cmd[cmd.index("-triple") + 1].startswith("aarch64")
    assert "-emit-obj" in cmd and "-O2" in cmd
    assert "-o" not in cmd and "-x" not in cmd and not any(a.endswith("module.bc") for a in cmd)


def test_an_override_clang_rejects_is_a_clear_error(tmp_path: Path) -> None:
    write_module(tmp_path, "m", cmd=None)
    write_description(tmp_path, {"global_command_override": ["--no-such-flag-xyz"],
                                 "has_thinlto": False, "modules": ["m"]})

    with pytest.raises(CorpusError, match="does not accept global_command_override") as err:
        load_corpus(tmp_path)
    # clang's own complaint is shown, not the tail of the command line -### echoes
    assert "error: unknown argument: '--no-such-flag-xyz'" in str(err.value)


def test_the_unfilled_local_thinlto_placeholder_is_refused(tmp_path: Path) -> None:
    write_module(tmp_path, "m", cmd=None)
    (tmp_path / "m.thinlto.bc").write_bytes(b"index")
    write_description(tmp_path, {"global_command_override": ["<UNSPECIFIED>"],
                                 "has_thinlto": True, "modules": ["m"]})

    with pytest.raises(CorpusError, match="placeholder"):
        load_corpus(tmp_path)


def test_a_thinlto_module_is_pointed_at_its_index_in_the_corpus(tmp_path: Path) -> None:
    write_module(tmp_path, "m", cmd=(*CC1, "-fthinlto-index=/build/m.o.thinlto.bc"))
    (tmp_path / "m.thinlto.bc").write_bytes(b"index")
    write_description(tmp_path, {"has_thinlto": True, "modules": ["m"]})

    m = load_corpus(tmp_path).modules[0]

    assert m.thinlto_index == tmp_path / "m.thinlto.bc"
    assert m.cmd == (*CC1, f"-fthinlto-index={tmp_path / 'm.thinlto.bc'}",
                     "-mllvm", "-thinlto-assume-merged")


# --- refused corpora ---------------------------------------------------------------------------


def test_a_directory_without_description_is_not_a_corpus(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no corpus_description.json"):
        load_corpus(tmp_path)
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "absent")


def test_a_description_that_is_not_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / DESCRIPTION_FILE).write_text("{modules: [")
    with pytest.raises(CorpusError, match="not valid JSON"):
        load_corpus(tmp_path)


def test_a_module_listed_without_its_bc_is_refused(tmp_path: Path) -> None:
    hand_written(tmp_path)
    (tmp_path / "lib/sub/b.o.bc").unlink()

    with pytest.raises(CorpusError, match=r"lib/sub/b\.o: missing b\.o\.bc"):
        load_corpus(tmp_path)


def test_a_module_without_cmd_and_without_override_is_refused(tmp_path: Path) -> None:
    write_module(tmp_path, "m", cmd=None)
    write_description(tmp_path, {"has_thinlto": False, "modules": ["m"]})

    with pytest.raises(CorpusError, match=r"missing m\.cmd"):
        load_corpus(tmp_path)


def test_a_cmd_that_does_not_start_with_cc1_is_refused(tmp_path: Path) -> None:
    write_module(tmp_path, "m", cmd=("clang", "-c", "x.c"))
    write_description(tmp_path, {"has_thinlto": False, "modules": ["m"]})

    with pytest.raises(CorpusError, match="must start with -cc1, found 'clang -c x.c'"):
        load_corpus(tmp_path)


@pytest.mark.parametrize("name", ["../outside", "a/../../b", "/etc/passwd", "a//b", "./a", ""])
def test_a_module_name_leaving_the_corpus_dir_is_refused(tmp_path: Path, name: str) -> None:
    write_module(tmp_path / "inner", "ok")
    write_description(tmp_path / "inner", {"has_thinlto": False, "modules": ["ok", name]})

    with pytest.raises(CorpusError, match="module name"):
        load_corpus(tmp_path / "inner")


def test_a_module_listed_twice_is_refused(tmp_path: Path) -> None:
    write_module(tmp_path, "m")
    write_description(tmp_path, {"has_thinlto": False, "modules": ["m", "m"]})

    with pytest.raises(CorpusError, match="more than once: m"):
        load_corpus(tmp_path)


def test_a_corpus_with_no_modules_is_refused(tmp_path: Path) -> None:
    write_description(tmp_path, {"has_thinlto": False, "modules": []})

    with pytest.raises(CorpusError, match="lists no modules"):
        load_corpus(tmp_path)


def test_module_name_rules() -> None:
    assert check_module_name("zstd/lib/compress/zstd_compress") == "zstd/lib/compress/zstd_compress"
    for bad in ("..", "a/..", "C:/x", "a\\b", "a\0b", None):
        with pytest.raises(CorpusError):
            check_module_name(bad)


# --- staging -----------------------------------------------------------------------------------


def test_a_failed_staged_write_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), staged_dir(target) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("interrupted")

    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_staging_refuses_a_non_empty_output_unless_overwriting(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("keep")
    with pytest.raises(CorpusError, match="not empty"), staged_dir(target):
        pass
    assert (target / "old").read_text() == "keep"

    with staged_dir(target, overwrite=True) as tmp:
        (tmp / "new").write_text("x")
    assert sorted(p.name for p in target.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# --- the real compiler -------------------------------------------------------------------------


def one_module_corpus(tmp_path: Path, compiler: Compiler, source: str) -> Module:
    """`source` built as a capture would (fixed target, embedded bitcode and command), as
    the only module of a corpus, loaded."""
    src = tmp_path / "f.c"
    src.write_text(source)
    obj = tmp_path / "f.o"
    subprocess.run([*compiler.cc_argv, "-c", "-target", "x86_64-linux-gnu", "-mcpu=baseline",
                    "-Oz", "-Xclang", "-fembed-bitcode=all", str(src), "-o", str(obj)],
                   check=True)
    from pymlgo.toolchain.elf import read_sections

    sec = read_sections(obj, (".llvmbc", ".llvmcmd"))
    root = tmp_path / "corpus"
    write_module(root, "pkg/f", cmd=sec[".llvmcmd"], bc=sec[".llvmbc"] or b"")
    write_corpus_description(root, ["pkg/f"])
    return load_corpus(root).modules[0]


def test_a_module_recompiles_with_the_bundled_clang(tmp_path: Path, compiler: Compiler) -> None:
    m = one_module_corpus(
        tmp_path, compiler, "int sq(int x) { return x * x; }\nint f(int y) { return sq(y) + 1; }\n")
    out = tmp_path / "re.o"
    subprocess.run([*compiler.clang_argv, *recompile_args(m.cmd, input_bc=str(m.bc_path),
                                                          output_obj=str(out))], check=True)
    assert text_size(out) > 0


def test_recompiling_drops_the_flags_that_would_embed_bitcode_again() -> None:
    # a ThinLTO backend compile, as a ThinLTO corpus records it (-lto-embed-bitcode is how
    # the corpus got its post-import module), and a compile captured with embedded bitcode
    cmd = ("-cc1", "-Oz", "-fembed-bitcode=all", "-mllvm", "-lto-embed-bitcode=post-merge-pre-opt",
           "-mllvm", "-inline-threshold=3", "-fthinlto-index=m.thinlto.bc")

    argv = recompile_args(cmd, input_bc="m.bc", output_obj="m.o")

    assert argv == ["-cc1", "-Oz", "-mllvm", "-inline-threshold=3",
                    "-fthinlto-index=m.thinlto.bc", "-x", "ir", "m.bc", "-o", "m.o"]


def test_a_replaced_flag_changes_the_real_compile(tmp_path: Path, compiler: Compiler) -> None:
    # Replacing the forced -Oz by -O0 must reach clang: no inlining, no size optimization.
    m = one_module_corpus(tmp_path, compiler,
                          "static int sq(int x) { return x * x; }\n"
                          "int f(int y) { int s = 0; for (int i = 0; i < y; i++) s += sq(i) / 3;\n"
                          "  return s; }\n")

    def compile_with(edits: FlagEdits, out: Path) -> list[str]:
        argv = recompile_args(m.cmd, input_bc=str(m.bc_path), output_obj=str(out), edits=edits)
        subprocess.run([*compiler.clang_argv, *argv], check=True)
        return argv

    plain = compile_with(FlagEdits(), tmp_path / "oz.o")
    edited = compile_with(FlagEdits(replace=(("-Oz", "-O0"),)), tmp_path / "o0.o")
    at_o0 = recompile_args(m.cmd, input_bc=str(m.bc_path), output_obj="x", opt_level="-O0")

    assert "-Oz" in plain and "-Oz" not in edited and "-O0" in edited
    assert text_size(tmp_path / "o0.o") > text_size(tmp_path / "oz.o")
    subprocess.run([*compiler.clang_argv, *at_o0[:-1], str(tmp_path / "at_o0.o")], check=True)
    assert text_size(tmp_path / "o0.o") == text_size(tmp_path / "at_o0.o")


def test_a_loaded_corpus_keeps_one_copy_of_each_repeated_argument(tmp_path: Path) -> None:
    # Real corpora repeat hundreds of flags per module: 10,000 modules must not hold
    # 10,000 copies of each.
    flags = ["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-Os", "-target-cpu", "x86-64"]
    root = tmp_path / "corpus"
    for name in ("a", "b"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.bc").write_bytes(b"BC\xc0\xde")
        # built separately, so equal strings are distinct objects until the loader interns
        (root / f"{name}.cmd").write_bytes(b"".join(f.encode() + b"\0" for f in flags))
    write_corpus_description(root, ["a", "b"])
    a, b = load_corpus(root).modules
    assert a.cmd == b.cmd == tuple(flags)
    assert all(x is y for x, y in zip(a.cmd, b.cmd, strict=True))
