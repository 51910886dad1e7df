"""Real programs built from modules compiled with register-allocation policies (real clang).

Release LLVM trusts the eviction advice, so wrong advice can miscompile: running a program
whose library objects were allocated with a random (valid) policy is the check that the
channel path produces correct code. Every demo module (63, about 125k decisions) is
compiled once with a random valid policy (under a minute with two compiles at a time);
those objects also make the zstd + brotli round-trip program. lz4 is checked against its
stock build, and with a second random policy and the learned one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.problems.regalloc.program import (
    BuiltObjects,
    build_objects,
    link_program,
    run_program,
)

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


@pytest.fixture(scope="module")
def random_build(compiler, demo_jobs, tmp_path_factory) -> BuiltObjects:
    """Every demo module compiled with a seeded random valid eviction policy (a failed
    module raises ProgramError naming it)."""
    return build_objects(compiler, list(demo_jobs.values()), builtin_policy("random:11"),
                         tmp_path_factory.mktemp("random") / "obj", threads=2)


def test_random_valid_eviction_compiles_every_demo_module(random_build, demo_jobs):
    results = random_build.results
    assert len(results) == len(demo_jobs) >= 60 and all(r.ok for r in results)
    assert random_build.decisions > 100_000  # the channel really was used
    assert random_build.invalid_advice == 0


def test_zstd_and_brotli_built_with_random_valid_eviction_still_round_trip(
        compiler, random_build, tmp_path):
    """Both libraries, every module allocated by the random policy, compress and
    decompress text and noise at five levels each, and through a trained zstd dictionary;
    the driver compares every decompressed buffer with its input."""
    chosen = [(path, res) for path, res in zip(random_build.paths, random_build.results,
                                               strict=True)
              if res.module.startswith(("zstd/", "brotli/"))]
    assert len(chosen) >= 50
    assert sum(res.decisions for _, res in chosen) > 50_000
    exe = link_program(compiler, DATA / "zstd_brotli_roundtrip.c", [p for p, _ in chosen],
                       tmp_path / "rt")
    lines = run_program([str(exe), "32768"]).splitlines()
    assert lines[-1] == "ok"
    assert lines[0].startswith("text: zstd1=") and "brotli11=" in lines[0]
    # text compresses at every level; noise does not (both inputs really went through)
    text, noise = ({k: int(v) for k, v in (f.split("=") for f in line.split()[1:])}
                   for line in lines[:2])
    assert text.keys() == noise.keys() and len(text) == 10
    assert all(v < 32768 // 2 for v in text.values())
    assert all(v >= 32768 for v in noise.values())


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
