"""Real programs built from modules compiled with register-allocation policies (real clang).

Release LLVM trusts the eviction advice, so wrong advice can miscompile: running a program
whose library objects were allocated with a random (valid) policy is the check that the
channel path produces correct code. Every demo module (63, about 127k decisions) compiles
with a random valid policy in about a minute on two workers; the program is the lz4 round
trip (`benchmarks/regalloc_perf.py` builds a driver over all three libraries).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.problems.regalloc.program import build_objects, link_program, run_program
from pymlgo.workers import WorkSpec, make_executor

DATA = Path(__file__).parent / "data" / "regalloc"
LZ4 = ("lz4/lz4libs/lz4", "lz4/lz4libs/lz4hc", "lz4/lz4libs/lz4frame", "lz4/lz4libs/xxhash")


@pytest.fixture(scope="module")
def demo_jobs(demo_corpus_dir: Path) -> dict[str, CompileJob]:
    return {j.module: j for j in corpus_jobs(load_corpus(demo_corpus_dir))}


@pytest.fixture(scope="module")
def stock_lz4(compiler, demo_jobs, tmp_path_factory):
    """The round-trip driver linked with lz4 as the stock allocator compiles it."""
    tmp = tmp_path_factory.mktemp("stock")
    built = build_objects(compiler, [demo_jobs[m] for m in LZ4], builtin_policy("default"),
                          tmp / "obj")
    exe = link_program(compiler, DATA / "lz4_roundtrip.c", built.paths, tmp / "rt")
    return built, run_program([str(exe), "200000", "2"])


def test_random_valid_eviction_compiles_every_demo_module(compiler, demo_corpus_dir):
    jobs = corpus_jobs(load_corpus(demo_corpus_dir))
    spec = WorkSpec(problem="regalloc", policy=builtin_policy("random:11"))
    with make_executor(None, 2) as executor:
        results = list(executor.run(spec, jobs))
    failed = {r.module: r.error for r in results if not r.ok}
    assert len(jobs) == len(results) >= 60 and not failed
    assert sum(r.decisions for r in results) > 100_000  # the channel really was used
    assert sum(r.extra["invalid_advice"] for r in results) == 0


def test_a_program_built_with_random_valid_eviction_still_round_trips(
        compiler, demo_jobs, stock_lz4, tmp_path):
    stock, stock_output = stock_lz4
    assert stock_output.startswith("ok ")
    policy = builtin_policy("random:5")
    built = build_objects(compiler, [demo_jobs[m] for m in LZ4], policy, tmp_path / "obj")
    # the policy really was asked, answered validly, and changed the allocation
    assert built.decisions > 1000 and built.invalid_advice == 0
    assert any(a.read_bytes() != b.read_bytes()
               for a, b in zip(built.paths, stock.paths, strict=True))
    assert built.weighted_cost != stock.weighted_cost
    exe = link_program(compiler, DATA / "lz4_roundtrip.c", built.paths, tmp_path / "rt")
    # same compressed bytes and checksums as the stock build: the code is still correct
    assert run_program([str(exe), "200000", "2"]) == stock_output


def test_the_learned_policy_builds_a_working_program(compiler, demo_jobs, stock_lz4,
                                                     tmp_path):
    from pymlgo.policy.regalloc import initial_policy

    _, stock_output = stock_lz4
    built = build_objects(compiler, [demo_jobs[m] for m in LZ4],
                          initial_policy(3).sampling(9), tmp_path / "obj")
    assert built.decisions > 1000 and built.invalid_advice == 0
    exe = link_program(compiler, DATA / "lz4_roundtrip.c", built.paths, tmp_path / "rt")
    assert run_program([str(exe), "200000", "2"]) == stock_output
