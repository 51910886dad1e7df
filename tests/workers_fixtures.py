"""Fixtures of tests/test_workers_*.py: `pytest_plugins = ("tests.workers_fixtures",)`."""

from __future__ import annotations

import pytest

from pymlgo.problems.base import CompileJob
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers.task import execute
from tests.workers_support import DATA, POLICIES, compile_to_jobs, outcome, spec_for


@pytest.fixture(scope="session")
def worker_jobs(compiler: Compiler, tmp_path_factory: pytest.TempPathFactory) -> list[CompileJob]:
    """Eight real modules: four of tests/data/workers and the four of minic."""
    out = tmp_path_factory.mktemp("worker-corpus")
    return [
        *compile_to_jobs(compiler, sorted((DATA / "workers").glob("*.c")), out, "workers"),
        *compile_to_jobs(compiler, sorted((DATA / "minic").glob("*.c")), out, "minic"),
    ]


@pytest.fixture(scope="session")
def reference(worker_jobs: list[CompileJob]) -> dict[str, dict[str, tuple[int, int]]]:
    """policy -> module -> (size, decisions), compiled one by one in this process."""
    out = {}
    for policy in POLICIES:
        results = [execute(spec_for(policy), job) for job in worker_jobs]
        assert all(r.ok for r in results), [r.error for r in results]
        out[policy] = outcome(results)
    return out
