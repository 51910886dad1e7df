"""What `mlgo cc` costs on a full real build, and what it saves.

Builds the brotli 1.1.0 command-line tool (32 C files from the pinned PyPI sdist the demo
corpus uses: c/common, c/dec, c/enc, c/tools/brotli.c) with `make -jJOBS` three ways per
round:
- `CC="mlgo cc"` with the policy (default: the shipped `pretrained:inlining-oz`), -Oz; the
  build starts its own policy server (a fresh runtime dir, the server killed afterwards);
- the same with `MLGO_CC_SERVER=0`: every compile loads the policy itself;
- `CC="zig cc"` with `-Oz -Xclang -Oz`: plain clang at -Oz through the same driver (zig's
  driver alone would run cc1 at -Os; `mlgo cc` adds the same `-Xclang -Oz`).
Every build gets a fresh `-DPYMLGO_BENCH_RUN=<token>` so zig's object cache never answers
(it would for the plain build only: mlgo's channel path differs every time). The order
rotates between rounds. Each binary must compress and decompress a file back to the same
bytes. Prints JSON: wall times, their ratios (RFC target <= 1.05), the bytes (every size
metric: allocated, text, llvm-size) of the binaries and of the objects (what the inliner
changed), decisions served.

    python benchmarks/cc_overhead.py [--rounds 3] [--jobs 2] [--policy P]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from pymlgo.corpus.demo import cache_root, download_sdists
from pymlgo.deploy.cc_server import stop_servers
from pymlgo.toolchain.compiler import bundled_zig, find_compiler
from pymlgo.toolchain.size import object_size, total

MAKEFILE = """\
SRCS := $(sort $(wildcard c/common/*.c c/dec/*.c c/enc/*.c c/tools/*.c))
OBJS := $(SRCS:.c=.o)
brotli: $(OBJS)
\t$(CC) $(CFLAGS) -o $@ $(OBJS) -lm
%.o: %.c
\t$(CC) $(CFLAGS) -Ic/include -c $< -o $@
"""


def mlgo_command() -> list[str]:
    script = Path(sys.executable).with_name("mlgo")  # not a shell shim: what a venv has
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pymlgo.cli.main"]


def unpack_brotli(dest: Path) -> Path:
    sdists = download_sdists(cache_root() / "sdists", progress=False)
    with tarfile.open(sdists["brotli"]) as tar:
        members = [m for m in tar.getmembers() if "/c/" in m.name and m.isfile()]
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
            tar.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover - the sdist is pinned by SHA-256
            tar.extractall(dest, members=members)
    (root,) = list(dest.iterdir())
    (root / "Makefile").write_text(MAKEFILE)
    return root


def build(src: Path, cc: str, cflags: str, jobs: int, log: Path | None,
          extra_env: dict[str, str]) -> float:
    for obj in src.rglob("*.o"):
        obj.unlink()
    (src / "brotli").unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLGO_POLICY", "MLGO_CC_LOG", "MLGO_CC_SERVER", "MLGO_RUNTIME_DIR")}
    env.update(extra_env)
    if log is not None:
        env["MLGO_CC_LOG"] = str(log)
    t0 = time.perf_counter()
    subprocess.run(["make", "-s", f"-j{jobs}", f"CC={cc}", f"CFLAGS={cflags}"], cwd=src,
                   env=env, check=True)
    return time.perf_counter() - t0


def round_trip_ok(binary: Path, sample: Path, tmp: Path) -> bool:
    packed, unpacked = tmp / "s.br", tmp / "s.out"
    subprocess.run([str(binary), "-q", "9", "-f", "-o", str(packed), str(sample)], check=True)
    subprocess.run([str(binary), "-d", "-f", "-o", str(unpacked), str(packed)], check=True)
    return unpacked.read_bytes() == sample.read_bytes() and packed.stat().st_size < (
        sample.stat().st_size)


def objects_bytes(src: Path) -> dict[str, int]:
    """Every size metric of all the build's objects together (`toolchain.size`)."""
    return total(object_size(o) for o in sorted(src.rglob("*.o"))).metrics()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds of three builds (default: 3)")
    p.add_argument("--jobs", type=int, default=2, help="make -j (default: 2)")
    p.add_argument("--policy", default="pretrained:inlining-oz")
    args = p.parse_args()

    compiler = find_compiler(None)
    mlgo_cc = shlex.join([*mlgo_command(), "cc", "--mlgo-policy", args.policy])
    plain_cc = shlex.join([str(bundled_zig()), "cc"])
    modes = ["mlgo_cc", "plain_clang_oz", "mlgo_cc_without_server"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    sizes: dict[str, dict[str, dict[str, int]]] = {}
    decisions = served = 0
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pymlgo-cc-bench-") as tmp_s:
        tmp = Path(tmp_s)
        src = unpack_brotli(tmp / "src")
        sample = tmp / "sample.bin"  # real text: the sources themselves, 512 KiB
        data = b"".join(f.read_bytes() for f in sorted(src.rglob("*.c")))
        sample.write_bytes(data[: 512 * 1024])
        n_sources = len(list(src.rglob("*.c")))
        for r in range(args.rounds):
            for which in modes[r % len(modes):] + modes[: r % len(modes)]:  # rotate the order
                token = f"-DPYMLGO_BENCH_RUN={time.time_ns()}"
                log = tmp / f"cc-{r}-{which}.jsonl" if which != "plain_clang_oz" else None
                # Every build starts its own policy server, as a build on a fresh machine does.
                runtime = tmp / f"run-{r}-{which}"
                env = {"MLGO_RUNTIME_DIR": str(runtime)}
                if which == "mlgo_cc_without_server":
                    env["MLGO_CC_SERVER"] = "0"
                try:
                    if which == "plain_clang_oz":
                        secs = build(src, plain_cc, f"-Oz -Xclang -Oz {token}", args.jobs,
                                     None, env)
                    else:
                        secs = build(src, mlgo_cc, f"-Oz {token}", args.jobs, log, env)
                finally:
                    stop_servers(runtime)
                times[which].append(round(secs, 3))
                if not round_trip_ok(src / "brotli", sample, tmp):
                    raise SystemExit(f"{which}: brotli round trip failed")
                sizes[which] = {"binary": object_size(src / "brotli").metrics(),
                                "objects": objects_bytes(src)}
                if log is not None:
                    recs = [json.loads(x) for x in log.read_text().splitlines()]
                    decisions = sum(x["decisions"] or 0 for x in recs)
                    served = sum(1 for x in recs if x["served"])
                    by = {x["served_by"] for x in recs if x["served"]}
                    want = {"process"} if which == "mlgo_cc_without_server" else {"server"}
                    if by != want:
                        raise SystemExit(f"{which}: compiles served by {by}, not {want}")
                print(f"round {r + 1} {which}: {secs:.1f} s", file=sys.stderr)

    ml, pl, alone = times["mlgo_cc"], times["plain_clang_oz"], times["mlgo_cc_without_server"]
    result = {
        "project": f"brotli 1.1.0 CLI, {n_sources} C files, make -j{args.jobs}",
        "compiler": compiler.describe(),
        "policy": args.policy,
        "wall_seconds": times,
        "ratio_of_medians": round(statistics.median(ml) / statistics.median(pl), 3),
        "ratio_of_minimums": round(min(ml) / min(pl), 3),
        "without_server_ratio_of_medians": round(statistics.median(alone)
                                                 / statistics.median(pl), 3),
        "target_ratio": 1.05,
        "bytes": sizes,  # by size metric: allocated (what ships), text, llvm-size
        **{f"{metric}_change_{what}": round(sizes["mlgo_cc"][what][metric]
                                            / sizes["plain_clang_oz"][what][metric] - 1, 5)
           for metric in ("allocated", "text") for what in ("binary", "objects")},
        "compiles_served": served,
        "decisions_per_build": decisions,
        "same_objects_with_and_without_server": sizes["mlgo_cc"] == sizes[
            "mlgo_cc_without_server"],
        "round_trip": "ok (every binary, every round)",
        "load_average_before_after": [round(load_before[0], 2),
                                      round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
