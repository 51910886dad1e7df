"""The optimization level a clang command line (driver or cc1) asks for: its last `-O` flag."""

from __future__ import annotations

from collections.abc import Iterable

# Every `-O` spelling clang's driver and cc1 accept; `-O` alone is `-O1` (an alias in clang's
# options table) and `-O4` the driver's old name for `-O3`.
LEVELS = frozenset({"-O0", "-O1", "-O2", "-O3", "-O4", "-O", "-Os", "-Oz", "-Ofast", "-Og"})


def level_of(arg: str) -> str | None:
    """`arg` as a level (`-O` read as `-O1`), or None when it is not an `-O` flag."""
    if arg not in LEVELS:
        return None
    return "-O1" if arg == "-O" else arg


def last_level(args: Iterable[str]) -> str | None:
    """The level the command compiles at: its last `-O` flag (clang obeys the last), or None
    when it has none (the driver and cc1 then compile at `-O0`)."""
    level = None
    for arg in args:
        level = level_of(arg) or level
    return level
