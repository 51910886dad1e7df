"""A Ray cluster of separate hosts, its faults, and experiments sharing workers. Prints JSON.

The hosts are network namespaces on this machine (tests/netns_hosts.py, netns_ray.py): a
head (0 CPUs: GCS and Ray Client server), worker hosts of 1 CPU each, and a driver host
where `mlgo` runs with `--cluster ray://HEAD:10001`. The corpus stays on the driver
(hidden from the other hosts); module bytes reach the workers through Ray's object store,
pymlgo's code through the job's runtime_env. All traffic stays in the lab's namespaces.

- `hosts`: every host of the lab, its address and role;
- `throughput`: compiles/s of the `default` policy over the corpus with 1 worker host, then
  2 (the executor follows the cluster as the second host joins);
- `fault_trial`: `mlgo train` (es, --iterations N) undisturbed on the cluster, then again
  with a worker host lost mid-iteration (cable cut, processes killed, namespace deleted)
  and a new host joining; `identical_to_undisturbed` (final/ and best/ bytes, compiles and
  failures per iteration), `lost_jobs`, `duplicated_jobs`, compiles per host;
- `head_loss`: the head lost after iteration 1: the run's exit code, error and seconds to
  it, then the same command on a new cluster resumes to the undisturbed bytes;
- `sharing`: two experiments, each alternating a compile batch with a lull (a training
  step on its own accelerator, a sleep here), the second starting half a lull later, on
  one shared pool of 2 workers (`mlgo pool
  serve`, the nesting worker) vs two separate pools of 1: throughput (compiles/s over
  both) and utilization (compile seconds / (workers x wall)). The pools run on this
  machine (a pool is a unix socket), not on the namespaces' hosts.

The machine is 2 cores shared with other work: every process runs under nice 10, and
`load_average` is reported with the figures, which move with it.

    python benchmarks/cluster.py [--iterations 3] [--rounds 4] [--lull 2.0]
                                 [--no-faults] [--no-sharing] [--no-cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/ holds the lab (namespaces) this benchmark runs on

from tests import netns_hosts  # noqa: E402
from tests.cluster_trials import (  # noqa: E402
    ES_CONFIG,
    Outcome,
    compare,
    head_loss_trial,
    summary_of,
    tiny_corpus,
    train_args,
    worker_loss_trial,
)
from tests.netns_ray import RayHosts  # noqa: E402

RUN_TIMEOUT_S = 1800.0


# -- parts run as their own processes ------------------------------------------------------


def throughput_main(cluster: str, corpus: str, rounds: int) -> None:
    """On the driver host: compile the corpus `rounds` times; JSON on stdout."""
    from pymlgo.cli.common import resolve_corpus
    from pymlgo.evaluate.eval import corpus_jobs
    from pymlgo.problems.inlining.policies import builtin_policy
    from pymlgo.workers import WorkSpec, make_executor

    jobs = corpus_jobs(resolve_corpus(corpus))
    spec = WorkSpec(policy=builtin_policy("default"))
    with make_executor(cluster) as ex:
        ex.wait_ready()  # type: ignore[attr-defined]
        list(ex.run(spec, jobs))  # warm-up: actors started, spec and modules shipped
        start = time.monotonic()
        done = sum(r.ok for _ in range(rounds) for r in ex.run(spec, jobs))
        seconds = time.monotonic() - start
        hosts = sorted(set(ex.hosts()))  # type: ignore[attr-defined]
        workers = ex.num_workers
    print(json.dumps({"compiles": done, "seconds": round(seconds, 2),
                      "compiles_per_second": round(done / seconds, 3),
                      "workers": workers, "hosts": hosts}))


def experiment_main(cluster: str, corpus: str, rounds: int, lull_s: float, out: str,
                    offset_s: float) -> None:
    """One experiment on a pool: after `offset_s`, `rounds` x (compile the corpus, then a
    lull)."""
    from pymlgo.cli.common import resolve_corpus
    from pymlgo.evaluate.eval import corpus_jobs
    from pymlgo.problems.inlining.policies import builtin_policy
    from pymlgo.workers import WorkSpec, make_executor

    jobs = corpus_jobs(resolve_corpus(corpus))
    spec = WorkSpec(policy=builtin_policy("default"))
    compiles, busy = 0, 0.0
    start = time.time()
    time.sleep(offset_s)
    with make_executor(cluster) as ex:
        for _ in range(rounds):
            for r in ex.run(spec, jobs):
                compiles += r.ok
                busy += r.seconds
            time.sleep(lull_s)
        end = time.time()
    Path(out).write_text(json.dumps({"compiles": compiles, "compile_seconds": busy,
                                     "start": start, "end": end}))


# -- the trials ----------------------------------------------------------------------------


def measure_throughput(rh: RayHosts, corpus: Path, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hosts in (1, 2):
        while len(rh.workers) < hosts:
            rh.add_worker(f"w{len(rh.workers) + 1}")
        done = rh.lab.run(rh.driver, [sys.executable, str(Path(__file__).resolve()),
                                      "throughput", rh.address, str(corpus), str(rounds)],
                          timeout=RUN_TIMEOUT_S, env=rh.driver_env(), cwd=rh.driver_dir)
        if done.returncode != 0:
            raise RuntimeError(f"throughput with {hosts} hosts failed:\n{done.stderr[-3000:]}")
        out[f"{hosts}_worker_hosts"] = json.loads(done.stdout.strip().splitlines()[-1])
    one = out["1_worker_hosts"]["compiles_per_second"]
    out["speedup_2_vs_1"] = round(out["2_worker_hosts"]["compiles_per_second"] / one, 3)
    return out


def fault_trials(rh: RayHosts, corpus: Path, iterations: int) -> dict[str, Any]:
    config = rh.driver_dir / "es.toml"
    config.write_text(ES_CONFIG)
    ref_dir = rh.driver_dir / "undisturbed"
    log = rh.driver_dir / "undisturbed.log"
    started = time.monotonic()
    proc = rh.spawn_mlgo(train_args(corpus, config, ref_dir, iterations, rh.address), log)
    if proc.wait(timeout=RUN_TIMEOUT_S) != 0:
        raise RuntimeError(f"undisturbed run failed:\n{log.read_text()[-3000:]}")
    undisturbed_s = time.monotonic() - started
    reference = Outcome.of(ref_dir)

    out = rh.driver_dir / "lose-worker"
    victim = rh.workers[sorted(rh.workers)[-1]]
    started = time.monotonic()
    trial = worker_loss_trial(rh, corpus, config, out, iterations, victim, "w-joined",
                              timeout=RUN_TIMEOUT_S)
    fault = {**compare(Outcome.of(out), reference), **trial,
             "seconds": round(time.monotonic() - started, 1),
             "undisturbed_seconds": round(undisturbed_s, 1),
             "undisturbed": summary_of(log), "iterations": iterations}

    out = rh.driver_dir / "lose-head"
    head = head_loss_trial(rh, corpus, config, out, iterations, error_timeout=300,
                           timeout=RUN_TIMEOUT_S)
    head["identical_to_undisturbed"] = compare(Outcome.of(out),
                                               reference)["identical_to_undisturbed"]
    return {"fault_trial": fault, "head_loss": head}


def sharing(corpus: Path, rounds: int, lull_s: float, workdir: Path) -> dict[str, Any]:
    """Two experiments: one pool of 2 workers shared vs one pool of 1 worker each."""
    env = {**os.environ, "MLGO_RUNTIME_DIR": str(workdir / "run"),
           "PYTHONPATH": str(REPO)}
    nice = ["nice", "-n", "10"]

    def serve(name: str, workers: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*nice, sys.executable, "-m", "pymlgo.cli.main", "pool",
                                 "serve", "--name", name, "--workers", str(workers)],
                                env=env, stderr=subprocess.DEVNULL)

    def trial(pools: dict[str, int], assign: tuple[str, str]) -> dict[str, Any]:
        from pymlgo.workers.pool import wait_for_pool

        servers = [serve(name, n) for name, n in pools.items()]
        try:
            for name in pools:
                wait_for_pool(name, runtime=workdir / "run", timeout=300)
            outs = [workdir / f"exp-{i}-{'-'.join(pools)}.json" for i in range(2)]
            # the second starts half a lull later: one trains while the other compiles,
            # the lulls a shared pool can fill (in step, there would be none)
            exps = [subprocess.Popen([*nice, sys.executable, str(Path(__file__).resolve()),
                                      "experiment", f"pool:{name}", str(corpus), str(rounds),
                                      str(lull_s), str(o), str(i * lull_s / 2)], env=env)
                    for i, (name, o) in enumerate(zip(assign, outs, strict=True))]
            for e in exps:
                if e.wait(timeout=RUN_TIMEOUT_S) != 0:
                    raise RuntimeError("an experiment failed")
        finally:
            for s in servers:
                s.terminate()
                s.wait(timeout=60)
        rows = [json.loads(o.read_text()) for o in outs]
        wall = max(r["end"] for r in rows) - min(r["start"] for r in rows)
        compiles = sum(r["compiles"] for r in rows)
        workers = sum(pools.values())
        return {"pools": pools, "compiles": compiles, "wall_seconds": round(wall, 2),
                "compiles_per_second": round(compiles / wall, 3),
                "utilization": round(sum(r["compile_seconds"] for r in rows)
                                     / (workers * wall), 3)}

    shared = trial({"shared": 2}, ("shared", "shared"))
    separate = trial({"a": 1, "b": 1}, ("a", "b"))
    return {"rounds_per_experiment": rounds, "lull_seconds": lull_s, "shared": shared,
            "separate": separate,
            "throughput_ratio_shared_vs_separate": round(
                shared["compiles_per_second"] / separate["compiles_per_second"], 3)}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "throughput":
        throughput_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "experiment":
        experiment_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]),
                        sys.argv[6], float(sys.argv[7]))
        return 0
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=3, help="training iterations per run")
    p.add_argument("--rounds", type=int, default=4,
                   help="passes over the corpus per throughput figure / per experiment")
    p.add_argument("--lull", type=float, default=2.0,
                   help="seconds of each experiment's lull between its batches")
    p.add_argument("--no-faults", action="store_true", help="skip the training trials")
    p.add_argument("--no-sharing", action="store_true", help="skip shared vs separate pools")
    p.add_argument("--no-cluster", action="store_true",
                   help="skip everything on the namespaces' Ray cluster (sharing only)")
    args = p.parse_args()

    result: dict[str, Any] = {"load_average_before": os.getloadavg()}
    reason = "--no-cluster" if args.no_cluster else netns_hosts.unavailable_reason()
    if reason is not None:
        result["cluster_skipped"] = reason
    else:
        with netns_hosts.Lab() as lab:
            rh = RayHosts(lab)
            corpus = tiny_corpus(rh.driver_dir / "corpus")
            rh.start_head()
            result["throughput"] = measure_throughput(rh, corpus, args.rounds)
            if not args.no_faults:
                result.update(fault_trials(rh, corpus, args.iterations))
            result["hosts"] = [{"name": h.name, "address": h.address, "alive": h.alive,
                                "role": ("driver" if h is rh.driver else
                                         "head" if h.name.startswith("head") else "worker")}
                               for h in lab.hosts.values()]
    if not args.no_sharing:
        with tempfile.TemporaryDirectory(prefix="mlgo-cluster-bench-") as tmp:
            corpus = tiny_corpus(Path(tmp) / "corpus")
            result["sharing"] = sharing(corpus, args.rounds, args.lull, Path(tmp))
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
