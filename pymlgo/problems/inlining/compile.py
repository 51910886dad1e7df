"""Compile one corpus module at -Oz with a policy answering the inliner; measure the object."""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pymlgo.corpus.command import FlagEdits, recompile_args
from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Trajectory
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE
from pymlgo.problems.objects import measure_object
from pymlgo.protocol.channel import ChannelError, ChannelSession, make_fifos, serve_channel
from pymlgo.protocol.features import FeatureMismatchError, select_features
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain import run
from pymlgo.toolchain.bitcode import read_error_hint
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC

if TYPE_CHECKING:  # numpy only, but most compiles never need it
    from pymlgo.ir2native.model import IR2NativeModel

OPT_LEVEL = "-Oz"
DEFAULT_TIMEOUT_S = 300.0


# The ML advisor stops asking (and refuses every later call site) once the module's IR
# grows past this factor of its initial size; the stock heuristic has no such stop. At
# LLVM's default of 2.0, `default` through the channel diverged from plain -Oz on
# zstd_compress_sequences (4,244 vs 4,510 bytes). At 10 (and at 1000) `default` equals
# -Oz on every demo module; 10 still stops a run-away policy: `always` on the demo corpus
# took 2m50s at 10, but 5m15s with lz4hc hitting the 300 s timeout at 1000.
SIZE_INCREASE_THRESHOLD = 10


def channel_flags(base: Path, *, include_default: bool = True) -> list[str]:
    """Stock clang >= 17: ask the inliner's release-mode advisor to use the FIFO channel.

    `include_default` adds clang's own decision as the last feature (`inlining_default`);
    clang then runs its heuristic's cost analysis at every call site as well (measured with
    a C host on the demo corpus: 1.128x plain -Oz with it, 1.089x without).
    """
    default = ["-mllvm", "-inliner-interactive-include-default"] if include_default else []
    return [
        "-mllvm", "-enable-ml-inliner=release",
        "-mllvm", f"-inliner-interactive-channel-base={base}",
        *default,
        "-mllvm", f"-ml-advisor-size-increase-threshold={SIZE_INCREASE_THRESHOLD}",
    ]  # fmt: skip


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"compiler killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"compiler killed by signal {-returncode}"
    return f"compiler exited with {returncode}"


def _error_text(
    res: run.ProcessResult, job: CompileJob, compiler: Compiler, memory_mb: int | None = None
) -> str:
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


_REMARKS = "inline-remarks.yaml"


def _estimate_flags(estimator: IR2NativeModel | None, tmp: Path) -> list[str]:
    """With an IR2Native model: the flags that make the compile report its decisions'
    callers (remarks) and its post-inlining IR (on stderr)."""
    if estimator is None:
        return []
    from pymlgo.ir2native.estimates import DUMP_FLAGS, remark_flags

    return [*remark_flags(tmp / _REMARKS), *DUMP_FLAGS]


def _estimates(estimator: IR2NativeModel, dump: str, obj: Path) -> dict[str, float]:
    """`ModuleResult.extra` with every function's IR2Native estimate (`fn:NAME`)."""
    from pymlgo.ir2native.dataset import function_sizes
    from pymlgo.ir2native.estimates import function_estimates, to_extra

    return to_extra(function_estimates(estimator, dump, function_sizes(obj)))


def compile_baseline(
    compiler: Compiler,
    job: CompileJob,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    edits: FlagEdits = FlagEdits(),
    memory_mb: int | None = None,
    estimator: IR2NativeModel | None = None,
    size_metric: str = DEFAULT_SIZE_METRIC,
) -> ModuleResult:
    """Plain -Oz, no channel: the heuristic's size every policy is compared with.

    `size` is the object's bytes by `size_metric` (`toolchain.size`), `sizes` its bytes by
    section group. `memory_mb` bounds the compiler's address space; a compile past it
    fails. With an IR2Native `estimator`, `extra` holds every function's estimated bytes
    (`fn:NAME`)."""
    started = time.monotonic()
    with run.private_tmpdir() as tmp:
        bc, obj = tmp / "module.bc", tmp / "module.o"
        bc.write_bytes(job.bitcode)
        argv = [
            *compiler.clang_argv,
            *recompile_args(job.cmd, input_bc=str(bc), output_obj=str(obj), opt_level=OPT_LEVEL,
                            edits=edits),
            *_estimate_flags(estimator, tmp),
        ]
        try:
            res = run.run(argv, timeout=timeout, cwd=tmp, memory_mb=memory_mb)
        except run.CompileTimeout as exc:
            return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                error=str(exc))
        if res.returncode != 0:
            return ModuleResult(job.module, None, seconds=res.seconds,
                                error=_error_text(res, job, compiler, memory_mb))
        sizes, error = measure_object(obj, res.stderr, job.cmd)
        extra = (_estimates(estimator, res.stderr, obj)
                 if estimator is not None and error is None else {})
        return ModuleResult(job.module, None if sizes is None else sizes.metric(size_metric),
                            seconds=time.monotonic() - started, error=error, extra=extra,
                            sizes=sizes)


def _trajectory(session: ChannelSession) -> Trajectory | None:
    if session.header is None:
        return None
    names = [s.name for s in session.header.features]
    n = len(session.decisions)
    features = {
        name: (np.stack([d.features[i] for d in session.decisions]) if n else
               np.zeros((0, *spec.shape), dtype=spec.dtype))
        for i, (name, spec) in enumerate(zip(names, session.header.features, strict=True))
    }
    adv = session.header.advice
    advice = (np.stack([d.advice for d in session.decisions]) if n else
              np.zeros((0, *(adv.shape if adv else (1,))), dtype=np.int64))
    return Trajectory(
        contexts=tuple(d.context for d in session.decisions), features=features, advice=advice
    )


def compile_with_policy(
    compiler: Compiler,
    job: CompileJob,
    policy: Policy,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    record: bool = False,
    edits: FlagEdits = FlagEdits(),
    memory_mb: int | None = None,
    estimator: IR2NativeModel | None = None,
    size_metric: str = DEFAULT_SIZE_METRIC,
    heuristic_feature: str | None = None,
) -> ModuleResult:
    """Compile `job` at -Oz with `policy` answering every inlining decision; `size` is the
    object's bytes by `size_metric`, `sizes` its bytes by section group.

    Where clang's own decision is asked for (the policy reads `inlining_default`, or
    `record`), it is read from `heuristic_feature`; None: from where this compiler's probe
    found it (`heuristic_check`, which raises HeuristicUnavailableError if it cannot be had).

    With an IR2Native `estimator` (for partial rewards), `extra` holds every function's
    estimated bytes (`fn:NAME`) and a recorded trajectory's `contexts` name the caller of
    each decision (left empty if the remarks do not match the decisions one to one).

    Never raises for a bad module: compiler failure, timeout or a channel error becomes
    `ModuleResult.error`, so a corpus run goes on.
    """
    started = time.monotonic()
    deadline = started + timeout
    decide = policy.for_module(job.module)
    required = policy.required_features
    include_default = record or DEFAULT_FEATURE in required
    if include_default and heuristic_feature is None:
        from pymlgo.problems.inlining.heuristic_check import heuristic_feature as probed

        heuristic_feature = probed(compiler, required=required, record=record)
    indices: list[int] | None = None
    moved: int | None = None  # where clang's decision arrives, if not in `inlining_default`

    def advise(context: str, obs: Observation, header: Header) -> int | float | np.ndarray:
        nonlocal indices, moved
        if indices is None:
            indices = select_features(header.features, required)
            if heuristic_feature not in (None, DEFAULT_FEATURE):
                moved = select_features(header.features, [heuristic_feature])[0]
        feats = {header.features[i].name: obs.tensors[i] for i in indices}
        if moved is not None and DEFAULT_FEATURE in feats:
            feats[DEFAULT_FEATURE] = obs.tensors[moved]
        return decide(feats)

    with run.private_tmpdir() as tmp:
        bc, obj = tmp / "module.bc", tmp / "module.o"
        bc.write_bytes(job.bitcode)
        base = make_fifos(tmp)
        argv = [
            *compiler.clang_argv,
            *recompile_args(job.cmd, input_bc=str(bc), output_obj=str(obj), opt_level=OPT_LEVEL,
                            edits=edits),
            # clang's decision only where it is used: a policy that reads it, or a recorded
            # trajectory (traces and behaviour cloning keep it as the label)
            *channel_flags(base, include_default=include_default),
            *_estimate_flags(estimator, tmp),
        ]
        with open(tmp / "stderr.txt", "wb") as err:
            proc = run.start(argv, cwd=tmp, stderr=err, memory_mb=memory_mb)
            try:
                try:
                    session = serve_channel(
                        base, advise, timeout=timeout, compiler_alive=lambda: proc.poll() is None
                    )
                except FeatureMismatchError:
                    raise  # the policy cannot run on this compiler at all: not a module failure
                except (ChannelError, ValueError) as exc:
                    exited = proc.poll() is not None  # on its own, not killed by us
                    run.kill_and_reap(proc)
                    why = f"channel: {exc}"
                    if exited:  # say why the compiler went away: its exit and stderr tail
                        err.flush()
                        tail = (tmp / "stderr.txt").read_text(errors="replace")
                        exit_res = run.ProcessResult(proc.returncode, tail, 0.0)
                        why += "; " + _error_text(exit_res, job, compiler, memory_mb)
                    return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                        error=why)
                try:
                    res = run.finish(proc, deadline=deadline, started=started)
                except run.CompileTimeout as exc:
                    return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                        error=str(exc))
            finally:
                run.kill_and_reap(proc)
        stderr = (tmp / "stderr.txt").read_text(errors="replace")
        if res.returncode != 0:
            res = run.ProcessResult(res.returncode, stderr, res.seconds)
            return ModuleResult(job.module, None, seconds=res.seconds,
                                error=_error_text(res, job, compiler, memory_mb))
        sizes, error = measure_object(obj, stderr, job.cmd)
        if sizes is None:
            return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                error=error)
        trajectory = _trajectory(session) if record else None
        extra: dict[str, float] = {}
        if estimator is not None:
            from pymlgo.ir2native.estimates import read_decision_callers

            extra = _estimates(estimator, stderr, obj)
            callers = read_decision_callers(tmp / _REMARKS)
            if trajectory is not None and len(callers) == len(trajectory):
                trajectory = dataclasses.replace(trajectory, contexts=tuple(callers))
    return ModuleResult(
        job.module,
        sizes.metric(size_metric),
        decisions=len(session.decisions),
        seconds=time.monotonic() - started,
        trajectory=trajectory,
        extra=extra,
        sizes=sizes,
    )
