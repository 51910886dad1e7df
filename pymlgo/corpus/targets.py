"""The named targets a corpus is built for: `mlgo corpus demo --target NAME` and
`mlgo corpus debian --target NAME` read this one table.

A target is a triple as zig spells it, a CPU (`baseline`: the target's generic CPU, never
the host's) and the flags every compile for it adds. A freestanding target (no operating
system) has no C library; `cortex-m4-musl` is the same Cortex-M4 code generation with a
Linux/musl triple, whose only job is to give C code that includes <stdio.h> the C library's
headers (the OS part of the triple changes the headers, not the Thumb-2 code).
"""

from __future__ import annotations

from dataclasses import dataclass

from pymlgo.corpus.capture import DEFAULT_CPU, DEFAULT_TARGET
from pymlgo.corpus.format import CorpusError

# The architecture part of a triple -> CMake's CMAKE_SYSTEM_PROCESSOR.
_CMAKE_PROCESSOR = {"thumb": "arm", "thumbeb": "armeb"}


class TargetError(CorpusError):
    """No target of that name, or one a build cannot use."""


@dataclass(frozen=True)
class Target:
    """What a corpus is built for. `note` says in --help what is special about it."""

    name: str
    triple: str
    cpu: str = DEFAULT_CPU
    flags: tuple[str, ...] = ()
    note: str = ""

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def os(self) -> str:
        parts = self.triple.split("-")
        return parts[1] if len(parts) > 1 else ""

    @property
    def freestanding(self) -> bool:
        """No operating system, so no C library."""
        return any(part in ("freestanding", "none") for part in self.triple.split("-")[1:])

    @property
    def codegen(self) -> tuple[str, str, tuple[str, ...]]:
        """(triple, CPU, flags): what code is generated for (the name is only a label), as a
        built corpus records it."""
        return (self.triple, self.cpu, self.flags)

    @property
    def cmake_processor(self) -> str:
        return _CMAKE_PROCESSOR.get(self.arch, self.arch)

    def describe(self) -> str:
        """`triple -mcpu=CPU flags`, as --help lists it."""
        return " ".join([self.triple, f"-mcpu={self.cpu}", *self.flags])

    def as_json(self) -> dict[str, object]:
        """How a corpus records its target (info and summary files)."""
        return {"name": self.name, "triple": self.triple, "cpu": self.cpu,
                "flags": list(self.flags)}


HOST_TARGET = Target("x86_64", DEFAULT_TARGET)
TARGETS: dict[str, Target] = {t.name: t for t in (
    HOST_TARGET,
    Target("aarch64", "aarch64-linux-gnu"),
    Target("riscv64", "riscv64-linux-gnu"),
    # 32-bit Arm Linux code is built as Thumb-2 (what distributions ship for armhf)
    Target("thumb2", "arm-linux-gnueabihf", flags=("-mthumb",),
           note="32-bit Arm Linux, Thumb-2"),
    Target("cortex-m4", "thumb-freestanding-eabi", cpu="cortex_m4",
           flags=("-ffreestanding",),
           note="bare metal, no C library: only code that compiles freestanding"),
    Target("cortex-m4-musl", "thumb-linux-musleabi", cpu="cortex_m4",
           note="Cortex-M4 Thumb-2 code; the linux-musl part only supplies C library "
           "headers (and links for configure checks): for C libraries that include "
           "<stdio.h>"),
)}


def named_target(name: str) -> Target:
    """The target called `name`; TargetError naming the known ones otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise TargetError(f"no target {name!r}: expected one of {', '.join(TARGETS)}") from None


def hosted_alternative(target: Target) -> Target | None:
    """For a freestanding target, the table's target with its CPU and a C library."""
    if not target.freestanding or target.cpu == DEFAULT_CPU:
        return None
    return next((t for t in TARGETS.values() if t.cpu == target.cpu and not t.freestanding),
                None)
