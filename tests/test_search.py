"""`mlgo search` on real modules with the real bundled compiler."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from pymlgo.evaluate.search import (
    SUMMARY_FILE,
    Move,
    ReplayPolicy,
    SearchDirError,
    SearchReport,
    _flipped,
    advice_bytes,
    callee_groups,
    search,
)
from pymlgo.evaluate.trace import module_log_path, read_trace_log
from pymlgo.policy.store import load_policy
from pymlgo.problems.base import CompileJob, ModuleResult, Trajectory
from pymlgo.problems.inlining.problem import INLINING
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers import make_executor
from pymlgo.workers.protocol import Executor, WorkSpec
from pymlgo.workers.task import execute
from tests.conftest import build_jobs
from tests.test_trace_cli import write_corpus

# Hash and fixed-point helpers used from several entry points: -Oz inlines `mix` into
# `hash_block`'s two loops and every caller of `scale` with its constants, and at least
# one of those decisions costs bytes: a budget of 1 + 15 compiles tries every single flip.
HELPERS_C = r"""
#include <stddef.h>
#include <stdint.h>

static uint32_t rotl(uint32_t x, unsigned k) { return (x << (k & 31)) | (x >> ((32 - k) & 31)); }

static uint32_t mix(uint32_t h, uint32_t v) {
  h ^= v * 0x9e3779b1u;
  h = rotl(h, 13) * 5u + 0xe6546b64u;
  if (h & 1u) h ^= h >> 16;
  return h;
}

static uint32_t hash_block(const uint8_t *p, size_t n, uint32_t seed) {
  uint32_t h = seed;
  for (size_t i = 0; i + 4 <= n; i += 4)
    h = mix(h, (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                   (uint32_t)p[i + 3] << 24);
  for (size_t i = n & ~(size_t)3; i < n; i++) h = mix(h, p[i]);
  return h ^ (uint32_t)n;
}

static int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static int scale(int v, int num, int den) {
  if (den == 0) return 0;
  long t = (long)v * num;
  if (t < 0) t -= den / 2; else t += den / 2;
  return clamp((int)(t / den), -32768, 32767);
}

uint32_t api_hash(const uint8_t *p, size_t n) { return hash_block(p, n, 1); }
uint32_t api_hash2(const uint8_t *p, size_t n) {
  return hash_block(p, n, 2) ^ hash_block(p, n / 2, 3);
}
uint32_t api_mix(uint32_t a, uint32_t b, uint32_t c) { return mix(mix(mix(a, b), c), a ^ c); }
int api_scale3(int a, int b, int c) { return scale(a, 3, 4) + scale(b, 5, 7) + scale(c, 9, 11); }
int api_scale(int a, int n, int d) { return scale(a, n, d) - scale(-a, d, n); }
"""

BUDGET, BATCH = 16, 4


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def jobs(compiler: Compiler, tmp_path_factory: pytest.TempPathFactory) -> list[CompileJob]:
    """The helpers module and minic's b64 (a module where no single flip helps)."""
    root = tmp_path_factory.mktemp("search-src")
    src = root / "helpers.c"
    src.write_text(HELPERS_C)
    minic = Path(__file__).parent / "data" / "minic"
    return build_jobs(compiler, [src, minic / "b64.c"], root)


class CountingExecutor:
    """Compiles in this process, in order, and counts the compiles."""

    num_workers = 1

    def __init__(self) -> None:
        self.compiles = 0

    def run(self, spec: WorkSpec, jobs: Sequence[CompileJob], **_: object
            ) -> Iterator[ModuleResult]:
        for job in jobs:
            self.compiles += 1
            yield execute(spec, job)

    def close(self) -> None:
        pass

    def __enter__(self) -> CountingExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def run_search(executor: Executor, compiler: Compiler, jobs: list[CompileJob], out: Path | None,
               policy: str = "default", **kwargs: object) -> SearchReport:
    return search(executor, compiler, jobs, load_policy(policy), budget=BUDGET, batch=BATCH,
                  seed=0, output_dir=out, **kwargs)  # type: ignore[arg-type]


def dir_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def on_one_and_two_workers(search_into: Callable[[Executor, Path], SearchReport], root: Path
                           ) -> tuple[SearchReport, Path, Path]:
    """The same search on one worker and on two, into root/w1 and root/w2; the first
    report."""
    reports = []
    for workers in (1, 2):
        with make_executor(None, workers) as executor:
            reports.append(search_into(executor, root / f"w{workers}"))
    return reports[0], root / "w1", root / "w2"


@pytest.fixture(scope="module")
def searched(compiler: Compiler, jobs: list[CompileJob], tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[SearchReport, Path, Path]:
    return on_one_and_two_workers(lambda ex, out: run_search(ex, compiler, jobs, out),
                                  tmp_path_factory.mktemp("search-out"))


def test_the_search_is_deterministic_whatever_the_number_of_workers(searched) -> None:
    report, one, two = searched
    files = dir_bytes(one)
    assert SUMMARY_FILE in files and "minic/helpers.log" in files and "minic/b64.log" in files
    assert files == dir_bytes(two)


def test_the_search_beats_oz_and_never_its_start(searched) -> None:
    report, one, _ = searched
    by_module = {m.module: m for m in report.modules}
    helpers, b64 = by_module["minic/helpers"], by_module["minic/b64"]
    # `default` answers as clang's heuristic does: the start is plain -Oz, byte for byte
    for m in (helpers, b64):
        assert m.error is None and m.start_bytes == m.baseline_bytes
        assert m.best_bytes is not None and m.start_bytes is not None
        assert m.best_bytes <= m.start_bytes and 1 <= m.compiles <= BUDGET
    assert helpers.best_bytes < helpers.baseline_bytes  # type: ignore[operator]
    assert helpers.accepted >= 1 and helpers.compiles == BUDGET
    # b64 has fewer decisions than the budget: every single flip tried once, none kept
    assert b64.accepted == 0 and b64.compiles == 1 + b64.decisions < BUDGET
    summary = json.loads((one / SUMMARY_FILE).read_text())
    assert summary["settings"]["size_metric"] == WorkSpec().size_metric
    assert summary["modules"]["minic/helpers"]["best_bytes"] == helpers.best_bytes
    assert summary["total"]["best_bytes"] == helpers.best_bytes + b64.best_bytes
    assert summary["total"]["compiles"] == helpers.compiles + b64.compiles
    assert summary["complete"] is True


def test_the_log_reads_back_with_the_best_decisions_and_replays_to_the_best_size(
    searched, compiler: Compiler, jobs: list[CompileJob]
) -> None:
    report, one, _ = searched
    helpers = next(m for m in report.modules if m.module == "minic/helpers")
    assert helpers.trajectory is not None
    header, traj, reward = read_trace_log(module_log_path(one, "minic/helpers"))
    assert np.array_equal(traj.advice, helpers.trajectory.advice)
    assert len(traj) == helpers.decisions
    assert list(traj.features) == list(helpers.trajectory.features)
    for name, column in traj.features.items():
        assert np.array_equal(column, helpers.trajectory.features[name]), name
    assert reward == pytest.approx(1 - helpers.best_bytes / helpers.baseline_bytes, rel=1e-6)
    # the logged decisions, replayed by index, give the best compile again
    job = next(j for j in jobs if j.module == "minic/helpers")
    replay = ReplayPolicy(load_policy("default"), {job.module: (job.module, advice_bytes(traj))})
    res = execute(WorkSpec(policy=replay), job)
    assert res.ok and res.size == helpers.best_bytes


def test_a_rerun_resumes_and_another_metric_is_refused(
    searched, compiler: Compiler, jobs: list[CompileJob], tmp_path: Path
) -> None:
    _, one, _ = searched
    out = tmp_path / "copy"
    out.mkdir()
    for rel, data in dir_bytes(one).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    counting = CountingExecutor()
    again = run_search(counting, compiler, jobs, out)
    assert counting.compiles == 0  # both modules taken from the directory
    assert again.trajectories().keys() == {"minic/helpers", "minic/b64"}
    assert dir_bytes(out) == dir_bytes(one)
    other = "text" if WorkSpec().size_metric != "text" else "allocated"
    with pytest.raises(SearchDirError, match="measuring sizes as .*metrics cannot be compared"):
        run_search(counting, compiler, jobs, out, spec=WorkSpec(size_metric=other))
    with pytest.raises(SearchDirError, match="other settings .*budget"):
        search(counting, compiler, jobs, load_policy("default"), budget=BUDGET + 1,
               batch=BATCH, output_dir=out)
    assert counting.compiles == 0


def test_a_learned_start_is_searched_least_certain_first_and_never_gets_worse(
    compiler: Compiler, jobs: list[CompileJob]
) -> None:
    with make_executor(None, 2) as executor:
        report = search(executor, compiler, jobs, load_policy("pretrained:inlining-oz"),
                        budget=6, batch=5)
    for m in report.modules:
        assert m.error is None and m.best_bytes is not None and m.start_bytes is not None
        assert m.best_bytes <= m.start_bytes and m.compiles <= 6


def test_search_command(jobs: list[CompileJob], tmp_path: Path, capsys) -> None:
    from pymlgo.cli import search as search_cli

    corpus = write_corpus(tmp_path / "corpus", jobs[:1])
    parser = argparse.ArgumentParser(prog="mlgo")
    search_cli.register(parser.add_subparsers())
    out = tmp_path / "out"
    argv = ["search", "--corpus", str(corpus), "--budget", "3", "--batch", "2",
            "--workers", "1", "--output-dir", str(out)]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "searched 1 of 1 module(s) from default" in printed and "-Oz" in printed
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["settings"]["budget"] == 3 and summary["total"]["compiles"] == 3
    args = parser.parse_args([*argv[:-2], "--output-dir", str(out), "--size-metric", "text"])
    assert args.func(args) == 2
    assert "cannot be compared" in capsys.readouterr().err


def _callee_trajectory(signatures: list[tuple[int, int, int, int]]) -> Trajectory:
    names = ("callee_basic_block_count", "callee_conditionally_executed_blocks", "num_loops",
             "is_callee_avail_external")
    n = len(signatures)
    features = {name: np.array([[s[i]] for s in signatures], dtype=np.int64)
                for i, name in enumerate(names)}
    features["callee_users"] = np.arange(n, dtype=np.int64).reshape(n, 1)  # changes: ignored
    return Trajectory(("f",) * n, features, np.zeros((n, 1), dtype=np.int64))


def test_call_sites_of_one_callee_form_one_move_largest_group_first() -> None:
    a, b, c = (3, 1, 0, 0), (1, 0, 0, 0), (5, 2, 1, 0)
    traj = _callee_trajectory([a, b, a, c, b, a, (7, 0, 0, 1)])
    # a callee with a single call site is no group; users (which drop) do not split one
    assert callee_groups(traj) == [(0, 2, 5), (1, 4)]
    def answers(_: int, chosen: int) -> tuple[int, ...]:
        return INLINING.search_answers({}, chosen)

    # a group inlines all its call sites, or none of them if all inline already
    assert _flipped(bytes([0, 1, 1, 0]), Move((0, 2, 3)), answers) == bytes([1, 1, 1, 1])
    assert _flipped(bytes([1, 0, 1, 1]), Move((0, 2, 3)), answers) == bytes([0, 0, 0, 0])
    # one position takes the problem's other answer; a call site has no second one
    assert _flipped(bytes([1, 0, 1]), Move((1,)), answers) == bytes([1, 1, 1])
    assert _flipped(bytes([1, 0, 1]), Move((1,), 1), answers) is None


def test_callee_moves_are_deterministic_never_worse_and_not_mixed_with_single_flips(
    compiler: Compiler, jobs: list[CompileJob], tmp_path: Path
) -> None:
    reports = []
    for workers in (1, 2):
        with make_executor(None, workers) as executor:
            reports.append(run_search(executor, compiler, jobs, tmp_path / f"w{workers}",
                                      moves="callee"))
    assert dir_bytes(tmp_path / "w1") == dir_bytes(tmp_path / "w2")
    for m in reports[0].modules:
        assert m.error is None and m.best_bytes is not None and m.start_bytes is not None
        assert m.best_bytes <= m.start_bytes and m.compiles <= BUDGET
    assert json.loads((tmp_path / "w1" / SUMMARY_FILE).read_text())["settings"]["moves"] == (
        "callee")
    with make_executor(None, 1) as executor, pytest.raises(SearchDirError, match="moves"):
        run_search(executor, compiler, jobs, tmp_path / "w1")  # single flips: refused
    with pytest.raises(ValueError, match="moves must be one of"):
        run_search(CountingExecutor(), compiler, jobs, None, moves="pairs")
