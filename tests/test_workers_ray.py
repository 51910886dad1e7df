"""The Ray backend on a real Ray cluster that this module starts on 127.0.0.1."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.main import main as mlgo
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.policy.store import load_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.workers import CUT_ERROR, LOST_ERROR, ExecutorError, WorkSpec, make_executor
from pymlgo.workers.local import LocalPool
from pymlgo.workers.ray_backend import BUSY_HEAD_ENV, RayExecutor
from pymlgo.workers.testing import CrashPolicy, SlowPolicy
from tests.ray_start import PATIENT_ENV, RAY_START
from tests.workers_support import (
    POLICIES,
    outcome,
    processes_mentioning,
    spec_for,
    wait_until,
    write_corpus,
)

pytest_plugins = ("tests.workers_fixtures",)  # fixtures: worker_jobs, reference

pytest.importorskip("ray")
pytestmark = pytest.mark.ray


# A single-machine test cluster: listen on loopback only (Ray's default is the address
# other machines reach), no token auth between local processes, no usage reports.
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


RAY_TMP = Path(f"/tmp/rmlgo-{os.getpid()}")  # short: Ray puts unix sockets in here
# the head, and the executor's actors, up: minutes on a loaded 2-core machine
HEAD_START_TIMEOUT_S = 900.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_ports() -> list[str]:
    """Fixed ports for the head's agents: the raylet is told them instead of waiting, 15 s
    at most (then it crashes), for the agents to write them to files."""
    flags = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
             "--metrics-export-port", "--runtime-env-agent-port")
    return [arg for flag in flags for arg in (flag, str(free_port()))]


def stop_processes_mentioning(path: Path) -> None:
    for pid in processes_mentioning(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """`ray start --head` on 127.0.0.1 with 2 CPUs; yields (ray:// address, scratch dir).

    The cluster's processes get their own TMPDIR, so the compiles of its actors, and any
    compiler a killed actor leaves behind, are found under that dir. The head is started
    patient with a loaded machine (`ray_start`), as a cluster on busy hosts is set up."""
    root = Path(tempfile_root := tmp_path_factory.mktemp("ray"))
    scratch = root / "scratch"
    scratch.mkdir()
    ray_tmp = RAY_TMP
    client_port = free_port()
    env = {
        **os.environ,
        **LOCAL_RAY_ENV,
        **PATIENT_ENV,
        **BUSY_HEAD_ENV,
        "TMPDIR": str(scratch),
        "PYTHONPATH": "",  # the cluster gets pymlgo only from the driver, as runtime_env
    }
    log = root / "ray-start.log"
    with open(log, "wb") as out:
        head = subprocess.Popen(
            [*RAY_START, "--head", "--block", "--node-ip-address", "127.0.0.1",
             "--port", str(free_port()), "--ray-client-server-port", str(client_port),
             *agent_ports(), "--num-cpus", "2",
             "--include-dashboard", "false", "--disable-usage-stats",
             "--temp-dir", str(ray_tmp)],
            env=env, cwd=tempfile_root, stdout=out, stderr=subprocess.STDOUT,
        )
    mp = pytest.MonkeyPatch()
    for var in ("RAY_AUTH_MODE",):  # the driver must agree with the cluster
        mp.setenv(var, LOCAL_RAY_ENV[var])
    try:
        deadline = time.monotonic() + HEAD_START_TIMEOUT_S
        while True:
            assert head.poll() is None, f"ray start failed:\n{log.read_text(errors='replace')}"
            try:
                socket.create_connection(("127.0.0.1", client_port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (
                    f"Ray client server not up in {HEAD_START_TIMEOUT_S:.0f} s:\n"
                    f"{log.read_text(errors='replace')}")
                time.sleep(0.5)
        yield f"ray://127.0.0.1:{client_port}", scratch
    finally:
        mp.undo()
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        stop_processes_mentioning(ray_tmp)
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)


def client_server_logs(ray_tmp: Path, lines: int = 40) -> str:
    """The tail of every Ray client server log: why a session could not start."""
    tails = []
    for log in sorted(ray_tmp.glob("session_*/logs/ray_client_server*")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"--- {log.name}\n" + "\n".join(text))
    return "\n".join(tails) or f"(no client server logs under {ray_tmp})"


@pytest.fixture(scope="module")
def ray_ex(ray_cluster):  # type: ignore[no-untyped-def]
    """One executor on the cluster for the whole module, attached as users do (retried by
    the executor when the head fails to start this driver's server)."""
    address, _ = ray_cluster
    try:
        ex = make_executor(address)
    except ExecutorError as exc:
        pytest.fail(f"{exc}\n{client_server_logs(RAY_TMP)}")
    with ex:
        assert isinstance(ex, RayExecutor) and ex.num_workers == 2
        ex.wait_ready(timeout=HEAD_START_TIMEOUT_S)
        yield ex


@pytest.fixture(scope="module")
def local_pool():  # type: ignore[no-untyped-def]
    with LocalPool(2) as pool:
        yield pool


@pytest.mark.parametrize("policy", POLICIES)
def test_ray_results_equal_the_local_pool_byte_for_byte(ray_ex, local_pool, worker_jobs,
                                                        reference, policy):
    spec = WorkSpec(policy=builtin_policy(policy), record=True)
    on_ray = {r.module: r for r in ray_ex.run(spec, worker_jobs)}
    local = {r.module: r for r in local_pool.run(spec, worker_jobs)}
    assert outcome(on_ray.values()) == outcome(local.values()) == reference[policy]
    for module, r in on_ray.items():
        assert (r.trajectory is None) == (local[module].trajectory is None)
        if r.trajectory is not None:
            assert np.array_equal(r.trajectory.advice, local[module].trajectory.advice)


# Fields of `mlgo eval --json` that may differ between two runs of one evaluation: none.
# The report holds no timings, and its "compiler" is the driver's (the same binary for
# both runs), not the workers'. A run-specific field added later is named here.
RUN_SPECIFIC_FIELDS: tuple[str, ...] = ()


def comparable(report_text: str) -> str:
    report = json.loads(report_text)
    for field in RUN_SPECIFIC_FIELDS:
        report.pop(field)
    return json.dumps(report, indent=2)


def test_the_eval_report_on_ray_equals_mlgo_eval_on_the_local_pool_byte_for_byte(
    ray_ex, compiler, worker_jobs, tmp_path, monkeypatch
):
    corpus = write_corpus(tmp_path / "corpus", worker_jobs)
    policy = "random:0.5:3"  # the most decisions that differ from clang's own
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache-local"))
    local_json = tmp_path / "local.json"
    assert mlgo(["eval", "--corpus", str(corpus), "--policy", policy, "--workers", "2",
                 "--json", str(local_json)]) == 0
    # on Ray, as `mlgo eval --cluster ray://...` runs it (the CLI would start actors of its
    # own; the module's executor holds the cluster's CPUs): jobs that read their files,
    # shipped as bytes; the baselines computed there too, not taken from the local cache
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache-ray"))
    report = evaluate(ray_ex, compiler, corpus_jobs(load_corpus(corpus)),
                      load_policy(policy, problem="inlining", seed=0))
    ray_text = json.dumps(report.to_json(), indent=2) + "\n"  # as the CLI writes it
    local_text = local_json.read_text()
    assert json.loads(local_text)["total"]["policy_bytes"] > 0
    assert len(report.ok_modules) == len(worker_jobs)
    assert comparable(ray_text) == comparable(local_text)
    assert not RUN_SPECIFIC_FIELDS and ray_text == local_text


def test_jobs_that_read_their_files_reach_actors_as_bytes(ray_ex, worker_jobs, tmp_path):
    import ray

    corpus = write_corpus(tmp_path / "corpus", worker_jobs[:1])
    (job,) = corpus_jobs(load_corpus(corpus))
    assert job.data is None
    shipped = ray.get(ray_ex._job_ref(job))
    assert shipped.path is None and shipped.data == job.bitcode
    # a file the driver cannot read is that module's error; the run goes on
    gone = dataclasses.replace(job, module="gone", path=tmp_path / "gone.bc")
    results = {r.module: r for r in ray_ex.run(spec_for("never"), [gone, job])}
    assert "cannot read bitcode" in (results["gone"].error or "") and results[job.module].ok


def test_an_actor_killed_mid_compile_has_its_job_retried(ray_ex, ray_cluster, worker_jobs,
                                                         reference):
    _, scratch = ray_cluster
    spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), 0.5))
    before = ray_ex.stats()["retries"]
    results, killed = [], []
    for r in ray_ex.run(spec, worker_jobs):
        results.append(r)
        if not killed:
            pid = next(iter(ray_ex.busy()))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    assert outcome(results) == reference["default"]  # none lost, none twice
    assert ray_ex.stats()["retries"] > before
    assert killed[0] not in ray_ex.worker_pids()
    # the executor goes on; the dead actor's compiler is cleaned up on its node
    assert outcome(ray_ex.run(spec_for("never"), worker_jobs)) == reference["never"]
    wait_until(lambda: processes_mentioning(scratch) == [], 120, "stray compilers reaped")


def test_a_job_that_keeps_killing_actors_ends_as_an_error(ray_ex, worker_jobs, reference,
                                                          monkeypatch):
    monkeypatch.setattr(ray_ex, "max_retries", 1)
    doomed = worker_jobs[2].module
    spec = WorkSpec(policy=CrashPolicy(builtin_policy("default"), (doomed,)))
    results = {r.module: r for r in ray_ex.run(spec, worker_jobs)}
    assert results.pop(doomed).error.startswith(LOST_ERROR)
    assert outcome(results.values()) == {m: v for m, v in reference["default"].items()
                                         if m != doomed}


STRAGGLER_S = 600.0  # far beyond the rest of the run, however loaded the machine


def test_a_straggler_is_cut_without_blocking_the_run(ray_ex, worker_jobs):
    straggler = worker_jobs[0].module
    spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), STRAGGLER_S, (straggler,)))
    # all but the straggler, then half a second of grace: however long the others take
    # on a busy machine, only the straggler is left to cut
    all_but_one = (len(worker_jobs) - 1) / len(worker_jobs)
    started = time.monotonic()
    results = {r.module: r for r in ray_ex.run(spec, worker_jobs, min_fraction=all_but_one,
                                               straggler_grace_s=0.5)}
    assert time.monotonic() - started < STRAGGLER_S / 2
    assert results[straggler].error == CUT_ERROR
    assert sum(r.ok for r in results.values()) == len(worker_jobs) - 1


def test_asking_for_more_workers_than_the_cluster_has_cpus_is_an_error(ray_ex):
    with pytest.raises(ExecutorError, match="2 CPUs"):
        RayExecutor("ray://unused:1", 3)  # already connected: the address is not redialled


def test_module_bytes_are_put_in_the_object_store_once_across_runs(ray_ex, worker_jobs):
    list(ray_ex.run(spec_for("never"), worker_jobs))
    refs = dict(ray_ex._job_refs)
    list(ray_ex.run(spec_for("default"), worker_jobs))
    assert ray_ex._job_refs == refs and len(refs) == len(worker_jobs)


# A second driver: two executors on one Ray Client connection, then the client dropped
# from another thread, as Ray's object-release thread drops it once the head is gone
# (that thread can do it at any moment, between two calls of the executor). Their actors
# need not start: the module's `ray_ex` holds the cluster's CPUs.
DROPPED_CLIENT_DRIVER = """
import pickle, sys, threading
import ray
from pymlgo.workers import ExecutorError, make_executor

address, jobs_file, spec_file = sys.argv[1:]
jobs, spec = pickle.loads(open(jobs_file, "rb").read()), pickle.loads(open(spec_file, "rb").read())
running, idle = make_executor(address, 1), make_executor(address, 1)
dropper = threading.Thread(target=ray.util.disconnect)
dropper.start()
dropper.join()
try:
    list(running.run(spec, jobs))
except ExecutorError as exc:
    print("run:", exc)
idle.close()
running.close()
print("closed")
"""


def test_a_dropped_ray_client_is_a_lost_cluster_and_closing_after_it_raises_nothing(
        ray_cluster, worker_jobs, tmp_path):
    address, _ = ray_cluster
    jobs, spec = tmp_path / "jobs.pkl", tmp_path / "spec.pkl"
    jobs.write_bytes(pickle.dumps([job.loaded() for job in worker_jobs[:2]]))
    spec.write_bytes(pickle.dumps(spec_for("default")))
    driver = subprocess.run(
        [sys.executable, "-c", DROPPED_CLIENT_DRIVER, address, str(jobs), str(spec)],
        capture_output=True, text=True, timeout=HEAD_START_TIMEOUT_S, check=False)
    assert driver.returncode == 0, driver.stderr[-3000:]
    ran, closed = driver.stdout.splitlines()[-2:]
    assert ran.startswith(f"run: lost the Ray cluster at {address}") and "resume" in ran
    assert closed == "closed"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
