"""A Ray cluster of separate hosts on this machine (network namespaces, `netns_ray`):
`mlgo eval`, `mlgo search` and `mlgo train --cluster ray://HEAD:PORT` run there from a
driver host of their own; a worker host lost mid-iteration and a host joining change no
byte of a training run; a lost head stops the run with a clear error, and the same
command resumes it on a new cluster to the bytes of an undisturbed run.

Skipped, with the reason, where namespaces cannot be made (not root, no iproute2). Every
wait is bounded; the lab removes its namespaces and processes whatever happens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import netns_hosts
from tests.cluster_trials import (
    ES_CONFIG,
    Outcome,
    compare,
    head_loss_trial,
    summary_of_text,
    tiny_corpus,
    train_args,
    worker_loss_trial,
)
from tests.netns_ray import RayHosts

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
_REASON = netns_hosts.unavailable_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

ITERATIONS = 3
RUN_TIMEOUT_S = 900.0  # one mlgo command on the cluster, on a loaded 2-core machine


def local_mlgo(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`mlgo ARGS` on this machine's own worker processes (2), for reference."""
    return subprocess.run([sys.executable, "-m", "pymlgo.cli.main", *args, "--workers", "2"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=cwd,
                          check=False)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[RayHosts, Path, Path]]:
    """Head (0 CPUs) + worker hosts w1, w2 (1 CPU each) + a driver host; the corpus and
    the training config in the driver's own dir (hidden from the cluster's hosts)."""
    with netns_hosts.Lab() as lab:
        rh = RayHosts(lab)
        corpus = tiny_corpus(rh.driver_dir / "corpus")
        config = rh.driver_dir / "es.toml"
        config.write_text(ES_CONFIG)
        rh.start_head()
        rh.add_workers(["w1", "w2"])
        yield rh, corpus, config
        prefix = lab.prefix
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in listed  # the lab left nothing behind


@pytest.fixture(scope="module")
def undisturbed(cluster: tuple[RayHosts, Path, Path],
                tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The training run on this machine's worker processes: the bytes every run with its
    seed and --iterations gives, wherever its compiles ran."""
    _, corpus, config = cluster
    out = tmp_path_factory.mktemp("undisturbed") / "run"
    done = local_mlgo(train_args(corpus, config, out, ITERATIONS), out.parent)
    assert done.returncode == 0, done.stderr
    return Outcome.of(out)


def test_cluster_hosts_cannot_read_the_drivers_files(cluster):
    rh, corpus, _ = cluster
    for host in [rh.head, *rh.workers.values()]:
        assert host is not None
        ray_start = host.procs[-1].pid  # its node's processes share its mounts
        mounts = Path(f"/proc/{ray_start}/mountinfo").read_text().splitlines()
        hidden = [m for m in mounts if f" {rh.driver_dir} " in m]
        assert hidden and " - tmpfs " in hidden[-1], host.name  # corpus: object store only


def test_mlgo_eval_and_search_on_the_cluster_equal_their_local_runs(cluster, tmp_path):
    rh, corpus, _ = cluster
    on_cluster = rh.driver_dir / "eval.json"
    done = rh.run_mlgo(["eval", "--corpus", str(corpus), "--policy", "random:0.5:3",
                        "--cluster", rh.address, "--json", str(on_cluster)],
                       timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr + rh.logs()
    ran_on = summary_of_text(done.stderr)["per_host"]
    assert ran_on and set(ran_on) <= {h.address for h in rh.workers.values()}, done.stderr
    local = tmp_path / "eval.json"
    ref = local_mlgo(["eval", "--corpus", str(corpus), "--policy", "random:0.5:3",
                      "--json", str(local)], tmp_path)
    assert ref.returncode == 0, ref.stderr
    assert on_cluster.read_bytes() == local.read_bytes()

    search_args = ["search", "--corpus", str(corpus), "--budget", "4", "--batch", "2"]
    done = rh.run_mlgo([*search_args, "--cluster", rh.address,
                        "--output-dir", str(rh.driver_dir / "search")], timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    ref = local_mlgo([*search_args, "--output-dir", str(tmp_path / "search")], tmp_path)
    assert ref.returncode == 0, ref.stderr
    cluster_report = json.loads((rh.driver_dir / "search" / "search.json").read_text())
    local_report = json.loads((tmp_path / "search" / "search.json").read_text())
    assert cluster_report["modules"] == local_report["modules"]


def test_a_worker_host_lost_mid_iteration_changes_no_byte_and_a_joining_host_gets_work(
    cluster, undisturbed
):
    rh, corpus, config = cluster
    out = rh.driver_dir / "lose-worker"
    trial = worker_loss_trial(rh, corpus, config, out, ITERATIONS, rh.workers["w2"], "w3",
                              timeout=RUN_TIMEOUT_S)
    assert trial["run_again"] >= 1  # the lost host's compile ran elsewhere
    assert trial["joined_host_compiles"] > 0, trial
    verdict = compare(Outcome.of(out), undisturbed)
    assert verdict["lost_jobs"] == verdict["duplicated_jobs"] == 0, verdict
    assert verdict["identical_to_undisturbed"], verdict


def test_a_lost_head_stops_the_run_with_a_clear_error_and_the_run_resumes(cluster,
                                                                          undisturbed):
    rh, corpus, config = cluster  # last: the cluster is replaced by a new one
    out = rh.driver_dir / "lose-head"
    trial = head_loss_trial(rh, corpus, config, out, ITERATIONS, error_timeout=180,
                            timeout=RUN_TIMEOUT_S)
    # the first run's log (Ray's warnings before the error): what the client met
    log = (out.parent / f"{out.name}.log").read_text(errors="replace")[-4000:]
    assert trial["exit_code"] == 2, (trial, log)
    assert "lost the Ray cluster" in trial["error"] and "resume" in trial["error"], (trial, log)
    assert trial["resumed"], trial
    assert compare(Outcome.of(out), undisturbed)["identical_to_undisturbed"]
