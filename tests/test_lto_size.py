"""benchmarks/lto_size.py's own logic: what it reads from `mlgo cc`'s log of an LTO build, the
flags each build gets, and the README table it writes. The MLGO_CC_LOG lines are recorded
from a real lz4 build (`-Oz -flto=thin` and `-Oz -flto` with `pretrained:inlining-oz`),
trimmed to the keys the benchmark reads; the builds themselves are the benchmark's run."""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
FULL_REASON = ("full LTO: LLVM builds the merged module's inliner with its default advisor "
               "whatever -enable-ml-inliner says, so no policy can answer it (use -flto=thin "
               "to have the link-time inliner served)")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # benchmarks/ is not a package; lto_size imports binary_size from beside it, as it does
    # when run as a script.
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("lto_size")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _compile(obj: str, decisions: int, inlined: int) -> dict[str, Any]:
    return {"args": ["-Oz", "-flto=thin", "-c", f"{obj}.c", "-o", f"{obj}.o"],
            "policy": "pretrained:inlining-oz", "served": True, "served_by": "server",
            "sessions": 1, "decisions": decisions, "inlined": inlined, "returncode": 0}


THIN_LOG = [
    _compile("lz4frame", 148, 102), _compile("lz4", 773, 742), _compile("xxhash", 165, 161),
    _compile("lz4_files", 5, 2), _compile("lz4hc", 604, 500),
    {"args": ["-Oz", "-flto=thin", "-o", "lz4_files", "lz4.o"], "served": True,
     "served_by": "server", "sessions": 6, "decisions": 189, "inlined": 30, "returncode": 0,
     "lto": {"mode": "thin", "thin_modules": 5, "full_modules": 0, "served": True,
             "thinlto_jobs": 1}, "output": "lz4_files"},
]
FULL_LOG = [
    *(dict(r, args=[a if a != "-flto=thin" else "-flto" for a in r["args"]])
      for r in THIN_LOG[:5]),
    {"args": ["-Oz", "-flto", "-o", "lz4_files", "lz4.o"], "served": False,
     "served_by": None, "sessions": 0, "decisions": 0, "inlined": 0, "returncode": 0,
     "lto": {"mode": "full", "thin_modules": 0, "full_modules": 5, "served": False,
             "reason": FULL_REASON}, "output": "lz4_files"},
]
NO_LTO_LOG = [
    *(dict(r, args=[a for a in r["args"] if a != "-flto=thin"]) for r in THIN_LOG[:5]),
    # a link of native objects: logged, not served, and no "lto" record
    {"args": ["-Oz", "-o", "lz4_files", "lz4.o"], "served": False, "served_by": None,
     "sessions": 0, "decisions": 0, "inlined": 0, "returncode": 0},
]


def test_a_served_thin_link_counts_its_decisions_apart_from_the_compiles(
        bench: ModuleType) -> None:
    s = bench.served_summary(THIN_LOG)
    assert s["compiles_served"] == 5
    assert s["compile_decisions"] == 148 + 773 + 165 + 5 + 604
    assert s["compile_inlined"] == 102 + 742 + 161 + 2 + 500
    assert s["lto_links"] == [{"output": "lz4_files", "mode": "thin", "served": True,
                               "decisions": 189, "inlined": 30}]
    assert s["link_decisions"] == 189
    assert s["failed_commands"] == 0


def test_a_full_lto_link_is_reported_stock_with_its_reason(bench: ModuleType) -> None:
    s = bench.served_summary(FULL_LOG)
    assert s["compiles_served"] == 5
    assert s["lto_links"] == [{"output": "lz4_files", "mode": "full", "served": False,
                               "reason": FULL_REASON}]
    assert s["link_decisions"] == 0


def test_a_build_without_lto_has_no_link_step_record(bench: ModuleType) -> None:
    s = bench.served_summary(NO_LTO_LOG)
    assert s["compiles_served"] == 5 and s["lto_links"] == [] and s["link_decisions"] == 0


def test_a_failed_command_is_counted(bench: ModuleType) -> None:
    log = [*THIN_LOG[:5], dict(THIN_LOG[5], returncode=1)]
    assert bench.served_summary(log)["failed_commands"] == 1


def test_every_build_gets_the_lto_flag_on_the_compile_and_link_line(
        bench: ModuleType) -> None:
    tools = bench.Toolchain("/zig", ["mlgo"])
    plain = tools.make_vars("thin", "plain", "7")
    assert shlex.split(plain["CC"]) == ["/zig", "cc"]
    flags = shlex.split(plain["CFLAGS"])
    assert flags[-3:] == ["-flto=thin", "-Xclang", "-Oz"] and "-DPYMLGO_BENCH_RUN=7" in flags
    served = tools.make_vars("full", "shift:2:30:3", "7")
    assert shlex.split(served["CC"]) == ["mlgo", "cc", "--mlgo-policy", "shift:2:30:3"]
    assert shlex.split(served["CFLAGS"])[-1] == "-flto"
    assert "-Xclang" not in served["CFLAGS"]  # mlgo cc reaches cc1 at -Oz itself
    none = shlex.split(tools.make_vars("none", "plain", "7")["CFLAGS"])
    assert not any(f.startswith("-flto") for f in none)


def test_variant_names_are_plain_directory_names(bench: ModuleType) -> None:
    assert bench.variant_name("thin", "pretrained:inlining-oz") == "thin-pretrained_inlining-oz"
    assert bench.variant_name("none", "plain") == "none-plain"


def _entry(lto: str, policy: str, allocated: int, *, passed: bool = True,
           log: list[dict[str, Any]] | None = None, bench: ModuleType) -> dict[str, Any]:
    e: dict[str, Any] = {"lto": lto, "policy": policy, "metrics": {"allocated": allocated},
                         "tests_passed": passed}
    if policy != "plain":
        e.update(bench.served_summary(log or []))
    return e


def test_the_table_has_a_row_per_lto_mode_with_changes_against_that_rows_plain_build(
        bench: ModuleType) -> None:
    p = "pretrained:inlining-oz"
    builds = {bench.variant_name(e["lto"], e["policy"]): e for e in (
        _entry("none", "plain", 109_857, bench=bench),
        _entry("none", p, 109_917, log=NO_LTO_LOG, bench=bench),
        _entry("thin", "plain", 79_695, bench=bench),
        _entry("thin", p, 80_022, log=THIN_LOG, bench=bench),
        _entry("full", "plain", 71_983, bench=bench),
        _entry("full", p, 71_843, passed=False, log=FULL_LOG, bench=bench),
    )}
    table = bench.markdown_table({"policies": [p], "lto": ["none", "thin", "full"],
                                  "programs": {"lz4": {"builds": builds}}})
    rows = table.splitlines()
    assert rows[0] == ("| program | build | plain | `pretrained:inlining-oz` | "
                       "link decisions, `pretrained:inlining-oz` |")
    assert rows[2] == "| lz4 | `-Oz` | 109,857 | 109,917 (+0.05%) |  |"
    assert rows[3] == "| lz4 | `-Oz -flto=thin` | 79,695 | 80,022 (+0.41%) | 189 |"
    assert rows[4] == ("| lz4 | `-Oz -flto` | 71,983 | 71,843 (-0.19%) **tests failed** | "
                       "stock |")
    assert len(rows) == 5
