"""`mlgo train` as a user runs it: same seed, same bytes; a SIGKILLed run resumes exactly.

Real subprocesses of `mlgo train` (ppo after a behaviour-cloning warm start, so torch,
sampling and the worker pool are all on the path) on eight demo-corpus modules.
"""

from __future__ import annotations

import contextlib
import json
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

from pymlgo.policy.store import load_policy_dir
from tests.test_train_algorithms import TINY_DEMO_MODULES, copy_demo_subset

ITERATIONS = 5
CONFIG = """
algo = "ppo"
seed = 7
warmstart = "bc"
[split]
validation = 0.25
heldout = 0.0
[policy]
hidden = [16, 16]
[bc]
batch_size = 32
warmstart_epochs = 20
[ppo]
modules_per_iteration = 4
samples_per_module = 2
"""


def mlgo_train(corpus: Path, config: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pymlgo.cli.main", "train", "--corpus", str(corpus),
            "--config", str(config), "--output_dir", str(out), "--workers", "2",
            "--iterations", str(ITERATIONS), *extra]


def policy_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def tiny(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("resume")
    corpus = copy_demo_subset(demo_corpus_dir, root / "corpus", TINY_DEMO_MODULES)
    config = root / "ppo.toml"
    config.write_text(CONFIG)
    return corpus, config


@pytest.fixture(scope="module")
def uninterrupted(tiny: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "a"
    done = subprocess.run(mlgo_train(*tiny, out), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def test_a_run_leaves_checkpoint_best_final_scalars_and_tensorboard(uninterrupted):
    out = uninterrupted
    assert (out / "checkpoint.pkl").is_file()
    rows = [json.loads(ln) for ln in (out / "scalars.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(ITERATIONS + 1))
    assert all("size_change/validation" in r and "reward/train" in r for r in rows[1:])
    assert "bc/accuracy_train" in rows[0]  # the warm start's scalars
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    best_row = min(rows, key=lambda r: (r["size_change/validation"], r["iteration"]))
    best = load_policy_dir(out / "best")
    assert best.hyperparameters["iteration"] == best_row["iteration"]
    assert load_policy_dir(out / "final").hyperparameters["iteration"] == ITERATIONS


# the tags the trainer documents for every iteration (pymlgo/train/trainer.py)
ITERATION_TAGS = ("reward/train", "size_change/train", "size_change/validation",
                  "size_change/validation_best", "compiles", "failures",
                  "decisions_per_second", "time/iteration_seconds")


def test_tensorboard_events_hold_the_documented_scalars_with_sane_values(uninterrupted):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from pymlgo.train.trainer import SETUP_FILE

    events = EventAccumulator(str(uninterrupted / "tensorboard"))
    events.Reload()
    assert set(ITERATION_TAGS) | {"bc/accuracy_train", "ppo/loss"} <= set(
        events.Tags()["scalars"])
    value = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in ITERATION_TAGS}
    iterations = list(range(1, ITERATIONS + 1))
    assert sorted(value["size_change/validation"]) == [0, *iterations]
    assert all(sorted(value[tag]) == iterations for tag in ITERATION_TAGS
               if tag != "size_change/validation")
    validation = len(pickle.loads((uninterrupted / SETUP_FILE).read_bytes()).split.validation)
    for it in iterations:
        # 4 modules x 2 samples to learn from, and every validation module
        assert value["compiles"][it] == 4 * 2 + validation
        assert value["failures"][it] == 0
        assert 10 < value["decisions_per_second"][it] < 1e6
        assert 0 < value["time/iteration_seconds"][it] < 600
        assert abs(value["size_change/train"][it]) < 0.5
        assert value["reward/train"][it] == pytest.approx(-value["size_change/train"][it],
                                                          abs=0.2)
        assert value["size_change/validation_best"][it] == min(
            v for step, v in value["size_change/validation"].items() if step <= it)
    # and the same numbers as scalars.jsonl (event files hold float32)
    rows = [json.loads(ln) for ln in (uninterrupted / "scalars.jsonl").read_text().splitlines()]
    for row in rows[1:]:
        for tag in ITERATION_TAGS:
            assert value[tag][row["iteration"]] == pytest.approx(row[tag], rel=1e-6)


def test_two_runs_with_one_seed_give_identical_policy_bytes(tiny, uninterrupted, tmp_path):
    out = tmp_path / "b"
    done = subprocess.run(mlgo_train(*tiny, out, "--no-tensorboard"), capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    for name in ("final", "best"):
        assert policy_bytes(out / name) == policy_bytes(uninterrupted / name)


def _checkpoint_iteration(out: Path) -> int:
    """The last iteration in scalars.jsonl once a checkpoint exists, else -1."""
    return _last_logged_iteration(out) if (out / "checkpoint.pkl").is_file() else -1


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_with_the_same_bytes(
    tiny, uninterrupted, tmp_path
):
    out = tmp_path / "killed"
    # own session, so SIGKILL takes the worker processes too, as a crash of the machine would
    proc = subprocess.Popen(mlgo_train(*tiny, out, "--no-tensorboard"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        # scalars.jsonl gets iteration k just before checkpoint k is written: wait for
        # iteration 2's line, so checkpoint 1 certainly exists
        while _checkpoint_iteration(out) < 2 and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (out / "final").exists()

    done = subprocess.run(mlgo_train(*tiny, out, "--no-tensorboard"), capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    resumed = [ln for ln in done.stderr.splitlines() if "resuming" in ln]
    assert resumed and "at iteration 1" not in resumed[0], done.stderr
    assert "behaviour cloning" not in done.stderr  # the setup was not redone
    rows = [json.loads(ln) for ln in (out / "scalars.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(ITERATIONS + 1))
    for name in ("final", "best"):
        assert policy_bytes(out / name) == policy_bytes(uninterrupted / name)


KILL_TRIALS = 4


def _last_logged_iteration(out: Path) -> int:
    scalars = out / "scalars.jsonl"
    lines = scalars.read_text().splitlines() if scalars.is_file() else []
    return json.loads(lines[-1])["iteration"] if lines else -1


def test_kill_9_at_random_points_loses_at_most_one_iteration_and_changes_no_byte(
    tiny, uninterrupted, tmp_path
):
    """SIGKILL (the whole process group) at seeded-random moments of the run: during the
    warm start, an iteration or a checkpoint write. Each resumed run must start from the
    checkpoint of the last or second-to-last iteration logged before the kill and end
    with the uninterrupted run's bytes."""
    rng = random.Random(20261123)
    killed_mid_run = 0
    for trial in range(KILL_TRIALS):
        out = tmp_path / f"trial{trial}"
        # an iteration to reach (trial 0: none, so the kill lands in the setup or the warm
        # start), then a random delay, so the kill lands anywhere: compiles, update,
        # validation, checkpoint write
        after = -1 if trial == 0 else rng.randint(0, ITERATIONS - 2)
        delay = rng.uniform(0.0, 3.0 if trial == 0 else 1.5)
        proc = subprocess.Popen(mlgo_train(*tiny, out, "--no-tensorboard"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 600
        while _last_logged_iteration(out) < after and proc.poll() is None:
            assert time.monotonic() < deadline, "no progress within 10 minutes"
            time.sleep(0.02)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=delay)
        finished = proc.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        logged = _last_logged_iteration(out)
        killed_mid_run += not finished

        done = subprocess.run(mlgo_train(*tiny, out, "--no-tensorboard"),
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        match = re.search(r"resuming .* at iteration (\d+)", done.stderr)
        resumed_after = int(match.group(1)) - 1 if match else -1
        lost = max(0, logged - resumed_after)
        print(f"trial {trial}: killed {delay:.2f}s after iteration {after}, last logged "
              f"{logged}, resumed after iteration {resumed_after}, lost {lost}")
        assert lost <= 1, done.stderr
        rows = [json.loads(ln) for ln in (out / "scalars.jsonl").read_text().splitlines()]
        assert [r["iteration"] for r in rows] == list(range(ITERATIONS + 1))
        for name in ("final", "best"):
            assert policy_bytes(out / name) == policy_bytes(uninterrupted / name)
    assert killed_mid_run >= KILL_TRIALS - 1, "the runs finished before the kills"


def test_mlgo_eval_runs_the_trained_policy_on_a_corpus(tiny, uninterrupted, tmp_path):
    corpus, _ = tiny
    report = tmp_path / "eval.json"
    done = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "eval", "--corpus",
                           str(corpus), "--policy", str(uninterrupted / "best"), "--json",
                           str(report), "--workers", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    assert data["policy"] == str(uninterrupted / "best")
    rows = data["modules"]
    assert len(rows) == len(TINY_DEMO_MODULES) and not any(r["error"] for r in rows)
    assert sum(r["decisions"] for r in rows) > 150  # the policy answered clang's questions
    assert data["total"]["baseline_bytes"] > 0 and data["total"]["policy_bytes"] > 0


def test_a_run_refuses_to_resume_under_another_size_metric(tiny, uninterrupted, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(uninterrupted, out)
    done = subprocess.run(mlgo_train(*tiny, out, "--no-tensorboard", "--size-metric", "text"),
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "size metric 'allocated'" in done.stderr and "measures 'text'" in done.stderr
    assert "--size-metric allocated" in done.stderr  # and says how to resume it
    assert "Traceback" not in done.stderr
    # the policy the run saved names the metric it was trained and chosen by
    doc = json.loads((uninterrupted / "best" / "policy.json").read_text())
    assert doc["hyperparameters"]["size_metric"] == "allocated"
    assert doc["hyperparameters"]["config"]["size_metric"] == "allocated"


def test_a_run_from_before_size_metrics_resumes_only_as_text(tiny, uninterrupted, tmp_path):
    out = tmp_path / "legacy"
    shutil.copytree(uninterrupted, out)
    for name in ("checkpoint.pkl", "setup.pkl"):  # as a run written before the metric existed
        data = pickle.loads((out / name).read_bytes())
        recorded = data["config"] if name == "checkpoint.pkl" else data.identity
        del recorded["size_metric"]
        (out / name).write_bytes(pickle.dumps(data))
    done = subprocess.run(mlgo_train(*tiny, out, "--no-tensorboard"), capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert "size metric 'text' (it predates size metrics)" in done.stderr
