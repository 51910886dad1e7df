"""Helpers shared by tests/test_workers_*.py (their fixtures are in workers_fixtures.py).

The corpus is real: the C files of tests/data/workers plus the minic program, compiled by
the bundled clang with embedded bitcode, as a corpus build would.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from pymlgo.corpus.command import format_cmd, parse_cmd
from pymlgo.corpus.format import write_corpus_description
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.elf import read_sections
from pymlgo.workers.protocol import WorkSpec

DATA = Path(__file__).parent / "data"
TARGET_FLAGS = ("-target", "x86_64-linux-gnu", "-mcpu=baseline")
POLICIES = ("default", "never", "random:0.5:3")


def compile_to_jobs(compiler: Compiler, sources: Iterable[Path], out_dir: Path,
                    prefix: str) -> list[CompileJob]:
    jobs = []
    for src in sources:
        obj = out_dir / f"{src.stem}.o"
        subprocess.run(
            [*compiler.cc_argv, "-c", *TARGET_FLAGS, "-Oz", "-Xclang", "-fembed-bitcode=all",
             str(src), "-o", str(obj)],
            check=True,
        )
        sec = read_sections(obj, (".llvmbc", ".llvmcmd"))
        bc, cmd = sec[".llvmbc"], sec[".llvmcmd"]
        assert bc and cmd, src
        jobs.append(CompileJob(f"{prefix}/{src.stem}", bc, parse_cmd(cmd)))
    return jobs


def wrap_bitcode(bitcode: bytes, pad: int) -> bytes:
    """The same module behind LLVM's bitcode wrapper header, followed by `pad` bytes LLVM
    never reads: a file as heavy as we like that compiles exactly like the original."""
    header = struct.pack("<5I", 0x0B17C0DE, 0, 20, len(bitcode), 0)  # magic ver offset size cpu
    return header + bitcode + b"\0" * pad


def write_corpus(root: Path, jobs: Iterable[CompileJob], *, pad: int = 0) -> Path:
    """A corpus in mlgo-utils' layout (.bc + .cmd per module), each .bc padded by `pad`."""
    names = []
    for job in jobs:
        (root / job.module).parent.mkdir(parents=True, exist_ok=True)
        bc = wrap_bitcode(job.bitcode, pad) if pad else job.bitcode
        (root / f"{job.module}.bc").write_bytes(bc)
        (root / f"{job.module}.cmd").write_bytes(format_cmd(job.cmd))
        names.append(job.module)
    write_corpus_description(root, names)
    return root


def spec_for(policy: str | None) -> WorkSpec:
    return WorkSpec(policy=None if policy is None else builtin_policy(policy))


def outcome(results: Iterable[ModuleResult]) -> dict[str, tuple[int, int]]:
    """module -> (size, decisions); fails on a module reported twice."""
    out: dict[str, tuple[int, int]] = {}
    for r in results:
        assert r.module not in out, f"{r.module} reported twice"
        assert r.ok, (r.module, r.error)
        assert r.size is not None
        out[r.module] = (r.size, r.decisions)
    return out


def processes_mentioning(path: Path) -> list[int]:
    """Our processes whose command line names something under `path` (stray compilers)."""
    needle = os.fsencode(str(path))
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if needle in f.read():
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


def wait_until(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


class TorchProbePolicy:
    """Fails the way a policy needing torch would inside a compile worker."""

    name = "torch-probe"
    required_features: tuple[str, ...] = ()

    def for_module(self, module: str):  # type: ignore[no-untyped-def]
        import torch  # noqa: F401

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return 0

        return decide


def experiment_main(argv: list[str]) -> None:
    """One experiment process: `python -m tests.workers_support JOBS.pkl OUT.json POLICY
    ROUNDS CLUSTER` evaluates POLICY over the pickled jobs ROUNDS times on CLUSTER and
    writes [[module, size, decisions, error], ...] per round."""
    import json
    import pickle
    import sys

    from pymlgo.workers import make_executor

    jobs_path, out_path, policy, rounds, cluster = argv
    jobs = pickle.loads(Path(jobs_path).read_bytes())
    rows = []
    with make_executor(cluster) as ex:
        for _ in range(int(rounds)):
            rows.append([[r.module, r.size, r.decisions, r.error]
                         for r in ex.run(spec_for(policy), jobs)])
    Path(out_path).write_text(json.dumps(rows))
    print("done", file=sys.stderr)


if __name__ == "__main__":
    import sys

    experiment_main(sys.argv[1:])
