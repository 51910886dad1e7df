"""A hostile corpus cannot make pymlgo load code, read its files or write outside the work dir.

Every refusal happens at corpus load (before any compile) and names the offending flag.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pymlgo.corpus.allowlist import unsafe_flags
from pymlgo.corpus.command import FlagEdits, format_cmd, parse_cmd
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, load_corpus
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.compile import compile_baseline
from pymlgo.toolchain.compiler import Compiler

CC1 = ("-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj", "-Os")


def make_corpus(root: Path, cmds: dict[str, tuple[str, ...]], bc: bytes = b"BC\xc0\xde",
                **desc: object) -> Path:
    for name, cmd in cmds.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(path.name + ".bc").write_bytes(bc)
        path.with_name(path.name + ".cmd").write_bytes(format_cmd(cmd))
    (root / DESCRIPTION_FILE).write_text(
        json.dumps({"has_thinlto": False, "modules": sorted(cmds), **desc})
    )
    return root


# (extra cc1 arguments in a .cmd, the text the error must name)
HOSTILE_CMD = [
    (("-load", "/tmp/evil.so"), "-load"),
    (("-fplugin=/tmp/evil.so",), "-fplugin=/tmp/evil.so"),
    (("-fpass-plugin=/tmp/evil.so",), "-fpass-plugin=/tmp/evil.so"),
    (("-add-plugin", "evil"), "-add-plugin"),
    (("-mllvm", "-load=/tmp/evil.so"), "-mllvm -load=/tmp/evil.so"),
    (("-mllvm", "-load"), "-mllvm -load"),
    (("-opt-record-file", "/tmp/evil.yaml"), "-opt-record-file"),
    (("-split-dwarf-output", "/tmp/evil.dwo"), "-split-dwarf-output"),
    (("-o/tmp/evil.o",), "-o/tmp/evil.o"),
    (("-dependency-file=/tmp/evil.d",), "-dependency-file=/tmp/evil.d"),
    (("-ftime-trace=/tmp/evil.json",), "-ftime-trace=/tmp/evil.json"),
    (("-stats-file=/tmp/evil",), "-stats-file=/tmp/evil"),
    (("-header-include-file", "/tmp/evil"), "-header-include-file"),
    (("-coverage-notes-file=/tmp/evil.gcno",), "-coverage-notes-file=/tmp/evil.gcno"),
    (("-fcrash-diagnostics-dir=/tmp/evil",), "-fcrash-diagnostics-dir=/tmp/evil"),
    (("@/tmp/evil.rsp",), "@/tmp/evil.rsp"),
    (("-D", "@/tmp/evil.rsp"), "@/tmp/evil.rsp"),
    (("-mllvm", "@/tmp/evil.rsp"), "-mllvm @/tmp/evil.rsp"),
    (("/etc/passwd",), "/etc/passwd"),
    (("-mlink-bitcode-file", "/tmp/evil.bc"), "-mlink-bitcode-file"),
    (("-include", "/etc/passwd"), "-include"),
    (("-fprofile-sample-use=/etc/passwd",), "-fprofile-sample-use=/etc/passwd"),
    (("-fthinlto-index=/tmp/evil.thinlto.bc",), "-fthinlto-index=/tmp/evil.thinlto.bc"),
    (("-fmystery-option=/tmp/evil",), "-fmystery-option=/tmp/evil"),
    (("-mllvm", "-inliner-interactive-channel-base=/tmp/evil"),
     "-mllvm -inliner-interactive-channel-base=/tmp/evil"),
    (("-mllvm", "-training-log=/tmp/evil.log"), "-mllvm -training-log=/tmp/evil.log"),
    (("-mllvm", "-info-output-file=/tmp/evil"), "-mllvm -info-output-file=/tmp/evil"),
    (("-mllvm", "-view-cfg"), "-mllvm -view-cfg"),
    (("-emit-llvm",), "-emit-llvm"),
    (("-S",), "-S"),
    (("-Xclang",), "-Xclang"),
    (("-some-unknown-cc1-flag",), "-some-unknown-cc1-flag"),
]


@pytest.mark.parametrize(("extra", "named"), HOSTILE_CMD, ids=[h[1] for h in HOSTILE_CMD])
def test_a_cmd_with_a_dangerous_flag_is_refused_at_load_naming_it(
    tmp_path: Path, extra: tuple[str, ...], named: str
) -> None:
    make_corpus(tmp_path, {"ok.o": CC1, "bad/m.o": (*CC1, *extra)})

    with pytest.raises(CorpusError) as err:
        load_corpus(tmp_path)

    msg = str(err.value)
    assert "bad/m.o" in msg and "ok.o:" not in msg
    assert repr(named) in msg  # the flag itself, quoted


def test_every_hostile_form_is_refused_and_none_of_their_flags_pass(tmp_path: Path) -> None:
    """The figure for the note: how many hostile forms the loader refuses."""
    refused = 0
    for i, (extra, _) in enumerate(HOSTILE_CMD):
        root = make_corpus(tmp_path / str(i), {"m.o": (*CC1, *extra)})
        with pytest.raises(CorpusError, match="refused flag|bare argument|response file"):
            load_corpus(root)
        refused += 1
    assert refused == len(HOSTILE_CMD) >= 30


# (global_command_override, the text the error must name)
HOSTILE_OVERRIDE = [
    (["-Oz", "-fplugin=/tmp/evil.so"], "-fplugin=/tmp/evil.so"),
    (["-Oz", "-fpass-plugin=/tmp/evil.so"], "-fpass-plugin=/tmp/evil.so"),
    (["-Oz", "@/tmp/evil.rsp"], "@/tmp/evil.rsp"),
    (["-Oz", "-Xclang", "-load", "-Xclang", "/tmp/evil.so"], "-Xclang"),
    (["-Oz", "-mllvm", "-load=/tmp/evil.so"], "-mllvm -load=/tmp/evil.so"),
    (["-Oz", "-o", "/tmp/evil.o"], "-o"),
    (["-Oz", "-MD", "-MF", "/tmp/evil.d"], "-MF"),
    (["-Oz", "-fsave-optimization-record"], "-fsave-optimization-record"),
    (["-Oz", "-ftime-trace"], "-ftime-trace"),
    (["-Oz", "-gsplit-dwarf"], "-gsplit-dwarf"),
    (["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-Oz", "-o", "/tmp/evil.o"],
     "-o /tmp/evil.o"),
    (["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-Oz", "-load", "/tmp/evil.so"],
     "-load"),
]


@pytest.mark.parametrize(("override", "named"), HOSTILE_OVERRIDE,
                         ids=[h[1] for h in HOSTILE_OVERRIDE])
def test_a_hostile_global_command_override_is_refused_naming_the_flag(
    tmp_path: Path, override: list[str], named: str
) -> None:
    make_corpus(tmp_path, {"m.o": CC1}, global_command_override=override)

    with pytest.raises(CorpusError, match="global_command_override") as err:
        load_corpus(tmp_path)
    assert repr(named) in str(err.value)
    # The same flags given by the caller instead of the description are refused too.
    with pytest.raises(CorpusError) as err2:
        load_corpus(tmp_path, command_override=override)
    assert repr(named) in str(err2.value)


def test_a_plain_driver_override_still_loads(tmp_path: Path) -> None:
    make_corpus(tmp_path, {"m.o": CC1},
                global_command_override=["-Oz", "-target", "x86_64-linux-gnu", "-g",
                                         "-ffunction-sections", "-DNDEBUG"])
    corpus = load_corpus(tmp_path)
    cmd = corpus.module("m.o").cmd
    assert cmd[0] == "-cc1" and "-Oz" in cmd and "-ffunction-sections" in cmd


def test_a_refused_flag_loads_once_the_user_allows_it(tmp_path: Path) -> None:
    make_corpus(tmp_path, {"m.o": (*CC1, "-fprofile-sample-use=/data/app.prof")})
    with pytest.raises(CorpusError, match="fprofile-sample-use"):
        load_corpus(tmp_path)

    corpus = load_corpus(tmp_path, allow_flags=["-fprofile-sample-use="])
    assert "-fprofile-sample-use=/data/app.prof" in corpus.module("m.o").cmd


def test_user_edits_are_applied_after_the_check(tmp_path: Path) -> None:
    """The user's own edits are trusted; the corpus' flags are not."""
    make_corpus(tmp_path, {"m.o": CC1})
    corpus = load_corpus(tmp_path, edits=FlagEdits(add=("-mllvm", "-some-user-option")))
    assert corpus.module("m.o").cmd[-2:] == ("-mllvm", "-some-user-option")


def test_every_demo_corpus_command_passes_the_allowlist(demo_corpus_dir: Path) -> None:
    cmds = sorted(demo_corpus_dir.rglob("*.cmd"))
    assert len(cmds) == 63
    assert [p for p in cmds if unsafe_flags(parse_cmd(p.read_bytes()))] == []
    assert len(load_corpus(demo_corpus_dir)) == 63


def test_recorded_output_names_are_stripped_so_a_real_compile_writes_nothing_there(
    tmp_path: Path, compiler: Compiler, minic_jobs: list[CompileJob]
) -> None:
    """A build's `-o` / `-dependency-file` are allowed in a .cmd because every compile drops
    them: compiling a module whose .cmd points them at a victim path leaves it untouched."""
    job = minic_jobs[0]
    victim = tmp_path / "victim"
    victim.mkdir()
    cmd = (*job.cmd, "-o", str(victim / "evil.o"), "-dependency-file", str(victim / "evil.d"),
           "-MT", str(victim / "evil.o"))
    root = tmp_path / "corpus"
    make_corpus(root, {"m.o": cmd}, bc=job.bitcode)
    module = load_corpus(root).module("m.o")

    res = compile_baseline(compiler, CompileJob(module.name, module.read_bitcode(), module.cmd))

    assert res.ok and res.size and res.size > 0
    assert list(victim.iterdir()) == []


def test_autotools_and_cmake_codegen_flags_seen_in_debian_builds_load_and_compile(
    tmp_path: Path, compiler: Compiler, minic_jobs: list[CompileJob]
) -> None:
    """autotools' depcomp records `-MP` (phony targets of a dependency file, which no
    recompile writes) and graphite2's CMake build `-mfpmath sse` (a value as the next
    argument): 16 of the broad corpus's Debian packages carry one of them."""
    job = minic_jobs[0]
    cmd = (*job.cmd, "-dependency-file", "x.d", "-MT", "x.o", "-sys-header-deps", "-MP",
           "-mfpmath", "sse")
    root = tmp_path / "corpus"
    make_corpus(root, {"m.o": cmd}, bc=job.bitcode)
    module = load_corpus(root).module("m.o")

    res = compile_baseline(compiler, CompileJob(module.name, module.read_bitcode(), module.cmd))

    assert res.ok and res.size and res.size > 0
    assert unsafe_flags(("-mfpmath", "sse")) == [] and unsafe_flags(("sse",)) != []


@pytest.mark.parametrize("name", ["../outside", "a/../../outside", "/etc/outside", "a/./b",
                                  "a//b", "C:/x", "a\\b", ""])
def test_module_names_that_leave_the_corpus_are_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / DESCRIPTION_FILE).write_text(json.dumps({"modules": [name]}))
    with pytest.raises(CorpusError, match="module name"):
        load_corpus(tmp_path)


def test_a_module_file_symlinked_out_of_the_corpus_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bc").write_bytes(b"BC\xc0\xde")
    (outside / "secret.cmd").write_bytes(format_cmd(CC1))
    root = make_corpus(tmp_path / "corpus", {"ok.o": CC1, "m.o": CC1})
    (root / "m.o.bc").unlink()
    os.symlink(outside / "secret.bc", root / "m.o.bc")

    with pytest.raises(CorpusError, match="m.o: m.o.bc resolves to .*outside the corpus"):
        load_corpus(root)

    (root / "m.o.bc").unlink()
    (root / "m.o.bc").write_bytes(b"BC\xc0\xde")
    (root / "m.o.cmd").unlink()
    os.symlink(outside / "secret.cmd", root / "m.o.cmd")
    with pytest.raises(CorpusError, match="m.o.cmd resolves to .*outside the corpus"):
        load_corpus(root)


def test_a_directory_symlinked_out_of_the_corpus_is_refused(tmp_path: Path) -> None:
    outside = make_corpus(tmp_path / "outside", {"lib/m.o": CC1})
    root = make_corpus(tmp_path / "corpus", {"ok.o": CC1})
    os.symlink(outside / "lib", root / "lib")
    (root / DESCRIPTION_FILE).write_text(json.dumps({"modules": ["ok.o", "lib/m.o"]}))

    with pytest.raises(CorpusError, match="lib/m.o: m.o.bc resolves to .*outside"):
        load_corpus(root)


def test_symlinks_that_stay_inside_the_corpus_are_fine(tmp_path: Path) -> None:
    root = make_corpus(tmp_path, {"a/m.o": CC1, "b/keep.o": CC1})
    os.symlink(root / "a", root / "alias")
    (root / DESCRIPTION_FILE).write_text(json.dumps({"modules": ["a/m.o", "alias/m.o"]}))
    assert load_corpus(root).names == ("a/m.o", "alias/m.o")


def test_the_command_line_accepts_flags_listed_in_mlgo_allow_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pymlgo.cli.common import resolve_corpus

    make_corpus(tmp_path, {"m.o": (*CC1, "-fprofile-sample-use=/data/app.prof",
                                   "-fsanitize-ignorelist=/data/ignore.txt")})
    with pytest.raises(CorpusError, match="MLGO_ALLOW_FLAGS|fprofile-sample-use"):
        resolve_corpus(str(tmp_path))
    monkeypatch.setenv("MLGO_ALLOW_FLAGS", "-fprofile-sample-use= -fsanitize-ignorelist=")
    assert resolve_corpus(str(tmp_path)).names == ("m.o",)
