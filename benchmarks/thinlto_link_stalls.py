"""ThinLTO links served by `mlgo cc` while its host process keeps being stopped: a stress test
of the channel between lld's backends and the host, not a speed target.

lld runs the ThinLTO backends one after another (`--thinlto-jobs=1`), each opening the two
FIFOs afresh; a host that is descheduled between one backend's end of stream and the next
backend's open must still answer both (issue 25: before, a stalled host read the next
backend's header inside the previous session and failed with "unknown event ['advice',
'features']"). This links minic's four `-flto=thin` objects RUNS times with `mlgo cc
--mlgo-policy default` (the host in the `mlgo cc` process: MLGO_CC_SERVER=0) while a thread
stops that process (SIGSTOP, never lld) for up to STOP ms, then lets it run for up to GAP ms,
until the link ends. Every link must succeed and give the stock link's bytes. Prints JSON.

    python benchmarks/thinlto_link_stalls.py [--runs 20] [--stop-ms 200] [--gap-ms 30]
        [--seed 0]

Measured on 2 loaded cores (load 15-20), 20 runs, 200/30 ms: 20 of 20 links byte-identical to
the stock link; the tree before the fix failed 4 of 20 (and 2 of 10) with the error above.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pymlgo.toolchain.compiler import bundled_zig

ROOT = Path(__file__).resolve().parents[1]
MINIC = ROOT / "tests" / "data" / "minic"
MODULES = ("b64", "main", "sort", "table")
TARGET = ("-target", "x86_64-linux-gnu", "-mcpu=baseline")


def build_objects(zig: Path, work: Path) -> None:
    for f in MINIC.iterdir():
        (work / f.name).write_bytes(f.read_bytes())
    for m in MODULES:
        subprocess.run([str(zig), "cc", *TARGET, "-Oz", "-Xclang", "-Oz", "-flto=thin", "-c",
                        f"{m}.c", "-o", f"{m}.o"], cwd=work, check=True)
    subprocess.run([str(zig), "cc", "-Oz", "-flto=thin", *(f"{m}.o" for m in MODULES), "-o",
                    "stock"], cwd=work, check=True)


def stalled_link(work: Path, out: str, stop_s: float, gap_s: float,
                 rng: random.Random) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLGO_POLICY"}
    env.update(MLGO_CC_SERVER="0", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymlgo.cli.main", "cc", "--mlgo-policy", "default", "-Oz",
         "-flto=thin", *(f"{m}.o" for m in MODULES), "-o", out],
        cwd=work, env=env, stderr=subprocess.PIPE, text=True)

    def stall() -> None:
        time.sleep(0.5)  # Python's start-up: the link itself has not begun
        while proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGSTOP)
                time.sleep(rng.uniform(0, stop_s))
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            time.sleep(rng.uniform(0, gap_s))

    stopper = threading.Thread(target=stall)
    stopper.start()
    try:
        _, err = proc.communicate(timeout=900)
    finally:
        stopper.join()
    return proc.returncode, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--stop-ms", type=float, default=200.0)
    ap.add_argument("--gap-ms", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    zig = bundled_zig()
    failures: dict[str, int] = {}
    identical = 0
    with tempfile.TemporaryDirectory(prefix="mlgo-stalls-") as tmp:
        work = Path(tmp)
        build_objects(zig, work)
        stock = (work / "stock").read_bytes()
        for i in range(args.runs):
            code, err = stalled_link(work, f"prog{i}", args.stop_ms / 1000, args.gap_ms / 1000,
                                     rng)
            if code == 0 and (work / f"prog{i}").read_bytes() == stock:
                identical += 1
                continue
            lines = err.strip().splitlines()
            why = lines[-1][:200] if code != 0 and lines else (
                f"exit {code}" if code != 0 else "differs from the stock link")
            failures[why] = failures.get(why, 0) + 1
    print(json.dumps({"runs": args.runs, "stop_ms": args.stop_ms, "gap_ms": args.gap_ms,
                      "identical_to_stock": identical, "failures": failures}, indent=2))


if __name__ == "__main__":
    main()
