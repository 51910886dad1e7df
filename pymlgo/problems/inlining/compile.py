"""Compile one corpus module at -Oz with a policy answering the inliner; measure the object."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult, Policy
from pymlgo.problems.compile import Compiled, compile_module, trajectory
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE, for_language
from pymlgo.protocol.features import select_features
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.language import cc1_language

if TYPE_CHECKING:  # numpy only, but most compiles never need it
    from pymlgo.ir2native.model import IR2NativeModel

OPT_LEVEL = "-Oz"


# The ML advisor stops asking (and refuses every later call site) once the module's IR
# grows past this factor of its initial size; the stock heuristic has no such stop. At
# LLVM's default of 2.0, `default` through the channel diverged from plain -Oz on
# zstd_compress_sequences (4,244 vs 4,510 bytes). At 10 (and at 1000) `default` equals
# -Oz on every demo module; 10 still stops a run-away policy: `always` on the demo corpus
# took 2m50s at 10, but 5m15s with lz4hc hitting the 300 s timeout at 1000.
SIZE_INCREASE_THRESHOLD = 10
# Where the advisor stopped, it refuses every later call site whatever the policy answers,
# so a policy's object is no longer its decisions' (clang 17 stops on zstd_lazy where clang
# 22 does not: `default` there is +0.77% over -Oz). clang says so per refused call site in a
# missed-optimization remark of the ML advisor's pass; the result counts them under this key.
SIZE_STOP_KEY = "calls_refused_after_size_stop"
SIZE_STOP_REMARKS = ("-Rpass-missed=inline-ml",)
_SIZE_STOP_TEXT = "because module size grew too much"


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


_REMARKS = "inline-remarks.yaml"


def _ir2vec_flags(vocab: Path | None) -> list[str]:
    if vocab is None:
        return []
    from pymlgo.ir2vec.vocab_file import clang_flags

    return clang_flags(vocab)


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


def _measure(estimator: IR2NativeModel | None, record: bool, keep_object: Path | None = None
             ) -> Callable[[Compiled], ModuleResult]:
    def measure(c: Compiled) -> ModuleResult:
        if keep_object is not None:
            keep_object.write_bytes(c.obj.read_bytes())
        traj = trajectory(c.session) if record else None
        stops = c.stderr.count(_SIZE_STOP_TEXT)
        stopped = {SIZE_STOP_KEY: float(stops)} if stops else {}
        if estimator is None:
            return c.result(trajectory=traj, extra=stopped)
        from pymlgo.ir2native.estimates import read_decision_callers

        callers = read_decision_callers(c.tmp / _REMARKS) if c.session is not None else []
        if traj is not None and len(callers) == len(traj):
            traj = dataclasses.replace(traj, contexts=tuple(callers))
        return c.result(trajectory=traj,
                        extra={**_estimates(estimator, c.stderr, c.obj), **stopped})

    return measure


def compile_baseline(compiler: Compiler, job: CompileJob,
                     settings: CompileSettings = CompileSettings(), *,
                     estimator: IR2NativeModel | None = None,
                     keep_object: Path | None = None) -> ModuleResult:
    """Plain -Oz, no channel: the heuristic's size every policy is compared with.

    `size` is the object's bytes by `settings.size_metric` (`toolchain.size`), `sizes` its
    bytes by section group. `settings.memory_mb` bounds the compiler's address space; a
    compile past it fails. With an IR2Native `estimator`, `extra` holds every function's
    estimated bytes (`fn:NAME`). `keep_object` copies the object there (to compare objects
    byte for byte). `settings.options` is not read here: `InliningProblem.compile` hands
    its estimator over as the keyword."""
    return compile_module(compiler, job, settings, opt_level=OPT_LEVEL,
                          flags=lambda tmp, _: _estimate_flags(estimator, tmp),
                          measure=_measure(estimator, record=False, keep_object=keep_object))


def compile_with_policy(compiler: Compiler, job: CompileJob, policy: Policy,
                        settings: CompileSettings = CompileSettings(), *,
                        estimator: IR2NativeModel | None = None,
                        heuristic_feature: str | None = None, ir2vec_vocab: Path | None = None,
                        keep_object: Path | None = None) -> ModuleResult:
    """Compile `job` at -Oz with `policy` answering every inlining decision; `size` is the
    object's bytes by `settings.size_metric`, `sizes` its bytes by section group;
    `keep_object` copies the object there. `settings.record` keeps every decision's
    features (`ModuleResult.trajectory`).

    Where clang's own decision is asked for (the policy reads `inlining_default`, or
    `settings.record`), it is read from `heuristic_feature`; None: from where this
    compiler's probe found it (`heuristic_check`, which raises HeuristicUnavailableError if
    it cannot be had).

    With an IR2Native `estimator` (for partial rewards), `extra` holds every function's
    estimated bytes (`fn:NAME`) and a recorded trajectory's `contexts` name the caller of
    each decision (left empty if the remarks do not match the decisions one to one).

    With an IR2Vec vocabulary file `ir2vec_vocab` (`pymlgo.ir2vec`), clang also sends
    `callee_embedding` and `caller_embedding` (float[dim]); a policy that carries its own
    vocabulary (`ir2vec_vocab` attribute) is always compiled with that one.
    (`settings.options` is not read here: `InliningProblem.compile` hands its estimator and
    vocabulary over as these keywords.)

    Never raises for a bad module: compiler failure, timeout or a channel error becomes
    `ModuleResult.error`, so a corpus run goes on.
    """
    policy = for_language(policy, cc1_language(job.cmd))
    ir2vec_vocab = getattr(policy, "ir2vec_vocab", None) or ir2vec_vocab
    record = settings.record
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

    def flags(tmp: Path, base: Path | None) -> list[str]:
        assert base is not None
        # clang's decision only where it is used: a policy that reads it, or a recorded
        # trajectory (traces and behaviour cloning keep it as the label)
        return [*channel_flags(base, include_default=include_default), *SIZE_STOP_REMARKS,
                *_ir2vec_flags(ir2vec_vocab), *_estimate_flags(estimator, tmp)]

    return compile_module(compiler, job, settings, opt_level=OPT_LEVEL, flags=flags,
                          measure=_measure(estimator, record, keep_object), advise=advise)
