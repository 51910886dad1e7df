"""`make_executor`: the one place a --cluster value becomes an Executor."""

from __future__ import annotations

import re

from pymlgo.workers.protocol import DEFAULT_MAX_RETRIES, Executor

CLUSTER_HELP = (
    "where compiles run: omit for worker processes on this machine; 'ray-local' for a "
    "private Ray instance here; 'ray://HOST:PORT' for a Ray cluster (Ray Client); "
    "'pool:NAME' to share a pool started by `mlgo pool serve --name NAME`"
)
_RAY_ADDRESS = re.compile(r"ray://[^:/\s]+:\d{1,5}")


def make_executor(
    cluster: str | None = None,
    num_workers: int | None = None,
    *,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> Executor:
    """None/'local' -> LocalPool (all cores by default); 'ray-local'; 'ray://HOST:PORT';
    'pool:NAME'. ValueError for a malformed value; ExecutorError when the backend cannot
    start (Ray not installed, no such pool)."""
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"number of workers must be >= 1, got {num_workers}")
    if cluster is None or cluster == "local":
        from pymlgo.workers.local import LocalPool

        return LocalPool(num_workers, max_retries=max_retries)
    if cluster == "ray-local" or cluster.startswith("ray://"):
        if cluster != "ray-local" and not _RAY_ADDRESS.fullmatch(cluster):
            raise ValueError(f"bad --cluster {cluster!r}: a Ray address is ray://HOST:PORT")
        from pymlgo.workers.ray_backend import RayExecutor

        address = None if cluster == "ray-local" else cluster
        return RayExecutor(address, num_workers, max_retries=max_retries)
    if cluster.startswith("pool:"):
        if num_workers is not None:
            raise ValueError(
                "a shared pool's size is set by `mlgo pool serve --workers`, not here"
            )
        from pymlgo.workers.pool import PoolClient

        return PoolClient(cluster.removeprefix("pool:"))
    raise ValueError(f"bad --cluster {cluster!r}: {CLUSTER_HELP}")
