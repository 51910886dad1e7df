"""The baseline (-Oz) size cache: a repeat evaluation compiles nothing; anything that could
change the baseline (compiler, flag edits, pymlgo's own recompile recipe) misses the cache."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pymlgo.corpus import demo
from pymlgo.corpus.command import FlagEdits
from pymlgo.evaluate import baseline
from pymlgo.evaluate.baseline import BaselineCache, baseline_key, baseline_results
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.workers.protocol import WorkSpec
from pymlgo.workers.task import execute
from tests.conftest import clang_behind_script


class CountingExecutor:
    """Compiles each job here with the real clang and remembers which modules it compiled."""

    num_workers = 1

    def __init__(self) -> None:
        self.compiled: list[str] = []

    def run(self, spec: WorkSpec, jobs: Sequence[CompileJob]) -> Iterator[ModuleResult]:
        for job in jobs:
            self.compiled.append(job.module)
            yield execute(spec, job)

    def close(self) -> None:
        pass


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private MLGO_CACHE_DIR: the user's own cache is never read or written."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MLGO_CACHE_DIR", str(root))
    return root


@pytest.fixture
def jobs(minic_jobs: list[CompileJob]) -> list[CompileJob]:
    return minic_jobs[:2]


def evaluate(jobs: list[CompileJob], compiler: Compiler,
             spec: WorkSpec | None = None) -> tuple[dict[str, int], list[str]]:
    """Baseline sizes and the modules that had to be compiled for them."""
    executor = CountingExecutor()
    results = list(baseline_results(executor, jobs, compiler, spec=spec))
    assert all(r.ok and r.size for r in results), [r.error for r in results]
    return {r.module: int(r.size or 0) for r in results}, executor.compiled


def test_every_pymlgo_cache_lives_under_mlgo_cache_dir(cache_dir: Path) -> None:
    assert baseline.cache_root() == cache_dir == demo.cache_root()
    assert BaselineCache().root == cache_dir / "baselines"


def test_a_second_evaluation_compiles_nothing_and_gives_the_same_sizes(
        cache_dir: Path, jobs: list[CompileJob], compiler: Compiler) -> None:
    first, compiled_first = evaluate(jobs, compiler)
    second, compiled_second = evaluate(jobs, compiler)

    assert compiled_first == [j.module for j in jobs]
    assert compiled_second == []
    assert second == first
    assert len(list((cache_dir / "baselines").glob("*.json"))) == len(jobs)


def test_another_compiler_misses_the_cache(cache_dir: Path, jobs: list[CompileJob],
                                           compiler: Compiler, tmp_path: Path) -> None:
    # The same clang behind a script: another compiler identity, the same code.
    script = clang_behind_script(compiler, tmp_path / "bin")
    other = find_compiler(script)
    assert other.identity != compiler.identity
    bundled_sizes, _ = evaluate(jobs, compiler)

    other_sizes, compiled = evaluate(jobs, other, WorkSpec(clang=str(script)))

    assert compiled == [j.module for j in jobs]
    assert other_sizes == bundled_sizes


def test_flag_edits_miss_the_cache_and_leave_the_plain_entries(
        cache_dir: Path, jobs: list[CompileJob], compiler: Compiler) -> None:
    plain, _ = evaluate(jobs, compiler)
    at_o0 = WorkSpec(edits=FlagEdits(replace=(("-Oz", "-O0"),)))

    edited, compiled = evaluate(jobs, compiler, at_o0)
    _, compiled_again = evaluate(jobs, compiler)

    assert compiled == [j.module for j in jobs]
    assert all(edited[m] > plain[m] for m in plain)
    assert compiled_again == []


def test_a_new_recompile_recipe_misses_the_cache(cache_dir: Path, jobs: list[CompileJob],
                                                 compiler: Compiler,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    evaluate(jobs, compiler)
    old_key = baseline_key(compiler, WorkSpec(), jobs[0])
    monkeypatch.setattr(baseline, "BASELINE_RECIPE_VERSION",
                        baseline.BASELINE_RECIPE_VERSION + 1)

    _, compiled = evaluate(jobs, compiler)

    assert baseline_key(compiler, WorkSpec(), jobs[0]) != old_key
    assert compiled == [j.module for j in jobs]


def test_a_module_whose_bitcode_file_went_away_is_an_error_and_the_rest_go_on(
    cache_dir: Path, jobs: list[CompileJob], tmp_path: Path
) -> None:
    compiler = find_compiler(None)
    gone = tmp_path / "gone.bc"
    gone.write_bytes(jobs[0].bitcode)
    lazy = CompileJob.from_file("gone", gone, jobs[0].cmd)
    gone.unlink()  # e.g. removed while a long run was starting
    executor = CountingExecutor()
    results = {r.module: r for r in baseline_results(executor, [lazy, jobs[1]], compiler)}
    assert results["gone"].size is None
    assert "cannot read bitcode" in (results["gone"].error or "")
    assert results[jobs[1].module].ok and results[jobs[1].module].size
    assert executor.compiled == [jobs[1].module]
