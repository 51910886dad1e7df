"""Compiler faults during a real evaluation: crashes, hangs, missing objects, garbage input.

The compiler is the real bundled clang behind a small wrapper script (passed as --clang)
that injects one fault per module, chosen by the module's source file name:

- `crash_*`: the real clang under a 150 MB address-space limit; it dies with SIGSEGV;
- `hang_*`: the "compiler" sleeps for an hour instead;
- `noobj_*`: the real clang compiles, then the object is deleted (exit status 0);
- `badobj_*`: the real clang compiles, then the object is truncated to garbage;
- a module whose bitcode is garbage, and one whose .cmd has an option clang rejects.

The run must finish with every good module measured, every bad one listed with the
compiler's own words (stderr tail) — and leave no process, FIFO or temp dir behind.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from pymlgo.evaluate.eval import evaluate
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.workers.factory import make_executor
from pymlgo.workers.protocol import WorkSpec

from .workers_support import compile_to_jobs

TIMEOUT_S = 10.0  # the modules are tiny (~50 ms each); only the hang reaches this

SOURCE = """
static int sq(int x) { return x * x; }
static int tri(int x) { int s = 0; for (int i = 0; i < x; i++) s += sq(i) + %d; return s; }
int entry_%s(int n) { return tri(n) + sq(n) - tri(n / 2); }
"""

WRAPPER = """#!/bin/bash
# Real clang with one fault injected per module, chosen by its -main-file-name.
prev=; name=; out=
for a in "$@"; do
  case "$prev" in -main-file-name) name=$a ;; -o) out=$a ;; esac
  prev=$a
done
case "$name" in
  crash_*) ulimit -v 150000; exec {zig} clang "$@" ;;
  hang_*) exec -a {marker} sleep 3600 ;;
  noobj_*) {zig} clang "$@" || exit $?; rm -f "$out"; exit 0 ;;
  badobj_*) {zig} clang "$@" || exit $?; echo garbage > "$out"; exit 0 ;;
  *) exec {zig} clang "$@" ;;
esac
"""


def ours(needles: list[str]) -> list[int]:
    """Pids of live processes whose command line mentions any of `needles`, and zombie
    children of this process (a compile that was never reaped)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
        except OSError:
            continue
        zombie_child = state == b"Z" and int(ppid) == os.getpid()
        if zombie_child or any(n.encode() in cmdline for n in needles):
            found.append(int(entry.name))
    return found


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def faulty(tmp_path: Path, compiler: Compiler) -> tuple[Compiler, list[CompileJob], str]:
    assert compiler.bundled
    src_dir, obj_dir = tmp_path / "src", tmp_path / "obj"
    src_dir.mkdir()
    obj_dir.mkdir()
    stems = ["ok_a", "ok_b", "ok_c", "crash_d", "hang_e", "noobj_f", "badobj_g"]
    for i, stem in enumerate(stems):
        (src_dir / f"{stem}.c").write_text(SOURCE % (i, stem))
    jobs = compile_to_jobs(compiler, [src_dir / f"{s}.c" for s in stems], obj_dir, "f")
    ok_a = jobs[0]
    jobs.append(CompileJob("f/garbage_bc", b"BC\xc0\xde" + b"\x17" * 200, ok_a.cmd))
    jobs.append(CompileJob("f/bad_flag", ok_a.bitcode,
                           (*ok_a.cmd, "-mllvm", "-no-such-llvm-option")))
    marker = f"mlgo-fault-hang-{tmp_path.name}"
    wrapper = tmp_path / "bin" / "clang-faulty"
    wrapper.parent.mkdir()
    wrapper.write_text(WRAPPER.format(zig=compiler.path, marker=marker))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return find_compiler(wrapper), jobs, marker


def test_an_eval_with_crashing_hanging_and_objectless_compiles_completes_cleanly(
    faulty: tuple[Compiler, list[CompileJob], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrapped, jobs, marker = faulty
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    # Every temp dir, FIFO and worker scratch dir of this run lands here, so what is left
    # afterwards is ours (other tests may be using /tmp at the same time).
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache"))
    needles = [marker, str(private_tmp), str(wrapped.path.parent)]
    assert ours(needles) == []

    started = time.monotonic()
    with make_executor(None, 2) as executor:
        report = evaluate(executor, wrapped, jobs, builtin_policy("default"),
                          spec=WorkSpec(clang=str(wrapped.path), timeout=TIMEOUT_S))
    elapsed = time.monotonic() - started

    rows = {m.name: m for m in report.modules}
    assert sorted(rows) == sorted(j.module for j in jobs)
    for name in ("f/ok_a", "f/ok_b", "f/ok_c"):
        assert rows[name].error is None, rows[name].error
        assert rows[name].policy_bytes == rows[name].baseline_bytes > 0
    errors = {name: rows[name].error or "" for name in rows if not name.startswith("f/ok_")}
    assert all(errors.values()), errors
    # Each failure says what happened, in the compiler's words where it had any.
    assert "killed by SIGSEGV" in errors["f/crash_d"]
    assert "timeout" in errors["f/hang_e"] or "no compiler opened" in errors["f/hang_e"]
    assert "wrote no object" in errors["f/noobj_f"]
    assert "not an object" in errors["f/badobj_g"]
    assert errors["f/garbage_bc"].count("compiler exited with 1: error: ") == 2  # both phases
    assert "no-such-llvm-option" in errors["f/bad_flag"]
    assert report.baseline_total == sum(rows[n].baseline_bytes or 0 for n in
                                        ("f/ok_a", "f/ok_b", "f/ok_c"))
    # 0 hangs: the hang cost one timeout per phase (baseline, policy), not more.
    assert elapsed < 4 * TIMEOUT_S + 60

    deadline = time.monotonic() + 10  # the kernel may take a moment to reap
    while ours(needles) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ours(needles) == []
    assert leftovers(private_tmp) == []
    print(f"\nfault run: {len(jobs)} modules, {len(errors)} failed as injected, "
          f"{elapsed:.1f}s, 0 leaked processes, 0 leftover files")
    for name, err in sorted(errors.items()):
        print(f"  {name}: {err[:160]}")
    shutil.rmtree(private_tmp)
