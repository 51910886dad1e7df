"""Build a real program from corpus modules compiled with a policy, run it, measure it.

The remark cost is a static estimate; this is the check on real code: the library modules
are compiled through `compile_with_policy` (the same path as training), linked with a
small C driver by `zig cc`, run (a wrong eviction can miscompile, so the driver checks its
own output), and measured: executed instructions under `valgrind --tool=callgrind`
(deterministic), wall time, and cycles with `perf stat` where the kernel allows it.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult, Policy
from pymlgo.problems.regalloc.compile import CORRECTED_KEY, COST_KEY, compile_with_policy
from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import Compiler

TARGET_FLAGS = ("-target", "x86_64-linux-gnu", "-mcpu=baseline")


class ProgramError(RuntimeError):
    """A module failed to compile, the link failed, or the program failed its own check."""


@dataclass(frozen=True)
class BuiltObjects:
    """Objects compiled with one policy, and what each compile reported."""

    paths: tuple[Path, ...]
    results: tuple[ModuleResult, ...]

    @property
    def decisions(self) -> int:
        return sum(r.decisions for r in self.results)

    @property
    def invalid_advice(self) -> int:
        return int(sum(r.extra.get(CORRECTED_KEY, 0.0) for r in self.results))

    @property
    def weighted_cost(self) -> float:
        return float(sum(r.extra.get(COST_KEY, 0.0) for r in self.results))


def build_objects(compiler: Compiler, jobs: Sequence[CompileJob], policy: Policy,
                  out_dir: Path, *, timeout: float = 300.0, threads: int = 1,
                  on_result: Callable[[ModuleResult], None] | None = None) -> BuiltObjects:
    """One object per job in `out_dir`, compiled with `policy` (stock: no channel), through
    the training compile path; ProgramError names the first module that failed.
    `threads` compiles run at once (each is a clang process; the host side is light)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / (job.module.replace("/", "__") + ".o") for job in jobs]

    def one(i: int) -> ModuleResult:
        return compile_with_policy(compiler, jobs[i], policy, CompileSettings(timeout=timeout),
                                   keep_object=paths[i])

    results: list[ModuleResult] = []
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for res in pool.map(one, range(len(jobs))):
            if on_result is not None:
                on_result(res)
            results.append(res)
    for res in results:
        if not res.ok:
            raise ProgramError(f"{res.module}: {res.error}")
    return BuiltObjects(tuple(paths), tuple(results))


def link_program(compiler: Compiler, driver: Path, objects: Sequence[Path], exe: Path,
                 *, opt_level: str = "-O2") -> Path:
    """`zig cc` the driver with the objects (it caches by inputs: fine outside training)."""
    argv = [*compiler.cc_argv, *TARGET_FLAGS, opt_level, str(driver), *map(str, objects),
            "-o", str(exe), "-lpthread"]
    res = run.run(argv, timeout=600)
    if res.returncode != 0:
        raise ProgramError(f"link failed ({res.returncode}): {res.stderr.strip()[-800:]}")
    return exe


def run_program(argv: Sequence[str], *, timeout: float = 600.0) -> str:
    """Run the program; its stdout, or ProgramError if it exits non-zero."""
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                             check=False)
    except subprocess.TimeoutExpired as exc:
        raise ProgramError(f"{argv[0]} timed out after {timeout:g} s") from exc
    if res.returncode != 0:
        raise ProgramError(f"{argv[0]} exited with {res.returncode}: {res.stderr.strip()}")
    return res.stdout


_CALLGRIND_RE = re.compile(r"Collected\s*:\s*(\d+)")


def callgrind_instructions(argv: Sequence[str], work_dir: Path, *,
                           timeout: float = 1800.0) -> int:
    """Instructions executed by the program (all of it, libc included), as counted by
    callgrind: the same binary and input always give the same count."""
    if shutil.which("valgrind") is None:
        raise ProgramError("valgrind is not installed")
    out = work_dir / "callgrind.out"
    res = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          *argv], capture_output=True, text=True, timeout=timeout,
                         check=False)
    if res.returncode != 0:
        raise ProgramError(f"callgrind run failed ({res.returncode}): {res.stderr[-800:]}")
    m = _CALLGRIND_RE.search(res.stderr)
    if not m:
        raise ProgramError(f"no instruction count in callgrind's output: {res.stderr[-400:]}")
    out.unlink(missing_ok=True)
    return int(m.group(1))


def wall_seconds(argv: Sequence[str], repeat: int = 5) -> list[float]:
    """Wall time of `repeat` runs (report the median or minimum: the machine is shared)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run_program(argv)
        times.append(time.perf_counter() - t0)
    return times


def perf_counters(argv: Sequence[str]) -> dict[str, float | None]:
    """`perf stat` cycles and task-clock (ms) of one run; None for what is unavailable
    (no perf; VMs and containers often have no hardware counters, only software ones)."""
    out: dict[str, float | None] = {"cycles": None, "task_clock_ms": None}
    if shutil.which("perf") is None:
        return out
    res = subprocess.run(["perf", "stat", "-x", ",", "-e", "cycles,task-clock", *argv],
                         capture_output=True, text=True, check=False,
                         env={**os.environ, "LC_ALL": "C"})
    for line in res.stderr.splitlines():
        fields = line.split(",")
        if len(fields) < 3:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue  # "<not supported>" / "<not counted>"
        if fields[2] == "cycles":
            out["cycles"] = value
        elif fields[2] == "task-clock":
            out["task_clock_ms"] = value
    return out


@dataclass(frozen=True)
class Measurement:
    instructions: int
    wall_median_s: float
    wall_min_s: float
    perf: dict[str, float | None]
    output: str

    def to_json(self) -> dict[str, object]:
        return {"callgrind_instructions": self.instructions,
                "wall_median_s": self.wall_median_s, "wall_min_s": self.wall_min_s,
                "perf_cycles": self.perf.get("cycles"),
                "perf_task_clock_ms": self.perf.get("task_clock_ms"),
                "output": self.output.strip()}


def measure(argv: Sequence[str], work_dir: Path, *, repeat: int = 5,
            callgrind_argv: Sequence[str] | None = None) -> Measurement:
    """Check the program runs, then count instructions (under callgrind, optionally with a
    smaller input: `callgrind_argv`) and time it."""
    output = run_program(argv)
    times = wall_seconds(argv, repeat)
    return Measurement(
        instructions=callgrind_instructions(callgrind_argv or argv, work_dir),
        wall_median_s=statistics.median(times),
        wall_min_s=min(times),
        perf=perf_counters(argv),
        output=output,
    )
