"""`mlgo cc --mlgo-guard`: never ship an object larger than the compiler's own.

Beside every policy compile, the same command runs once more without the channel (the plain
compile at the user's level, `-Oz` or `-Os`, with the same `-Xclang -Oz` rule), writing its
object(s) to a scratch directory. When both succeed, the user's object is the smaller of the
two by a size metric (`toolchain.size`, default `allocated`); on a tie the plain object is
kept, so the outcome depends on the bytes alone.

The policy compile is the user's command untouched (it writes the user's object, dependency
file, diagnostics); the plain one only produces bytes to compare: its output goes to the
scratch directory and it writes no dependency file (the dependencies of both compiles are
the same preprocessed sources, so the one file the policy compile writes describes
whichever object is kept), its diagnostics are not shown twice. Commands whose other side
outputs would differ between the two compiles (`-save-temps`, `-gsplit-dwarf`, coverage
notes, optimization records, time traces) or that cannot be run twice (a source on stdin)
are compiled without the guard, and the log says why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

GUARD_ENV, METRIC_ENV = "MLGO_GUARD", "MLGO_GUARD_METRIC"

# Dependency-file options: (name, takes a value). The plain compile drops them all.
_DEP_FLAGS = frozenset({"-MD", "-MMD", "-MP", "-MG", "-MV", "--write-dependencies",
                        "--write-user-dependencies", "--user-dependencies"})
_DEP_VALUE = ("-MF", "-MT", "-MQ", "-MJ", "-dependency-file", "-dependency-dot")
# gcc's environment variables for dependency output, which clang honours too.
_DEP_ENV = ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES")
# Options that write files beside the object that the two compiles would both write.
_SIDE_OUTPUTS = ("-save-temps", "-gsplit-dwarf", "--coverage", "-ftest-coverage",
                 "-fsave-optimization-record", "-foptimization-record-file", "-ftime-trace")


def enabled(value: str | None) -> bool:
    """`$MLGO_GUARD`: 1/yes/on/true or 0/no/off/false (unset: off)."""
    v = (value or "").strip().lower()
    if v in ("1", "yes", "on", "true"):
        return True
    if v in ("0", "no", "off", "false", ""):
        return False
    raise ValueError(f"{GUARD_ENV}={value!r}: use 1 or 0")


@dataclass(frozen=True)
class Plan:
    """The plain compiles: `commands[i]` writes `scratch[i]`, to be weighed against the
    user's object `outputs[i]`."""

    outputs: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...]
    scratch: tuple[Path, ...]


def output_option(args: Sequence[str]) -> str | None:
    """The value of the last `-o` (separate or joined), None without one."""
    out = None
    for i, arg in enumerate(args):
        if arg == "-o" and i + 1 < len(args):
            out = args[i + 1]
        elif arg.startswith("-o") and len(arg) > 2:
            out = arg[2:]
    return out


def _skip_reason(args: Sequence[str], sources: Sequence[str]) -> str | None:
    if "-c" not in args:
        return "not a -c compile (the object is not kept by the command)"
    if "-" in sources:
        return "a source on stdin cannot be compiled twice"
    for arg in args:
        if arg.startswith(_SIDE_OUTPUTS):
            return f"{arg} writes side outputs of its own"
    return None


def _plain_args(args: Sequence[str], drop: set[int]) -> list[str]:
    """`args` without the argument indices `drop`, without `-o` and dependency options."""
    out: list[str] = []
    skip_next = False
    for i, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        if i in drop or arg in _DEP_FLAGS:
            continue
        if arg == "-o" or arg in _DEP_VALUE:
            skip_next = True
            continue
        if (arg.startswith("-o") and len(arg) > 2) or (
                arg.startswith(_DEP_VALUE[:4]) and len(arg) > 3):
            continue
        if arg.startswith("-Wp,") and any(p in ("-MD", "-MMD") for p in arg.split(",")):
            continue
        out.append(arg)
    return out


def plan(driver: Sequence[str], args: Sequence[str], extra: Sequence[str],
         source_at: Sequence[int], merged: bool, scratch: Path) -> Plan | str:
    """The plain compiles for the user's `args` (compiler arguments, sources at indices
    `source_at`), or why the guard does not apply. `merged`: the driver writes one object
    for all the sources of a `-c` command (zig's does, `ld -r`), else one per source
    (clang's, `-o` only with one source)."""
    sources = [args[i] for i in source_at]
    reason = _skip_reason(args, sources)
    if reason is not None:
        return reason
    given = output_option(args)
    if merged or len(sources) == 1:
        groups = [list(source_at)]
        outputs = [given or Path(sources[0]).with_suffix(".o").name]
    else:
        groups = [[i] for i in source_at]
        outputs = [Path(s).with_suffix(".o").name for s in sources]
    commands, objects = [], []
    for n, keep in enumerate(groups):
        obj = scratch / f"{n}.o"
        drop = set(source_at) - set(keep)
        commands.append((*driver, *_plain_args(args, drop), *extra, "-o", str(obj)))
        objects.append(obj)
    return Plan(tuple(outputs), tuple(commands), tuple(objects))


def plain_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _DEP_ENV}


class PlainCompiles:
    """The plan's commands, one after another on a thread (each in its own process group,
    killed with it); output captured, not shown."""

    def __init__(self, commands: Sequence[Sequence[str]], env: Mapping[str, str]) -> None:
        self.commands = commands
        self.env = dict(env)
        self.failure: tuple[int, str] | None = None  # (exit code, stderr tail)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def _run(self) -> None:
        for cmd in self.commands:
            with self._lock:
                if self._stopped:
                    return
                self._proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT,
                                              start_new_session=True)
            out, _ = self._proc.communicate()
            if self._proc.returncode != 0:
                self.failure = (self._proc.returncode, out.decode(errors="replace")[-800:])
                return

    def wait(self) -> tuple[int, str] | None:
        """Run (if not yet started) to the end; the failure, None if all succeeded."""
        self.start()
        self._thread.join()
        return self.failure

    def kill(self) -> None:
        with self._lock:
            self._stopped = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._started:
            self._thread.join()


def parallel() -> bool:
    """Whether this process may use more than one core (then both compiles run at once)."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


def keep_smaller(p: Plan, metric: str) -> list[dict[str, object]]:
    """Replace each user object by the plain one unless the policy's is strictly smaller by
    `metric`; what was kept, both sizes. An object either side cannot measure (not ELF,
    `-o /dev/null`) is left as the policy compile wrote it."""
    from pymlgo.toolchain.elf import NotELFError
    from pymlgo.toolchain.size import object_size

    records: list[dict[str, object]] = []
    for out, plain in zip(p.outputs, p.scratch, strict=True):
        rec: dict[str, object] = {"object": out}
        try:
            policy_bytes = object_size(out).metric(metric)
            plain_bytes = object_size(plain).metric(metric)
        except (OSError, NotELFError) as exc:
            rec.update(kept="policy", unmeasured=str(exc))
            records.append(rec)
            continue
        kept = "policy" if policy_bytes < plain_bytes else "plain"
        if kept == "plain":
            _replace(plain, Path(out))
        rec.update(kept=kept, policy_bytes=policy_bytes, plain_bytes=plain_bytes)
        records.append(rec)
    return records


def _replace(src: Path, dest: Path) -> None:
    """Put `src`'s bytes at `dest` in one rename (a reader never sees half an object), with
    the mode the compiler gave `dest`."""
    tmp = dest.with_name(f".{dest.name}.mlgo-guard-{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        shutil.copymode(dest, tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
