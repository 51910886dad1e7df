"""The toolchain finds a usable clang, refuses old ones, and never leaves a child behind."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import CompilerError, find_compiler
from pymlgo.toolchain.elf import NotELFError, read_sections
from pymlgo.toolchain.size import text_size


def children_of_self() -> set[int]:
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        pids.update(int(p) for p in (task / "children").read_text().split())
    return pids


def fake_clang(tmp_path: Path, version: str) -> Path:
    """A stand-in that only answers --version: enough to test the version gate."""
    exe = tmp_path / "clang"
    exe.write_text(f"#!/bin/sh\necho 'clang version {version} (fake)'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_bundled_compiler_is_clang_22(compiler):
    assert compiler.bundled
    assert compiler.major == 22
    assert compiler.clang_argv[-1] == "clang"


def test_clang_older_than_17_is_refused_with_the_reason(tmp_path):
    with pytest.raises(CompilerError, match=r"clang >= 17.*interactive"):
        find_compiler(fake_clang(tmp_path, "16.0.6"))


def test_clang_17_or_newer_is_accepted(tmp_path):
    assert find_compiler(fake_clang(tmp_path, "17.0.1")).major == 17


def test_env_var_selects_the_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("MLGO_CLANG", str(fake_clang(tmp_path, "19.1.0")))
    assert find_compiler().version == "19.1.0"


def test_missing_or_non_clang_binary_is_a_clear_error(tmp_path):
    with pytest.raises(CompilerError, match="not found"):
        find_compiler(tmp_path / "no-such-clang")
    with pytest.raises(CompilerError, match="does not look like clang"):
        find_compiler("/bin/true")


def test_timeout_kills_and_reaps_the_whole_process_group():
    before = children_of_self()
    started = time.monotonic()
    with pytest.raises(run.CompileTimeout):
        run.run(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert time.monotonic() - started < 10
    assert children_of_self() <= before


def test_private_tmpdir_is_removed_even_on_error():
    with pytest.raises(RuntimeError), run.private_tmpdir() as tmp:
        (tmp / "x").write_text("x")
        kept = tmp
        raise RuntimeError
    assert not kept.exists()


def test_text_size_counts_only_executable_sections(compiler, tmp_path):
    src = tmp_path / "m.c"
    # a large constant table lands in .rodata, which `size`'s "text" column would count
    src.write_text("const int table[256] = {1};\nint get(int i) { return table[i & 255]; }\n")
    obj = tmp_path / "m.o"
    subprocess.run([*compiler.cc_argv, "-c", "-target", "x86_64-linux-gnu", "-mcpu=baseline",
                    "-Oz", str(src), "-o", str(obj)], check=True)
    size = text_size(obj)
    assert 0 < size < 64
    assert text_size(obj.read_bytes()) == size
    assert read_sections(obj, (".rodata", ".nothing"))[".nothing"] is None


def readelf_sections(obj: Path) -> dict[str, tuple[int, str]]:
    """Section name -> (size, flags), as binutils `readelf -SW` lists them."""
    out = subprocess.run(["readelf", "-SW", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    sections: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        if not re.match(r"\s*\[\s*\d+\]", line):
            continue
        fields = line.split("]", 1)[1].split()
        # Name (absent for the null section) and type come before the 16-digit address; then
        # offset, size, entry size, flags (absent when none), link, info, alignment.
        at = next(i for i, f in enumerate(fields) if re.fullmatch(r"[0-9a-f]{16}", f))
        name = fields[0] if at == 2 else ""
        rest = fields[at + 1:]
        flags = rest[3] if len(rest) == 7 else ""
        sections[name] = (int(rest[1], 16), flags)
    return sections


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils readelf")
def test_text_size_sums_every_executable_section_as_readelf_lists_them(compiler, tmp_path):
    src = tmp_path / "several.c"
    src.write_text(
        "static const int table[128] = {3, 1, 4, 1, 5, 9, 2, 6};\n"
        "__attribute__((noinline)) static int scale(int x) { return x * 7 + table[x & 127]; }\n"
        "int first(int x) { return scale(x) - 1; }\n"
        "int second(int x, int y) { int s = 0; while (x < y) s += scale(x++); return s; }\n"
        "int third(const char *p) { int n = 0; while (*p) n += scale(*p++); return n; }\n"
    )
    obj = tmp_path / "several.o"
    subprocess.run([*compiler.cc_argv, "-c", "-target", "x86_64-linux-gnu", "-mcpu=baseline",
                    "-Oz", "-ffunction-sections", "-fdata-sections", str(src), "-o", str(obj)],
                   check=True)

    sections = readelf_sections(obj)
    executable = {n: size for n, (size, flags) in sections.items() if "X" in flags}
    code = {n for n, size in executable.items() if size > 0}
    rodata = {n: size for n, (size, flags) in sections.items() if n.startswith(".rodata")}

    assert {".text.scale", ".text.first", ".text.second", ".text.third"} <= code
    assert text_size(obj) == sum(executable.values())
    assert rodata and sum(rodata.values()) >= 128 * 4
    assert not any("X" in sections[n][1] for n in rodata)


def test_non_elf_input_is_rejected(tmp_path):
    bogus = tmp_path / "x.o"
    bogus.write_bytes(b"!<arch>\nnot an object")
    with pytest.raises(NotELFError, match="not an ELF"):
        text_size(bogus)
