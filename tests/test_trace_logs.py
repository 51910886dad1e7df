"""Trace logs from recorded trajectories: the training-log layout, independent of clang."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pytest

from pymlgo.evaluate.baseline import BaselineCache
from pymlgo.evaluate.trace import load_traces, read_sizes, trace_corpus, trajectory_log_bytes
from pymlgo.problems.base import CompileJob, ModuleResult, Trajectory
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.protocol.log import Context, Header, Observation, Outcome, read_events, read_records
from pymlgo.workers.protocol import WorkSpec


def trajectory(contexts: Sequence[str], decisions: Sequence[int]) -> Trajectory:
    n = len(contexts)
    return Trajectory(
        contexts=tuple(contexts),
        features={
            "callee_users": np.arange(n, dtype=np.int64).reshape(n, 1),
            "inlining_default": np.array(decisions, dtype=np.int64).reshape(n, 1),
        },
        advice=np.array(decisions, dtype=np.int64).reshape(n, 1),
    )


def test_log_has_features_then_decision_and_an_outcome_after_each_observation():
    log = trajectory_log_bytes(trajectory(["", "", ""], [1, 0, 1]), reward=0.25)
    events = list(read_events(io.BytesIO(log)))
    header = events[0]
    assert isinstance(header, Header)
    assert [s.name for s in header.features] == [
        "callee_users",
        "inlining_default",
        "inlining_decision",
    ]
    assert header.score is not None and header.score.name == "reward"
    kinds = [type(e) for e in events[1:]]
    assert kinds == [Context, Observation, Outcome, Observation, Outcome, Observation, Outcome]
    outcomes = [e.tensor.tolist() for e in events if isinstance(e, Outcome)]
    assert outcomes == [[0.25]] * 3


def test_observation_numbers_restart_in_each_context_like_llvm():
    log = trajectory_log_bytes(trajectory(["f", "f", "g", "g", "g"], [0, 1, 1, 0, 0]), 0.0)
    records = list(read_records(io.BytesIO(log)))
    assert [(r.context, r.index) for r in records] == [
        ("f", 0),
        ("f", 1),
        ("g", 0),
        ("g", 1),
        ("g", 2),
    ]
    assert [int(r.features["inlining_decision"][0]) for r in records] == [0, 1, 1, 0, 0]


def test_a_module_without_decisions_gets_a_header_only_log():
    log = trajectory_log_bytes(trajectory([], []), reward=0.0)
    assert [type(e) for e in read_events(io.BytesIO(log))] == [Header]


class ScriptedExecutor:
    """Baselines of fixed size; policy compiles return the prepared results."""

    num_workers = 1

    def __init__(
        self, baseline: int | Mapping[str, int], results: Mapping[str, ModuleResult]
    ) -> None:
        self.baseline, self.results = baseline, results

    def run(self, spec: WorkSpec, jobs: Sequence[CompileJob]) -> Iterator[ModuleResult]:
        for job in jobs:
            if spec.policy is None:
                size = (
                    self.baseline if isinstance(self.baseline, int) else self.baseline[job.module]
                )
                yield ModuleResult(job.module, size)
            else:
                assert spec.record, "a trace must record trajectories"
                yield self.results[job.module]

    def close(self) -> None:
        pass


def test_reward_of_a_module_without_decisions_comes_from_sizes_csv(compiler, tmp_path):
    results = {
        "a/busy": ModuleResult("a/busy", 90, decisions=2, trajectory=trajectory(["", ""], [1, 1])),
        "a/idle": ModuleResult("a/idle", 110, decisions=0, trajectory=trajectory([], [])),
    }
    jobs = [CompileJob(m, m.encode(), ("-cc1",)) for m in results]
    trace_corpus(
        ScriptedExecutor(100, results),
        compiler,
        jobs,
        builtin_policy("default"),
        tmp_path / "t",
        cache=BaselineCache(tmp_path / "cache"),
    )
    loaded = {m: (traj, r) for m, traj, r in load_traces(tmp_path / "t")}
    assert loaded["a/busy"][1] == pytest.approx(0.1) and len(loaded["a/busy"][0]) == 2
    assert loaded["a/idle"][1] == pytest.approx(-0.1) and len(loaded["a/idle"][0]) == 0
    assert loaded["a/idle"][0].features["callee_users"].shape == (0, 1)
    assert read_sizes(tmp_path / "t")["a/idle"].decisions == 0


def test_a_result_without_trajectory_is_an_error_row(compiler, tmp_path):
    results = {"m": ModuleResult("m", 100, decisions=0, trajectory=None)}
    summary = trace_corpus(
        ScriptedExecutor(100, results),
        compiler,
        [CompileJob("m", b"m", ("-cc1",))],
        builtin_policy("default"),
        tmp_path / "t",
        cache=BaselineCache(tmp_path / "cache"),
    )
    assert summary.traced == () and "no trajectory" in (summary.rows[0].error or "")
    assert list(load_traces(tmp_path / "t")) == []


def test_a_module_without_code_is_traced_with_zero_reward(compiler, tmp_path):
    # e.g. a file of constant tables: 0 bytes of .text at -Oz and with any policy
    results = {
        "tables": ModuleResult("tables", 0, trajectory=trajectory([], [])),
        "grew": ModuleResult("grew", 8, trajectory=trajectory([], [])),
    }
    jobs = [CompileJob(m, m.encode(), ("-cc1",)) for m in results]
    summary = trace_corpus(
        ScriptedExecutor({"tables": 0, "grew": 0}, results),
        compiler,
        jobs,
        builtin_policy("default"),
        tmp_path / "t",
        cache=BaselineCache(tmp_path / "cache"),
    )
    rows = {r.module: r for r in summary.rows}
    assert rows["tables"].error is None and rows["tables"].reward == 0.0
    assert "no relative reward" in (rows["grew"].error or "")
    assert [(m, r) for m, _, r in load_traces(tmp_path / "t")] == [("tables", 0.0)]
