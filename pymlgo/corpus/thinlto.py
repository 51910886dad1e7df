"""A captured ThinLTO build turned into a distributed-ThinLTO corpus.

The build's compiles wrote ThinLTO bitcode (`-flto=thin`) and its links read it. For every
link, lld's index-only mode (`--thinlto-index-only`) writes each module's summary index
(`<object>.thinlto.bc`, what a distributed ThinLTO build hands each backend); then each
module is compiled once as its backend would (`clang -c -x ir OBJ -fthinlto-index=INDEX`),
embedding the module after its imports were merged (`-lto-embed-bitcode=post-merge-pre-opt`)
and the backend's command. Those objects are what `extract --thinlto_build distributed`
reads (as mlgo-utils' `extract_ir` does for such builds); the corpus loader points each
command at the corpus' copy of the index and adds `-thinlto-assume-merged`.

A module linked into several programs gets the index of the first link that reads it (its
imports are those of that program). Bitcode inside archives is not indexed: a link's archive
members are left out of its index (modules that import from them import less).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymlgo.toolchain.compiler import Compiler

TIMEOUT_S = 3600.0


@dataclass
class Backends:
    """compile_commands entries of the backend compiles, and the modules left out (why)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _lld(compiler: Compiler) -> list[str]:
    return [str(compiler.path), "ld.lld"] if compiler.bundled else ["ld.lld"]


def _opt_level(args: Sequence[str]) -> str:
    levels = [a for a in args if a.startswith("-O") and len(a) <= 6 and "=" not in a]
    return levels[-1] if levels else "-O0"


def index_links(compiler: Compiler, links: Sequence[Sequence[str]], objects: set[str],
                scratch: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Each recorded object's index (from the first link that reads it), and the problems:
    an object no link read, or a link lld could not index."""
    index: dict[str, Path] = {}
    problems: dict[str, str] = {}
    for k, inputs in enumerate(links):
        mine = [p for p in inputs if p in objects and p not in index]
        if not mine:
            continue
        out = scratch / f"link{k}"
        out.mkdir(parents=True)
        # Each link's indexes under a directory of their own: an object read by two links
        # would otherwise have its index overwritten.
        cmd = [*_lld(compiler), "--thinlto-index-only", "-r",
               f"--thinlto-prefix-replace=/;{out}/", *inputs, "-o", str(out / "index.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
        if proc.returncode != 0:
            for p in mine:
                problems[p] = f"lld --thinlto-index-only failed: {proc.stderr.strip()[-300:]}"
            continue
        for p in mine:
            found = out / (p.lstrip("/") + ".thinlto.bc")
            if found.is_file():
                index[p] = found
            else:
                problems[p] = f"lld wrote no index {found}"
    for p in sorted(objects - index.keys() - problems.keys()):
        problems[p] = "no link read it (a library built only as an archive?)"
    return index, problems


def compile_backends(compiler: Compiler, compiles: Sequence[dict[str, Any]],
                     links: Sequence[Sequence[str]], workdir: Path, scratch: Path,
                     target: str) -> Backends:
    """Index the recorded ThinLTO objects and compile each as its backend would, into
    `scratch/native/<object path relative to workdir>`; compile_commands entries for them."""
    by_output = {str(Path(e["output"])): e for e in compiles}
    index, problems = index_links(compiler, links, set(by_output), scratch / "index")
    result = Backends(skipped={os.path.relpath(p, workdir): why for p, why in problems.items()})
    native_root = scratch / "native"
    for obj, idx in sorted(index.items()):
        rel = os.path.relpath(obj, workdir)
        if rel.startswith(".."):
            result.skipped[rel] = "outside the build directory"
            continue
        native = native_root / rel
        native.parent.mkdir(parents=True, exist_ok=True)
        args = [*compiler.clang_argv, f"--target={target}",
                _opt_level(by_output[obj]["arguments"]), "-c", "-x", "ir", obj,
                f"-fthinlto-index={idx}", "-mllvm", "-lto-embed-bitcode=post-merge-pre-opt",
                "-o", rel]
        # run where the object goes, named relative to it, as a build writes its commands
        # (mlgo-utils' extract_ir names modules by the -o value)
        proc = subprocess.run(args, cwd=native_root, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
        if proc.returncode != 0:
            result.skipped[rel] = f"backend compile failed: {proc.stderr.strip()[-300:]}"
            continue
        result.entries.append({"directory": str(native_root), "arguments": args,
                               "file": obj, "output": rel})
    return result
