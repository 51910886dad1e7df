"""Compiling demo modules with a policy on the register allocator's channels (real clang)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from pymlgo.corpus.command import FlagEdits, recompile_args
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob, CompileSettings, Decide
from pymlgo.problems.regalloc.advice import MASK_FEATURE
from pymlgo.problems.regalloc.compile import (
    CORRECTED_KEY,
    COST_KEY,
    compile_baseline,
    compile_with_policy,
    function_costs,
)
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.problems.regalloc.remarks import read_remarks
from pymlgo.problems.regalloc.reward import function_rewards, split_by_function
from pymlgo.toolchain import run
from pymlgo.toolchain.size import object_size

ECHO = FlagEdits(add=("-mllvm", "-interactive-model-runner-echo-reply"))
# a trajectory, and clang echoing every answer it received on stderr
RECORD_ECHO = CompileSettings(record=True, edits=ECHO)
SMALL = ("lz4/lz4libs/lz4frame", "zstd/lib/compress/hist", "brotli/c/enc/histogram")


@pytest.fixture(scope="module")
def demo_jobs(demo_corpus_dir: Path) -> dict[str, CompileJob]:
    return {j.module: j for j in corpus_jobs(load_corpus(demo_corpus_dir))}


@dataclass(frozen=True)
class MaskedOutPolicy:
    """Asks for a column the allocator cannot use: a masked-out one, else one past the end."""

    advisor: str = "evict"
    name: str = "masked-out"
    required_features: tuple[str, ...] = (MASK_FEATURE,)

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> int:
            mask = features[MASK_FEATURE].reshape(-1)
            bad = np.flatnonzero(mask != 1)
            return int(bad[0]) if bad.size else mask.size

        return decide


def echoed(stderr: Path, name: str) -> list[float]:
    return [float(line.split(":", 1)[1]) for line in stderr.read_text().splitlines()
            if line.startswith(f"{name}: ")]


def test_eviction_channel_round_trip_reads_the_specs_from_the_header(compiler, demo_jobs,
                                                                     tmp_path):
    job = demo_jobs["lz4/lz4libs/lz4frame"]
    res = compile_with_policy(compiler, job, builtin_policy("random:3"), RECORD_ECHO,
                              keep_stderr=tmp_path / "err")
    assert res.ok, res.error
    traj = res.trajectory
    assert res.decisions == len(traj) > 50
    columns = traj.features[MASK_FEATURE].shape[-1]  # from the header: never assumed
    assert traj.features[MASK_FEATURE].shape == (len(traj), 1, columns)
    assert traj.advice.dtype == np.int64 and traj.advice.shape == (len(traj), 1)
    # what the compiler received is exactly what the trajectory says was sent
    assert echoed(tmp_path / "err", "index_to_evict") == traj.advice.reshape(-1).tolist()
    masks = traj.features[MASK_FEATURE].reshape(len(traj), columns)
    assert (masks[np.arange(len(traj)), traj.advice.reshape(-1)] == 1).all()
    # one context per machine function: decisions group into per-function trajectories
    per_function = split_by_function(traj)
    assert len(per_function) > 5 and sum(map(len, per_function.values())) == len(traj)
    assert res.extra[CORRECTED_KEY] == 0 and res.extra[COST_KEY] > 0


def test_answers_for_masked_out_columns_never_reach_the_compiler(compiler, demo_jobs,
                                                                tmp_path):
    for module in SMALL:
        res = compile_with_policy(compiler, demo_jobs[module], MaskedOutPolicy(),
                                  RECORD_ECHO, keep_stderr=tmp_path / "err")
        assert res.ok, res.error
        traj = res.trajectory
        sent = echoed(tmp_path / "err", "index_to_evict")
        assert len(sent) == res.decisions == len(traj) > 0
        masks = traj.features[MASK_FEATURE].reshape(len(traj), -1)
        assert all(masks[i, int(col)] == 1 for i, col in enumerate(sent)), module
        # every answer was invalid, so every one was corrected, and counted
        assert res.extra[CORRECTED_KEY] == res.decisions


def test_priority_channel_sends_float32_priorities(compiler, demo_jobs, tmp_path):
    res = compile_with_policy(compiler, demo_jobs["lz4/lz4libs/lz4frame"],
                              builtin_policy("priority:size"), RECORD_ECHO,
                              keep_stderr=tmp_path / "err")
    assert res.ok, res.error
    traj = res.trajectory
    assert traj.advice.dtype == np.float32 and len(traj) > 50
    assert (traj.advice.reshape(-1) == traj.features["li_size"].reshape(-1)).all()
    assert echoed(tmp_path / "err", "priority") == traj.advice.reshape(-1).tolist()


def test_stock_policy_is_the_baseline_without_a_channel(compiler, demo_jobs):
    job = demo_jobs["zstd/lib/compress/hist"]
    base = compile_baseline(compiler, job)
    stock = compile_with_policy(compiler, job, builtin_policy("default"))
    assert base.ok and stock.ok and stock.decisions == 0
    assert (stock.size, stock.extra[COST_KEY]) == (base.size, base.extra[COST_KEY])


def test_remarks_do_not_change_the_code_and_match_the_result(compiler, demo_jobs, tmp_path):
    job = demo_jobs["lz4/lz4libs/lz4frame"]
    (tmp_path / "m.bc").write_bytes(job.bitcode)
    plain = run.run([*compiler.clang_argv, *recompile_args(
        job.cmd, input_bc=str(tmp_path / "m.bc"), output_obj=str(tmp_path / "plain.o"),
        opt_level="-O2")], cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    res = compile_baseline(compiler, job, keep_object=tmp_path / "remarked.o")
    assert res.ok and res.sizes == object_size(tmp_path / "plain.o")
    assert res.size == object_size(tmp_path / "plain.o").allocated  # the default metric
    assert (tmp_path / "plain.o").read_bytes() == (tmp_path / "remarked.o").read_bytes()
    # the per-function costs add up to the module's cost
    assert sum(function_costs(res).values()) == pytest.approx(res.extra[COST_KEY])
    assert res.extra[COST_KEY] > 0 and read_remarks(tmp_path / "none.yaml").functions == {}


def test_per_function_rewards_compare_with_the_stock_advisor(compiler, demo_jobs):
    job = demo_jobs["lz4/lz4libs/lz4frame"]
    base = compile_baseline(compiler, job)
    same = function_rewards(base, base)
    assert same and set(same.values()) == {0.0}
    worse = compile_with_policy(compiler, job, builtin_policy("no-evict"))
    rewards = function_rewards(worse, base)
    assert min(rewards.values()) < 0  # never evicting costs spill code somewhere


def test_a_module_with_nothing_to_allocate_has_zero_decisions(compiler, demo_jobs):
    res = compile_with_policy(compiler, demo_jobs["brotli/c/common/constants"],
                              builtin_policy("random:0"),
                              CompileSettings(timeout=60))
    assert res.ok, res.error
    assert res.decisions == 0 and res.extra[COST_KEY] == 0.0


def test_a_broken_module_is_an_error_result(compiler, demo_jobs):
    job = demo_jobs["zstd/lib/compress/hist"]
    bad = CompileJob("broken", b"not bitcode", job.cmd)
    res = compile_with_policy(compiler, bad, builtin_policy("random:0"),
                              CompileSettings(timeout=30))
    assert not res.ok and res.size is None
    assert not compile_baseline(compiler, bad).ok
