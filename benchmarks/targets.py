"""The demo corpus built for each target, and what the inlining policies do there.

For every target of `TARGETS` (x86-64, AArch64, RISC-V 64, 32-bit Arm in Thumb-2, a
bare-metal Cortex-M4), builds the demo corpus for it (cached; the Cortex-M4 has no C library,
so its corpus holds the freestanding units only), then compiles every module with plain -Oz
and through the channel with `default` (clang's own decisions), `never` and the shipped
`pretrained:inlining-oz` (trained on x86-64). Prints JSON: per target the modules, the bytes
of each (the allocated metric, by section group too), how many `default` objects are
byte-for-byte plain -Oz's, and the ELF facts the metric depends on (class, machine, which
unwind and exception sections the objects carry, RISC-V relaxation relocations).

    python benchmarks/targets.py --workers 2 > targets.json
    python benchmarks/targets.py --targets aarch64,cortex-m4
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from elftools.elf.relocation import RelocationSection

from pymlgo.corpus.demo import ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.corpus.targets import TARGETS
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.policy.store import load_policy
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining import compile as inl
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.toolchain.elf import open_elf
from pymlgo.toolchain.size import GROUPS, ObjectSize, section_group, total

POLICIES = ("default", "never", "pretrained:inlining-oz")
R_RISCV_RELAX = 51


@functools.cache
def _policy(spec: str) -> Any:
    return load_policy(spec)


def _elf_facts(obj: bytes) -> dict[str, Any]:
    """Class, machine, the unwind/exception sections and RISC-V relaxation relocations."""
    elf = open_elf(obj, "<object>")
    eh = sorted({s.name.split(".text")[0].rstrip(".") or s.name for s in elf.iter_sections()
                 if section_group(s.name, s["sh_type"], s["sh_flags"]) in ("unwind",
                                                                            "eh_tables")})
    relax = sum(1 for s in elf.iter_sections() if isinstance(s, RelocationSection)
                for r in s.iter_relocations() if r["r_info_type"] == R_RISCV_RELAX
                and elf["e_machine"] == "EM_RISCV")
    return {"class": elf.elfclass, "machine": elf["e_machine"], "eh_sections": eh,
            "riscv_relax_relocations": relax}


def measure_module(job: CompileJob) -> dict[str, Any]:
    """Plain -Oz and every policy on one module: sizes by group, and whether `default`'s
    object is plain -Oz's byte for byte."""
    compiler = find_compiler(None)
    with tempfile.TemporaryDirectory(prefix="mlgo-targets-") as tmp:
        oz_obj, default_obj = Path(tmp) / "oz.o", Path(tmp) / "default.o"
        oz = inl.compile_baseline(compiler, job, keep_object=oz_obj)
        out: dict[str, Any] = {"module": job.module, "-Oz": oz.sizes and oz.sizes.to_json(),
                               "error": oz.error}
        if oz.error is not None:
            return out
        out["elf"] = _elf_facts(oz_obj.read_bytes())
        for spec in POLICIES:
            keep = default_obj if spec == "default" else None
            res = inl.compile_with_policy(compiler, job, _policy(spec), keep_object=keep)
            out[spec] = res.sizes and res.sizes.to_json()
            out["error"] = out["error"] or res.error
        out["default_identical"] = (default_obj.is_file() and hashlib.sha256(
            default_obj.read_bytes()).digest() == hashlib.sha256(oz_obj.read_bytes()).digest())
    return out


def _change(policy: ObjectSize, oz: ObjectSize, metric: str = "allocated") -> float:
    return round(100.0 * (policy.metric(metric) / oz.metric(metric) - 1.0), 3)


def target_report(name: str, workers: int) -> dict[str, Any]:
    target = TARGETS[name]
    started = time.monotonic()
    corpus = ensure_demo_corpus(target=target, progress=False)
    jobs = corpus_jobs(load_corpus(corpus))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(measure_module, jobs))
    ok = [r for r in rows if r["error"] is None]
    sums = {k: total(ObjectSize.from_json(r[k]) for r in ok) for k in ("-Oz", *POLICIES)}
    oz = sums["-Oz"]
    facts = [r["elf"] for r in ok]
    return {
        "target": name, "triple": target.triple, "cpu": target.cpu,
        "flags": list(target.flags), "corpus": str(corpus),
        "modules": len(rows), "failed": {r["module"]: r["error"] for r in rows
                                         if r["error"] is not None},
        "elf_class": sorted({f["class"] for f in facts}),
        "machine": sorted({f["machine"] for f in facts}),
        "eh_sections": sorted({s for f in facts for s in f["eh_sections"]}),
        "riscv_relax_relocations": sum(f["riscv_relax_relocations"] for f in facts),
        "default_identical_modules": sum(1 for r in ok if r["default_identical"]),
        "bytes": {k: v.allocated for k, v in sums.items()},
        "groups": {k: {g: getattr(v, g) for g in GROUPS} for k, v in sums.items()},
        "change_percent": {p: _change(sums[p], oz) for p in POLICIES},
        "text_change_percent": {p: _change(sums[p], oz, "text") for p in POLICIES},
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help=f"comma-separated demo targets (default: all: "
                    f"{', '.join(TARGETS)})")
    ap.add_argument("--workers", type=int, default=2, help="compile processes (default: 2)")
    args = ap.parse_args()
    names = [n for n in args.targets.split(",") if n]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {unknown}: expected some of {', '.join(TARGETS)}")
    reports = []
    for name in names:
        reports.append(target_report(name, args.workers))
        print(json.dumps(reports[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"compiler": find_compiler(None).version, "targets": reports}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
