"""What `mlgo cc` costs on a full real build, and what it saves.

Builds the brotli 1.1.0 command-line tool (32 C files from the pinned PyPI sdist the demo
corpus uses: c/common, c/dec, c/enc, c/tools/brotli.c) with `make -jJOBS`, each round every
way below once, interleaved (the order rotates between rounds):
- `plain`: `CC="zig cc"` with `-Oz -Xclang -Oz`: plain clang at -Oz through the same driver
  (zig's driver alone would run cc1 at -Os; `mlgo cc` adds the same `-Xclang -Oz`);
- `launcher`: `CC="$(mlgo cc --mlgo-launcher)"`, the native launcher, with the policy
  (default: the shipped `pretrained:inlining-oz`), -Oz;
- `python`: `CC="mlgo cc"`, the Python path, the same policy;
- `guard`: `CC="mlgo cc"` with `MLGO_GUARD=1` (every policy compile also compiled plainly,
  the smaller object kept);
- `python_without_server` (only with `--without-server`): `MLGO_CC_SERVER=0`.
Every mlgo build starts its own policy server (a fresh runtime dir, the server killed
afterwards), as a build on a fresh machine does; timed builds write no MLGO_CC_LOG (with a
log, the launcher runs Python once per compile to measure the object). Every build gets a
fresh `-DPYMLGO_BENCH_RUN=<token>` so zig's object cache never answers. After the timed
rounds, one untimed build per mlgo way with MLGO_CC_LOG checks who served the compiles and
what the guard kept. Each binary must compress and decompress a file back to the same bytes.
Prints JSON: wall times, the ratios of medians to plain (issue 19's target for the
launcher: <= 1.12), whether the launcher's objects and binary are byte-identical to the
Python path's, the bytes (every size metric) of the binaries and objects, decisions served,
the load average.

    python benchmarks/cc_overhead.py [--rounds 3] [--jobs 2] [--policy P] [--without-server]
"""

from __future__ import annotations

import argparse
import hashlib
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
from pymlgo.deploy.launcher import launcher_path
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
           if k not in ("MLGO_POLICY", "MLGO_CC_LOG", "MLGO_CC_SERVER", "MLGO_RUNTIME_DIR",
                        "MLGO_GUARD")}
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


def object_digests(src: Path) -> dict[str, str]:
    return {str(o.relative_to(src)): hashlib.sha256(o.read_bytes()).hexdigest()
            for o in sorted([*src.rglob("*.o"), src / "brotli"])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds of builds (default: 3)")
    p.add_argument("--jobs", type=int, default=2, help="make -j (default: 2)")
    p.add_argument("--policy", default="pretrained:inlining-oz")
    p.add_argument("--without-server", action="store_true",
                   help="also time the Python path with MLGO_CC_SERVER=0")
    args = p.parse_args()

    compiler = find_compiler(None)
    python_cc = shlex.join([*mlgo_command(), "cc", "--mlgo-policy", args.policy])
    launcher_cc = shlex.join([str(launcher_path("cc")), "--mlgo-policy", args.policy])
    plain_cc = shlex.join([str(bundled_zig()), "cc"])
    modes = ["plain", "launcher", "python", "guard"]
    if args.without_server:
        modes.append("python_without_server")
    times: dict[str, list[float]] = {m: [] for m in modes}
    sizes: dict[str, dict[str, dict[str, int]]] = {}
    digests: dict[str, dict[str, str]] = {}
    checks: dict[str, dict[str, object]] = {}
    load_before = os.getloadavg()

    def one_build(src: Path, tmp: Path, which: str, tag: str, log: Path | None) -> float:
        token = f"-DPYMLGO_BENCH_RUN={time.time_ns()}"
        runtime = tmp / f"run-{tag}-{which}"
        env = {"MLGO_RUNTIME_DIR": str(runtime)}
        if which == "python_without_server":
            env["MLGO_CC_SERVER"] = "0"
        if which == "guard":
            env["MLGO_GUARD"] = "1"
        cc = {"plain": plain_cc, "launcher": launcher_cc}.get(which, python_cc)
        cflags = f"-Oz -Xclang -Oz {token}" if which == "plain" else f"-Oz {token}"
        try:
            return build(src, cc, cflags, args.jobs, log, env)
        finally:
            stop_servers(runtime)

    with tempfile.TemporaryDirectory(prefix="pymlgo-cc-bench-") as tmp_s:
        tmp = Path(tmp_s)
        src = unpack_brotli(tmp / "src")
        sample = tmp / "sample.bin"  # real text: the sources themselves, 512 KiB
        data = b"".join(f.read_bytes() for f in sorted(src.rglob("*.c")))
        sample.write_bytes(data[: 512 * 1024])
        n_sources = len(list(src.rglob("*.c")))
        for r in range(args.rounds):
            for which in modes[r % len(modes):] + modes[: r % len(modes)]:  # rotate the order
                secs = one_build(src, tmp, which, str(r), None)
                times[which].append(round(secs, 3))
                if not round_trip_ok(src / "brotli", sample, tmp):
                    raise SystemExit(f"{which}: brotli round trip failed")
                sizes[which] = {"binary": object_size(src / "brotli").metrics(),
                                "objects": objects_bytes(src)}
                digests[which] = object_digests(src)
                print(f"round {r + 1} {which}: {secs:.1f} s", file=sys.stderr)
        for which in modes[1:]:  # untimed, logged: who served, what the guard kept
            log = tmp / f"check-{which}.jsonl"
            one_build(src, tmp, which, "check", log)
            if digests[which] != object_digests(src):
                raise SystemExit(f"{which}: a logged build gave other objects")
            recs = [json.loads(x) for x in log.read_text().splitlines()]
            served = [x for x in recs if x["served"]]
            kept = [o["kept"] for x in served if (x.get("guard") or {}).get("applied")
                    for o in x["guard"]["objects"]]
            checks[which] = {
                "compiles_served": len(served),
                "served_by": {b: sum(1 for x in served if x["served_by"] == b)
                              for b in sorted({x["served_by"] for x in served})},
                "decisions": sum(x["decisions"] or 0 for x in served),
                **({"guard_kept": {k: kept.count(k) for k in sorted(set(kept))}}
                   if which == "guard" else {}),
            }

    def ratio(mode: str) -> float:
        return round(statistics.median(times[mode]) / statistics.median(times["plain"]), 3)

    result = {
        "project": f"brotli 1.1.0 CLI, {n_sources} C files, make -j{args.jobs}",
        "compiler": compiler.describe(),
        "policy": args.policy,
        "wall_seconds": times,
        "launcher_ratio": ratio("launcher"),
        "python_ratio": ratio("python"),
        "guard_ratio": ratio("guard"),
        **({"python_without_server_ratio": ratio("python_without_server")}
           if args.without_server else {}),
        "launcher_target_ratio": 1.12,
        "launcher_objects_identical_to_python": digests["launcher"] == digests["python"],
        "bytes": sizes,  # by size metric: allocated (what ships), text, llvm-size
        **{f"{metric}_change_{what}_{mode}": round(sizes[mode][what][metric]
                                                   / sizes["plain"][what][metric] - 1, 5)
           for mode in ("python", "guard") for metric in ("allocated", "text")
           for what in ("binary", "objects")},
        "checks": checks,
        "round_trip": "ok (every binary, every round)",
        "load_average_before_after": [round(load_before[0], 2),
                                      round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
