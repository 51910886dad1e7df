"""Compiling a module with a policy on the channel, against the real bundled clang."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import pytest

from pymlgo.corpus.command import FlagEdits
from pymlgo.problems.base import CompileSettings
from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.protocol.features import FeatureMismatchError
from tests.test_toolchain import children_of_self

RECORD = CompileSettings(record=True)  # keep every decision's features


def test_default_policy_through_the_channel_equals_plain_oz_per_module(compiler, minic_jobs):
    for job in minic_jobs:
        base = compile_baseline(compiler, job)
        res = compile_with_policy(compiler, job, builtin_policy("default"))
        assert base.ok and res.ok, (base.error, res.error)
        assert res.size == base.size, job.module
    assert sum(compile_with_policy(compiler, j, builtin_policy("default")).decisions
               for j in minic_jobs) > 10


def test_never_and_always_change_the_size(compiler, minic_jobs):
    def total(policy: str) -> int:
        return sum(compile_with_policy(compiler, j, builtin_policy(policy)).size
                   for j in minic_jobs)

    default, never, always = total("default"), total("never"), total("always")
    assert never != default and always != default and never != always


def test_random_policy_is_deterministic_for_a_seed(compiler, minic_jobs):
    job = max(minic_jobs, key=lambda j: len(j.bitcode))
    runs = [compile_with_policy(compiler, job, builtin_policy("random:0.5:7"), RECORD)
            for _ in range(2)]
    assert runs[0].size == runs[1].size
    assert (runs[0].trajectory.advice == runs[1].trajectory.advice).all()


def test_recorded_trajectory_holds_every_feature_and_decision(compiler, minic_jobs):
    res = compile_with_policy(compiler, minic_jobs[0], builtin_policy("default"), RECORD)
    traj = res.trajectory
    assert len(traj) == res.decisions > 0
    assert list(traj.features)[-1] == "inlining_default"
    assert "callee_basic_block_count" in traj.features
    assert (traj.advice.reshape(-1) == traj.features["inlining_default"].reshape(-1)).all()



def test_clangs_own_decision_is_asked_for_only_when_read_or_recorded(
    compiler, minic_jobs, monkeypatch
):
    # Asking costs clang its heuristic's cost analysis at every call site; a policy that
    # does not read the answer must get the same call sites, decisions and bytes without it.
    from pymlgo.toolchain import run

    commands: list[list[str]] = []
    real_start = run.start

    def spy(argv, **kwargs):
        commands.append(list(argv))
        return real_start(argv, **kwargs)

    monkeypatch.setattr(run, "start", spy)
    asked = "-inliner-interactive-include-default"
    policy = builtin_policy("random:0.5:3")
    for job in minic_jobs:
        unrecorded = compile_with_policy(compiler, job, policy)
        recorded = compile_with_policy(compiler, job, policy, RECORD)
        assert unrecorded.ok and recorded.ok, (unrecorded.error, recorded.error)
        assert (unrecorded.size, unrecorded.decisions) == (recorded.size, recorded.decisions)
        if recorded.decisions:
            assert "inlining_default" in recorded.trajectory.features
    assert [asked in c for c in commands] == [False, True] * len(minic_jobs)
    compile_with_policy(compiler, minic_jobs[0], builtin_policy("default"))
    assert asked in commands[-1]  # `default` answers with it

def test_compiler_that_never_opens_the_channel_fails_fast_and_cleanly(
    compiler, minic_jobs, tmp_path, monkeypatch
):
    # -O0 after -Oz wins in cc1: the inliner pass never runs, so the FIFOs are never opened.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # make tempfile re-read TMPDIR
    try:
        before = children_of_self()
        res = compile_with_policy(compiler, minic_jobs[0], builtin_policy("default"),
                                  CompileSettings(timeout=20, edits=FlagEdits(add=("-O0",))))
    finally:
        tempfile.tempdir = None
    assert not res.ok
    assert "without opening the channel" in res.error
    assert res.seconds < 10
    assert os.listdir(tmp_path) == []  # no FIFO, no temp dir left
    assert children_of_self() <= before


def test_a_failing_compile_is_an_error_result_not_an_exception(compiler, minic_jobs):
    bad = minic_jobs[0].__class__("broken", b"not bitcode", minic_jobs[0].cmd)
    res = compile_with_policy(compiler, bad, builtin_policy("default"),
                              CompileSettings(timeout=20))
    assert not res.ok and res.size is None
    assert not compile_baseline(compiler, bad).ok


@dataclass(frozen=True)
class NeedsUnknownFeature:
    name: str = "future"
    required_features: tuple[str, ...] = ("inlining_default", "feature_from_llvm_99")

    def for_module(self, module):
        return lambda feats: 0


def test_policy_needing_a_feature_the_compiler_lacks_is_a_clear_error(compiler, minic_jobs):
    with pytest.raises(FeatureMismatchError, match="feature_from_llvm_99"):
        compile_with_policy(compiler, minic_jobs[0], NeedsUnknownFeature())


def test_policy_knowing_fewer_features_than_the_compiler_works(compiler, minic_jobs):
    # `default` needs only inlining_default; the 38 other features are ignored.
    assert builtin_policy("default").required_features == ("inlining_default",)
    assert compile_with_policy(compiler, minic_jobs[0], builtin_policy("default")).ok


@pytest.mark.parametrize("spec", ["random:2", "random:x", "sometimes", "random:0.5:1:2"])
def test_bad_builtin_policy_names_are_rejected(spec):
    with pytest.raises(ValueError, match="policy"):
        builtin_policy(spec)


# Each level calls the next twice: inlining everything doubles the code per level, far past
# the ML advisor's size stop (the module's IR grown SIZE_INCREASE_THRESHOLD times).
_DOUBLING = "\n".join(
    ["int leaf(int x) { return x * 7 + (x >> 3); }"]
    + [f"int f{k}(int x) {{ return {'leaf' if k == 0 else f'f{k - 1}'}(x) + "
       f"{'leaf' if k == 0 else f'f{k - 1}'}(x ^ {k + 1}); }}" for k in range(14)]
) + "\n"


def test_call_sites_clang_refuses_past_the_size_stop_are_counted(compiler, tmp_path):
    from pymlgo.evaluate.eval import evaluate
    from pymlgo.problems.inlining.compile import SIZE_STOP_KEY
    from pymlgo.workers import make_executor
    from tests.conftest import build_jobs

    src = tmp_path / "doubling.c"
    src.write_text(_DOUBLING)
    (job,) = build_jobs(compiler, [src], tmp_path)
    always = compile_with_policy(compiler, job, builtin_policy("always"))
    assert always.ok and always.extra[SIZE_STOP_KEY] > 0
    default = compile_with_policy(compiler, job, builtin_policy("default"))
    assert default.ok and SIZE_STOP_KEY not in default.extra  # -Oz's own inlining stays small
    with make_executor(None, 1) as executor:
        report = evaluate(executor, compiler, [job], builtin_policy("always"))
    assert report.to_json()["total"][SIZE_STOP_KEY] == always.extra[SIZE_STOP_KEY]
