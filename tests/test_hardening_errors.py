"""Errors people will hit get a message that says what to do, and leave nothing half-written.

- no zig binary for this platform in the ziglang package, or a compiler binary built for
  another platform;
- a clang older than 17 (a stand-in script that answers `--version` like clang 16: only
  the version check is exercised, nothing is compiled with it);
- a corpus built for another target (real compiles: another ELF target works, a Mach-O or
  COFF one is refused with the reason);
- bitcode newer than the compiler (real bitcode whose producer and epoch are rewritten the
  way a future LLVM would write them; the real clang refuses it);
- a disk that fills up while a checkpoint, a policy or a cache entry is written (a real
  file-size limit, RLIMIT_FSIZE): the old file stays whole and no temp file is left.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.corpus.command import format_cmd
from pymlgo.corpus.format import DESCRIPTION_FILE
from pymlgo.evaluate.baseline import BaselineCache
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.bitcode import producer
from pymlgo.toolchain.compiler import Compiler, CompilerError, find_compiler
from pymlgo.toolchain.size import ObjectSize

# --- no usable zig binary for this platform --------------------------------------------------


def test_a_ziglang_without_a_binary_for_this_platform_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ziglang

    # what an install for another platform looks like: the package, but no zig next to it
    monkeypatch.setattr(ziglang, "__file__", str(tmp_path / "__init__.py"))
    monkeypatch.delenv("MLGO_CLANG", raising=False)
    with pytest.raises(CompilerError, match=r"no zig binary.*wheel per platform.*"
                       r"--force-reinstall.*--clang PATH"):
        find_compiler(None)


def test_a_compiler_binary_for_another_platform_is_named_as_such(tmp_path: Path) -> None:
    foreign = tmp_path / "clang"
    # an ELF header for a machine this kernel cannot run: exec fails with ENOEXEC
    foreign.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00\xff\xff" + bytes(44))
    foreign.chmod(0o755)
    with pytest.raises(CompilerError, match=r"binary for another platform.*--clang PATH"):
        find_compiler(str(foreign))


# --- clang < 17 -----------------------------------------------------------------------------


def fake_old_clang(directory: Path) -> Path:
    script = directory / "clang-16"
    script.write_text("#!/bin/sh\necho 'Ubuntu clang version 16.0.6 (15)'\n"
                      "echo 'Target: x86_64-pc-linux-gnu'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_clang_16_is_refused_with_the_reason_and_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(CompilerError) as err:
        find_compiler(fake_old_clang(tmp_path))
    msg = str(err.value)
    assert "clang 16.0.6" in msg and ">= 17" in msg
    assert "interactive model runner" in msg  # why
    assert "bundled clang" in msg and "--clang" in msg and "MLGO_CLANG" in msg  # what to do


def test_mlgo_eval_with_clang_16_exits_2_with_the_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLGO_CLANG", str(fake_old_clang(tmp_path)))
    assert main(["eval", "--corpus", str(tmp_path), "--policy", "default"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlgo eval: ") and "clang 16.0.6" in err and "Traceback" not in err


def test_mlgo_eval_on_a_hostile_corpus_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m.o.bc").write_bytes(b"BC\xc0\xde")
    (tmp_path / "m.o.cmd").write_bytes(format_cmd(("-cc1", "-Oz", "-load", "/tmp/evil.so")))
    (tmp_path / DESCRIPTION_FILE).write_text(json.dumps({"modules": ["m.o"]}))
    assert main(["eval", "--corpus", str(tmp_path), "--policy", "default"]) == 2
    err = capsys.readouterr().err
    assert "'-load' loads code into the compiler" in err and "Traceback" not in err


# --- corpus built for another target --------------------------------------------------------


def retarget(job: CompileJob, triple: str) -> CompileJob:
    """The module's command with another -triple, and no x86 CPU/features."""
    out: list[str] = []
    skip = False
    for a in job.cmd:
        if skip:
            skip = False
            continue
        if a in ("-triple", "-target-cpu", "-tune-cpu", "-target-feature"):
            skip = True
            if a == "-triple":
                out += ["-triple", triple]
            continue
        out.append(a)
    return CompileJob(job.module, job.bitcode, tuple(out))


def test_a_corpus_for_another_elf_target_still_measures(
    compiler: Compiler, minic_jobs: list[CompileJob]
) -> None:
    res = compile_baseline(compiler, retarget(minic_jobs[0], "aarch64-unknown-linux-gnu"))
    assert res.ok and res.size and res.size > 0


@pytest.mark.parametrize(("triple", "fmt"), [("x86_64-apple-macosx14.0.0", "Mach-O"),
                                             ("x86_64-pc-windows-msvc", "COFF")])
def test_a_corpus_for_a_non_elf_platform_fails_saying_so(
    compiler: Compiler, minic_jobs: list[CompileJob], triple: str, fmt: str
) -> None:
    job = retarget(minic_jobs[0], triple)
    for res in (compile_baseline(compiler, job),
                compile_with_policy(compiler, job, builtin_policy("default"))):
        assert not res.ok and res.error
        assert f"wrote a {fmt} object" in res.error and triple in res.error
        assert "rebuild the corpus for an ELF target" in res.error


# --- bitcode newer than the compiler --------------------------------------------------------

_CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"


class BitEditor:
    """Read and write LLVM bitstream fields in place (LSB-first), for hand-made bitcode."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)

    def get(self, pos: int, n: int) -> int:
        return sum(((self.data[(pos + i) // 8] >> ((pos + i) % 8)) & 1) << i for i in range(n))

    def put(self, pos: int, n: int, value: int) -> None:
        for i in range(n):
            byte, bit = divmod(pos + i, 8)
            self.data[byte] = (self.data[byte] & ~(1 << bit)) | (((value >> i) & 1) << bit)

    def find_char6(self, text: str) -> int:
        want = [(_CHAR6.index(c) >> i) & 1 for c in text for i in range(6)]
        have = [(b >> i) & 1 for b in self.data[:512] for i in range(8)]
        return next(p for p in range(len(have) - len(want)) if have[p:p + len(want)] == want)

    def vbr(self, pos: int, n: int) -> tuple[int, int]:
        value, shift = 0, 0
        while True:
            chunk = self.get(pos, n)
            pos += n
            value |= (chunk & ((1 << (n - 1)) - 1)) << shift
            shift += n - 1
            if not chunk >> (n - 1):
                return value, pos


def as_future_llvm(bitcode: bytes, current: str) -> bytes:
    """`bitcode` as LLVM 99 would label it: producer "LLVM99..." and bitcode epoch 1.

    LLVM writes the IDENTIFICATION block as: the producer string (char6 array), then an
    abbreviation definition for the epoch record, then that record with the epoch (VBR6).
    """
    ed = BitEditor(bitcode)
    at = ed.find_char6(f"LLVM{current}")
    major = current.split(".")[0]
    for k, c in enumerate("99"):
        ed.put(at + 6 * (4 + k), 6, _CHAR6.index(c))
    pos = at + 6 * len(f"LLVM{current}")
    assert ed.get(pos, 5) == 2, "expected DEFINE_ABBREV for the epoch record"
    nops, pos = ed.vbr(pos + 5, 5)
    for _ in range(nops):
        literal = ed.get(pos, 1)
        pos += 1
        if literal:
            _, pos = ed.vbr(pos, 8)
        else:
            enc = ed.get(pos, 3)
            pos += 3
            if enc in (1, 2):
                _, pos = ed.vbr(pos, 5)
    pos += 5  # the record's abbreviation id
    epoch, _ = ed.vbr(pos, 6)
    assert epoch == 0 and len(major) == 2
    ed.put(pos, 6, 1)
    return bytes(ed.data)


def test_the_producer_of_real_bitcode_is_read(compiler: Compiler,
                                              minic_jobs: list[CompileJob]) -> None:
    assert {producer(j.bitcode) for j in minic_jobs} == {f"LLVM{compiler.version}"}
    assert producer(b"not bitcode") is None
    assert producer(minic_jobs[0].bitcode[:20]) is None  # cut inside the block


def test_bitcode_from_a_newer_llvm_fails_naming_its_producer_and_the_fix(
    compiler: Compiler, minic_jobs: list[CompileJob]
) -> None:
    job = minic_jobs[0]
    future = CompileJob(job.module, as_future_llvm(job.bitcode, compiler.version), job.cmd)
    assert producer(future.bitcode) == "LLVM99" + compiler.version[2:]

    for res in (compile_baseline(compiler, future),
                compile_with_policy(compiler, future, builtin_policy("default"))):
        assert not res.ok and res.error
        assert "Incompatible epoch" in res.error  # the compiler's own words ...
        assert "newer than this compiler" in res.error  # ... and what they mean
        assert f"LLVM99{compiler.version[2:]}" in res.error and "--clang" in res.error


def test_damaged_bitcode_is_called_damaged_not_newer(
    compiler: Compiler, minic_jobs: list[CompileJob]
) -> None:
    job = minic_jobs[0]
    damaged = bytearray(job.bitcode)
    damaged[len(damaged) // 2:len(damaged) // 2 + 32] = b"\xff" * 32
    res = compile_baseline(compiler, CompileJob(job.module, bytes(damaged), job.cmd))
    assert not res.ok and res.error
    assert "damaged" in res.error and "newer" not in res.error


# --- disk full while writing ------------------------------------------------------------------


@contextmanager
def file_size_limit(nbytes: int) -> Iterator[None]:
    """Writes past `nbytes` fail with EFBIG, as on a full disk (SIGXFSZ ignored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_checkpoint_write_that_runs_out_of_space_keeps_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    from pymlgo.train.trainer import CHECKPOINT_FILE, _atomic_write_bytes

    path = tmp_path / CHECKPOINT_FILE
    first = pickle.dumps({"iteration": 1, "state": np.zeros(10)})
    _atomic_write_bytes(path, first)
    second = pickle.dumps({"iteration": 2, "state": np.zeros(100_000)})  # ~800 KB

    with file_size_limit(64 * 1024), pytest.raises(OSError):
        _atomic_write_bytes(path, second)

    assert snapshot(tmp_path) == {CHECKPOINT_FILE: first}  # old one whole, no temp file
    _atomic_write_bytes(path, second)  # space again: the write goes through
    assert pickle.loads(path.read_bytes())["iteration"] == 2


def test_a_policy_save_that_runs_out_of_space_keeps_the_previous_policy(
    tmp_path: Path,
) -> None:
    from pymlgo.policy.store import load_policy_dir
    from pymlgo.train.trainer import save_policy_dir

    from .test_policy_inlining import make_policy

    best = tmp_path / "best"
    save_policy_dir(make_policy(0), best)
    before = snapshot(best)
    bigger = make_policy(1, hidden=(400, 400))  # ~1 MB of weights

    with file_size_limit(256 * 1024), pytest.raises(OSError):
        save_policy_dir(bigger, best)

    assert snapshot(best) == before
    assert load_policy_dir(best).hidden == (40, 40, 20)
    save_policy_dir(bigger, best)
    assert load_policy_dir(best).hidden == (400, 400)


def test_a_baseline_cache_entry_that_cannot_be_written_leaves_no_temp_file(
    tmp_path: Path,
) -> None:
    cache = BaselineCache(tmp_path)
    kept = ObjectSize(code=1234, unwind=56, berkeley_text=1290)
    cache.put("a" * 64, kept)
    with file_size_limit(0), pytest.raises(OSError):
        cache.put("b" * 64, ObjectSize(code=5678, berkeley_text=5678))
    assert sorted(os.listdir(tmp_path / "baselines")) == ["a" * 64 + ".json"]
    assert cache.get("a" * 64) == kept and cache.get("b" * 64) is None
