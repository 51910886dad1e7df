"""Regalloc compiles that exit with 0 but leave no usable object or remarks are failures
with a reason, never an exception out of the worker or a made-up zero cost.

The real bundled clang runs behind a wrapper (passed as the compiler) that damages what a
successful compile left, chosen by the module's source file name: `noobj_*` deletes the
object, `badobj_*` overwrites it with text, `noremarks_*` deletes the remarks YAML and
`badremarks_*` makes its copy counts non-numeric.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pymlgo.problems.base import CompileJob
from pymlgo.problems.regalloc.compile import compile_baseline, compile_with_policy
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler, find_compiler

from .workers_support import compile_to_jobs

SOURCE = """
int table[64];
int mix_%d(int n, int k) {
  int a = 0, b = 1, c = 2, d = 3, e = 4, f = 5;
  for (int i = 0; i < n; i++) {
    a += table[(i + k) & 63] * b; b ^= a + c; c += d * e; d -= f + a; e += b; f ^= c;
  }
  return a + b + c + d + e + f;
}
"""

WRAPPER = """#!/bin/bash
prev=; name=; out=; remarks=
for a in "$@"; do
  case "$prev" in -main-file-name) name=$a ;; -o) out=$a ;; -opt-record-file) remarks=$a ;; esac
  prev=$a
done
{zig} clang "$@" || exit $?
case "$name" in
  noobj_*) rm -f "$out" ;;
  badobj_*) echo garbage > "$out" ;;
  noremarks_*) rm -f "$remarks" ;;
  badremarks_*) sed -i 's/NumVRCopies: .*/NumVRCopies: lots/' "$remarks" ;;
esac
exit 0
"""

STEMS = ["ok_a", "noobj_b", "badobj_c", "noremarks_d", "badremarks_e"]


@pytest.fixture
def damaged(tmp_path: Path, compiler: Compiler) -> tuple[Compiler, dict[str, CompileJob]]:
    src_dir, obj_dir = tmp_path / "src", tmp_path / "obj"
    src_dir.mkdir()
    obj_dir.mkdir()
    for i, stem in enumerate(STEMS):
        (src_dir / f"{stem}.c").write_text(SOURCE % i)
    jobs = compile_to_jobs(compiler, [src_dir / f"{s}.c" for s in STEMS], obj_dir, "r")
    wrapper = tmp_path / "clang-damaging"
    wrapper.write_text(WRAPPER.format(zig=compiler.path))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return find_compiler(wrapper), {j.module.split("/")[-1]: j for j in jobs}


@pytest.mark.parametrize("policy", ["default", "random:3"])
def test_damaged_outputs_become_errors_that_say_what_is_missing(damaged, policy):
    wrapped, jobs = damaged
    compile_ = ((lambda job: compile_baseline(wrapped, job)) if policy == "default" else
                (lambda job: compile_with_policy(wrapped, job, builtin_policy(policy))))
    results = {stem: compile_(job) for stem, job in jobs.items()}

    ok = results["ok_a"]
    assert ok.error is None and ok.size and ok.extra
    for stem in STEMS[1:]:
        assert results[stem].size is None and results[stem].error, stem
    assert "wrote no object" in (results["noobj_b"].error or "")
    assert "not an object" in (results["badobj_c"].error or "")
    assert "wrote no optimization remarks" in (results["noremarks_d"].error or "")
    assert "unreadable optimization remarks" in (results["badremarks_e"].error or "")
