"""benchmarks/binary_size.py end to end on one small real program: the lz4 library from the
demo corpus' PyPI sdist with the lz4_files.c driver, built plain (-Oz) and through `mlgo cc`
with the real bundled compiler."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "binary_size.py"


def _load_benchmark() -> ModuleType:
    # benchmarks/ is not a package: load the script as a module.
    spec = importlib.util.spec_from_file_location("pymlgo_bench_binary_size", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


def test_default_policy_links_the_same_bytes_as_plain_oz(tmp_path: Path) -> None:
    bench = _load_benchmark()
    report = bench.measure_program(bench.PROGRAMS["lz4"], "default", tmp_path / "build",
                                   jobs=2)
    plain, policy = report["plain"], report["policy"]
    assert plain["tests_passed"], plain["test_detail"]
    assert policy["tests_passed"], policy["test_detail"]
    assert report["binaries"] == ["lz4_files"]
    # The channel answering with clang's own decision must reproduce plain -Oz: every group
    # and metric of the linked binary, and of the objects, the same to the byte.
    assert policy["metrics"]["allocated"] == plain["metrics"]["allocated"] > 50_000
    assert policy["groups"] == plain["groups"] and policy["bss"] == plain["bss"]
    assert policy["metrics"] == plain["metrics"]
    assert policy["objects"] == plain["objects"]
    assert report["change"]["allocated"]["bytes"] == 0
    # The policy really answered the inliner (not a build that bypassed it).
    assert policy["compiles_served"] == 5 and policy["decisions_served"] > 100
    assert policy["failed_commands"] == 0
    assert all(v == "ok" for v in report["llvm_size_check"].values()), report[
        "llvm_size_check"]
    built = tmp_path / "build" / "lz4"
    assert (built / "plain" / "lz4_files").read_bytes() == (
        built / "policy" / "lz4_files").read_bytes()


def test_guarded_policy_build_links_no_larger_than_plain_oz(tmp_path: Path) -> None:
    # `always` grows lz4's objects; through `--mlgo-guard` each of them must come back as
    # plain -Oz's, so the linked program is no larger and its tests still pass.
    bench = _load_benchmark()
    report = bench.measure_program(bench.PROGRAMS["lz4"], "always", tmp_path / "build",
                                   jobs=2, guard=True)
    plain, policy = report["plain"], report["policy"]
    assert policy["tests_passed"], policy["test_detail"]
    assert policy["guard_kept"].get("plain", 0) >= 4  # lz4, lz4frame, lz4hc, the driver
    assert policy["objects"]["metrics"]["allocated"] <= plain["objects"]["metrics"]["allocated"]
    assert policy["metrics"]["allocated"] <= plain["metrics"]["allocated"]
    assert policy["compiles_served"] == 5 and policy["failed_commands"] == 0
