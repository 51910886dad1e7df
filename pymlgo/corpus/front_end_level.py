"""Which optimization level a module's IR was written at, against the level it is compiled at.

The front end marks every function for its `-O` level (`-O0`: optnone noinline; `-Os`:
optsize; `-Oz`: optsize minsize; `-O1`..`-O3`: neither), and the recorded bitcode keeps those
marks: recompiled at another level, the pass pipeline changes but the functions keep
them, and the back end still generates the recorded level's code. A module recorded at
`-Os` and compiled at `-Oz` is therefore not what `clang -Oz` ships: zstd's zstd_lazy.c
measured 136,665 bytes that way against 119,922 from `zig cc -Oz -Xclang -Oz`, and a
policy's gains there do not carry over (the demo corpus, the shift rules: -3.5% on
`-Os` bitcode, +0.01% on `-Oz` bitcode). `zig cc -Oz` records `-Os` (zig hands cc1 `-Os`);
`mlgo corpus capture` adds `-Xclang -Oz` (corpora recorded since the demo's format 3 and
the Debian corpus' format 4).
This module only finds the modules whose marks differ; a recapture is the cure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pymlgo.corpus.format import Module

# The function attributes clang's front end writes at each level (cc1's `-O` spelling).
_MARKS = {"-O0": "optnone", "-Os": "optsize", "-Oz": "optsize minsize", "-O": "",
          "-O1": "", "-O2": "", "-O3": "", "-Ofast": "", "-Og": ""}


def recorded_level(cmd: Sequence[str]) -> str | None:
    """The `-O` level of a cc1 command (cc1 obeys the last one); None if it has none, which
    cc1 reads as -O0."""
    level = None
    for arg in cmd:
        if arg in _MARKS:
            level = arg
    return level


def marks(level: str | None) -> str:
    """The function attributes the front end writes at `level` (None: cc1's default -O0)."""
    return _MARKS.get(level or "-O0", "")


def mismatched_modules(modules: Iterable[Module], level: str) -> dict[str, list[str]]:
    """Modules whose IR carries another level's marks than `level`'s, by recorded level."""
    out: dict[str, list[str]] = {}
    want = marks(level)
    for m in modules:
        got = recorded_level(m.cmd)
        if marks(got) != want:
            out.setdefault(got or "no -O", []).append(m.name)
    return out


def level_warning(found: dict[str, list[str]], level: str) -> str | None:
    """One warning for the modules `mismatched_modules` found, or None when there are none."""
    if not found:
        return None
    n = sum(len(v) for v in found.values())
    parts = []
    for got, names in sorted(found.items()):
        shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
        parts.append(f"{len(names)} at {got} ({shown})")
    return (f"warning: {n} module(s) were recorded at another optimization level than the "
            f"{level} they are compiled at: {'; '.join(parts)}. Their bitcode keeps that "
            f"level's function attributes ({marks(level) or 'none'} expected), so the objects "
            f"are not what a {level} build ships and results measured on them may not carry "
            f"over: capture a build at {level} for this problem."
            + (" `zig cc -Oz` records -Os; `mlgo corpus capture` adds -Xclang -Oz (or pass "
               "it yourself)." if level == "-Oz" and "-Os" in found else ""))
