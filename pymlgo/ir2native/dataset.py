"""The IR2Native data set: per function, IR features after inlining and native size.

Each module is compiled once at -Oz (the inlining problem's level) with
`-ffunction-sections` and `-mllvm -print-after=inline`: the inliner dumps every SCC's
functions to stderr right after it has visited them, and the object's symbol table gives
each function's machine-code bytes (`st_size` of its `FUNC` symbol). A function in the IR
but not in the object (inlined everywhere, then deleted) has no native size and is left
out; so is a symbol with no IR (none are expected at -Oz on x86-64).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile

from pymlgo.corpus.command import FlagEdits, recompile_args
from pymlgo.corpus.format import package_of
from pymlgo.ir2native.features import FEATURE_NAMES, module_features
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.compile import OPT_LEVEL
from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import Compiler, find_compiler

FORMAT = "pymlgo-ir2native-dataset"
VERSION = 1
DUMP_FLAGS = ("-ffunction-sections", "-mllvm", "-print-after=inline")


@dataclass(frozen=True)
class FunctionRow:
    module: str
    function: str
    size: int  # native bytes (st_size)
    features: tuple[float, ...]  # in FEATURE_NAMES order

    @property
    def package(self) -> str:
        return package_of(self.module)


@dataclass(frozen=True)
class ModuleRows:
    module: str
    rows: tuple[FunctionRow, ...] = ()
    ir_only: int = 0  # functions in the IR dump without a symbol (deleted later)
    symbol_only: int = 0  # FUNC symbols without an IR dump
    error: str | None = None


@dataclass(frozen=True)
class Dataset:
    feature_names: tuple[str, ...]
    rows: tuple[FunctionRow, ...]
    compiler: dict[str, str] = field(default_factory=dict)
    ir_only: int = 0
    symbol_only: int = 0
    failed_modules: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "opt_level": OPT_LEVEL,
            "compiler": self.compiler,
            "feature_names": list(self.feature_names),
            "dropped": {"ir_only": self.ir_only, "symbol_only": self.symbol_only},
            "failed_modules": list(self.failed_modules),
            "functions": [
                {"module": r.module, "function": r.function, "size": r.size,
                 "features": list(r.features)}
                for r in self.rows
            ],
        }

    def save(self, path: Path) -> None:
        """Write-then-rename: a failed run never leaves half a data set."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_json(), f)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def load_dataset(path: Path) -> Dataset:
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read IR2Native data set {path}: {exc}") from exc
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{path} is not an IR2Native data set (made by `mlgo ir2native dataset`)")
    if d.get("version") != VERSION:
        raise ValueError(f"{path}: data set version {d.get('version')}, expected {VERSION}")
    names = tuple(d["feature_names"])
    rows = tuple(
        FunctionRow(r["module"], r["function"], int(r["size"]), tuple(map(float, r["features"])))
        for r in d["functions"]
    )
    if any(len(r.features) != len(names) for r in rows):
        raise ValueError(f"{path}: a row does not have {len(names)} features")
    return Dataset(names, rows, dict(d.get("compiler", {})), d["dropped"]["ir_only"],
                   d["dropped"]["symbol_only"], tuple(d.get("failed_modules", ())))


def function_sizes(obj: Path) -> dict[str, int]:
    """Defined FUNC symbols -> st_size (machine-code bytes of the function)."""
    with open(obj, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        if symtab is None:
            return {}
        return {
            s.name: int(s["st_size"])
            for s in symtab.iter_symbols()
            if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF"
        }


def extract_module(
    compiler: Compiler, job: CompileJob, *, timeout: float = 300.0,
    edits: FlagEdits = FlagEdits(),
) -> ModuleRows:
    """Compile `job` once; pair each function's post-inlining IR features with its size."""
    started = time.monotonic()
    with run.private_tmpdir(prefix="mlgo-ir2n-") as tmp:
        bc, obj, dump = tmp / "module.bc", tmp / "module.o", tmp / "ir.txt"
        bc.write_bytes(job.bitcode)
        argv = [
            *compiler.clang_argv,
            *recompile_args(job.cmd, input_bc=str(bc), output_obj=str(obj), opt_level=OPT_LEVEL,
                            edits=edits),
            *DUMP_FLAGS,
        ]
        with open(dump, "wb") as err:
            proc = run.start(argv, cwd=tmp, stderr=err)
            try:
                res = run.finish(proc, deadline=started + timeout, started=started)
            except run.CompileTimeout as exc:
                return ModuleRows(job.module, error=str(exc))
            finally:
                run.kill_and_reap(proc)
        if res.returncode != 0:
            tail = dump.read_text(errors="replace").strip().splitlines()[-3:]
            return ModuleRows(job.module, error=f"compiler exited with {res.returncode}: "
                              + " | ".join(tail))
        with open(dump, encoding="utf-8", errors="surrogateescape") as f:
            feats = module_features(f)
        sizes = function_sizes(obj)
    rows = tuple(
        FunctionRow(job.module, name, sizes[name], tuple(f[k] for k in FEATURE_NAMES))
        for name, f in feats.items()
        if name in sizes
    )
    return ModuleRows(job.module, rows, ir_only=len(feats.keys() - sizes.keys()),
                      symbol_only=len(sizes.keys() - feats.keys()))


def _worker(args: tuple[str | None, CompileJob, float]) -> ModuleRows:
    clang, job, timeout = args
    return extract_module(find_compiler(clang), job, timeout=timeout)


def build_dataset(
    compiler: Compiler,
    jobs: Sequence[CompileJob],
    *,
    workers: int = 1,
    timeout: float = 300.0,
    on_module: Callable[[ModuleRows], None] | None = None,
) -> Dataset:
    """Extract every module (in `workers` processes); rows sorted by module, then name.

    A module that fails to compile is listed in `failed_modules`, not fatal.
    """
    clang = None if compiler.bundled else str(compiler.path)
    tasks = [(clang, job, timeout) for job in jobs]
    results: list[ModuleRows] = []
    if workers <= 1:
        for task in tasks:
            results.append(_worker(task))
            if on_module:
                on_module(results[-1])
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for res in pool.map(_worker, tasks):
                results.append(res)
                if on_module:
                    on_module(res)
    ok = [r for r in results if r.error is None]
    rows = sorted((row for r in ok for row in r.rows), key=lambda r: (r.module, r.function))
    return Dataset(
        FEATURE_NAMES, tuple(rows), compiler.describe(),
        ir_only=sum(r.ir_only for r in ok), symbol_only=sum(r.symbol_only for r in ok),
        failed_modules=tuple(sorted(r.module for r in results if r.error is not None)),
    )
