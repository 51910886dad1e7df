"""A compile worker process: `python -m pymlgo.workers.worker`, driven over stdin/stdout.

Frames from the pool: ("spec", key, spec_blob) caches a pickled WorkSpec under `key`,
("forget", key) drops it, ("job", jid, key, job_blob) compiles one CompileJob with it.
Frames to the pool: ("ready", pid, scratch_dir) once, then per job ("done", jid,
result_blob) or ("raised", jid, exc_blob, traceback_text). End of stdin: exit.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def forbid_torch() -> None:
    """Compile workers stay light: any `import torch` in this process fails loudly."""
    sys.modules["torch"] = None  # type: ignore[assignment]


@dataclass(frozen=True)
class _Unloadable:
    exc: Exception
    tb: str


def _exception_blob(exc: BaseException) -> bytes:
    try:
        blob = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
        return blob
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def exit_with_parent(scratch: Path, period: float = 2.0) -> None:
    """End this process, and the compiler it runs, when the pool's process is gone. End of
    stdin ends an idle worker, but a busy one would run on under PID 1 after its parent was
    killed, and a compiler whose host vanished spins on its FIFO (seen after a `kill -9` of
    a benchmark: orphans for minutes). Its compilers run in their own sessions under
    `scratch`, so they are reaped with it."""
    parent = os.getppid()

    def watch() -> None:
        from pymlgo.workers.scratch import reap

        while True:
            time.sleep(period)
            if os.getppid() != parent:
                reap(scratch)
                os._exit(1)  # nobody reads a result now; an exception would only print

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def main() -> int:
    forbid_torch()
    from pymlgo.workers import wire
    from pymlgo.workers.scratch import claim_scratch
    from pymlgo.workers.task import execute

    # Frames go to a private copy of stdout; stray prints from libraries go to stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    inp = 0
    scratch = claim_scratch()
    exit_with_parent(scratch.path)
    with contextlib.suppress(ImportError):  # warm up now rather than in the first job
        import pymlgo.problems.inlining.compile  # noqa: F401
    wire.write_frame(out, ("ready", os.getpid(), str(scratch.path)))
    specs: dict[Any, Any] = {}
    while True:
        msg = wire.read_frame(inp)
        if msg is None:
            return 0
        kind = msg[0]
        if kind == "spec":
            try:
                specs[msg[1]] = pickle.loads(msg[2])
            except Exception as exc:  # e.g. the policy's class is not importable here
                specs[msg[1]] = _Unloadable(exc, traceback.format_exc())
        elif kind == "forget":
            specs.pop(msg[1], None)
        elif kind == "job":
            _, jid, key, blob = msg
            spec = specs[key]
            if isinstance(spec, _Unloadable):
                wire.write_frame(out, ("raised", jid, _exception_blob(spec.exc), spec.tb))
                continue
            try:
                result = execute(spec, pickle.loads(blob))
            except Exception as exc:
                tb = traceback.format_exc()
                wire.write_frame(out, ("raised", jid, _exception_blob(exc), tb))
            else:
                wire.write_frame(out, ("done", jid, wire.dumps(result)))
        else:
            raise SystemExit(f"pymlgo worker: unknown frame {kind!r}")


if __name__ == "__main__":
    sys.exit(main())
