"""Memory of an evaluation does not grow with the corpus: no module's bitcode is held
before it compiles, and the local pool queues only a window of jobs ahead of its workers.

The figure for 1,000 vs 10,000 modules is `benchmarks/many_modules.py`; these tests check
the mechanism on a small real corpus whose every file is made heavy (LLVM's bitcode
wrapper lets a module carry padding clang never reads), so holding bitcode shows.
"""

from __future__ import annotations

import dataclasses
import pickle
import tracemalloc
from pathlib import Path

import pytest

from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers.dispatch import Dispatcher
from pymlgo.workers.local import LocalPool
from pymlgo.workers.task import execute
from tests.workers_support import outcome, spec_for, wrap_bitcode, write_corpus

pytest_plugins = ("tests.workers_fixtures",)  # fixtures: worker_jobs, reference

PAD = 1 << 20  # per module file: 24 modules weigh 24 MiB


@pytest.fixture(scope="module")
def heavy_jobs(worker_jobs: list[CompileJob]) -> list[CompileJob]:
    """24 modules: the eight real ones three times under other names."""
    return [dataclasses.replace(j, module=f"r{k}/{j.module}") for k in range(3)
            for j in worker_jobs]


@pytest.fixture(scope="module")
def heavy_corpus(heavy_jobs: list[CompileJob], tmp_path_factory: pytest.TempPathFactory
                 ) -> Path:
    return write_corpus(tmp_path_factory.mktemp("heavy"), heavy_jobs, pad=PAD)


def test_corpus_jobs_hold_a_path_and_read_the_bitcode_each_time_it_is_asked_for(
    heavy_corpus: Path, tmp_path: Path
) -> None:
    jobs = corpus_jobs(load_corpus(heavy_corpus))
    assert jobs and all(j.data is None and j.path is not None for j in jobs)
    # what a worker receives is the command and a path, not the MiB behind it
    assert all(len(pickle.dumps(j)) < len(pickle.dumps(j.cmd)) + 1024 for j in jobs)
    job = jobs[0]
    assert job.path is not None and job.bitcode == job.path.read_bytes()
    assert len(job.bitcode) > PAD
    loaded = job.loaded()
    assert loaded.data == job.bitcode and loaded.path is None and loaded.cmd == job.cmd
    # read when used, not when listed: a file rewritten after listing is what compiles
    moved = tmp_path / "m.bc"
    moved.write_bytes(b"first")
    lazy = CompileJob.from_file("m", moved, job.cmd)
    moved.write_bytes(b"second")
    assert lazy.bitcode == b"second"
    with pytest.raises(ValueError, match="either"):
        CompileJob("m", b"bc", job.cmd, moved)


def test_a_padded_module_compiles_exactly_like_the_original(
    worker_jobs: list[CompileJob], reference: dict[str, dict[str, tuple[int, int]]]
) -> None:
    job = worker_jobs[0]
    heavy = dataclasses.replace(job, data=wrap_bitcode(job.bitcode, PAD))
    assert outcome([execute(spec_for("default"), heavy)]) == {
        job.module: reference["default"][job.module]}


def test_a_job_whose_file_is_gone_by_compile_time_is_a_module_error(
    worker_jobs: list[CompileJob], tmp_path: Path
) -> None:
    job = worker_jobs[0]
    gone = CompileJob.from_file(job.module, tmp_path / "gone.bc", job.cmd)
    res = execute(spec_for("default"), gone)
    assert not res.ok and "cannot read bitcode" in (res.error or "")
    assert "gone.bc" in (res.error or "")


def test_the_local_pool_queues_only_a_window_of_jobs_ahead_of_its_workers(
    heavy_jobs: list[CompileJob], reference: dict[str, dict[str, tuple[int, int]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ahead: list[int] = []
    yielded = 0
    real_submit = Dispatcher.submit

    def spy(self, run_id, index, module, blob):  # type: ignore[no-untyped-def]
        ahead.append(index + 1 - yielded)  # submitted so far minus results handed out
        return real_submit(self, run_id, index, module, blob)

    monkeypatch.setattr(Dispatcher, "submit", spy)
    results = []
    with LocalPool(2) as pool:
        for r in pool.run(spec_for("never"), heavy_jobs):
            yielded += 1
            results.append(r)
    assert len(ahead) == len(heavy_jobs)  # each job submitted once
    assert max(ahead) <= 2 * pool.num_workers < len(heavy_jobs)
    expected = {f"r{k}/{m}": v for k in range(3) for m, v in reference["never"].items()}
    assert outcome(results) == expected


def test_an_evaluation_holds_no_modules_bitcode_in_the_driver(
    heavy_corpus: Path, heavy_jobs: list[CompileJob], compiler: Compiler, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path))  # every baseline compiles too
    with LocalPool(2) as pool:
        pool.wait_ready()
        load_corpus(heavy_corpus)  # first use imports things: not the corpus's memory
        tracemalloc.start()
        try:
            jobs = corpus_jobs(load_corpus(heavy_corpus))
            listed, _ = tracemalloc.get_traced_memory()
            report = evaluate(pool, compiler, jobs, builtin_policy("default"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert len(report.ok_modules) == len(heavy_jobs)
    # 24 files of 1+ MiB went through; the listing holds none (its size is the modules'
    # cc1 commands, ~30 KiB each here), and at most one was in memory at a time (the
    # baseline cache key reads each once; the workers read their own)
    assert listed < 2 * PAD, f"listing the corpus took {listed / 2**20:.2f} MiB"
    assert peak < listed + 2 * PAD, f"the driver peaked at {peak / 2**20:.2f} MiB"
