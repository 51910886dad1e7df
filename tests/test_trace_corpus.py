"""`trace_corpus` and `load_traces` against the real bundled clang on a small real corpus."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from pymlgo.evaluate.baseline import BaselineCache
from pymlgo.evaluate.trace import (
    load_traces,
    module_log_path,
    read_sizes,
    trace_columns,
    trace_corpus,
)
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.store import load_policy, save_policy
from pymlgo.policy.vocab import build_vocab
from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult
from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.protocol.features import FeatureMismatchError
from pymlgo.protocol.log import read_events, read_records
from pymlgo.workers.protocol import WorkSpec
from pymlgo.workers.task import execute


class InProcessExecutor:
    """Runs each job right here, in order: the Executor protocol at its simplest."""

    num_workers = 1

    def run(self, spec: WorkSpec, jobs: Sequence[CompileJob]) -> Iterator[ModuleResult]:
        for job in jobs:
            yield execute(spec, job)

    def close(self) -> None:
        pass

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def default_trace(compiler, minic_jobs, tmp_path_factory) -> Path:
    """The minic corpus traced with clang's own heuristic answering on the channel."""
    root = tmp_path_factory.mktemp("trace")
    trace_corpus(
        InProcessExecutor(),
        compiler,
        minic_jobs,
        builtin_policy("default"),
        root / "default",
        cache=BaselineCache(root / "cache"),
        metadata={"seed": 0},
    )
    return root / "default"


def test_one_log_per_module_mirroring_module_paths(default_trace, minic_jobs):
    logs = sorted(p.relative_to(default_trace).as_posix() for p in default_trace.rglob("*.log"))
    assert logs == sorted(f"{job.module}.log" for job in minic_jobs)
    assert (default_trace / "sizes.csv").is_file() and (default_trace / "trace.json").is_file()


def test_logs_are_llvm_training_logs_with_the_decision_as_last_feature(default_trace):
    for log in default_trace.rglob("*.log"):
        with open(log, "rb") as f:
            header = next(read_events(f))
        names = [s.name for s in header.features]
        assert names[-2:] == ["inlining_default", "inlining_decision"]
        assert "callee_basic_block_count" in names and len(names) == 38 + 2
        assert all(s.type == "int64_t" and s.shape == (1,) for s in header.features)
        assert header.score.to_json() == {
            "name": "reward",
            "type": "float",
            "port": 0,
            "shape": [1],
        }


def test_default_policy_decisions_equal_the_heuristic_and_reward_is_zero(default_trace):
    total = 0
    for log in default_trace.rglob("*.log"):
        with open(log, "rb") as f:
            records = list(read_records(f))
        for r in records:
            assert (
                r.features["inlining_decision"].tolist() == r.features["inlining_default"].tolist()
            )
            assert r.outcome is not None and r.outcome.tolist() == [0.0]
        assert [r.index for r in records] == list(range(len(records)))
        total += len(records)
    assert total > 10


def test_sizes_csv_has_every_module_with_policy_size_equal_to_baseline(
    default_trace, compiler, minic_jobs
):
    with open(default_trace / "sizes.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["module", "baseline_bytes", "policy_bytes", "decisions", "error"]
    assert [r[0] for r in rows[1:]] == sorted(job.module for job in minic_jobs)
    sizes = read_sizes(default_trace)
    for job in minic_jobs:
        row = sizes[job.module]
        assert row.error is None and row.reward == 0.0
        assert row.policy_bytes == row.baseline_bytes == compile_baseline(compiler, job).size


def test_trace_json_summarizes_the_run(default_trace, minic_jobs):
    info = json.loads((default_trace / "trace.json").read_text())
    sizes = read_sizes(default_trace)
    assert info["policy"] == "default" and info["problem"] == "inlining"
    assert info["compiler"]["version"].startswith("22.")
    assert info["modules"] == info["traced"] == len(minic_jobs) and info["failed"] == 0
    assert info["decisions"] == sum(r.decisions for r in sizes.values())
    assert (
        info["baseline_bytes"]
        == info["policy_bytes"]
        == sum(r.baseline_bytes for r in sizes.values())
    )
    assert info["seed"] == 0


def test_load_traces_yields_trajectories_for_training(default_trace, minic_jobs):
    loaded = list(load_traces(default_trace))
    assert [m for m, _, _ in loaded] == sorted(job.module for job in minic_jobs)
    sizes = read_sizes(default_trace)
    for module, traj, reward in loaded:
        assert reward == 0.0
        assert len(traj) == sizes[module].decisions
        assert "inlining_decision" not in traj.features
        assert traj.advice.shape == (len(traj), 1) and traj.advice.dtype == np.int64
        assert np.array_equal(traj.advice, traj.features["inlining_default"])
        assert all(v.shape == (len(traj), 1) for v in traj.features.values())


def test_trace_columns_collect_every_value_in_compiler_feature_order(default_trace):
    cols = trace_columns(default_trace)
    assert list(cols)[-1] == "inlining_default" and len(cols) == 39
    n = sum(len(t) for _, t, _ in load_traces(default_trace))
    assert all(c.shape == (n,) for c in cols.values())


def test_rewards_measure_size_against_the_baseline(compiler, minic_jobs, tmp_path):
    out = tmp_path / "always"
    summary = trace_corpus(
        InProcessExecutor(),
        compiler,
        minic_jobs,
        builtin_policy("always"),
        out,
        cache=BaselineCache(tmp_path / "cache"),
    )
    assert summary.policy == "always"
    sizes = read_sizes(out)
    assert any(r.policy_bytes != r.baseline_bytes for r in sizes.values())
    for module, traj, reward in load_traces(out):
        row = sizes[module]
        assert reward == pytest.approx(1 - row.policy_bytes / row.baseline_bytes, abs=1e-6)
        assert (traj.advice == 1).all()


class FutureFeaturePolicy:
    name = "future"
    required_features = ("inlining_default", "feature_from_llvm_99")

    def for_module(self, module: str):
        return lambda feats: 0


def test_a_run_that_fails_leaves_nothing_behind(compiler, minic_jobs, tmp_path):
    out = tmp_path / "traces" / "t"
    with pytest.raises(FeatureMismatchError):
        trace_corpus(
            InProcessExecutor(),
            compiler,
            minic_jobs,
            FutureFeaturePolicy(),
            out,
            cache=BaselineCache(tmp_path / "cache"),
        )
    assert list((tmp_path / "traces").iterdir()) == []


def test_an_existing_trace_is_kept_unless_overwrite(default_trace, compiler, minic_jobs, tmp_path):
    out = tmp_path / "t"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    cache = BaselineCache(tmp_path / "cache")
    with pytest.raises(FileExistsError, match="not empty"):
        trace_corpus(
            InProcessExecutor(), compiler, minic_jobs[:1], builtin_policy("never"), out, cache=cache
        )
    assert (out / "keep.txt").exists()
    trace_corpus(
        InProcessExecutor(),
        compiler,
        minic_jobs[:1],
        builtin_policy("never"),
        out,
        cache=cache,
        overwrite=True,
    )
    assert not (out / "keep.txt").exists()
    assert [m for m, _, _ in load_traces(out)] == [minic_jobs[0].module]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "t"]  # no temp dirs left


def test_a_module_that_fails_to_compile_is_reported_and_the_run_goes_on(
    compiler, minic_jobs, tmp_path
):
    broken = CompileJob("minic/broken", b"not bitcode", minic_jobs[0].cmd)
    out = tmp_path / "t"
    summary = trace_corpus(
        InProcessExecutor(),
        compiler,
        [*minic_jobs[:1], broken],
        builtin_policy("default"),
        out,
        cache=BaselineCache(tmp_path / "c"),
    )
    assert [r.module for r in summary.traced] == [minic_jobs[0].module]
    row = read_sizes(out)["minic/broken"]
    assert row.error.startswith("baseline: compiler exited") and row.baseline_bytes is None
    assert not (out / "minic" / "broken.log").exists()
    assert json.loads((out / "trace.json").read_text())["failed"] == 1


@pytest.mark.parametrize("name", ["../escape", "/abs/path", "a/./b", "a//b", ""])
def test_module_names_that_would_escape_the_trace_directory_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="relative file path"):
        module_log_path(tmp_path, name)


def test_a_saved_random_weight_policy_drives_the_real_compiler(
    default_trace, compiler, minic_jobs, tmp_path
):
    # vocab from the heuristic's trace, as MLGO does; the heuristic's answer is no input
    cols = trace_columns(default_trace)
    vocab = build_vocab(cols, features=[n for n in cols if n != "inlining_default"])
    params = init_mlp(vocab.input_dim, (40, 40, 20), np.random.default_rng(1))
    save_policy(InliningPolicy(vocab, params), tmp_path / "policy")
    policy = load_policy(str(tmp_path / "policy"))
    job = max(minic_jobs, key=lambda j: len(j.bitcode))
    res = compile_with_policy(compiler, job, policy, CompileSettings(record=True))
    assert res.ok and res.decisions > 0, res.error
    # what the compiler was told is what the batch (training-side) computation says
    assert isinstance(policy, InliningPolicy)
    p = policy.probabilities(vocab.matrix(res.trajectory.features))
    clear = np.abs(p - 0.5) > 1e-6
    assert np.array_equal(res.trajectory.advice[clear, 0], (p[clear] >= 0.5).astype(np.int64))
