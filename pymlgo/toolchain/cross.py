"""The linker and archiver for another target than the host: zig's, never the host's.

A build for another target links and archives too. The host's `ld` cannot link for it
("unrecognised emulation mode: aarch64linux") and the host's binutils try to read the
embedded bitcode through their LLVM plugin ("bfd plugin: LLVM gold plugin has failed to
create LTO module"). zig brings, for every target it knows, a linker driver with the
target's C library and start files (`zig cc -target T`), lld (`zig ld.lld`) and llvm-ar
(`zig ar`, `zig ranlib`). A stock clang has the target's code generator but not its C
library: its compiles get zig's libc headers for the target (what `zig cc` itself uses).
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pymlgo.toolchain.compiler import Compiler, bundled_zig

# platform.machine() -> the architecture a target triple starts with.
_HOST_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


def is_cross(target: str, *, machine: str | None = None, system: str | None = None) -> bool:
    """Whether `target` (a triple) is another architecture or OS than this machine."""
    parts = target.lower().split("-")
    host_arch = _HOST_ARCH.get((machine or platform.machine()).lower(),
                               (machine or platform.machine()).lower())
    host_os = (system or platform.system()).lower()
    return parts[0] != host_arch or host_os not in parts[1:]


@dataclass(frozen=True)
class CrossTools:
    """Commands (argv prefixes) that link and archive for one target."""

    link_c: tuple[str, ...]
    link_cxx: tuple[str, ...]
    link_flags: tuple[str, ...]
    tools: dict[str, tuple[str, ...]]  # program name (ar, ranlib, ld) -> command
    compile_flags: tuple[str, ...] = ()  # for a stock clang: the target's libc headers


class CrossToolsError(RuntimeError):
    """zig cannot build for the target."""


def libc_header_flags(zig: str, target: str) -> tuple[str, ...]:
    """The flags that give a stock clang the C library headers zig uses for `target`:
    its libc include directories (not its clang's own resource headers) and the glibc
    version macro, read from `zig cc -###`; the host's /usr/include is dropped."""
    with tempfile.TemporaryDirectory(prefix="mlgo-cross-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("int probe;\n", encoding="utf-8")
        res = subprocess.run([zig, "cc", "-target", target, "-c", str(src), "-o",
                              str(Path(tmp) / "probe.o"), "-###"], capture_output=True,
                             text=True, timeout=120, check=False, cwd=tmp)
    if res.returncode != 0:
        tail = " | ".join(res.stderr.strip().splitlines()[-2:])
        raise CrossToolsError(f"zig cannot compile for {target!r}: {tail}")
    flags: list[str] = []
    for line in res.stderr.splitlines():
        if '"-cc1"' not in line:
            continue
        args = shlex.split(line)
        for opt, value in zip(args, args[1:], strict=False):
            if opt == "-isystem" and "/libc/include/" in value:
                flags += ["-isystem", value]
            elif opt == "-D" and value.startswith("__GLIBC"):
                flags.append(f"-D{value}")
    return ("-nostdlibinc", *flags) if flags else ()


def cross_tools(compiler: Compiler, target: str, cpu: str) -> CrossTools:
    """zig's tools for `target`: the compiler's own zig if it is one, else the bundled zig
    (a stock clang has the target's code generator but no C library or linker for it)."""
    zig = str(compiler.path if compiler.zig else bundled_zig())
    return CrossTools(
        compile_flags=() if compiler.zig else libc_header_flags(zig, target),
        link_c=(zig, "cc"),
        link_cxx=(zig, "c++"),
        link_flags=("-target", target, f"-mcpu={cpu}"),
        tools={"ar": (zig, "ar"), "ranlib": (zig, "ranlib"), "ld": (zig, "ld.lld")},
    )
