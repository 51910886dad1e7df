"""`mlgo train` as a user runs it, for every registered problem: a run leaves its
checkpoint, policies, scalars and TensorBoard events; same seed, same bytes; a stopped run
resumes and a SIGKILLed run resumes exactly, losing at most one iteration.

Real subprocesses of `mlgo train` (ppo, after a behaviour-cloning warm start where the
problem has one) on eight demo-corpus modules, real clang: `tests/train_runs.py`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymlgo.problems import registry
from pymlgo.train.hooks import training_of
from pymlgo.train.trainer import CHECKPOINT_FILE, SETUP_FILE
from tests.train_runs import (
    ITERATIONS,
    MODULES,
    PPO_MODULES,
    PPO_SAMPLES,
    PROBLEMS,
    change_name,
    last_logged_iteration,
    policy_bytes,
    saved_policy,
    scalars,
    train_in_process,
)

every_problem = pytest.mark.parametrize("problem", PROBLEMS)


def has_bc_warmstart(problem: str) -> bool:
    return training_of(registry.problem(problem)).bc_warmstart


def learned(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """Scalars without the clock's (iteration seconds, decisions per second)."""
    return [{k: v for k, v in r.items() if k not in ("time/iteration_seconds",
                                                     "decisions_per_second")} for r in rows]


def assert_same_policies(out: Path, reference: Path) -> None:
    for name in ("final", "best"):
        assert policy_bytes(out / name) == policy_bytes(reference / name), name


@every_problem
def test_a_run_leaves_checkpoint_best_final_scalars_and_tensorboard(trained, problem):
    out = trained(problem).out
    change = change_name(problem)
    assert (out / CHECKPOINT_FILE).is_file() and (out / SETUP_FILE).is_file()
    rows = scalars(out)
    assert [r["iteration"] for r in rows] == list(range(ITERATIONS + 1))
    assert all(f"{change}/validation" in r and "reward/train" in r for r in rows[1:])
    # the warm start's scalars, where there is one
    assert ("bc/accuracy_train" in rows[0]) == has_bc_warmstart(problem)
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    # the smallest validation change; of equal ones the later, longer-trained policy
    best_row = min(rows, key=lambda r: (r[f"{change}/validation"], -r["iteration"]))
    best = saved_policy(problem, out / "best")
    assert best.hyperparameters["iteration"] == best_row["iteration"]
    final = saved_policy(problem, out / "final")
    assert final.hyperparameters["iteration"] == ITERATIONS
    assert final.hyperparameters["algo"] == "ppo"
    # a saved config leaves out the default problem (provenance of older runs unchanged)
    assert final.hyperparameters["config"].get("problem", registry.DEFAULT.name) == problem


def iteration_tags(problem: str) -> tuple[str, ...]:
    """The tags the trainer documents for every iteration (pymlgo/train/trainer.py)."""
    change = change_name(problem)
    return ("reward/train", f"{change}/train", f"{change}/validation",
            f"{change}/validation_best", "compiles", "failures", "decisions_per_second",
            "time/iteration_seconds")


@every_problem
def test_tensorboard_events_hold_the_documented_scalars_with_sane_values(trained, problem):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = trained(problem).out
    change = change_name(problem)
    tags = iteration_tags(problem)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    warm = {"bc/accuracy_train"} if has_bc_warmstart(problem) else set()
    assert set(tags) | warm | {"ppo/loss"} <= set(events.Tags()["scalars"])
    value = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in tags}
    iterations = list(range(1, ITERATIONS + 1))
    assert sorted(value[f"{change}/validation"]) == [0, *iterations]
    assert all(sorted(value[tag]) == iterations for tag in tags
               if tag != f"{change}/validation")
    validation = pickle.loads((out / SETUP_FILE).read_bytes()).split.validation
    for it in iterations:
        # the modules x samples ppo learns from, and every validation module
        assert value["compiles"][it] == PPO_MODULES * PPO_SAMPLES + len(validation)
        assert value["failures"][it] == 0
        assert 0 < value["decisions_per_second"][it] < 1e6
        assert 0 < value["time/iteration_seconds"][it] < 600
        # the sampled policies' total change vs the baseline, and their mean reward
        assert -1 < value[f"{change}/train"][it] < 10
        assert math.isfinite(value["reward/train"][it]) and value["reward/train"][it] != 0
        assert value[f"{change}/validation_best"][it] == min(
            v for step, v in value[f"{change}/validation"].items() if step <= it)
    # and the same numbers as scalars.jsonl (event files hold float32)
    for row in scalars(out)[1:]:
        for tag in tags:
            assert value[tag][row["iteration"]] == pytest.approx(row[tag], rel=1e-6)


@every_problem
def test_two_runs_with_one_seed_give_identical_policy_bytes(trained, problem, tmp_path):
    run = trained(problem)
    # this process: another hash seed, another import order, TensorBoard off
    train_in_process(run.corpus, run.config, tmp_path / "b", "--no-tensorboard")
    assert_same_policies(tmp_path / "b", run.out)
    assert learned(scalars(tmp_path / "b")) == learned(scalars(run.out))


@every_problem
def test_a_run_stopped_after_an_iteration_resumes_and_ends_with_the_same_bytes(
        trained, problem, tmp_path):
    run = trained(problem)
    out = tmp_path / "stopped"
    train_in_process(run.corpus, run.config, out, "--no-tensorboard", "--iterations", "1")
    assert saved_policy(problem, out / "final").hyperparameters["iteration"] == 1
    resumed = train_in_process(run.corpus, run.config, out, "--no-tensorboard")
    assert "resuming" in resumed and "at iteration 2" in resumed
    assert_same_policies(out, run.out)
    assert [r["iteration"] for r in scalars(out)] == list(range(ITERATIONS + 1))


KILL_TRIALS = 3


@every_problem
def test_kill_9_at_random_points_loses_at_most_one_iteration_and_changes_no_byte(
        trained, problem, tmp_path):
    """SIGKILL (the whole process group, as a crash of the machine would) during the setup
    or warm start, right after an iteration is logged, and at a seeded-random moment of an
    iteration (compiles, update, validation, checkpoint write). Each resumed run starts from
    the checkpoint of the last or second-to-last iteration logged before the kill, redoes no
    setup once it was saved, and ends with the uninterrupted run's bytes."""
    run = trained(problem)
    baseline_line = f" baseline {training_of(registry.problem(problem)).scoring.name}s of "
    rng = random.Random(f"kill-9 {problem}")
    # the delays are fractions of the uninterrupted run's own iterations: fixed seconds miss
    # on a machine fast enough to finish the whole run within them
    pace = [r["time/iteration_seconds"] for r in scalars(run.out)[1:]]  # iterations 1..N
    killed = resumed = 0
    for trial in range(KILL_TRIALS):
        out = tmp_path / f"trial{trial}"
        # an iteration to reach, then a delay: trial 0 waits for the output directory
        # only, so the kill lands in the setup, the warm start or an early iteration (the
        # delay is below the run's iterations alone); trial 1 kills as soon as
        # an iteration is logged (its checkpoint being written); the others anywhere in the
        # iteration after the one reached
        if trial == 0:
            after, delay = -1, rng.uniform(0.0, 0.8) * sum(pace)
        elif trial == 1:
            after, delay = rng.randint(1, ITERATIONS - 1), 0.0
        else:
            after = rng.randint(0, ITERATIONS - 1)
            delay = rng.uniform(0.0, 0.8) * pace[after]
        proc = subprocess.Popen(run.argv(out, "--no-tensorboard"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 600
        while (not out.is_dir() if after < 0 else last_logged_iteration(out) < after
               ) and proc.poll() is None:
            assert time.monotonic() < deadline, "no progress within 10 minutes"
            time.sleep(0.02)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=delay)
        finished = proc.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed += not finished
        logged = last_logged_iteration(out)
        set_up = (out / SETUP_FILE).is_file()

        # resumed in this process (torch already imported): the checkpoint is all it shares
        # with the killed one
        said = train_in_process(run.corpus, run.config, out, "--no-tensorboard")
        match = re.search(r"resuming .* at iteration (\d+)", said)
        resumed_after = int(match.group(1)) - 1 if match else -1
        resumed += match is not None
        lost = max(0, logged - resumed_after)
        print(f"{problem} trial {trial}: killed {delay:.2f}s after iteration {after}, last "
              f"logged {logged}, resumed after iteration {resumed_after}, lost {lost}")
        assert lost <= 1, said
        assert (baseline_line in said) != set_up, said  # the setup is never redone
        assert [r["iteration"] for r in scalars(out)] == list(range(ITERATIONS + 1))
        assert_same_policies(out, run.out)
    assert killed >= KILL_TRIALS - 1, "the runs finished before the kills"
    assert resumed >= 1, "no killed run resumed from a checkpoint"


@every_problem
def test_mlgo_eval_runs_the_trained_policy_on_a_corpus(trained, problem, tmp_path):
    run = trained(problem)
    report = tmp_path / "eval.json"
    done = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "eval", "--problem",
                           problem, "--corpus", str(run.corpus), "--policy",
                           str(run.out / "best"), "--json", str(report), "--workers", "2"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    assert data["policy"] == str(run.out / "best")
    rows = data["modules"]
    assert len(rows) == len(MODULES) and not any(r["error"] for r in rows)
    assert sum(r["decisions"] for r in rows) > 0  # the policy answered clang's questions


def test_a_run_refuses_to_resume_under_another_size_metric(trained, tmp_path):
    run = trained("inlining")
    out = tmp_path / "copy"
    shutil.copytree(run.out, out)
    done = subprocess.run(run.argv(out, "--no-tensorboard", "--size-metric", "text"),
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "size metric 'allocated'" in done.stderr and "measures 'text'" in done.stderr
    assert "--size-metric allocated" in done.stderr  # and says how to resume it
    assert "Traceback" not in done.stderr
    # the policy the run saved names the metric it was trained and chosen by
    doc = json.loads((run.out / "best" / "policy.json").read_text())
    assert doc["hyperparameters"]["size_metric"] == "allocated"
    assert doc["hyperparameters"]["config"]["size_metric"] == "allocated"


def test_a_run_from_before_size_metrics_resumes_only_as_text(trained, tmp_path):
    run = trained("inlining")
    out = tmp_path / "legacy"
    shutil.copytree(run.out, out)
    for name in (CHECKPOINT_FILE, SETUP_FILE):  # as a run written before the metric existed
        data = pickle.loads((out / name).read_bytes())
        recorded = data["config"] if name == CHECKPOINT_FILE else data.identity
        del recorded["size_metric"]
        (out / name).write_bytes(pickle.dumps(data))
    done = subprocess.run(run.argv(out, "--no-tensorboard"), capture_output=True, text=True)
    assert done.returncode == 2
    assert "size metric 'text' (it predates size metrics)" in done.stderr
