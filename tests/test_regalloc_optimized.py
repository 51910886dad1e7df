"""Register allocation compiles run the code generator only, on each module's middle-end
output made once and cached: the same costs, decisions and allocated bytes as a full -O2
compile (real clang, demo modules)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pymlgo.corpus.command import FlagEdits
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult
from pymlgo.problems.regalloc import compile as regalloc_compile
from pymlgo.problems.regalloc import optimized
from pymlgo.problems.regalloc.compile import compile_baseline, compile_with_policy
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler

# a small module, one with a few hundred decisions, and zstd's divsufsort, where
# reading bitcode back without its use-list order changed the code
MODULES = ("lz4/lz4libs/lz4frame", "brotli/c/enc/cluster", "zstd/lib/dictBuilder/divsufsort")


@pytest.fixture(scope="module")
def demo_jobs(demo_corpus_dir: Path) -> dict[str, CompileJob]:
    return {j.module: j for j in corpus_jobs(load_corpus(demo_corpus_dir))}


def full_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile as before the cache: the recorded command, middle-end included."""
    monkeypatch.setattr(regalloc_compile, "codegen_job", lambda *args, **kwargs: None)


def assert_same_compile(split: ModuleResult, full: ModuleResult) -> None:
    assert split.ok and full.ok, (split.error, full.error)
    assert split.size == full.size
    assert split.extra == full.extra  # the total cost, its parts and every function's cost
    assert split.decisions == full.decisions


@pytest.mark.parametrize("module", MODULES)
def test_a_codegen_only_compile_equals_the_full_compile_with_stock_and_a_policy(
        compiler: Compiler, demo_jobs: dict[str, CompileJob], module: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    job = demo_jobs[module]
    policy = builtin_policy("heuristic")
    record = CompileSettings(record=True)
    split_stock = compile_baseline(compiler, job)
    split_policy = compile_with_policy(compiler, job, policy, record)
    with monkeypatch.context() as m:
        full_compile(m)
        full_stock = compile_baseline(compiler, job)
        full_policy = compile_with_policy(compiler, job, policy, record)
    assert_same_compile(split_stock, full_stock)
    assert_same_compile(split_policy, full_policy)
    assert split_policy.decisions > 0
    # every decision saw the same features and got the same answer
    a, b = split_policy.trajectory, full_policy.trajectory
    assert a is not None and b is not None
    assert a.contexts == b.contexts
    assert a.features.keys() == b.features.keys()
    assert all(np.array_equal(a.features[k], b.features[k], equal_nan=True)
               for k in a.features)
    assert np.array_equal(a.advice, b.advice)


def test_the_middle_end_runs_once_per_module_and_flags(
        compiler: Compiler, demo_jobs: dict[str, CompileJob], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    job = demo_jobs["lz4/lz4libs/lz4frame"]
    runs: list[list[str]] = []
    real = optimized._run_middle_end

    def counted(compiler: Compiler, bitcode: bytes, argv: list[str],
                settings: CompileSettings) -> bytes | None:
        runs.append(argv)
        return real(compiler, bitcode, argv, settings)

    monkeypatch.setattr(optimized, "_run_middle_end", counted)
    first = optimized.codegen_job(compiler, job, "-O2", cache_dir=tmp_path)
    again = optimized.codegen_job(compiler, job, "-O2", cache_dir=tmp_path)
    assert first is not None and again is not None
    assert len(runs) == 1 and first.bitcode == again.bitcode != job.bitcode
    assert "-emit-llvm-uselists" in runs[0]
    assert len(list(tmp_path.rglob("*.bc"))) == 1
    # another middle-end flag is another middle-end output
    other = CompileSettings(edits=FlagEdits(add=("-fno-unroll-loops",)))
    assert optimized.codegen_job(compiler, job, "-O2", other, cache_dir=tmp_path) is not None
    assert len(runs) == 2 and len(list(tmp_path.rglob("*.bc"))) == 2


def test_an_unwritable_cache_costs_speed_not_the_compile(
        compiler: Compiler, demo_jobs: dict[str, CompileJob], tmp_path: Path) -> None:
    job = demo_jobs["lz4/lz4libs/lz4frame"]
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory would be")
    codegen = optimized.codegen_job(compiler, job, "-O2", cache_dir=blocked)
    assert codegen is not None and codegen.bitcode[:2] == b"BC"


def test_lto_commands_and_failing_modules_compile_in_full(
        compiler: Compiler, demo_jobs: dict[str, CompileJob], tmp_path: Path) -> None:
    job = demo_jobs["lz4/lz4libs/lz4frame"]
    thin = CompileJob(job.module, job.bitcode, (*job.cmd, "-flto=thin"))
    assert not optimized.splittable(thin.cmd)
    assert optimized.codegen_job(compiler, thin, "-O2", cache_dir=tmp_path) is None
    edited = CompileSettings(edits=FlagEdits(add=("-flto=thin",)))
    assert optimized.codegen_job(compiler, job, "-O2", edited, cache_dir=tmp_path) is None
    broken = CompileJob("broken", b"BC\xc0\xde not really bitcode", job.cmd)
    assert optimized.codegen_job(compiler, broken, "-O2", cache_dir=tmp_path) is None
    assert not list(tmp_path.rglob("*.bc"))
    # the full compile then says what is wrong, as it always did
    res = compile_baseline(compiler, broken)
    assert not res.ok and res.error
