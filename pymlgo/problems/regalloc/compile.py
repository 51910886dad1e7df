"""Compile one corpus module at -O2 with a policy answering the greedy register allocator.

Two advisors speak the interactive protocol in stock clang (release mode, no TFLite):
eviction (`index_to_evict`, int64: which interfering live range to evict, the last column
meaning "evict nothing") and priority (`priority`, float32: the allocation queue order).
Neither the channel nor a release compiler reports a reward, so every compile also writes
the allocator's optimization remarks (`remarks.py`): spills, reloads and copies per
function, weighted by block frequency. The stock advisor's numbers are the baseline.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pymlgo.corpus.command import FlagEdits, recompile_args
from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Trajectory
from pymlgo.problems.objects import measure_object
from pymlgo.problems.regalloc.advice import (
    MASK_FEATURE,
    Advisor,
    valid_eviction,
    valid_priority,
)
from pymlgo.problems.regalloc.remarks import (
    REMARK_PASS,
    RemarkFormatError,
    RemarkReport,
    read_remarks,
    remark_file,
)
from pymlgo.protocol.channel import ChannelError, ChannelSession, make_fifos, serve_channel
from pymlgo.protocol.features import FeatureMismatchError, select_features
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, ObjectSize
from pymlgo.workers.protocol import WorkSpec

OPT_LEVEL = "-O2"
DEFAULT_TIMEOUT_S = 300.0

# ModuleResult.extra keys. Per-function weighted costs are `FUNCTION_PREFIX + name`.
COST_KEY = "weighted_cost"
CORRECTED_KEY = "invalid_advice"
FUNCTION_PREFIX = "fn:"


def channel_flags(advisor: Advisor, base: Path) -> list[str]:
    """Ask the release-mode advisor to take its answers from the FIFO channel at `base`."""
    if advisor == "evict":
        return ["-mllvm", "-regalloc-enable-advisor=release",
                "-mllvm", f"-regalloc-evict-interactive-channel-base={base}"]
    if advisor == "priority":
        return ["-mllvm", "-regalloc-enable-priority-advisor=release",
                "-mllvm", f"-regalloc-priority-interactive-channel-base={base}"]
    raise ValueError(f"unknown regalloc advisor {advisor!r}: use evict or priority")


def remark_flags(path: Path) -> list[str]:
    """cc1 options (not driver ones: the driver spells them -fsave-optimization-record=)
    that write the allocator's remarks as YAML to `path`."""
    return ["-opt-record-file", str(path), "-opt-record-passes", REMARK_PASS]


def advisor_of(policy: Policy) -> Advisor:
    """Which advisor `policy` answers: its `advisor` attribute (a batch of policies: its
    first member's), else eviction."""
    advisor = getattr(policy, "advisor", None)
    if advisor is None:
        members = getattr(policy, "members", None)
        if members:
            return advisor_of(members[0])
        return "evict"
    if advisor not in ("evict", "priority"):
        raise ValueError(f"policy {policy.name!r} has unknown advisor {advisor!r}")
    return advisor  # type: ignore[no-any-return]


def is_stock(policy: Policy | None) -> bool:
    """The stock advisor: no channel at all (policy None, or a policy marked `stock`)."""
    return policy is None or bool(getattr(policy, "stock", False))


def result_extra(report: RemarkReport, corrected: int = 0) -> dict[str, float]:
    """The remark totals, per-function weighted costs and the correction count, as the
    flat float mapping `ModuleResult.extra` carries across processes."""
    total = report.total
    extra: dict[str, float] = {COST_KEY: total.weighted_cost(), CORRECTED_KEY: float(corrected)}
    extra.update({k: float(v) for k, v in total.to_json().items()})
    extra.update({FUNCTION_PREFIX + name: cost
                  for name, cost in report.function_costs().items()})
    return extra


def _error_text(returncode: int, stderr: str) -> str:
    tail = stderr.strip().splitlines()[-5:]
    return f"compiler exited with {returncode}: " + " | ".join(tail)


def _argv(compiler: Compiler, job: CompileJob, tmp: Path, edits: FlagEdits,
          extra: Sequence[str]) -> tuple[list[str], Path]:
    bc, obj = tmp / "module.bc", tmp / "module.o"
    bc.write_bytes(job.bitcode)
    argv = [
        *compiler.clang_argv,
        *recompile_args(job.cmd, input_bc=str(bc), output_obj=str(obj), opt_level=OPT_LEVEL,
                        edits=edits),
        *remark_flags(remark_file(tmp)),
        *extra,
    ]
    return argv, obj


def compile_baseline(
    compiler: Compiler,
    job: CompileJob,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    edits: FlagEdits = FlagEdits(),
    keep_object: Path | None = None,
    size_metric: str = DEFAULT_SIZE_METRIC,
) -> ModuleResult:
    """-O2 with the stock advisors (no channel): the object's bytes and the remark costs
    every policy is compared with. `keep_object` copies the object there (to link
    programs)."""
    started = time.monotonic()
    with run.private_tmpdir() as tmp:
        argv, obj = _argv(compiler, job, tmp, edits, ())
        try:
            res = run.run(argv, timeout=timeout, cwd=tmp)
        except run.CompileTimeout as exc:
            return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                error=str(exc))
        if res.returncode != 0:
            return ModuleResult(job.module, None, seconds=res.seconds,
                                error=_error_text(res.returncode, res.stderr))
        out = _outputs(obj, tmp, res.stderr, job.cmd)
        if isinstance(out, str):
            return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                error=out)
        sizes, report = out
        if keep_object is not None:
            keep_object.write_bytes(obj.read_bytes())
        return ModuleResult(job.module, sizes.metric(size_metric),
                            seconds=time.monotonic() - started, extra=result_extra(report),
                            sizes=sizes)


def compile_with_policy(
    compiler: Compiler,
    job: CompileJob,
    policy: Policy,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    record: bool = False,
    edits: FlagEdits = FlagEdits(),
    keep_object: Path | None = None,
    keep_stderr: Path | None = None,
    size_metric: str = DEFAULT_SIZE_METRIC,
) -> ModuleResult:
    """Compile `job` at -O2 with `policy` answering its advisor (`advisor_of(policy)`).

    `keep_object` / `keep_stderr` copy the object / the compiler's stderr there (to link a
    program; to read what `-mllvm -interactive-model-runner-echo-reply` echoed).

    Every answer is checked before it is sent (`advice.py`); corrections are counted in
    `extra[CORRECTED_KEY]`. A stock policy compiles without a channel. Never raises for a
    bad module: failures become `ModuleResult.error`, except a policy that needs features
    this compiler does not send (`FeatureMismatchError`).
    """
    if is_stock(policy):
        return compile_baseline(compiler, job, timeout=timeout, edits=edits,
                                keep_object=keep_object, size_metric=size_metric)
    started = time.monotonic()
    deadline = started + timeout
    advisor = advisor_of(policy)
    decide = policy.for_module(job.module)
    required = tuple(policy.required_features)
    corrected = 0
    plan: tuple[list[int], list[str], int | None] | None = None

    def advise(context: str, obs: Observation, header: Header) -> int | float:
        nonlocal plan, corrected
        if plan is None:
            plan = _plan(header, required, advisor)
        indices, names, mask_at = plan
        value = decide({name: obs.tensors[i] for i, name in zip(indices, names, strict=True)})
        if mask_at is not None:
            answer, fixed = valid_eviction(value, obs.tensors[mask_at])
        else:
            answer, fixed = valid_priority(value)
        corrected += fixed
        return answer

    with run.private_tmpdir() as tmp:
        base = make_fifos(tmp)
        argv, obj = _argv(compiler, job, tmp, edits, channel_flags(advisor, base))
        with open(tmp / "stderr.txt", "wb") as err:
            proc = run.start(argv, cwd=tmp, stderr=err)
            try:
                try:
                    session = serve_channel(
                        base, advise, timeout=timeout, compiler_alive=lambda: proc.poll() is None
                    )
                except FeatureMismatchError:
                    raise  # the policy cannot run on this compiler at all: not a module failure
                except (ChannelError, ValueError) as exc:
                    if not _never_asked(exc, proc):
                        run.kill_and_reap(proc)
                        return ModuleResult(job.module, None,
                                            seconds=time.monotonic() - started,
                                            error=f"channel: {exc}")
                    session = ChannelSession(None, (), ())
                try:
                    res = run.finish(proc, deadline=deadline, started=started)
                except run.CompileTimeout as exc:
                    return ModuleResult(job.module, None, seconds=time.monotonic() - started,
                                        error=str(exc))
            finally:
                run.kill_and_reap(proc)
        if keep_stderr is not None:
            keep_stderr.write_bytes((tmp / "stderr.txt").read_bytes())
        if res.returncode != 0:
            stderr = (tmp / "stderr.txt").read_text(errors="replace")
            return ModuleResult(job.module, None, seconds=res.seconds,
                                error=_error_text(res.returncode, stderr))
        out = _outputs(obj, tmp, (tmp / "stderr.txt").read_text(errors="replace"), job.cmd)
        if isinstance(out, str):
            return ModuleResult(job.module, None, decisions=len(session.decisions),
                                seconds=time.monotonic() - started, error=out)
        sizes, report = out
        if keep_object is not None:
            keep_object.write_bytes(obj.read_bytes())
    return ModuleResult(
        job.module,
        sizes.metric(size_metric),
        decisions=len(session.decisions),
        seconds=time.monotonic() - started,
        trajectory=record_trajectory(session, required, advisor) if record else None,
        extra=result_extra(report, corrected),
        sizes=sizes,
    )


def _outputs(obj: Path, tmp: Path, stderr: str, cmd: tuple[str, ...]
             ) -> tuple[ObjectSize, RemarkReport] | str:
    """(the object's bytes by group, the allocator's remarks) of a compile that exited with
    0, or why they cannot be had. The reward needs the remarks: without them a module is a
    failure, not a zero cost."""
    sizes, error = measure_object(obj, stderr, cmd)
    if sizes is None:
        return error or "no object"
    path = remark_file(tmp)
    if not path.is_file():  # clang creates it before codegen, even when it stays empty
        return "compiler exited with 0 but wrote no optimization remarks"
    try:
        return sizes, read_remarks(path)
    except RemarkFormatError as exc:
        return f"unreadable optimization remarks: {exc}"


def _never_asked(exc: Exception, proc: subprocess.Popen[bytes]) -> bool:
    """The compiler finished without opening the channel: the advisor is created at the
    first function with virtual registers to allocate, so a module with none (only data,
    or only trivial functions) never asks. That is an empty session, not a failure; a
    failed compile is still reported from its exit status."""
    return "without opening the channel" in str(exc) and proc.wait() == 0


def _plan(header: Header, required: Sequence[str],
          advisor: Advisor) -> tuple[list[int], list[str], int | None]:
    """Header positions of the policy's features and, for eviction, of `mask`."""
    if header.advice is None:
        raise ChannelError("the regalloc header has no advice spec")
    want = "index_to_evict" if advisor == "evict" else "priority"
    if header.advice.name != want:
        raise ChannelError(f"the {advisor} channel sent advice {header.advice.name!r}, "
                           f"expected {want!r} (are the flags for the other advisor?)")
    indices = select_features(header.features, required)
    names = [header.features[i].name for i in indices]
    mask_at = None
    if advisor == "evict":
        mask_at = select_features(header.features, [MASK_FEATURE])[0]
    return indices, names, mask_at


def record_trajectory(session: ChannelSession, required: Sequence[str],
                      advisor: Advisor) -> Trajectory | None:
    """The decisions as a Trajectory: the policy's features (and `mask` for eviction,
    which a trainer needs to renormalize over valid columns) stacked per decision, the
    advice actually sent, and each decision's function (its context)."""
    header = session.header
    if header is None or header.advice is None:
        return None
    names = list(dict.fromkeys([*required, *([MASK_FEATURE] if advisor == "evict" else [])]))
    at = dict(zip(names, select_features(header.features, names), strict=True))
    n = len(session.decisions)
    features: dict[str, np.ndarray] = {}
    for name, i in at.items():
        spec = header.features[i]
        features[name] = (np.stack([d.features[i] for d in session.decisions]) if n
                          else np.zeros((0, *spec.shape), dtype=spec.dtype))
    adv = header.advice
    advice = (np.stack([d.advice for d in session.decisions]) if n
              else np.zeros((0, *adv.shape), dtype=adv.dtype))
    return Trajectory(tuple(d.context for d in session.decisions), features, advice)


def execute(compiler: Compiler, spec: WorkSpec, job: CompileJob) -> ModuleResult:
    """One compile job of problem "regalloc", as a worker runs it (`workers/task.py`)."""
    if spec.policy is None:
        return compile_baseline(compiler, job, timeout=spec.timeout, edits=spec.edits,
                                size_metric=spec.size_metric)
    return compile_with_policy(compiler, job, spec.policy, timeout=spec.timeout,
                               record=spec.record, edits=spec.edits,
                               size_metric=spec.size_metric)


def function_costs(result: ModuleResult) -> dict[str, float]:
    """Function name -> weighted cost of a regalloc result (functions without spill code
    have no remark and are absent: their cost is 0)."""
    return _prefixed(result.extra, FUNCTION_PREFIX)


def _prefixed(extra: Mapping[str, float], prefix: str) -> dict[str, float]:
    n = len(prefix)
    return {k[n:]: v for k, v in extra.items() if k.startswith(prefix)}
