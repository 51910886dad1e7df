"""A captured ThinLTO build turned into a distributed-ThinLTO corpus.

The build's compiles wrote ThinLTO bitcode (`-flto=thin`) and its links read it, lld running
the ThinLTO backends in-process. For every link, lld's index-only mode
(`--thinlto-index-only`) writes each module's summary index (`<object>.thinlto.bc`, what a
distributed ThinLTO build hands each backend); then each module is compiled once as its
backend would (`clang -c -x ir OBJ -fthinlto-index=INDEX`), embedding the module after its
imports were merged (`-lto-embed-bitcode=post-merge-pre-opt`) and the backend's command.
Those objects are what `extract --thinlto_build distributed` reads (as mlgo-utils'
`extract_ir` does for such builds); the corpus loader points each command at the corpus' copy
of the index and adds `-thinlto-assume-merged`.

The index is made by the link's own lld command (had from zig's driver, toolchain/lld.py)
with `--thinlto-index-only` added, so symbol resolution is the real link's: what the program
does not export is internalized, what it does not reach is dropped, and the backends import
what the real ones do. The backend compile gets what lld's in-process backends get that a
plain `clang -c -x ir` would not: function and data sections (lld always asks for them), the
relocation model of the link's output (`-shared`: PIC, `-pie`: PIE, else static), loop and
SLP vectorization (lld's at --lto-O2 and above). (The link's `-mllvm` options are not
carried over: lld registers codegen options clang does not, such as the `-float-abi=hard`
zig's driver gives every link, which matters on Arm only.) So every
corpus module compiles to the object lld's in-process backend made in the real link, to the
byte (tested on minic; checked on lz4). Where the link's command cannot be had (a link by
another driver than zig's, an argument with whitespace), the index comes from a relocatable
index-only link of the link's bitcode alone (`-r`: every symbol kept, nothing internalized),
and those modules are reported as approximate.

A module linked into several programs gets the index of the first link that reads it (its
imports are those of that program). A module that reaches the link only inside an archive
gets no corpus entry (lld names its index after the archive member, not the recorded object);
with the link's own command the index-only link still reads the archive as the link does,
so the modules beside it import from it (with the approximate `-r` index they do not).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.lld import LinkCommandError, lld_command
from pymlgo.toolchain.opt_level import last_level

TIMEOUT_S = 3600.0


@dataclass
class Backends:
    """compile_commands entries of the backend compiles, the modules left out (why), and the
    modules indexed without their link's command (why: approximate backends)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    approximate: dict[str, str] = field(default_factory=dict)


@dataclass
class Indexed:
    """Each object's index, the backend flags of the link that indexed it, and the problems
    and approximations (object -> why)."""

    index: dict[str, Path] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    approximate: dict[str, str] = field(default_factory=dict)


def _lld(compiler: Compiler) -> list[str]:
    return [str(compiler.path), "ld.lld"] if compiler.bundled else ["ld.lld"]


def backend_flags(lld_args: Sequence[str]) -> list[str]:
    """The clang flags that make a distributed backend compile what lld's in-process backend
    of this link (lld's arguments) compiles: lld/ELF/LTO.cpp's configuration of the backends
    in clang's words."""
    shared = pie = False
    lto_level = 2
    for arg in lld_args:
        if arg in ("-shared", "--shared", "-Bshareable"):
            shared = True
        elif arg in ("-pie", "--pie", "--pic-executable"):
            pie = True
        elif arg in ("-no-pie", "--no-pie", "--no-pic-executable"):
            pie = False
        elif arg.startswith(("--lto-O", "-lto-O")) and arg.rsplit("O", 1)[1].isdigit():
            lto_level = int(arg.rsplit("O", 1)[1])
    reloc = ["-fpic"] if shared else ["-fpie"] if pie else ["-fno-pic", "-fno-pie"]
    vectorize = ["-fvectorize", "-fslp-vectorize"] if lto_level > 1 else []
    return [*reloc, "-ffunction-sections", "-fdata-sections", *vectorize]


def _absolute_inputs(command: Sequence[str], cwd: str, inputs: Sequence[str]) -> list[str]:
    """lld's command with the recorded bitcode operands named by absolute path, so that
    `--thinlto-prefix-replace` puts every index under the scratch directory."""
    wanted = {os.path.normpath(p) for p in inputs}
    out = list(command[:2])
    for word in command[2:]:
        path = os.path.normpath(os.path.join(cwd, word))
        out.append(path if not word.startswith("-") and path in wanted else word)
    return out


def _index_command(compiler: Compiler, link: dict[str, Any], out: Path
                   ) -> tuple[list[str], list[str], str | None]:
    """The index-only lld command for a recorded link, the backend flags it implies, and
    why it is only approximate (None: it is the real link's own command)."""
    inputs = list(link["link"])
    prefix = [f"--thinlto-prefix-replace=/;{out}/", "--thinlto-index-only"]
    why = "the link's command was not recorded"
    if compiler.zig and link.get("driver"):
        try:
            lld = lld_command(link["driver"], link["arguments"], str(out / "index.o"),
                              dict(os.environ), out, cwd=Path(link["directory"]))
            return ([*_absolute_inputs(lld, link["directory"], inputs), *prefix],
                    backend_flags(lld[2:]), None)
        except (LinkCommandError, subprocess.TimeoutExpired, OSError) as exc:
            why = f"lld's command could not be had from the driver: {exc}"
    elif link.get("driver"):
        why = "not linked by zig's driver (its lld command cannot be had)"
    return [*_lld(compiler), "-r", *prefix, *inputs, "-o", str(out / "index.o")], [], why


def index_links(compiler: Compiler, links: Sequence[dict[str, Any]], objects: set[str],
                scratch: Path) -> Indexed:
    """Each recorded object's index (from the first link that reads it) and backend flags,
    and the problems: an object no link read, or a link lld could not index."""
    result = Indexed()
    for k, link in enumerate(links):
        mine = [p for p in link["link"] if p in objects and p not in result.index]
        if not mine:
            continue
        out = scratch / f"link{k}"
        out.mkdir(parents=True)
        # Each link's indexes under a directory of their own: an object read by two links
        # would otherwise have its index overwritten.
        cmd, flags, approximate = _index_command(compiler, link, out)
        proc = subprocess.run(cmd, cwd=link.get("directory"), capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
        if proc.returncode != 0:
            for p in mine:
                result.problems[p] = ("lld --thinlto-index-only failed: "
                                      f"{proc.stderr.strip()[-300:]}")
            continue
        for p in mine:
            found = out / (os.path.normpath(p).lstrip("/") + ".thinlto.bc")
            if found.is_file():
                result.index[p] = found
                result.flags[p] = flags
                if approximate is not None:
                    result.approximate[p] = approximate
            else:
                result.problems[p] = f"lld wrote no index {found}"
    for p in sorted(objects - result.index.keys() - result.problems.keys()):
        result.problems[p] = "no link read it (a library built only as an archive?)"
    return result


def compile_backends(compiler: Compiler, compiles: Sequence[dict[str, Any]],
                     links: Sequence[dict[str, Any]], workdir: Path, scratch: Path,
                     target: str) -> Backends:
    """Index the recorded ThinLTO objects and compile each as its backend would, into
    `scratch/native/<object path relative to workdir>`; compile_commands entries for them."""
    by_output = {str(Path(e["output"])): e for e in compiles}
    indexed = index_links(compiler, links, set(by_output), scratch / "index")
    result = Backends(
        skipped={os.path.relpath(p, workdir): why for p, why in indexed.problems.items()},
        approximate={os.path.relpath(p, workdir): why
                     for p, why in indexed.approximate.items()})
    native_root = scratch / "native"
    for obj, idx in sorted(indexed.index.items()):
        rel = os.path.relpath(obj, workdir)
        if rel.startswith(".."):
            result.skipped[rel] = "outside the build directory"
            continue
        native = native_root / rel
        native.parent.mkdir(parents=True, exist_ok=True)
        args = [*compiler.clang_argv, f"--target={target}",
                last_level(by_output[obj]["arguments"]) or "-O0", *indexed.flags[obj], "-c",
                "-x", "ir",
                obj, f"-fthinlto-index={idx}", "-mllvm",
                "-lto-embed-bitcode=post-merge-pre-opt", "-o", rel]
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
