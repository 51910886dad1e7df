"""A module's -O2 middle-end output, made once and cached on disk, so that every register
allocation compile of it runs the code generator only.

The advisors act in the code generator; the middle-end's output does not depend on them. So
its IR is written once (`-emit-llvm-bc`) and every later compile reads it with
`-disable-llvm-passes`, which skips the middle-end and keeps the whole code generator. That
halves a compile (the 63 demo modules: 78.8 s in full, 44.6 s so;
`benchmarks/regalloc_codegen_only.py`). Two things keep the result the compile's own:
`-emit-llvm-uselists` (without it the bitcode reader rebuilds use-lists in another order and
code generation changes, e.g. 1,617 more bytes of brotli's backward_references), and the key,
which covers the compiler, the bitcode and every flag of the middle-end step. The
allocator's remarks and the allocated sections then equal a full compile's
(`tests/test_regalloc_optimized.py`); only non-allocated debug sections may differ.

Commands this cannot split (no `-emit-obj`; LTO, whose bitcode output is another pipeline),
and modules whose middle-end fails, compile in full as before, which reports any failure.
The cache is `cache_root()/optimized-ir`; deleting it costs one middle-end run per module.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from pathlib import Path

from pymlgo.corpus.command import recompile_args
from pymlgo.corpus.demo import cache_root
from pymlgo.problems.base import CompileJob, CompileSettings
from pymlgo.toolchain import run
from pymlgo.toolchain.bitcode import is_bitcode
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.files import write_atomic

CACHE_DIR = "optimized-ir"
# What the code-generator-only compile adds to the recorded command.
CODEGEN_ONLY_FLAGS = ("-disable-llvm-passes",)
# Bump when the middle-end step changes what it writes.
RECIPE = "optimized-ir-1"
_UNSPLITTABLE_PREFIXES = ("-flto", "-fthinlto-index")


def codegen_job(compiler: Compiler, job: CompileJob, opt_level: str,
                settings: CompileSettings = CompileSettings(),
                cache_dir: Path | None = None) -> CompileJob | None:
    """`job` with its bitcode replaced by its middle-end output at `opt_level` (from the
    cache, or made now and cached); compile it with `CODEGEN_ONLY_FLAGS`. None when the
    command cannot be split or the middle-end step fails: compile `job` in full then."""
    compile_args = recompile_args(job.cmd, input_bc="module.bc", output_obj="optimized.bc",
                                  opt_level=opt_level, edits=settings.edits)
    if not splittable(compile_args):  # as edited: an edit may add LTO
        return None
    argv = [("-emit-llvm-bc" if a == "-emit-obj" else a) for a in compile_args]
    argv.append("-emit-llvm-uselists")
    bitcode = job.bitcode
    key = _key(compiler, bitcode, argv)
    path = (cache_dir or cache_root() / CACHE_DIR) / key[:2] / f"{key}.bc"
    try:
        return CompileJob(job.module, path.read_bytes(), job.cmd)
    except OSError:
        pass  # not made yet (or unreadable): make it
    optimized = _run_middle_end(compiler, bitcode, argv, settings)
    if optimized is None:
        return None
    with contextlib.suppress(OSError):  # a read-only or full cache costs speed, not the compile
        write_atomic(path, optimized)
    return CompileJob(job.module, optimized, job.cmd)


def splittable(cmd: Sequence[str]) -> bool:
    """Whether a cc1 command emits an object without LTO: only then is `-emit-llvm-bc` the
    same middle-end as the object's."""
    return "-emit-obj" in cmd and not any(a.startswith(_UNSPLITTABLE_PREFIXES) for a in cmd)


def _key(compiler: Compiler, bitcode: bytes, argv: list[str]) -> str:
    h = hashlib.sha256()
    for part in (RECIPE, compiler.identity, *argv):
        h.update(part.encode())
        h.update(b"\0")
    h.update(bitcode)
    return h.hexdigest()


def _run_middle_end(compiler: Compiler, bitcode: bytes, argv: list[str],
                    settings: CompileSettings) -> bytes | None:
    with run.private_tmpdir() as tmp:
        (tmp / "module.bc").write_bytes(bitcode)
        try:
            res = run.run([*compiler.clang_argv, *argv], timeout=settings.timeout, cwd=tmp,
                          memory_mb=settings.memory_mb)
        except run.CompileTimeout:
            return None
        out = tmp / "optimized.bc"
        if res.returncode != 0 or not out.is_file():
            return None
        data = out.read_bytes()
        # a compiler that exits with 0 and leaves no bitcode gets the full compile, which says so
        return data if is_bitcode(data) else None
