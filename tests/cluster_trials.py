"""Trials on a Ray cluster of separate hosts (`netns_ray.RayHosts`): training runs that lose
a worker host, gain one, or lose the head. Shared by tests/test_cluster_hosts.py (small)
and benchmarks/cluster.py.

A run's outcome is what it leaves on disk: the bytes of `final/` and `best/`, and the
`compiles` and `failures` of each iteration in scalars.jsonl (a compile lost or counted
twice changes those counts; one run again elsewhere does not).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymlgo.corpus.format import write_corpus_description
from tests.netns_hosts import Host, LabError, wait_for
from tests.netns_ray import RayHosts
from tests.test_train_algorithms import TINY_DEMO_MODULES

# Eight real modules of the demo corpus (zstd, brotli): small enough to train on for a
# few iterations on a loaded 2-core machine.
MODULES = TINY_DEMO_MODULES

# es from a random network (no torch in the driver): 2 antithetic pairs x 4 modules per
# iteration = 16 training compiles, plus the validation modules.
ES_CONFIG = """algo = "es"
warmstart = ""
seed = 11
[split]
validation = 0.25
heldout = 0.0
[policy]
hidden = [8]
quantiles = 100
[es]
population = 2
modules_per_iteration = 4
"""

_SUMMARY = re.compile(r"ray \S+: (\d+) compiles on (\d+) hosts \(([^)]*)\); (\d+) run again")


def tiny_corpus(dest: Path, modules: Sequence[str] = MODULES) -> Path:
    """`modules` of the demo corpus (built once and cached) copied to `dest`."""
    from pymlgo.corpus.demo import ensure_demo_corpus

    demo = ensure_demo_corpus(progress=False)
    for name in modules:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        for ext in (".bc", ".cmd"):
            shutil.copyfile(demo / f"{name}{ext}", dest / f"{name}{ext}")
    write_corpus_description(dest, list(modules))
    return dest


def train_args(corpus: Path, config: Path, out: Path, iterations: int,
               cluster: str | None = None, workers: int | None = None) -> list[str]:
    args = ["train", "--corpus", str(corpus), "--config", str(config), "--output_dir",
            str(out), "--iterations", str(iterations), "--no-tensorboard"]
    if cluster is not None:
        args += ["--cluster", cluster]
    if workers is not None:
        args += ["--workers", str(workers)]
    return args


@dataclass(frozen=True)
class Outcome:
    """What a training run leaves that must not depend on where or how it ran."""

    policies: dict[str, dict[str, bytes]]  # final/, best/: file name -> bytes
    counts: list[tuple[int, int, int]]  # per iteration: (iteration, compiles, failures)

    @classmethod
    def of(cls, run_dir: Path) -> Outcome:
        policies = {name: {p.name: p.read_bytes() for p in sorted((run_dir / name).iterdir())
                           if p.is_file()} for name in ("final", "best")}
        counts = []
        for line in (run_dir / "scalars.jsonl").read_text().splitlines():
            row = json.loads(line)
            counts.append((int(row["iteration"]), int(row.get("compiles", 0)),
                           int(row.get("failures", 0))))
        return cls(policies, counts)


def compare(run: Outcome, reference: Outcome) -> dict[str, Any]:
    """identical_to_undisturbed, and the compiles lost or counted twice per iteration."""
    ref = {i: (c, f) for i, c, f in reference.counts}
    got = {i: (c, f) for i, c, f in run.counts}
    lost = sum(max(0, ref[i][0] - got.get(i, (0, 0))[0]) for i in ref)
    twice = sum(max(0, got[i][0] - ref.get(i, (0, 0))[0]) for i in got)
    return {
        "identical_to_undisturbed": run.policies == reference.policies and got == ref,
        "policy_bytes_identical": run.policies == reference.policies,
        "lost_jobs": lost,
        "duplicated_jobs": twice,
        "failures": sum(f for _, _, f in run.counts),
    }


def summary_of(log: Path) -> dict[str, Any]:
    """The Ray executor's last summary line in a driver's log: compiles per host."""
    return summary_of_text(log.read_text(errors="replace"))


def summary_of_text(text: str) -> dict[str, Any]:
    """The Ray executor's last summary line in `text` (a driver's stderr)."""
    found = _SUMMARY.findall(text)
    if not found:
        return {}
    total, _, hosts, again = found[-1]
    per_host = {h: int(n) for h, n in (part.split(": ") for part in hosts.split(", ") if part)}
    return {"compiles": int(total), "per_host": per_host, "run_again": int(again)}


def compiler_pids(host: Host) -> list[int]:
    """The compilers running on `host` right now."""
    found = []
    for pid in host.pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"-cc1" in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def compiling_on(rh: RayHosts, host: Host) -> bool:
    """A compiler is running on `host` right now."""
    return bool(compiler_pids(host))


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def compiles_held(hosts: Sequence[Host], release_every: float = 10.0) -> Iterator[None]:
    """While inside, every compiler that starts on `hosts` is stopped (SIGSTOP), so a run on
    the cluster cannot finish however fast the machine is: a host that joins meanwhile gets
    the queued jobs. Every `release_every` s the held ones continue to their end (the last
    jobs of a batch may all be held, with none queued for a newcomer); all do on exit."""
    stop = threading.Event()
    held: set[int] = set()
    seen: set[int] = set()

    def hold() -> None:
        released = time.monotonic()
        while not stop.wait(0.02):  # `held` is read by the caller only after the join
            for host in hosts:
                fresh = [p for p in compiler_pids(host) if p not in seen]
                _signal(fresh, signal.SIGSTOP)
                seen.update(fresh)
                held.update(fresh)
            if time.monotonic() - released > release_every:
                _signal(held, signal.SIGCONT)
                held.clear()
                released = time.monotonic()

    thread = threading.Thread(target=hold, name="compiles-held", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _signal(held, signal.SIGCONT)


def wait_checkpoint(run_dir: Path, iteration: int) -> bool:
    """Iteration `iteration` has been checkpointed (scalars.jsonl has its row)."""
    scalars = run_dir / "scalars.jsonl"
    if not scalars.is_file():
        return False
    return any(json.loads(line)["iteration"] >= iteration
               for line in scalars.read_text().splitlines() if line.strip())


def worker_loss_trial(rh: RayHosts, corpus: Path, config: Path, out: Path, iterations: int,
                      victim: Host, joiner: str, *, timeout: float) -> dict[str, Any]:
    """Train on the cluster; once it compiles, a host named `joiner` joins, and once that has
    compiled, iteration 1 is checkpointed and `victim` is compiling, lose `victim`
    (mid-iteration). The run must finish.

    The join comes first and is waited for: joined after the loss (stop 37), the new host's
    actor was sometimes still starting when a short run ended, and it got no job. The
    compiles of the other hosts are held while the joiner starts (`compiles_held`): a fast
    machine finished the whole run in 8 s, before a new host's node was up (stop 53). The
    victim's compile is held from the moment it is seen until the host is lost, so the run
    cannot end in between."""
    log = out.parent / f"{out.name}.log"
    others = list(rh.workers.values())
    proc = rh.spawn_mlgo(train_args(corpus, config, out, iterations, rh.address), log)
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    def ended_before(what: str) -> None:
        if proc.poll() is not None:
            raise LabError(f"the run ended before {what}:\n{log.read_text()}")

    wait_for(lambda: proc.poll() is not None or compiling_on(rh, victim), left(),
             f"the run's first compile on {victim.name}", every=0.05)
    ended_before(f"{joiner} joined")
    held_from = time.monotonic()
    with compiles_held(others):
        added = rh.add_worker(joiner)  # into a run that is compiling: the executor must grow
        wait_for(lambda: proc.poll() is not None or compiling_on(rh, added), left(),
                 f"a compile on {joiner}", every=0.05)
        ended_before(f"{joiner} compiled")
    held_seconds = time.monotonic() - held_from
    wait_for(lambda: proc.poll() is not None or wait_checkpoint(out, 1), left(),
             "iteration 1", every=0.05)
    stopped: list[int] = []

    def victim_holds_a_compile() -> bool:
        found = compiler_pids(victim)
        _signal(found, signal.SIGSTOP)
        stopped.extend(found)
        return proc.poll() is not None or bool(stopped)

    wait_for(victim_holds_a_compile, left(), f"a compile on {victim.name}", every=0.02)
    ended_before(f"{victim.name} was lost")
    lost_at = _iteration_of(out)
    rh.lose(victim)
    try:
        proc.wait(timeout=left())
    except Exception as exc:
        raise LabError(f"the run did not finish after losing {victim.name}") from exc
    if proc.returncode != 0:
        raise LabError(f"the run failed after losing {victim.name}:\n{log.read_text()}")
    summary = summary_of(log)
    return {"lost_during_iteration": lost_at + 1, "joined": added.address,
            "joined_host_compiles": summary.get("per_host", {}).get(added.address, 0),
            "victim": victim.address, "held_seconds": round(held_seconds, 1), **summary}


def _iteration_of(run_dir: Path) -> int:
    lines = (run_dir / "scalars.jsonl").read_text().splitlines()
    return max(int(json.loads(line)["iteration"]) for line in lines if line.strip())


def head_loss_trial(rh: RayHosts, corpus: Path, config: Path, out: Path, iterations: int,
                    *, error_timeout: float, timeout: float) -> dict[str, Any]:
    """Train; after iteration 1 lose the head. The run must stop with a clear error within
    `error_timeout`; then a new cluster comes up and the same command resumes the run."""
    log = out.parent / f"{out.name}.log"
    proc = rh.spawn_mlgo(train_args(corpus, config, out, iterations, rh.address), log)
    wait_for(lambda: proc.poll() is not None or wait_checkpoint(out, 1), timeout,
             "iteration 1", every=0.05)
    # the workers' compiles are held from here until they are lost: however fast the
    # machine, the run cannot end before its head does
    with compiles_held(list(rh.workers.values())):
        if proc.poll() is not None:
            raise LabError(f"the run ended before the head was lost:\n{log.read_text()}")
        checkpointed = _iteration_of(out)
        lost = time.monotonic()
        rh.lose_head()
        for host in list(rh.workers.values()):  # its raylets would die with the head anyway
            rh.lose(host)
    try:
        code = proc.wait(timeout=error_timeout)
    except Exception as exc:
        raise LabError(f"the run did not stop within {error_timeout:.0f}s of losing the "
                       f"head:\n{log.read_text()[-3000:]}") from exc
    seconds_to_error = time.monotonic() - lost
    error = [line for line in log.read_text(errors="replace").splitlines()
             if line.startswith("mlgo train:")]
    rh.start_head("head2")
    rh.add_worker("w-after-head")
    resumed = rh.run_mlgo(train_args(corpus, config, out, iterations, rh.address),
                          timeout=timeout)
    if resumed.returncode != 0:
        raise LabError(f"the resumed run failed:\n{resumed.stderr[-3000:]}")
    return {"exit_code": code, "seconds_to_error": round(seconds_to_error, 1),
            "error": error[-1] if error else "", "checkpointed_iteration": checkpointed,
            "resumed": "resuming" in resumed.stderr}
