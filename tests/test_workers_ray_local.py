"""`--cluster ray-local`: a private Ray instance on this machine, started by the executor."""

from __future__ import annotations

import pytest

from pymlgo.workers import make_executor
from pymlgo.workers.local import LocalPool
from pymlgo.workers.ray_backend import RayExecutor, lost_cluster_message
from tests.workers_support import POLICIES, outcome, spec_for

pytest_plugins = ("tests.workers_fixtures",)  # fixtures: worker_jobs, reference
ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_local():  # type: ignore[no-untyped-def]
    if ray.is_initialized():  # another module's connection: this one starts its own
        ray.shutdown()
    with make_executor("ray-local", 2) as ex:
        assert isinstance(ex, RayExecutor)
        yield ex
    assert not ray.is_initialized()  # it started Ray, so it stopped it


def test_a_private_instance_listens_on_loopback_only(ray_local):
    nodes = [k for k in ray.cluster_resources() if k.startswith("node:") and "internal" not in k]
    assert nodes == ["node:127.0.0.1"]
    assert ray_local.num_workers == 2


def test_ray_local_results_equal_the_local_pool(ray_local, worker_jobs, reference):
    with LocalPool(2) as pool:
        for policy in POLICIES:
            on_ray = outcome(ray_local.run(spec_for(policy), worker_jobs))
            assert on_ray == outcome(pool.run(spec_for(policy), worker_jobs)) == reference[policy]


def test_a_lost_cluster_is_one_line_naming_the_cause_and_the_resume():
    # the first line is what Ray Client raised when the head of tests/test_cluster_hosts.py
    # went away (CI, stop 45); the lines after it follow gRPC's layout of such an error
    grpc_text = ("<_InactiveRpcError of RPC that terminated with:\n"
                 "\tstatus = StatusCode.UNAVAILABLE\n"
                 '\tdetails = "failed to connect to all addresses"\n>')
    message = lost_cluster_message("ray://10.77.0.2:10001", ConnectionError(grpc_text))
    assert "\n" not in message
    assert message.startswith("lost the Ray cluster at ray://10.77.0.2:10001 (ConnectionError: "
                              "<_InactiveRpcError of RPC that terminated with:)")
    assert "resumes from its last checkpoint when rerun" in message
    assert "(ConnectionError)" in lost_cluster_message("ray-local", ConnectionError())
