"""The one compile every problem runs: a private temp dir, the module's recorded command at
the problem's optimization level, a policy answering on the FIFO channel (when there is
one), then the object measured. A problem supplies its flags, its answer to each
observation and what it measures beyond the object's bytes.

Never raises for a bad module (failure, timeout, channel error: `ModuleResult.error`),
except for a policy that needs features this compiler does not send
(`FeatureMismatchError`): that is no module's fault.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pymlgo.corpus.command import FlagEdits, recompile_args
from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult, Trajectory
from pymlgo.problems.objects import measure_object
from pymlgo.protocol.channel import ChannelError, ChannelSession, make_fifos, serve_channel
from pymlgo.protocol.features import FeatureMismatchError, select_features
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain import run
from pymlgo.toolchain.bitcode import read_error_hint
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import ObjectSize

# (context, observation, header) -> the advice to send
Advise = Callable[[str, Observation, Header], "int | float | np.ndarray"]
# (temp dir, channel base or None without a channel) -> the problem's extra compiler flags
Flags = Callable[[Path, "Path | None"], Sequence[str]]


@dataclass(frozen=True)
class Compiled:
    """A compile that exited with 0 and left an object, for the problem to measure."""

    job: CompileJob
    tmp: Path
    obj: Path
    stderr: str
    sizes: ObjectSize
    session: ChannelSession | None
    started: float
    size_metric: str

    @property
    def decisions(self) -> int:
        return 0 if self.session is None else len(self.session.decisions)

    def result(self, **fields: object) -> ModuleResult:
        """The measured result; `fields` adds `extra`, `trajectory` and the like."""
        return ModuleResult(self.job.module, self.sizes.metric(self.size_metric),
                            decisions=self.decisions, seconds=time.monotonic() - self.started,
                            sizes=self.sizes, **fields)  # type: ignore[arg-type]

    def failed(self, error: str) -> ModuleResult:
        return ModuleResult(self.job.module, None, decisions=self.decisions,
                            seconds=time.monotonic() - self.started, error=error)


def compile_argv(compiler: Compiler, job: CompileJob, tmp: Path, opt_level: str,
                 extra: Sequence[str] = (), edits: FlagEdits = FlagEdits()) -> list[str]:
    """Write the bitcode to `tmp/module.bc`; the argv recompiling it to `tmp/module.o` at
    `opt_level` with `edits` and then `extra` flags."""
    bc = tmp / "module.bc"
    bc.write_bytes(job.bitcode)
    return [
        *compiler.clang_argv,
        *recompile_args(job.cmd, input_bc=str(bc), output_obj=str(tmp / "module.o"),
                        opt_level=opt_level, edits=edits),
        *extra,
    ]


def compile_module(compiler: Compiler, job: CompileJob, settings: CompileSettings, *,
                   opt_level: str, flags: Flags, measure: Callable[[Compiled], ModuleResult],
                   advise: Advise | None = None, may_not_ask: bool = False) -> ModuleResult:
    """Compile `job`: with `advise` answering on the channel, else with the compiler's own
    heuristic; `measure` turns a compile that left an object into the result.

    `may_not_ask`: a compiler that exits with 0 without ever opening the channel is a
    compile without decisions, not a failure (regalloc's advisor is created only for the
    first function with virtual registers).
    """
    started = time.monotonic()
    with run.private_tmpdir() as tmp:
        base = make_fifos(tmp) if advise is not None else None
        argv = compile_argv(compiler, job, tmp, opt_level, flags(tmp, base), settings.edits)
        session: ChannelSession | None = None
        if advise is None or base is None:
            try:
                res = run.run(argv, timeout=settings.timeout, cwd=tmp,
                              memory_mb=settings.memory_mb)
            except run.CompileTimeout as exc:
                return _failed(job, started, str(exc))
        else:
            served = _serve(compiler, job, argv, tmp, base, advise, settings, started,
                            may_not_ask)
            if isinstance(served, str):
                return _failed(job, started, served)
            res, session = served
        if res.returncode != 0:
            return ModuleResult(job.module, None, seconds=res.seconds,
                                error=error_text(res, job, compiler, settings.memory_mb))
        obj = tmp / "module.o"
        sizes, error = measure_object(obj, res.stderr, job.cmd)
        if sizes is None:
            return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                decisions=0 if session is None else len(session.decisions),
                                error=error)
        return measure(Compiled(job, tmp, obj, res.stderr, sizes, session, started,
                                settings.size_metric))


def _failed(job: CompileJob, started: float, error: str) -> ModuleResult:
    return ModuleResult(job.module, None, seconds=time.monotonic() - started, error=error)


def _serve(compiler: Compiler, job: CompileJob, argv: list[str], tmp: Path, base: Path,
           advise: Advise, settings: CompileSettings, started: float, may_not_ask: bool
           ) -> tuple[run.ProcessResult, ChannelSession] | str:
    """Run the compiler with `advise` answering on the channel at `base`: (its exit and
    stderr, the session), or why the compile failed."""
    with open(tmp / "stderr.txt", "wb") as err:
        proc = run.start(argv, cwd=tmp, stderr=err, memory_mb=settings.memory_mb)
        try:
            try:
                session = serve_channel(base, advise, timeout=settings.timeout,
                                        compiler_alive=lambda: proc.poll() is None)
            except FeatureMismatchError:
                raise  # the policy cannot run on this compiler at all: not a module failure
            except (ChannelError, ValueError) as exc:
                if may_not_ask and "without opening the channel" in str(exc) and proc.wait() == 0:
                    session = ChannelSession(None, (), ())
                else:
                    exited = proc.poll() is not None  # on its own, not killed by us
                    run.kill_and_reap(proc)
                    why = f"channel: {exc}"
                    if exited:  # say why the compiler went away: its exit and stderr tail
                        err.flush()
                        tail = (tmp / "stderr.txt").read_text(errors="replace")
                        why += "; " + error_text(run.ProcessResult(proc.returncode, tail, 0.0),
                                                 job, compiler, settings.memory_mb)
                    return why
            try:
                res = run.finish(proc, deadline=started + settings.timeout, started=started)
            except run.CompileTimeout as exc:
                return str(exc)
        finally:
            run.kill_and_reap(proc)
    stderr = (tmp / "stderr.txt").read_text(errors="replace")
    return run.ProcessResult(res.returncode, stderr, res.seconds), session


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"compiler killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"compiler killed by signal {-returncode}"
    return f"compiler exited with {returncode}"


def error_text(res: run.ProcessResult, job: CompileJob, compiler: Compiler,
               memory_mb: int | None = None) -> str:
    """Exit status, stderr tail and, when clang could not read the bitcode (or ran into the
    memory limit), why."""
    tail = res.stderr.strip().splitlines()[-5:]
    text = f"{_exit_text(res.returncode)}: " + " | ".join(tail)
    hint = read_error_hint(res.stderr, job.bitcode, compiler.version)
    if hint is None and memory_mb is not None and (
        res.returncode < 0 or "out of memory" in res.stderr
    ):
        hint = f"the compile was limited to {memory_mb} MiB of address space; raise the limit"
    return text + (f" => {hint}" if hint else "")


def trajectory(session: ChannelSession | None,
               names: Sequence[str] | None = None) -> Trajectory | None:
    """The session's decisions as a Trajectory: the features called `names` (default:
    every feature of the header) stacked per decision, the advice sent, each decision's
    context."""
    header = session.header if session is not None else None
    if session is None or header is None:
        return None
    at = (list(range(len(header.features))) if names is None
          else select_features(header.features, list(names)))
    n = len(session.decisions)
    features = {
        header.features[i].name: (np.stack([d.features[i] for d in session.decisions]) if n
                                  else np.zeros((0, *header.features[i].shape),
                                                dtype=header.features[i].dtype))
        for i in at
    }
    adv = header.advice
    advice = (np.stack([d.advice for d in session.decisions]) if n else
              np.zeros((0, *(adv.shape if adv else (1,))),
                       dtype=adv.dtype if adv else np.int64))
    return Trajectory(tuple(d.context for d in session.decisions), features, advice)
