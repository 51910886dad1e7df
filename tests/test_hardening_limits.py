"""Resource limits per compile: memory (address space) as well as time are bounded.

A compile that needs more memory than allowed fails — listed like any other failure, with
the limit named — instead of driving a training machine into swap.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymlgo.evaluate.eval import evaluate
from pymlgo.problems.base import CompileJob, CompileSettings
from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.run import run, with_memory_limit
from pymlgo.workers.local import LocalPool
from pymlgo.workers.protocol import WorkSpec

TOO_LITTLE_MB = 100  # clang 22 (zig) cannot even start its pass pipeline in this
ENOUGH_MB = 4096


def test_the_limit_is_an_rlimit_as_of_the_compiler_process_itself() -> None:
    probe = run(["/bin/sh", "-c", "ulimit -v >&2"], memory_mb=123)
    assert probe.returncode == 0 and probe.stderr.strip() == str(123 * 1024)  # KiB
    assert run(["/bin/sh", "-c", "ulimit -v >&2"]).stderr.strip() != str(123 * 1024)
    assert with_memory_limit(["clang", "-cc1"], None) == ["clang", "-cc1"]
    with pytest.raises(ValueError, match="memory limit"):
        with_memory_limit(["clang"], 0)


def test_a_compile_over_its_memory_limit_fails_naming_the_limit(
    compiler: Compiler, minic_jobs: list[CompileJob]
) -> None:
    job = minic_jobs[0]
    free = compile_baseline(compiler, job)
    assert free.ok and free.size

    roomy = compile_baseline(compiler, job, CompileSettings(memory_mb=ENOUGH_MB))
    assert roomy.ok and roomy.size == free.size

    too_little = CompileSettings(memory_mb=TOO_LITTLE_MB)
    for res in (compile_baseline(compiler, job, too_little),
                compile_with_policy(compiler, job, builtin_policy("default"), too_little)):
        assert not res.ok and res.error
        assert f"limited to {TOO_LITTLE_MB} MiB" in res.error


def test_the_limit_travels_to_the_workers_of_an_eval(
    compiler: Compiler, minic_jobs: list[CompileJob], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path))
    jobs = minic_jobs[:2]
    with LocalPool(1) as pool:
        starved = evaluate(pool, compiler, jobs, builtin_policy("default"),
                           spec=WorkSpec(memory_mb=TOO_LITTLE_MB))
        fed = evaluate(pool, compiler, jobs, builtin_policy("default"),
                       spec=WorkSpec(memory_mb=ENOUGH_MB))
    assert [m.error is not None for m in starved.modules] == [True, True]
    assert all(f"limited to {TOO_LITTLE_MB} MiB" in (m.error or "") for m in starved.modules)
    assert fed.ok_modules == fed.modules and fed.change == 0.0
