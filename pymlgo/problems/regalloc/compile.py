"""Compile one corpus module at -O2 with a policy answering the greedy register allocator.

Two advisors speak the interactive protocol in stock clang (release mode, no TFLite):
eviction (`index_to_evict`, int64: which interfering live range to evict, the last column
meaning "evict nothing") and priority (`priority`, float32: the allocation queue order).
Neither the channel nor a release compiler reports a reward, so every compile also writes
the allocator's optimization remarks (`remarks.py`): spills, reloads and copies per
function, weighted by block frequency. The stock advisor's numbers are the baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult, Policy, Trajectory
from pymlgo.problems.compile import Advise, Compiled, Flags, compile_module, trajectory
from pymlgo.problems.regalloc.advice import (
    MASK_FEATURE,
    Advisor,
    valid_eviction,
    valid_priority,
)
from pymlgo.problems.regalloc.optimized import CODEGEN_ONLY_FLAGS, codegen_job
from pymlgo.problems.regalloc.remarks import (
    REMARK_PASS,
    RemarkFormatError,
    RemarkReport,
    read_remarks,
    remark_file,
)
from pymlgo.protocol.channel import ChannelError, ChannelSession
from pymlgo.protocol.features import select_features
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain.compiler import Compiler

OPT_LEVEL = "-O2"

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


def _measure(keep_object: Path | None, keep_stderr: Path | None,
             trajectory_of: Callable[[ChannelSession | None], Trajectory | None],
             corrected: Callable[[], int]) -> Callable[[Compiled], ModuleResult]:
    """The result of a compile that left an object: its bytes and the allocator's remarks
    (without them a module is a failure, not a zero cost)."""

    def measure(c: Compiled) -> ModuleResult:
        if keep_stderr is not None:
            keep_stderr.write_text(c.stderr)
        path = remark_file(c.tmp)
        if not path.is_file():  # clang creates it before codegen, even when it stays empty
            return c.failed("compiler exited with 0 but wrote no optimization remarks")
        try:
            report = read_remarks(path)
        except RemarkFormatError as exc:
            return c.failed(f"unreadable optimization remarks: {exc}")
        if keep_object is not None:
            keep_object.write_bytes(c.obj.read_bytes())
        return c.result(extra=result_extra(report, corrected()),
                        trajectory=trajectory_of(c.session))

    return measure


def compile_baseline(compiler: Compiler, job: CompileJob,
                     settings: CompileSettings = CompileSettings(), *,
                     keep_object: Path | None = None) -> ModuleResult:
    """-O2 with the stock advisors (no channel): the object's bytes and the remark costs
    every policy is compared with. `keep_object` copies the object there (to link
    programs)."""
    return _compile(compiler, job, settings, flags=lambda tmp, _: remark_flags(remark_file(tmp)),
                    measure=_measure(keep_object, None, lambda _: None, lambda: 0))


def compile_with_policy(compiler: Compiler, job: CompileJob, policy: Policy,
                        settings: CompileSettings = CompileSettings(), *,
                        keep_object: Path | None = None,
                        keep_stderr: Path | None = None) -> ModuleResult:
    """Compile `job` at -O2 with `policy` answering its advisor (`advisor_of(policy)`).

    `settings.record` keeps every decision's features (`ModuleResult.trajectory`).
    `keep_object` / `keep_stderr` copy the object / the compiler's stderr there (to link a
    program; to read what `-mllvm -interactive-model-runner-echo-reply` echoed).

    Every answer is checked before it is sent (`advice.py`); corrections are counted in
    `extra[CORRECTED_KEY]`. A stock policy compiles without a channel. Never raises for a
    bad module: failures become `ModuleResult.error`, except a policy that needs features
    this compiler does not send (`FeatureMismatchError`).
    """
    if is_stock(policy):
        return compile_baseline(compiler, job, settings, keep_object=keep_object)
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

    def recorded(session: ChannelSession | None) -> Trajectory | None:
        if not settings.record or session is None or session.header is None:
            return None
        return record_trajectory(session, required, advisor)

    def flags(tmp: Path, base: Path | None) -> list[str]:
        assert base is not None  # a policy always answers on a channel
        return [*remark_flags(remark_file(tmp)), *channel_flags(advisor, base)]

    return _compile(compiler, job, settings, flags=flags,
                    measure=_measure(keep_object, keep_stderr, recorded, lambda: corrected),
                    advise=advise)


def _compile(compiler: Compiler, job: CompileJob, settings: CompileSettings, *, flags: Flags,
             measure: Callable[[Compiled], ModuleResult],
             advise: Advise | None = None) -> ModuleResult:
    """The one compile of both advisors: the code generator only, on the module's cached
    middle-end output (`optimized.py`), unless the command cannot be split."""
    codegen = codegen_job(compiler, job, OPT_LEVEL, settings)
    if codegen is None:
        return compile_module(compiler, job, settings, opt_level=OPT_LEVEL, flags=flags,
                              measure=measure, advise=advise, may_not_ask=True)

    def codegen_flags(tmp: Path, base: Path | None) -> list[str]:
        return [*flags(tmp, base), *CODEGEN_ONLY_FLAGS]

    return compile_module(compiler, codegen, settings, opt_level=OPT_LEVEL, flags=codegen_flags,
                          measure=measure, advise=advise, may_not_ask=True)


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
    """The decisions as a Trajectory: every feature of the header, in its order, stacked per
    decision (a trace logs them all, a trainer needs `mask` to renormalize over valid
    columns), the advice actually sent, and each decision's function (its context).
    `required` (the policy's features) and `advisor` are checked to be in the header."""
    if session.header is None or session.header.advice is None:
        return None
    select_features(session.header.features,
                    [*required, *([MASK_FEATURE] if advisor == "evict" else [])])
    return trajectory(session)


def function_costs(result: ModuleResult) -> dict[str, float]:
    """Function name -> weighted cost of a regalloc result (functions without spill code
    have no remark and are absent: their cost is 0)."""
    return _prefixed(result.extra, FUNCTION_PREFIX)


def _prefixed(extra: Mapping[str, float], prefix: str) -> dict[str, float]:
    n = len(prefix)
    return {k[n:]: v for k, v in extra.items() if k.startswith(prefix)}
