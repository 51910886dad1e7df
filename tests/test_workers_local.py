"""The local pool: worker processes on this machine, the default executor."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from pymlgo.evaluate.eval import evaluate
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.protocol.features import FeatureMismatchError
from pymlgo.workers import CUT_ERROR, LOST_ERROR, WorkSpec, make_executor
from pymlgo.workers.dispatch import WorkerProcess
from pymlgo.workers.local import LocalPool
from pymlgo.workers.testing import CrashPolicy, SlowPolicy
from tests.workers_support import (
    POLICIES,
    TorchProbePolicy,
    is_running,
    outcome,
    processes_mentioning,
    spec_for,
    wait_until,
)

pytest_plugins = ("tests.workers_fixtures",)  # fixtures: worker_jobs, reference


@pytest.fixture
def scratch_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Workers made after this put every compile's files under `tmp_path`."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def pool(scratch_tmp: Path):  # type: ignore[no-untyped-def]
    with LocalPool(2) as p:
        p.wait_ready()
        yield p
    assert processes_mentioning(scratch_tmp) == []
    assert not list(scratch_tmp.glob("mlgo-worker-*")), "a worker's scratch dir was left"


@pytest.mark.parametrize("policy", POLICIES)
def test_results_match_compiling_in_process_module_for_module(pool, worker_jobs, reference,
                                                              policy):
    results = list(pool.run(spec_for(policy), worker_jobs))
    assert outcome(results) == reference[policy]


def test_plain_baseline_needs_no_policy(pool, worker_jobs, reference):
    sizes = {m: s for m, (s, _) in outcome(pool.run(WorkSpec(), worker_jobs)).items()}
    assert sizes == {m: s for m, (s, _) in reference["default"].items()}


def test_results_arrive_as_they_complete_not_in_submission_order(pool, worker_jobs):
    slow = worker_jobs[0].module
    spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), 1.0, (slow,)))
    order = [r.module for r in pool.run(spec, worker_jobs)]
    assert order[-1] == slow and sorted(order) == sorted(j.module for j in worker_jobs)


def test_the_policy_is_shipped_once_per_worker_and_jobs_carry_only_the_module(
    pool, worker_jobs, monkeypatch
):
    sent: list[str] = []
    real_send = WorkerProcess.send

    def spy(self, msg):  # type: ignore[no-untyped-def]
        sent.append(msg[0])
        return real_send(self, msg)

    monkeypatch.setattr(WorkerProcess, "send", spy)
    for _ in range(2):
        assert len(list(pool.run(spec_for("default"), worker_jobs * 2))) == 16
        assert sent.count("job") == 16 and 1 <= sent.count("spec") <= pool.num_workers
        sent.clear()


def test_a_worker_killed_mid_compile_has_its_job_retried_elsewhere(pool, worker_jobs,
                                                                   reference):
    # every module's compile pauses 0.5 s on the channel: a kill surely lands mid-compile
    spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), 0.5))
    results, killed = [], []
    for r in pool.run(spec, worker_jobs):
        results.append(r)
        busy = pool.busy()  # empty when both workers finished together: kill at a later one
        if not killed and busy:
            pid, module = next(iter(busy.items()))
            os.kill(pid, signal.SIGKILL)
            killed.append(module)
    assert killed, "no result arrived while the other worker was compiling"
    assert outcome(results) == reference["default"]  # none lost, none twice
    assert pool.stats()["retries"] >= 1 and pid not in pool.worker_pids()
    assert len(pool.worker_pids()) == 2 and all(map(is_running, pool.worker_pids()))


def test_a_worker_killed_during_an_evaluation_leaves_every_module_exactly_one_result(
    pool, worker_jobs, compiler, tmp_path, monkeypatch
):
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "undisturbed"))
    undisturbed = evaluate(pool, compiler, worker_jobs, builtin_policy("default"))
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "disturbed"))  # baselines compile too
    seen: Counter[str] = Counter()
    killed: list[int] = []
    baselines_in, evaluated = threading.Event(), threading.Event()

    def count(res) -> None:  # type: ignore[no-untyped-def]
        seen[res.module] += 1
        if sum(seen.values()) == len(worker_jobs):
            baselines_in.set()

    def kill_a_policy_compile() -> None:
        # From another thread: the pool hands out the next jobs only after the results in
        # hand are consumed, so at a result two workers in step may both be idle.
        baselines_in.wait()
        while not killed and not evaluated.is_set():
            busy = pool.busy()
            if busy:
                pid = next(iter(busy))  # compiling, paused on the channel
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.005)

    killer = threading.Thread(target=kill_a_policy_compile, daemon=True)
    killer.start()
    # every policy compile pauses 0.5 s on the channel: the kill lands mid-compile
    disturbed = evaluate(pool, compiler, worker_jobs,
                         SlowPolicy(builtin_policy("default"), 0.5),
                         on_result=count)
    evaluated.set()
    baselines_in.set()  # a killer still waiting for baselines that never all came ends too
    killer.join()
    assert killed and killed[0] not in pool.worker_pids() and pool.stats()["retries"] >= 1
    # one baseline and one policy result per module: none lost, none twice
    assert seen == {j.module: 2 for j in worker_jobs}
    assert [m.name for m in disturbed.modules] == sorted(j.module for j in worker_jobs)
    assert disturbed.ok_modules == disturbed.modules == undisturbed.modules
    assert (disturbed.baseline_total, disturbed.policy_total) == (
        undisturbed.baseline_total, undisturbed.policy_total)


def test_a_job_that_keeps_killing_workers_ends_as_an_error_after_bounded_retries(
    scratch_tmp, worker_jobs, reference
):
    doomed = worker_jobs[1].module
    spec = WorkSpec(policy=CrashPolicy(builtin_policy("default"), (doomed,)))
    with LocalPool(2, max_retries=1) as pool:
        results = {r.module: r for r in pool.run(spec, worker_jobs)}
        assert pool.stats()["restarts"] == 2
    assert results[doomed].error.startswith(LOST_ERROR) and "2 attempts" in results[doomed].error
    del results[doomed]
    expected = {m: v for m, v in reference["default"].items() if m != doomed}
    assert outcome(results.values()) == expected


def test_a_straggler_is_cut_at_the_deadline_and_its_compiler_killed(pool, worker_jobs,
                                                                    scratch_tmp):
    straggler = worker_jobs[0].module
    spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), 60.0, (straggler,)))
    all_but_one = (len(worker_jobs) - 1) / len(worker_jobs)  # only the straggler is cut
    started = time.monotonic()
    results = {r.module: r for r in pool.run(spec, worker_jobs, min_fraction=all_but_one,
                                             straggler_grace_s=0.5)}
    assert time.monotonic() - started < 15
    assert results[straggler].error == CUT_ERROR
    assert all(r.ok for m, r in results.items() if m != straggler)
    assert len(results) == len(worker_jobs)
    # SIGKILL is sent at the cut; under load the kernel may take a moment to end the process
    wait_until(lambda: processes_mentioning(scratch_tmp) == [], 10.0,
               "the cut compiler to exit")
    # the pool goes on with a fresh worker in place of the one that was cut
    assert len(list(pool.run(spec_for("never"), worker_jobs))) == len(worker_jobs)


def test_stopping_iteration_cancels_the_rest_and_the_pool_stays_usable(pool, worker_jobs,
                                                                       reference):
    spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), 0.3))
    for _ in pool.run(spec, worker_jobs):
        break
    assert pool.busy() == {}
    assert outcome(pool.run(spec_for("never"), worker_jobs)) == reference["never"]


def test_a_policy_that_cannot_be_pickled_is_refused_before_any_job_runs(pool, worker_jobs):
    class LocalClass:
        name = "local"
        required_features = ()

        def for_module(self, module):  # type: ignore[no-untyped-def]
            raise AssertionError("never reached")

    with pytest.raises(AttributeError, match="pickle"):
        pool.run(WorkSpec(policy=LocalClass()), worker_jobs)


def test_a_policy_requiring_a_feature_the_compiler_lacks_raises_feature_mismatch(
    pool, worker_jobs
):
    from dataclasses import replace

    from pymlgo.problems.inlining.policies import HeuristicPolicy

    bad = replace(HeuristicPolicy(), required_features=("no_such_feature",))
    with pytest.raises(FeatureMismatchError):
        list(pool.run(WorkSpec(policy=bad), worker_jobs))
    assert len(list(pool.run(spec_for("default"), worker_jobs))) == len(worker_jobs)


def test_compile_workers_cannot_import_torch(pool, worker_jobs):
    with pytest.raises(ImportError, match="torch"):
        list(pool.run(WorkSpec(policy=TorchProbePolicy()), worker_jobs[:1]))


def test_make_executor_defaults_to_a_local_pool_on_every_core(scratch_tmp):
    with make_executor(None) as ex:
        assert isinstance(ex, LocalPool)
        assert ex.num_workers == len(os.sched_getaffinity(0))
    with make_executor("local", 1) as ex:
        assert ex.num_workers == 1


def test_close_stops_every_worker_process(scratch_tmp):
    pool = LocalPool(2)
    pool.wait_ready()
    pids = pool.worker_pids()
    pool.close()
    assert not any(map(is_running, pids))
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(spec_for("default"), [])


ORPHAN_PARENT = """
import pickle, sys
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.workers import WorkSpec
from pymlgo.workers.local import LocalPool
from pymlgo.workers.testing import SlowPolicy

job = pickle.loads(open(sys.argv[1], "rb").read())
pool = LocalPool(1)
pool.wait_ready()
print(pool.worker_pids()[0], flush=True)
spec = WorkSpec(policy=SlowPolicy(builtin_policy("default"), 120.0))
for _ in pool.run(spec, [job]):  # the compile waits 120 s on the channel
    pass
"""


def test_a_worker_busy_when_its_parent_is_killed_exits_with_its_compiler(worker_jobs,
                                                                        scratch_tmp):
    # End of stdin ends an idle worker; a busy one must not compile on under PID 1
    import pickle
    import subprocess
    import sys

    job = scratch_tmp / "job.pkl"
    job.write_bytes(pickle.dumps(worker_jobs[0]))
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_PARENT, str(job)],
                              stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())  # type: ignore[union-attr]
        wait_until(lambda: processes_mentioning(scratch_tmp / "mlgo-worker") != [], 60.0,
                   "the compile to start")
    finally:
        parent.kill()
        parent.wait()
    wait_until(lambda: not is_running(worker), 15.0, "the orphaned worker to exit")
    wait_until(lambda: processes_mentioning(scratch_tmp / "mlgo-worker") == [], 15.0,
               "its compiler to exit")
