"""`mlgo corpus capture --target T` for another target than the host: the build's links and
archives run zig's linker driver, `zig ar` and `zig ranlib`, never the host's binutils."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pymlgo.corpus.capture import capture
from pymlgo.corpus.capture_wrapper import is_link
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.inlining import compile as inl
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import bundled_zig, find_compiler
from pymlgo.toolchain.cross import is_cross
from tests.conftest import DATA

# A static library (`ar rcs` + `ranlib`, as its Makefile spells them) and a program that
# links it and printf from the C library.
RINGLIB = DATA / "ringlib"
EM_AARCH64 = 183


def test_a_target_is_cross_when_its_architecture_or_os_is_not_the_hosts() -> None:
    on_x86_linux = {"machine": "x86_64", "system": "Linux"}
    assert not is_cross("x86_64-linux-gnu", **on_x86_linux)
    assert not is_cross("x86_64-unknown-linux-gnu", **on_x86_linux)
    assert is_cross("aarch64-linux-gnu", **on_x86_linux)
    assert is_cross("riscv64-linux-gnu", **on_x86_linux)
    assert is_cross("thumbv7m-none-eabi", **on_x86_linux)
    assert is_cross("x86_64-windows-gnu", **on_x86_linux)
    assert not is_cross("aarch64-linux-gnu", machine="arm64", system="Linux")


def test_links_are_told_from_compiles_preprocessing_and_queries() -> None:
    assert is_link(["-Oz", "app.o", "-L.", "-lring", "-o", "app"])
    assert is_link(["main.c", "-o", "main"])
    assert not is_link(["-Oz", "-c", "a.c", "-o", "a.o"])
    assert not is_link(["-E", "a.c"])
    assert not is_link(["--version"])
    assert not is_link(["-print-search-dirs"])
    assert not is_link(["-dumpmachine"])


def _elf_machine(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return int.from_bytes(head[16:18], "little"), int.from_bytes(head[18:20], "little")


@pytest.mark.parametrize("clang", [None, "/usr/bin/clang-19"], ids=["bundled", "debian-clang-19"])
def test_a_cross_build_with_an_archive_and_a_link_is_captured_for_aarch64(
        clang: str | None, tmp_path: Path) -> None:
    if clang is not None and shutil.which(clang) is None:
        pytest.skip(f"{clang} is not installed (apt-get install {Path(clang).name})")
    project = tmp_path / "ringlib"
    shutil.copytree(RINGLIB, project)
    log = tmp_path / "build.log"

    with open(log, "wb") as out:
        result = capture(["make"], tmp_path / "corpus", cwd=project, clang=clang,
                         target="aarch64-linux-gnu", progress=False, build_output=out.fileno())

    text = log.read_text(errors="replace")
    assert "bfd plugin" not in text and "emulation" not in text, text
    assert result.compiles == 3
    e_type, machine = _elf_machine(project / "app")
    assert machine == EM_AARCH64 and e_type in (2, 3)  # an executable (static or PIE)
    members = subprocess.run([str(bundled_zig()), "ar", "t", str(project / "libring.a")],
                             capture_output=True, text=True, check=True).stdout.split()
    assert members == ["ring.o", "crc.o"]
    assert _elf_machine(project / "lib" / "ring.o")[1] == EM_AARCH64

    compiler = find_compiler(clang)
    jobs = corpus_jobs(load_corpus(tmp_path / "corpus", clang=clang))
    assert sorted(j.module for j in jobs) == ["app", "lib/crc", "lib/ring"]
    for job in jobs:  # the aarch64 modules compile with a policy like any others
        plain = inl.compile_baseline(compiler, job)
        default = inl.compile_with_policy(compiler, job, builtin_policy("default"))
        assert plain.error is None and default.sizes == plain.sizes, (job.module, default.error)
