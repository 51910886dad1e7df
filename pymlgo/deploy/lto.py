"""The link step of an LTO build: which link-time inliner it runs, and how `mlgo cc` serves it.

With LTO the compile steps write LLVM bitcode, and the linker runs the optimizer again on it;
most cross-module inlining happens there. What LLVM 22 does at link time (read in its source,
checked with the bundled lld 22.1.8):

- ThinLTO: every module gets a backend, whose post-link pipeline builds its inliner with the
  advisor `-enable-ml-inliner` asks for (llvm/lib/Passes/PassBuilderPipelines.cpp). The
  release advisor opens `BASE.out` / `BASE.in` once per module (llvm/lib/Analysis/
  MLInlineAdvisor.cpp, InteractiveModelRunner.cpp): one channel session per backend module,
  context "", the same protocol as a compile.
- The backends run on a pool of `--thinlto-jobs` threads (llvm/lib/LTO/LTO.cpp, the in-process
  ThinLTO backend; lld's default is one per core). The channel base is one global option, so
  parallel backends all open the same two FIFOs and their streams mix (seen on lz4 with two
  jobs: a second header inside the first session, then a linker spinning on a closed pipe).
  `--thinlto-jobs=1` makes them one stream of sessions, largest module first; the output is
  byte-identical to the parallel link's (checked on lz4).
- Full LTO: the merged module's inliner (the FullLTOPostLink one) is built with the default
  advisor whatever `-enable-ml-inliner` says (ModuleInlinerWrapperPass's default argument,
  llvm/include/llvm/Transforms/IPO/Inliner.h): no channel is ever opened, so a policy cannot
  answer it. `mlgo cc` says so instead.
- zig's driver passes no `-mllvm`, `-Wl,-mllvm,...` or `--thinlto-jobs` on to lld ("unsupported
  linker arg"); lld's own command is had from the driver (toolchain/lld.py) and run as
  `zig ld.lld ...` with the channel flags.

A link is an LTO link when one of its inputs (an object, a member of an archive named on the
command line, a `-lNAME` found in a `-L` directory given) is bitcode. A bitcode module is
full LTO when it carries the `ThinLTO` module flag (clang sets it to 0 on every full-LTO module
for ELF targets; a ThinLTO module has no such flag); module flag names are metadata strings,
which bitcode stores as one byte-aligned blob, so the name is found in the file's bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pymlgo.toolchain.bitcode import is_bitcode

AR_MAGIC, THIN_AR_MAGIC = b"!<arch>\n", b"!<thin>\n"
FULL_LTO_FLAG = b"ThinLTO"
# Options after which the driver compiles but does not link.
_NO_LINK = frozenset({"-c", "-S", "-emit-llvm", "-r"})
LLD_JOBS = "--thinlto-jobs=1"


@dataclass(frozen=True)
class LTOLink:
    """The bitcode a link command gives the linker: module counts by LTO kind."""

    thin: int
    full: int

    @property
    def mode(self) -> str:
        if self.thin and self.full:
            return "mixed"
        return "thin" if self.thin else "full"

    def record(self) -> dict[str, object]:
        return {"mode": self.mode, "thin_modules": self.thin, "full_modules": self.full}


def is_link(args: Sequence[str]) -> bool:
    """Whether a driver command (that generates code) ends in a link."""
    return not any(a in _NO_LINK for a in args)


def bitcode_kind(data: bytes) -> str | None:
    """"thin" or "full" for a bitcode module's bytes, None for anything else."""
    if not is_bitcode(data):
        return None
    return "full" if FULL_LTO_FLAG in data else "thin"


def _archive_members(path: Path, data: bytes) -> Iterator[bytes]:
    """The contents of an ar archive's members (a thin archive's from the files it names);
    the symbol and long-name tables are skipped."""
    thin = data.startswith(THIN_AR_MAGIC)
    names = b""
    pos = len(AR_MAGIC)
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].rstrip(b" ")
        try:
            size = int(header[48:58].strip() or b"0")
        except ValueError:
            return  # not an archive we can read: treated as holding no bitcode
        body = pos + 60
        stored = not thin or name in (b"/", b"//", b"/SYM64/")
        end = body + (size if stored else 0)
        if name == b"//":
            names = data[body:end]
        elif name not in (b"/", b"/SYM64/"):
            if thin:
                yield _thin_member(path, name, names)
            elif name.startswith(b"#1/"):  # BSD: the name is the first bytes of the body
                yield data[body + int(name[3:]):end]
            else:
                yield data[body:end]
        pos = end + (end & 1)


def _thin_member(archive: Path, name: bytes, names: bytes) -> bytes:
    if name.startswith(b"/") and name[1:].isdigit():
        start = int(name[1:])
        name = names[start:names.index(b"\n", start)]
    member = archive.parent / os.fsdecode(name.rstrip(b"/"))
    try:
        return member.read_bytes()
    except OSError:
        return b""


def _file_kinds(path: Path) -> Iterator[str]:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if not (is_bitcode(head) or head in (AR_MAGIC, THIN_AR_MAGIC)):
                return
            data = head + f.read()
    except OSError:
        return  # the linker will say what is wrong with it
    if head in (AR_MAGIC, THIN_AR_MAGIC):
        for member in _archive_members(path, data):
            if (kind := bitcode_kind(member)) is not None:
                yield kind
    elif (kind := bitcode_kind(data)) is not None:
        yield kind


def _library(name: str, dirs: Sequence[str]) -> Path | None:
    """The static archive `-lNAME` names in one of the `-L` directories given, if any (a
    shared library is never bitcode; `-l:FILE` names the file)."""
    files = [name[1:]] if name.startswith(":") else [f"lib{name}.a"]
    for d in dirs:
        for f in files:
            if (p := Path(d) / f).is_file():
                return p
    return None


def lto_link(inputs: Sequence[str], args: Sequence[str]) -> LTOLink | None:
    """What bitcode a link gives the linker; None when it gives none (no LTO at link time).
    `inputs` are the command's file operands, `args` all its arguments (for -l and -L)."""
    dirs: list[str] = []
    libs: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in ("-L", "-l"):
            value = next(it, "")
            (dirs if arg == "-L" else libs).append(value)
        elif arg.startswith("-L"):
            dirs.append(arg[2:])
        elif arg.startswith("-l"):
            libs.append(arg[2:])
    paths = [Path(p) for p in inputs]
    paths += [p for lib in libs if (p := _library(lib, dirs)) is not None]
    kinds = [k for p in paths for k in _file_kinds(p)]
    if not kinds:
        return None
    return LTOLink(thin=kinds.count("thin"), full=kinds.count("full"))


def lto_flag(args: Sequence[str]) -> str | None:
    """The LTO kind the driver's last `-flto`/`-fno-lto` asks for ("thin", "full"), or None."""
    kind: str | None = None
    for arg in args:
        if arg in ("-flto", "-flto=full", "-flto=auto", "-flto=jobserver"):
            kind = "full"
        elif arg == "-flto=thin":
            kind = "thin"
        elif arg == "-fno-lto":
            kind = None
    return kind


def channel_args(base: Path, *, include_default: bool, size_increase_threshold: int) -> list[str]:
    """lld's flags for the ThinLTO backends' inliner to ask the channel at `base`, one backend
    at a time."""
    default = ["-mllvm", "-inliner-interactive-include-default"] if include_default else []
    return [
        "-mllvm", "-enable-ml-inliner=release",
        "-mllvm", f"-inliner-interactive-channel-base={base}",
        *default,
        "-mllvm", f"-ml-advisor-size-increase-threshold={size_increase_threshold}",
        LLD_JOBS,
    ]  # fmt: skip
