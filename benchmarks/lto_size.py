"""What a policy does to real programs built with link-time optimization: linked binaries of
-Oz, -Oz -flto=thin and -Oz -flto builds, each plain and through `mlgo cc --mlgo-policy P`.

The programs, their sources, their tests and the Makefile that builds them are
benchmarks/binary_size.py's (brotli, zstd, lz4; see there). Each program is built once per
LTO mode and policy, every time for `-target x86_64-linux-gnu -mcpu=baseline` with the
bundled zig toolchain (clang and lld 22.1.8), `make -jJOBS`, with the same flags on the
compile and the link lines:
- LTO modes: none (`-Oz`), thin (`-Oz -flto=thin`), full (`-Oz -flto`);
- plain: `zig cc -Oz -Xclang -Oz` (zig's driver alone runs cc1 at -Os);
- a policy: `mlgo cc --mlgo-policy P -Oz` (default P: `pretrained:inlining-oz`, the shipped
  model, and `shift:2:30:3`, a built-in rule). With -flto=thin `mlgo cc` also serves the
  link step: lld's ThinLTO backends ask the policy, one backend at a time. With -flto the
  compiles are served but the merged module's inliner at link time is LLVM's default (no
  advisor can be given to it; `mlgo cc` warns), so the full-LTO columns show what the
  policy's pre-link decisions alone do.

Every build runs the program's own tests. Sizes are the linked binaries' bytes by section
group (`pymlgo.toolchain.size`; the default metric is `allocated`), checked against
llvm-size. From MLGO_CC_LOG each policy build reports the compiles' decisions and, per link
step, whether its link-time inliner was served and how many decisions it made, so a
ThinLTO row proves the link-time inliner was the policy's. Prints JSON (also written to
OUTPUT_DIR/lto_size.json with --output_dir), and the README's table on stderr.

    python benchmarks/lto_size.py [--programs brotli zstd lz4] [--lto none thin full]
        [--policies pretrained:inlining-oz shift:2:30:3] [--jobs 2] [--output_dir DIR]
        [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# benchmarks/ is this script's directory, first on sys.path when it runs.
from binary_size import (
    PROGRAMS,
    TARGET_FLAGS,
    _sizes,
    build_tree,
    check_llvm_size,
    mlgo_command,
    origin_label,
)

from pymlgo.toolchain.compiler import bundled_zig, find_compiler
from pymlgo.toolchain.size import total

LTO_FLAGS: dict[str, tuple[str, ...]] = {"none": (), "thin": ("-flto=thin",),
                                         "full": ("-flto",)}
LTO_LABELS = {"none": "`-Oz`", "thin": "`-Oz -flto=thin`", "full": "`-Oz -flto`"}
DEFAULT_POLICIES = ("pretrained:inlining-oz", "shift:2:30:3")
DEFAULT_PROGRAMS = ("brotli", "zstd", "lz4")  # the C programs: no C++ runtime to LTO around
PLAIN = "plain"


@dataclass
class Toolchain:
    """Make variables for one LTO mode, plain or through `mlgo cc` with a policy."""

    zig: str
    mlgo: list[str] = field(default_factory=mlgo_command)

    def make_vars(self, lto: str, policy: str, token: str) -> dict[str, str]:
        common = [*TARGET_FLAGS, "-Oz", f"-DPYMLGO_BENCH_RUN={token}", *LTO_FLAGS[lto]]
        if policy == PLAIN:
            cc, cxx = [self.zig, "cc"], [self.zig, "c++"]
            flags = [*common, "-Xclang", "-Oz"]  # what mlgo cc adds to reach cc1 at -Oz
        else:
            pol = ["--mlgo-policy", policy]
            cc, cxx = [*self.mlgo, "cc", *pol], [*self.mlgo, "c++", *pol]
            flags = common
        return {"CC": shlex.join(cc), "CXX": shlex.join(cxx),
                "CFLAGS": shlex.join(flags), "CXXFLAGS": shlex.join(flags)}


def variant_name(lto: str, policy: str) -> str:
    """A build directory's name: the LTO mode and the policy, without a path's troubles."""
    return f"{lto}-{policy.replace(':', '_').replace('/', '_')}"


def served_summary(log: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What `mlgo cc` served in one build, from its MLGO_CC_LOG lines: the compiles (lines
    without an "lto" record) and every LTO link step (its mode, whether its link-time
    inliner was the policy's, its decisions, or why not)."""
    compiles = [r for r in log if "lto" not in r]
    served = [r for r in compiles if r.get("served")]
    links = []
    for r in log:
        if "lto" not in r:
            continue
        link: dict[str, Any] = {"output": r.get("output"), "mode": r["lto"].get("mode"),
                                "served": bool(r["lto"].get("served"))}
        if link["served"]:
            link["decisions"] = r.get("decisions")
            link["inlined"] = r.get("inlined")
        else:
            link["reason"] = r["lto"].get("reason")
        links.append(link)
    return {
        "compiles_served": len(served),
        "compile_decisions": sum(r.get("decisions") or 0 for r in served),
        "compile_inlined": sum(r.get("inlined") or 0 for r in served),
        "uncounted_compiles": sum(1 for r in served if r.get("decisions") is None),
        "failed_commands": sum(1 for r in log if r.get("returncode")),
        "lto_links": links,
        "link_decisions": sum(x.get("decisions") or 0 for x in links if x["served"]),
    }


def measure_program(name: str, ltos: Sequence[str], policies: Sequence[str], root: Path,
                    jobs: int, runtime_parent: Path, tools: Toolchain) -> dict[str, Any]:
    """Build program `name` every way (LTO mode x plain and each policy) under `root`, test
    every build, and return its report."""
    program = PROGRAMS[name]
    out: dict[str, Any] = {"sources": origin_label(program), "tests": program.tests,
                           "builds": {}}
    for lto in ltos:
        for policy in (PLAIN, *policies):
            variant = variant_name(lto, policy)
            print(f"lto_size: {name} {variant} ...", file=sys.stderr, flush=True)
            tree = build_tree(program, variant,
                              tools.make_vars(lto, policy, f"{time.time_ns()}"),
                              root / name, jobs, runtime_parent)
            linked = total(tree.binaries.values())
            entry: dict[str, Any] = {
                "lto": lto, "policy": policy, **_sizes(linked),
                "per_binary_allocated": {k: s.allocated for k, s in tree.binaries.items()},
                "tests_passed": tree.test.passed, "test_detail": tree.test.detail,
                "build_seconds": round(tree.seconds, 2),
                "llvm_size_check": {k: check_llvm_size(tree.build / k)
                                    for k in tree.binaries},
            }
            if policy != PLAIN:
                entry.update(served_summary(tree.log))
            out["builds"][variant] = entry
            print(f"lto_size: {name} {variant}: allocated {linked.allocated}, tests "
                  f"{tree.test.passed}", file=sys.stderr, flush=True)
    return out


def _cell(entry: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
    if entry is None:
        return ""
    size = entry["metrics"]["allocated"]
    text = f"{size:,}"
    if base is not None and base is not entry:
        text += f" ({(size / base['metrics']['allocated'] - 1) * 100:+.2f}%)"
    if not entry["tests_passed"]:
        text += " **tests failed**"
    return text


def _link_note(entry: dict[str, Any] | None) -> str:
    if entry is None or entry["policy"] == PLAIN or entry["lto"] == "none":
        return ""
    links = entry.get("lto_links", [])
    if links and all(x["served"] for x in links):
        return f"{entry['link_decisions']:,}"
    return "stock" if links else "no LTO link"


def markdown_table(result: dict[str, Any]) -> str:
    """The README's table: a row per program and LTO mode; allocated bytes of the linked
    binaries plain and per policy (change against the same row's plain build), and the
    decisions each policy's link step served ("stock": its link-time inliner was LLVM's)."""
    policies = result["policies"]
    head = ["program", "build", PLAIN, *(f"`{p}`" for p in policies),
            *(f"link decisions, `{p}`" for p in policies)]
    rows = ["| " + " | ".join(head) + " |",
            "|" + "|".join(["---", "---", *("---:" for _ in head[2:])]) + "|"]
    for name, r in result["programs"].items():
        builds = r["builds"]
        for lto in result["lto"]:
            plain = builds.get(variant_name(lto, PLAIN))
            cells = [_cell(builds.get(variant_name(lto, p)), plain) for p in (PLAIN,
                                                                             *policies)]
            notes = [_link_note(builds.get(variant_name(lto, p))) for p in policies]
            rows.append("| " + " | ".join([name, LTO_LABELS[lto], *cells, *notes]) + " |")
    return "\n".join(rows)


def warm_runtime_caches(tools: Toolchain, ltos: Sequence[str], scratch: Path) -> None:
    """Link a trivial C program with each LTO mode's plain flags once, so zig builds its
    runtime libraries into its cache here and not inside the first build."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "w.c").write_text("int main(void) { return 0; }\n")
    for lto in ltos:
        flags = shlex.split(tools.make_vars(lto, PLAIN, f"warm{time.time_ns()}")["CFLAGS"])
        subprocess.run([tools.zig, "cc", *flags, "w.c", "-o", f"w-{lto}"], cwd=scratch,
                       check=True, capture_output=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", nargs="+", choices=list(PROGRAMS),
                   default=list(DEFAULT_PROGRAMS), metavar="NAME",
                   help=f"build these (default: {' '.join(DEFAULT_PROGRAMS)})")
    p.add_argument("--lto", nargs="+", choices=list(LTO_FLAGS), default=list(LTO_FLAGS),
                   help="LTO modes (default: none thin full)")
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), metavar="P",
                   help=f"policies for `mlgo cc` (default: {' '.join(DEFAULT_POLICIES)})")
    p.add_argument("--jobs", type=int, default=2, help="make -j (default: 2)")
    p.add_argument("--output_dir", type=Path, default=None,
                   help="also write the JSON to OUTPUT_DIR/lto_size.json")
    p.add_argument("--keep", action="store_true",
                   help="keep the build directories (their path goes to stderr)")
    args = p.parse_args(argv)

    started = time.perf_counter()
    compiler = find_compiler(None)
    tools = Toolchain(str(bundled_zig()))
    root = Path(tempfile.mkdtemp(prefix="pymlgo-lto-size-"))
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="mlgo-lto-") as rt:
            warm_runtime_caches(tools, args.lto, root / "warm")
            for name in args.programs:
                try:
                    results[name] = measure_program(name, args.lto, args.policies, root,
                                                    args.jobs, Path(rt), tools)
                except Exception as exc:  # one program that fails to build: report, go on
                    failed[name] = f"{type(exc).__name__}: {exc}"
                    print(f"lto_size: {name}: {failed[name]}", file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"lto_size: build directories kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)

    builds = [b for r in results.values() for b in r["builds"].values()]
    result = {
        "compiler": compiler.describe(),
        "target": " ".join(TARGET_FLAGS),
        "plain": f"zig cc {' '.join(TARGET_FLAGS)} -Oz -Xclang -Oz [-flto=thin | -flto]",
        "with_policy": f"mlgo cc --mlgo-policy P {' '.join(TARGET_FLAGS)} -Oz "
                       "[-flto=thin | -flto]",
        "lto": args.lto,
        "policies": args.policies,
        "jobs": args.jobs,
        "programs": results,
        "failed": failed,
        "all_tests_passed": not failed and all(b["tests_passed"] for b in builds),
        # Every ThinLTO link of a policy build had its link-time inliner served.
        "thin_links_served": all(x["served"] for b in builds if b["lto"] == "thin"
                                 for x in b.get("lto_links", [])),
        "llvm_size_agrees": all(c == "ok" for b in builds
                                for c in b["llvm_size_check"].values()),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpus": os.cpu_count(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    print(markdown_table(result), file=sys.stderr)
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / "lto_size.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
