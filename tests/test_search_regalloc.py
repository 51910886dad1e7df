"""`mlgo search --problem regalloc-evict`: the eviction advisor's decisions searched for a
lower allocator cost than the start policy's, with the real bundled clang at -O2."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from pymlgo.evaluate.search import SUMMARY_FILE, ReplayPolicy, advice_bytes, flip_order, search
from pymlgo.evaluate.trace import module_log_path, read_trace_log
from pymlgo.policy.regalloc import initial_policy, load_spec
from pymlgo.problems import registry
from pymlgo.problems.base import CompileJob, Trajectory
from pymlgo.problems.regalloc.advice import MASK_FEATURE
from pymlgo.problems.regalloc.compile import COST_KEY
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers.protocol import WorkSpec
from pymlgo.workers.task import execute
from tests.conftest import build_jobs
from tests.test_search import CountingExecutor, dir_bytes, on_one_and_two_workers
from tests.test_trace_cli import write_corpus

EVICT = registry.problem("regalloc-evict")
SPEC = WorkSpec(problem=EVICT)
BUDGET, BATCH = 40, 4


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def jobs(minic_jobs: list[CompileJob]) -> list[CompileJob]:
    """minic's b64 (one eviction the stock rule gets wrong costs a third of its spill
    cost) and table."""
    return [j for j in minic_jobs if j.module in ("minic/b64", "minic/table")]


def run_search(executor, compiler: Compiler, jobs: list[CompileJob], out: Path | None,
               **kwargs: object):
    return search(executor, compiler, jobs, load_spec("heuristic"), budget=BUDGET,
                  batch=BATCH, spec=SPEC, output_dir=out, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def searched(compiler: Compiler, jobs: list[CompileJob],
             tmp_path_factory: pytest.TempPathFactory):
    return on_one_and_two_workers(lambda ex, out: run_search(ex, compiler, jobs, out),
                                  tmp_path_factory.mktemp("evict-search"))


def test_an_eviction_search_lowers_the_cost_never_above_its_start_whatever_the_workers(
        searched) -> None:
    report, one, two = searched
    assert dir_bytes(one) == dir_bytes(two)
    for m in report.modules:
        assert m.error is None and 1 <= m.compiles <= BUDGET
        assert m.best_extra[COST_KEY] <= m.start_extra[COST_KEY]
    b64 = next(m for m in report.modules if m.module == "minic/b64")
    assert b64.accepted >= 1
    assert b64.best_extra[COST_KEY] < 0.9 * b64.baseline_extra[COST_KEY]  # vs stock
    summary = json.loads((one / SUMMARY_FILE).read_text())
    assert summary["settings"]["problem"] == "regalloc-evict"
    record = summary["modules"]["minic/b64"]
    assert record["best_cost"] == b64.best_extra[COST_KEY]
    assert record["baseline_cost"] == b64.baseline_extra[COST_KEY]
    total = summary["total"]
    assert total["best_cost"] == pytest.approx(sum(m.best_extra[COST_KEY]
                                                   for m in report.modules))
    assert total["cost_change"] < 0


def test_the_searched_log_replays_to_the_best_cost(searched, jobs: list[CompileJob]) -> None:
    report, one, _ = searched
    b64 = next(m for m in report.modules if m.module == "minic/b64")
    header, traj, reward = read_trace_log(module_log_path(one, "minic/b64"))
    assert header.features[-1].name == EVICT.trace_advice.name
    assert reward == pytest.approx(b64.reward_of(EVICT)) and reward > 0
    job = next(j for j in jobs if j.module == "minic/b64")
    replay = ReplayPolicy(load_spec("heuristic"), {job.module: (job.module, advice_bytes(traj))})
    res = execute(WorkSpec(problem=EVICT, policy=replay), job)
    assert res.ok and res.extra[COST_KEY] == b64.best_extra[COST_KEY]


def test_a_rerun_resumes_without_compiling(searched, compiler: Compiler,
                                           jobs: list[CompileJob], tmp_path: Path) -> None:
    report, one, _ = searched
    out = tmp_path / "copy"
    for rel, data in dir_bytes(one).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    counting = CountingExecutor()
    again = run_search(counting, compiler, jobs, out)
    assert counting.compiles == 0 and again.modules == report.modules
    assert dir_bytes(out) == dir_bytes(one)


def test_a_module_the_advisor_never_asks_about_is_searched_with_nothing_to_try(
        compiler: Compiler, tmp_path: Path) -> None:
    src = tmp_path / "tables.c"  # data only: no virtual register, no eviction advisor
    src.write_text("const int squares[4] = {0, 1, 4, 9};\nconst char name[] = \"tables\";\n")
    jobs = build_jobs(compiler, [src], tmp_path)
    out = tmp_path / "out"
    report = run_search(CountingExecutor(), compiler, jobs, out)
    (found,) = report.modules
    assert found.error is None and found.decisions == 0 and found.compiles == 1
    assert found.trajectory is None and not module_log_path(out, found.module).exists()
    counting = CountingExecutor()
    assert run_search(counting, compiler, jobs, out).modules == report.modules
    assert counting.compiles == 0  # resumed: nothing compiled again


def test_what_cannot_be_searched_is_refused_before_compiling(compiler: Compiler,
                                                             jobs: list[CompileJob]) -> None:
    counting = CountingExecutor()
    with pytest.raises(ValueError, match="cannot be searched"):  # a priority is a float
        search(counting, compiler, jobs, load_spec("priority:stage-size"), budget=2,
               spec=WorkSpec(problem="regalloc-priority"))
    with pytest.raises(ValueError, match="nothing to trace"):  # the stock advisor: no channel
        search(counting, compiler, jobs, load_spec("default"), budget=2, spec=SPEC)
    with pytest.raises(ValueError, match="moves must be one of single"):
        run_search(counting, compiler, jobs, None, moves="callee")
    assert counting.compiles == 0


def test_eviction_answers_try_evicting_nothing_first_then_the_lightest() -> None:
    mask = np.zeros(33, dtype=np.int64)
    mask[[0, 3, 7, 32]] = 1
    density = np.zeros(33)
    density[[0, 3, 7]] = [0.9, 0.2, 0.5]
    features = {MASK_FEATURE: mask, "use_def_density": density}
    assert EVICT.search_answers(features, 0) == (32, 3, 7)
    assert EVICT.search_answers(features, 32) == (3, 7, 0)


def test_decisions_are_tried_in_the_costliest_functions_first_and_never_where_cost_is_0(
) -> None:
    traj = Trajectory(("f", "g", "f", "h", "g"), {}, np.zeros((5, 1), dtype=np.int64))
    weights = np.array([5.0, 9.0, 5.0, 0.0, 9.0])
    order = flip_order(load_spec("heuristic"), traj, seed=1, weights=weights)
    assert sorted(order[:2]) == [1, 4] and sorted(order[2:]) == [0, 2]
    assert flip_order(load_spec("heuristic"), traj, seed=1, weights=weights) == order


def test_search_command_on_the_eviction_advisor(jobs: list[CompileJob], tmp_path: Path,
                                                capsys) -> None:
    from pymlgo.cli import search as search_cli

    corpus = write_corpus(tmp_path / "corpus", jobs[:1])
    parser = argparse.ArgumentParser(prog="mlgo")
    search_cli.register(parser.add_subparsers())
    out = tmp_path / "out"
    args = parser.parse_args(["search", "--problem", "regalloc-evict", "--corpus", str(corpus),
                              "--budget", "6", "--answers", "1", "--workers", "1",
                              "--output-dir", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "from heuristic" in printed and "weighted spill/reload/copy cost: stock" in printed
    settings = json.loads((out / SUMMARY_FILE).read_text())["settings"]
    assert settings["answers"] == 1 and settings["policy_spec"] == "heuristic"


def test_il_clones_best_trajectories_beside_one_without_a_real_choice(
        jobs: list[CompileJob]) -> None:
    """A searched module whose best compile made no real choice (no virtual register, or
    one valid column each time) adds nothing to the eviction cloner's data; it used to
    stop the run, its empty encoding having a placeholder column count."""
    pytest.importorskip("torch")
    from pymlgo.train.bc import HeadImitator
    from pymlgo.train.config import ILConfig
    from pymlgo.train.heads import EvictionHead

    job = next(j for j in jobs if j.module == "minic/b64")
    res = execute(WorkSpec(problem=EVICT, policy=load_spec("heuristic"), record=True), job)
    assert res.ok and res.trajectory is not None and len(res.trajectory) > 0
    traj = res.trajectory
    none = Trajectory((), {k: v[:0] for k, v in traj.features.items()}, traj.advice[:0])
    imitator = HeadImitator(ILConfig(batch_size=8), initial_policy(0), EvictionHead())
    real = imitator.encode(traj)
    assert len(real[0]) > 0 and len(imitator.encode(none)[0]) == 0
    rng = np.random.default_rng(0)
    got = imitator.fit([imitator.encode(none), real, imitator.encode(none)], 1, rng)
    assert got["il/dataset_decisions"] == len(real[0]) and np.isfinite(got["il/loss"])
