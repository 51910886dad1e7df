"""Fixtures of the channel host's tests: `pytest_plugins = ("tests.channel_fixtures",)`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pymlgo.protocol.channel import make_fifos, remove_fifos
from tests.channel_fakes import FAKE_COMPILER, FakeCompiler


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    fifo_base = make_fifos(tmp_path)
    yield fifo_base
    remove_fifos(fifo_base)


@pytest.fixture
def start_fake_compiler(
    base: Path, tmp_path: Path
) -> Iterator[Callable[[list[tuple[str, object]]], FakeCompiler]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(steps: list[tuple[str, object]]) -> FakeCompiler:
        script = tmp_path / f"script{len(started)}.json"
        received = tmp_path / f"received{len(started)}.bin"
        script.write_text(
            json.dumps([(k, v.hex() if isinstance(v, bytes) else v) for k, v in steps])
        )
        process = subprocess.Popen(
            [sys.executable, "-c", FAKE_COMPILER, str(base), str(script), str(received)]
        )
        started.append(process)
        return FakeCompiler(process, received)

    yield start
    for process in started:  # never leave a child behind, whatever the test did
        process.kill()
        process.wait()

