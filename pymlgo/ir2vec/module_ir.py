"""A corpus module's IR as text, from the compiler that will later embed it.

The corpus holds bitcode of the compiler's own version (older `llvm-dis` builds may not read
it), so the module's recorded cc1 command is rerun with `-emit-llvm`: `raw` is the module
as captured (no passes), `optimized` the IR after the -Oz pipeline, closer to what the
inliner embeds (it sees callees already simplified).
"""

from __future__ import annotations

from collections.abc import Sequence

from pymlgo.corpus.command import recompile_args
from pymlgo.corpus.format import Module
from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import Compiler

STAGES = ("raw", "optimized")
_STAGE_FLAGS = {"raw": ("-emit-llvm", "-disable-llvm-passes"), "optimized": ("-emit-llvm",)}


class ModuleIRError(RuntimeError):
    """The compiler could not turn the module into text IR."""


def module_ir(compiler: Compiler, module: Module, stage: str, *, timeout: float = 300.0,
              opt_level: str = "-Oz") -> str:
    """The text IR of `module` at `stage` (`raw` or `optimized`)."""
    if stage not in _STAGE_FLAGS:
        raise ValueError(f"IR stage must be one of {', '.join(STAGES)}, not {stage!r}")
    with run.private_tmpdir() as tmp:
        out = tmp / "module.ll"
        argv = [*compiler.clang_argv,
                *recompile_args(module.cmd, input_bc=str(module.bc_path), output_obj=str(out),
                                opt_level=opt_level),
                *_STAGE_FLAGS[stage]]
        try:
            res = run.run(argv, timeout=timeout, cwd=tmp)
        except run.CompileTimeout as exc:
            raise ModuleIRError(f"{module.name}: {exc}") from exc
        if res.returncode != 0 or not out.is_file():
            tail = " | ".join(res.stderr.strip().splitlines()[-3:])
            raise ModuleIRError(f"{module.name}: the compiler could not emit IR "
                                f"(exit {res.returncode}): {tail}")
        return out.read_text(errors="replace")


def check_stages(stages: Sequence[str]) -> tuple[str, ...]:
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        raise ValueError(f"IR stages must be among {', '.join(STAGES)}, got {list(stages)}")
    return tuple(dict.fromkeys(stages))
