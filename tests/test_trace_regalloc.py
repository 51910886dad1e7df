"""`mlgo trace` for register allocation: the decisions of a policy answering clang's eviction
or priority advisor, in LLVM's training-log format, with the allocator's costs; the same
bytes twice and after a resume. Real bundled clang, the four minic modules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pymlgo.evaluate.baseline import BaselineCache
from pymlgo.evaluate.trace import (
    load_traces,
    module_log_path,
    read_sizes,
    read_trace_log,
    trace_corpus,
)
from pymlgo.evaluate.trace_partial import partial_dir
from pymlgo.policy.regalloc import load_spec
from pymlgo.problems import registry
from pymlgo.problems.regalloc.advice import MASK_FEATURE
from pymlgo.protocol.log import Context, Header, Observation, Outcome, read_events
from pymlgo.protocol.tensor_spec import C_TYPES
from tests.test_trace_cli import isolated_cache, run_cli, write_corpus  # noqa: F401
from tests.test_trace_resume import CountingExecutor, Stopped, journaled, tree

# (problem, the policy traced, the decision's name and C type in the log)
CASES = [("regalloc-evict", "heuristic", "index_to_evict", "int64_t"),
         ("regalloc-priority", "priority:stage-size", "priority", "float")]


def trace(problem: str, policy: str, jobs, out: Path, cache: Path, executor=None):
    from pymlgo.workers.protocol import WorkSpec

    return trace_corpus(executor or CountingExecutor(), _compiler(), jobs, load_spec(policy),
                        out, spec=WorkSpec(problem=problem), cache=BaselineCache(cache),
                        metadata={"corpus": "minic"})


def _compiler():
    from pymlgo.toolchain.compiler import find_compiler

    return find_compiler(None)


def llvm_records(data: bytes) -> tuple[dict, list[tuple[str, int, bytes, bytes]]]:
    """The log as LLVM's format defines it, read without pymlgo: a JSON header line, then
    `{"context"}` lines, and per observation `{"observation": i}` + the raw feature bytes
    + newline, followed by `{"outcome": i}` + the score bytes + newline. Returns the header
    and (context, index, feature bytes, score bytes) per observation."""
    header_line, rest = data.split(b"\n", 1)
    header = json.loads(header_line)
    sizes = [int(np.prod(f["shape"])) * np.dtype(C_TYPES[f["type"]]).itemsize
             for f in header["features"]]
    score = header["score"]
    score_size = int(np.prod(score["shape"])) * np.dtype(C_TYPES[score["type"]]).itemsize
    records, context, pos = [], None, 0
    while pos < len(rest):
        end = rest.index(b"\n", pos)
        event = json.loads(rest[pos:end])
        pos = end + 1
        if "context" in event:
            context = event["context"]
            continue
        index = event["observation"]
        features = rest[pos:pos + sum(sizes)]
        pos += sum(sizes)
        assert rest[pos:pos + 1] == b"\n"
        end = rest.index(b"\n", pos + 1)
        assert json.loads(rest[pos + 1:end]) == {"outcome": index}
        reward = rest[end + 1:end + 1 + score_size]
        pos = end + 1 + score_size
        assert rest[pos:pos + 1] == b"\n"
        pos += 1
        records.append((context, index, features, reward))
    return header, records


@pytest.mark.parametrize(("problem", "policy", "decision", "ctype"), CASES)
def test_a_regalloc_trace_logs_every_decision_with_the_compilers_features_and_the_reward(
    minic_jobs, tmp_path, problem, policy, decision, ctype
):
    summary = trace(problem, policy, minic_jobs, tmp_path / "t", tmp_path / "cache")
    out = tmp_path / "t"
    info = json.loads((out / "trace.json").read_text())
    assert info["problem"] == problem and info["policy"] == policy
    assert info["advice"] == {"name": decision, "type": ctype, "port": 0, "shape": [1]}
    assert len(summary.traced) == len(minic_jobs) and info["decisions"] > 20
    rows = read_sizes(out)
    assert {r.module for r in rows.values()} == {j.module for j in minic_jobs}
    assert all(r.baseline_extra["weighted_cost"] > 0 for r in rows.values())
    assert info["baseline_cost"] == pytest.approx(
        sum(r.baseline_extra["weighted_cost"] for r in rows.values()))
    regalloc = registry.problem(problem)
    logged = {m: (traj, reward) for m, traj, reward in load_traces(out)}
    assert sum(len(traj) for traj, _ in logged.values()) == info["decisions"]
    for module, row in rows.items():
        log = module_log_path(out, module)
        if not log.is_file():  # the advisor never asked: no header to log
            assert row.decisions == 0
            continue
        header, traj, reward = read_trace_log(log)
        names = [s.name for s in header.features]
        assert names[-1] == decision and decision not in traj.features
        assert list(traj.features) == names[:-1]  # the compiler's order, every feature
        assert len(traj) == row.decisions  # one record per decision
        expected = np.float32(row.reward_of(regalloc))
        if len(traj):
            assert reward == pytest.approx(float(expected), abs=1e-7)
        # LLVM's format, read independently: the same records, the same reward on each
        llvm_header, records = llvm_records(log.read_bytes())
        assert [f["name"] for f in llvm_header["features"]] == names
        assert llvm_header["score"] == {"name": "reward", "type": "float", "port": 0,
                                        "shape": [1]}
        assert len(records) == len(traj)
        assert [c for c, _, _, _ in records] == list(traj.contexts)
        assert all(np.frombuffer(r, np.float32)[0] == expected for _, _, _, r in records)
        # and pymlgo's streaming reader sees the same events
        events = list(read_events(log.open("rb")))
        assert isinstance(events[0], Header)
        assert sum(isinstance(e, Observation) for e in events) == len(traj)
        assert sum(isinstance(e, Outcome) for e in events) == len(traj)
        assert {e.name for e in events if isinstance(e, Context)} == set(traj.contexts)
    if problem == "regalloc-evict":
        traj = next(t for t, _ in logged.values() if len(t))
        columns = traj.features[MASK_FEATURE].shape[-1]
        for name, values in traj.features.items():
            shape = (1,) if name == "progress" else (1, columns)
            assert values.shape == (len(traj), *shape), name
        # every logged eviction points at a column the compiler allowed
        masks = traj.features[MASK_FEATURE].reshape(len(traj), columns)
        assert (masks[np.arange(len(traj)), traj.advice.reshape(-1)] == 1).all()
    else:
        traj = next(t for t, _ in logged.values() if len(t))
        assert traj.advice.dtype == np.float32
        assert {n: v.shape[1:] for n, v in traj.features.items()} == {
            "li_size": (1,), "stage": (1,), "weight": (1,)}


@pytest.mark.parametrize(("problem", "policy"), [c[:2] for c in CASES])
def test_a_regalloc_trace_is_the_same_bytes_twice_and_after_a_resume(
    minic_jobs, tmp_path, problem, policy
):
    reference = tmp_path / "reference"
    trace(problem, policy, minic_jobs, reference, tmp_path / "ref-cache")
    again = tmp_path / "again"
    trace(problem, policy, minic_jobs, again, tmp_path / "again-cache")
    assert tree(again) == tree(reference)

    out, cache = tmp_path / "run" / "trace", tmp_path / "cache"
    first = CountingExecutor(stop_after=2)
    with pytest.raises(Stopped):
        trace(problem, policy, minic_jobs, out, cache, first)
    assert not out.exists()
    assert journaled(partial_dir(out)) == list(first.traced) and len(first.traced) == 2
    rest = CountingExecutor()
    summary = trace(problem, policy, minic_jobs, out, cache, rest)
    assert set(rest.traced) == {j.module for j in minic_jobs} - set(first.traced)
    assert summary.resumed == 2
    assert tree(out) == tree(reference)


@pytest.mark.parametrize("policy", ["default", "priority:default"])
def test_the_stock_advisors_cannot_be_traced_and_say_why(minic_jobs, tmp_path, policy):
    problem = "regalloc-priority" if policy.startswith("priority") else "regalloc-evict"
    with pytest.raises(ValueError, match="development mode") as err:
        trace(problem, policy, minic_jobs, tmp_path / "t", tmp_path / "cache")
    assert registry.problem(problem).trace_policy in str(err.value)
    assert not (tmp_path / "t").exists() and not partial_dir(tmp_path / "t").exists()


def test_the_trace_command_records_the_channel_rule_by_default_and_refuses_the_stock_advisor(
    minic_jobs, tmp_path, isolated_cache, capsys  # noqa: F811
):
    corpus = write_corpus(tmp_path / "corpus", minic_jobs[:2])
    out = tmp_path / "traces"
    assert run_cli("trace", "--corpus", str(corpus), "--problem", "regalloc-evict",
                   "--output_dir", str(out), "--workers", "1") == 0
    printed = capsys.readouterr().out
    assert "traced 2 of 2 module(s) with heuristic" in printed
    assert "weighted spill/reload/copy cost: stock" in printed
    info = json.loads((out / "trace.json").read_text())
    assert info["policy_spec"] == "heuristic" and info["problem"] == "regalloc-evict"
    assert run_cli("trace", "--corpus", str(corpus), "--problem", "regalloc", "--policy",
                   "default", "--output_dir", str(tmp_path / "stock")) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlgo trace: policy 'default' is the stock evict advisor")
    assert not (tmp_path / "stock").exists()


def test_bc_learns_the_decisions_of_a_regalloc_trace(
    minic_jobs, tmp_path, isolated_cache  # noqa: F811
):
    pytest.importorskip("torch")
    from pymlgo.cli.main import main
    from pymlgo.policy.regalloc import load_eviction_policy
    from tests.train_runs import scalars

    corpus = write_corpus(tmp_path / "corpus", minic_jobs)
    trace_dir = tmp_path / "trace"
    assert run_cli("trace", "--corpus", str(corpus), "--problem", "regalloc-evict",
                   "--output_dir", str(trace_dir), "--workers", "1") == 0
    config = tmp_path / "bc.toml"
    config.write_text("\n".join([
        f'traces = "{trace_dir}"', 'problem = "regalloc-evict"', 'algo = "bc"', "seed = 3",
        "[split]", "validation = 0.25", "heldout = 0.0", "[policy]", "hidden = [4]", "[bc]",
        "batch_size = 16", "epochs_per_iteration = 3"]) + "\n")
    out = tmp_path / "run"
    assert main(["train", "--corpus", str(corpus), "--config", str(config), "--output_dir",
                 str(out), "--workers", "1", "--iterations", "2", "--no-tensorboard"]) == 0
    fits = [s for s in scalars(out) if "bc/loss" in s]
    assert len(fits) == 2 and fits[0]["bc/decisions"] > 10
    assert fits[1]["bc/loss"] < fits[0]["bc/loss_first_epoch"]  # it learns the decisions
    load_eviction_policy(out / "final")


@pytest.mark.parametrize(("problem", "policy"), [c[:2] for c in CASES])
def test_a_trace_holds_exactly_the_decisions_a_recording_compile_sees(
    minic_jobs, tmp_path, problem, policy
):
    """So bc from a trace learns what bc recording at setup learns."""
    from pymlgo.workers.protocol import WorkSpec
    from pymlgo.workers.task import execute

    trace(problem, policy, minic_jobs, tmp_path / "t", tmp_path / "cache")
    logged = {m: traj for m, traj, _ in load_traces(tmp_path / "t")}
    spec = WorkSpec(problem=problem, policy=load_spec(policy), record=True)
    for job in minic_jobs:
        recorded = execute(spec, job).trajectory
        if recorded is None:
            assert job.module not in logged
            continue
        traj = logged[job.module]
        assert traj.contexts == recorded.contexts
        assert list(traj.features) == list(recorded.features)
        for name, values in recorded.features.items():
            assert traj.features[name].dtype == values.dtype
            assert traj.features[name].tobytes() == values.tobytes(), name
        assert traj.advice.tobytes() == recorded.advice.tobytes()
