"""Which modules are compiled for linker relaxation, whose object bytes overstate the linked.

With relaxation on (`-mrelax`: stock clang's default for RISC-V, which zig turns off; also
LoongArch's), a call is emitted as a full `auipc`+`jalr` pair with an `R_*_RELAX`
relocation, and the linker shrinks it to one instruction when the target is near. The
object then counts 8 bytes for a call the program carries in 4, so every size pymlgo
measures would favour removing calls, i.e. inlining. The cure is a build with relaxation
off (`-mno-relax`). A flag edit cannot do it: the setting is recorded in each function's
`target-features` attribute in the bitcode, which codegen obeys over cc1's
`-target-feature -relax` (checked with Debian's clang-19: the same relocations either way).
This module only finds the modules that need the rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pymlgo.corpus.format import Module


def relaxes(cmd: Sequence[str]) -> bool:
    """True if a cc1 command leaves linker relaxation on: its last `-target-feature` about
    `relax` is `+relax` (cc1 applies target features in order, the last one wins)."""
    state = False
    for flag, value in zip(cmd, cmd[1:], strict=False):
        if flag == "-target-feature" and value in ("+relax", "-relax"):
            state = value == "+relax"
    return state


def relaxing_modules(modules: Iterable[Module]) -> list[str]:
    """Names of the modules whose recorded command (hence their bitcode) relaxes."""
    return [m.name for m in modules if relaxes(m.cmd)]


def relaxation_warning(names: Sequence[str]) -> str | None:
    """One warning for the modules that relax, or None when there are none."""
    if not names:
        return None
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"warning: {len(names)} module(s) are compiled with linker relaxation on "
            f"(-target-feature +relax: {shown}); their object bytes overstate the linked "
            f"program's (a call the linker relaxes counts 8 bytes instead of 4), which favours "
            f"inlining. Capture the build again with -mno-relax for an exact measure (the "
            f"setting is in the bitcode: flag edits cannot change it).")
