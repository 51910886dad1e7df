"""A stopped `trace_corpus` resumes where it stopped and ends with an uninterrupted run's bytes;
the heuristic's traced objects are its -Oz baselines. Real bundled clang, real modules."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from pymlgo.evaluate.baseline import BaselineCache, baseline_key, baseline_spec
from pymlgo.evaluate.trace import (
    HeuristicBaselineError,
    TraceSummary,
    read_sizes,
    trace_corpus,
)
from pymlgo.evaluate.trace_partial import (
    IDENTITY_FILE,
    JOURNAL_FILE,
    PartialTrace,
    PartialTraceError,
    partial_dir,
)
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.problems.inlining.compile import compile_baseline
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers.protocol import WorkSpec
from tests.test_trace_corpus import InProcessExecutor


class Stopped(Exception):
    """What the run is stopped with (as a Ctrl-C or the end of a session would)."""


class CountingExecutor(InProcessExecutor):
    """Runs jobs here and counts every compile, baseline (no policy) or traced; raises
    `Stopped` once `stop_after` traced results were handed out."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.baselines: Counter[str] = Counter()
        self.traced: Counter[str] = Counter()

    def run(self, spec: WorkSpec, jobs: Sequence[CompileJob]) -> Iterator[ModuleResult]:
        for res in super().run(spec, jobs):
            if spec.policy is None:
                self.baselines[res.module] += 1
            else:
                if self.stop_after is not None and sum(self.traced.values()) >= self.stop_after:
                    raise Stopped
                self.traced[res.module] += 1
            yield res


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def journaled(partial: Path) -> list[str]:
    """The modules of a partial directory's journal, in order (cut lines skipped)."""
    modules = []
    with contextlib.suppress(FileNotFoundError):
        for line in (partial / JOURNAL_FILE).read_text().splitlines():
            with contextlib.suppress(ValueError):
                modules.append(json.loads(line)["module"])
    return modules


def trace(compiler: Compiler, jobs: Sequence[CompileJob], policy: str, out: Path, cache: Path,
          executor: InProcessExecutor | None = None, spec: WorkSpec | None = None
          ) -> TraceSummary:
    return trace_corpus(executor or InProcessExecutor(), compiler, jobs, builtin_policy(policy),
                        out, spec=spec, cache=BaselineCache(cache), metadata={"corpus": "minic"})


@pytest.mark.parametrize("policy", ["default", "never"])
def test_a_stopped_trace_resumes_compiling_only_the_missing_modules_and_ends_identical(
    compiler, minic_jobs, tmp_path, policy
):
    reference = tmp_path / "reference"
    trace(compiler, minic_jobs, policy, reference, tmp_path / "ref-cache")

    out, cache = tmp_path / "run" / "trace", tmp_path / "cache"
    first = CountingExecutor(stop_after=2)
    with pytest.raises(Stopped):
        trace(compiler, minic_jobs, policy, out, cache, first)
    assert not out.exists()  # only a complete trace appears
    partial = partial_dir(out)
    assert journaled(partial) == list(first.traced) and len(first.traced) == 2
    # what a kill in the middle of a write leaves: a cut journal line, a temp file
    with open(partial / JOURNAL_FILE, "a") as f:
        f.write('{"module": "minic/')
    (partial / "trace" / "minic" / ".x.log.123.tmp").write_bytes(b"half")

    second = CountingExecutor(stop_after=1)  # stopped again
    with pytest.raises(Stopped):
        trace(compiler, minic_jobs, policy, out, cache, second)
    assert journaled(partial) == [*first.traced, *second.traced]

    third = CountingExecutor()
    summary = trace(compiler, minic_jobs, policy, out, cache, third)
    missing = {j.module for j in minic_jobs} - set(first.traced) - set(second.traced)
    assert set(third.traced) == missing and set(third.traced.values()) == {1}
    assert second.baselines == third.baselines == Counter()  # cached, or the traced objects
    assert summary.resumed == 3 and len(summary.traced) == len(minic_jobs)
    assert tree(out) == tree(reference)
    assert not partial.exists()


def test_the_heuristic_trace_compiles_each_module_once_and_its_baselines_are_plain_oz(
    compiler, minic_jobs, tmp_path
):
    cache = BaselineCache(tmp_path / "cache")
    executor = CountingExecutor()
    trace_corpus(executor, compiler, minic_jobs, builtin_policy("default"), tmp_path / "t",
                 cache=cache)
    assert executor.baselines == Counter()  # a cold cache, yet no -Oz compile
    assert executor.traced == {j.module: 1 for j in minic_jobs}
    rows = read_sizes(tmp_path / "t")
    spec = baseline_spec(WorkSpec())
    for job in minic_jobs:
        plain = compile_baseline(compiler, job)  # compiled on its own, no channel
        assert rows[job.module].baseline_bytes == plain.size
        assert cache.get(baseline_key(compiler, spec, job)) == plain.sizes  # later evals hit
    # with the cache warm, a later trace checks its objects against it, and compiles no -Oz
    again = CountingExecutor()
    trace_corpus(again, compiler, minic_jobs, builtin_policy("default"), tmp_path / "t2",
                 cache=cache)
    assert again.baselines == Counter() and tree(tmp_path / "t2") == tree(tmp_path / "t")


def test_a_cached_baseline_that_differs_from_the_heuristics_object_fails_loudly(
    compiler, minic_jobs, tmp_path
):
    cache = BaselineCache(tmp_path / "cache")
    job = minic_jobs[0]
    plain = compile_baseline(compiler, job)
    assert plain.sizes is not None
    key = baseline_key(compiler, baseline_spec(WorkSpec()), job)
    cache.put(key, replace(plain.sizes, code=plain.sizes.code + 16))  # not what -Oz gives
    with pytest.raises(HeuristicBaselineError, match=f"{job.module}: clang's heuristic"):
        trace_corpus(InProcessExecutor(), compiler, [job], builtin_policy("default"),
                     tmp_path / "t", cache=cache)
    assert not (tmp_path / "t").exists()


def test_a_partial_trace_of_another_policy_is_refused_and_kept(compiler, minic_jobs, tmp_path):
    out, cache = tmp_path / "trace", tmp_path / "cache"
    with pytest.raises(Stopped):
        trace(compiler, minic_jobs, "never", out, cache, CountingExecutor(stop_after=1))
    before = tree(partial_dir(out))
    other = CountingExecutor()
    with pytest.raises(PartialTraceError) as err:
        trace(compiler, minic_jobs, "always", out, cache, other)
    message = str(err.value)
    assert '"never" there, "always" here' in message
    assert f"rm -r {partial_dir(out)}" in message
    assert other.traced == other.baselines == Counter()  # refused before compiling
    assert tree(partial_dir(out)) == before


def test_a_partial_trace_of_another_size_metric_is_refused(compiler, minic_jobs, tmp_path):
    out, cache = tmp_path / "trace", tmp_path / "cache"
    with pytest.raises(Stopped):
        trace(compiler, minic_jobs, "never", out, cache, CountingExecutor(stop_after=1))
    with pytest.raises(PartialTraceError, match='size_metric: "allocated" there, "text" here'):
        trace(compiler, minic_jobs, "never", out, cache, spec=WorkSpec(size_metric="text"))


def test_a_module_whose_bitcode_changed_since_the_stop_is_traced_again(
    compiler, minic_jobs, tmp_path
):
    out, cache = tmp_path / "trace", tmp_path / "cache"
    first = CountingExecutor(stop_after=2)
    with pytest.raises(Stopped):
        trace(compiler, minic_jobs, "default", out, cache, first)
    changed_name = next(iter(first.traced))
    donor = next(j for j in minic_jobs if j.module not in first.traced)
    # the module now holds another module's bitcode and command
    jobs = [CompileJob(j.module, donor.bitcode, donor.cmd) if j.module == changed_name else j
            for j in minic_jobs]
    second = CountingExecutor()
    trace(compiler, jobs, "default", out, cache, second)
    assert changed_name in second.traced and len(second.traced) == len(minic_jobs) - 1
    assert read_sizes(out)[changed_name].policy_bytes == read_sizes(out)[donor.module].policy_bytes


def test_a_run_that_stops_before_any_module_leaves_nothing_behind(
    compiler, minic_jobs, tmp_path
):
    out = tmp_path / "traces" / "t"
    with pytest.raises(Stopped):
        trace(compiler, minic_jobs, "default", out, tmp_path / "cache",
              CountingExecutor(stop_after=0))
    assert list((tmp_path / "traces").iterdir()) == []


def test_two_runs_never_share_a_partial_directory(tmp_path):
    identity = {"policy": "default"}
    with (PartialTrace(tmp_path / "t", identity),
          pytest.raises(PartialTraceError, match="another run is tracing into it")):
        PartialTrace(tmp_path / "t", identity).__enter__()
    with PartialTrace(tmp_path / "t", identity) as again:  # free once the first is done
        assert (again.root / IDENTITY_FILE).is_file()
