"""A named pool shared by experiments running in separate processes."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pymlgo.workers import ExecutorError, make_executor
from pymlgo.workers.pool import PoolClient, pool_stats, socket_path, stop_pool, wait_for_pool
from pymlgo.workers.testing import SlowPolicy
from tests.workers_support import is_running, outcome, processes_mentioning, spec_for

pytest_plugins = ("tests.workers_fixtures",)  # fixtures: worker_jobs, reference

REPO = Path(__file__).resolve().parents[1]
NAME = "shared"


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private runtime dir (and scratch dir) for this test's pools and clients."""
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return tmp_path


@pytest.fixture
def server(runtime: Path):  # type: ignore[no-untyped-def]
    """`mlgo pool serve --name shared --workers 2`, as a separate process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymlgo.cli.pool", "serve", "--name", NAME, "--workers", "2"],
        cwd=REPO,
    )
    try:
        wait_for_pool(NAME, timeout=60)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert not socket_path(NAME).exists()
    assert processes_mentioning(runtime) == []


def start_experiment(tmp: Path, jobs, policy: str, rounds: int = 1) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    jobs_file = tmp / f"jobs-{policy}.pkl"
    jobs_file.write_bytes(pickle.dumps(jobs))
    out = tmp / f"out-{policy}.json"
    return subprocess.Popen(
        [sys.executable, "-m", "tests.workers_support", str(jobs_file), str(out), policy,
         str(rounds), f"pool:{NAME}"],
        cwd=REPO,
    )


def read_rounds(tmp: Path, policy: str) -> list[list[list]]:  # type: ignore[type-arg]
    return json.loads((tmp / f"out-{policy}.json").read_text())


def streaks(labels: list[str]) -> list[int]:
    """Lengths of the maximal runs of one experiment in a row."""
    out: list[int] = []
    for i, label in enumerate(labels):
        if i and labels[i - 1] == label:
            out[-1] += 1
        else:
            out.append(1)
    return out


def test_two_experiments_share_one_pool_taking_turns(server, runtime, worker_jobs, reference):
    # each experiment evaluates 24 jobs (the corpus three times under distinct names)
    jobs = [dataclasses.replace(j, module=f"{j.module}#{k}")
            for k in range(3) for j in worker_jobs]
    a = start_experiment(runtime, jobs, "default", rounds=2)
    b = start_experiment(runtime, jobs, "never", rounds=2)
    assert a.wait(timeout=300) == 0 and b.wait(timeout=300) == 0

    for policy in ("default", "never"):
        rounds = read_rounds(runtime, policy)
        assert len(rounds) == 2
        for rows in rounds:
            got = {m: (s, d) for m, s, d, e in rows}
            assert len(rows) == len(got) == len(jobs) and all(e is None for *_, e in rows)
            assert got == {j.module: reference[policy][j.module.split("#")[0]] for j in jobs}

    stats = pool_stats(NAME)
    assert stats["experiments"] == []  # both detached cleanly
    host = socket.gethostname()
    labels = [exp for exp, _ in stats["starts"]]
    assert sorted(set(labels)) == sorted({f"{host}:{a.pid}", f"{host}:{b.pid}"})
    assert len(labels) == 2 * 2 * len(jobs)
    # While both are attached, the pool alternates between them (FIFO would serve blocks
    # of each client's window). Only where an experiment is between two rounds (closing
    # one run, opening the next) does the other get several turns in a row.
    begin = max(labels.index(x) for x in set(labels))
    end = min(len(labels) - labels[::-1].index(x) for x in set(labels))
    both = labels[begin:end]
    picture = "".join("AB"[x == labels[0]] for x in labels)
    assert len(both) > 40, picture
    assert sum(n > 2 for n in streaks(both)) <= 2, picture  # one per round boundary
    assert len(streaks(both)) >= 0.8 * len(both), picture


def test_an_experiment_that_dies_is_detached_and_the_other_goes_on(server, runtime,
                                                                   worker_jobs, reference):
    with PoolClient(NAME, experiment="survivor") as client:
        slow = dataclasses.replace(spec_for("default"),
                                   policy=SlowPolicy(spec_for("default").policy, 0.2))
        doomed = start_experiment(runtime, worker_jobs * 1, "never", rounds=50)
        wait = pool_stats(NAME)
        while not any(e != "survivor" for e in wait["experiments"]):
            wait = pool_stats(NAME)
        results = []
        for r in client.run(slow, worker_jobs):
            results.append(r)
            if len(results) == 2:
                doomed.kill()
                doomed.wait()
        assert outcome(results) == reference["default"]
        assert pool_stats(NAME)["experiments"] == ["survivor"]


def test_a_pool_worker_killed_mid_compile_is_replaced_and_the_job_retried(server, worker_jobs,
                                                                          reference):
    spec = dataclasses.replace(spec_for("default"),
                               policy=SlowPolicy(spec_for("default").policy, 0.5))
    with make_executor(f"pool:{NAME}") as ex:
        results, killed = [], False
        for r in ex.run(spec, worker_jobs):
            results.append(r)
            if not killed:
                busy = pool_stats(NAME)["busy"]
                os.kill(int(next(iter(busy))), signal.SIGKILL)
                killed = True
    assert outcome(results) == reference["default"]
    stats = pool_stats(NAME)
    assert stats["retries"] >= 1 and all(map(is_running, stats["worker_pids"]))


def test_straggler_cut_through_a_shared_pool(server, worker_jobs):
    straggler = worker_jobs[0].module
    spec = dataclasses.replace(
        spec_for("default"), policy=SlowPolicy(spec_for("default").policy, 60.0, (straggler,))
    )
    # all but the straggler, then a moment of grace: however long the others take on a
    # busy machine, only the straggler is left to cut (0.75 cut a slow 7th module under load)
    all_but_one = (len(worker_jobs) - 1) / len(worker_jobs)
    with make_executor(f"pool:{NAME}") as ex:
        results = {r.module: r for r in ex.run(spec, worker_jobs, min_fraction=all_but_one,
                                               straggler_grace_s=0.2)}
        assert results[straggler].error == "cut: straggler"
        assert sum(r.ok for r in results.values()) == len(worker_jobs) - 1
        assert len(list(ex.run(spec_for("never"), worker_jobs))) == len(worker_jobs)


def test_pool_status_and_stop_from_the_command_line(server):
    out = subprocess.run([sys.executable, "-m", "pymlgo.cli.pool", "status", "--name", NAME],
                         cwd=REPO, check=True, capture_output=True, text=True).stdout
    status = json.loads(out)
    assert status["workers"] == 2 and status["name"] == NAME
    subprocess.run([sys.executable, "-m", "pymlgo.cli.pool", "stop", "--name", NAME],
                   cwd=REPO, check=True)
    assert server.wait(timeout=30) == 0


def test_attaching_to_a_pool_nobody_serves_says_how_to_start_one(runtime):
    with pytest.raises(ExecutorError, match="mlgo pool serve --name nobody"):
        make_executor("pool:nobody")


def test_a_second_server_for_the_same_name_is_refused(server):
    res = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.pool", "serve", "--name", NAME],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert res.returncode != 0 and "already served" in res.stderr
    stop_pool(NAME)
