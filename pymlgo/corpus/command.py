"""Turn a module's recorded cc1 command into one that recompiles its bitcode."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pymlgo.toolchain.opt_level import LEVELS as OPT_LEVELS

# cc1 flags that name build-time side outputs or inputs; each takes one argument.
_DROP_WITH_ARG = frozenset({"-o", "-x", "-dependency-file", "-MT", "-MQ", "-MF"})
# Flags that would re-embed bitcode (bloating the object) or emit dependency files.
_DROP_ALONE = frozenset({"-sys-header-deps", "-MV", "-MD", "-MMD", "-fembed-bitcode=all"})
# `-mllvm` options of that kind: a ThinLTO corpus' backend compiles embedded the module after
# its imports (and the whole command) this way, which is how the corpus got it, not part of
# the backend; kept, every compile would write it again, the channel flags included.
_DROP_LLVM_PREFIXES = ("-lto-embed-bitcode",)


@dataclass(frozen=True)
class FlagEdits:
    """User edits applied after the recorded command: delete, replace, then add."""

    delete: tuple[str, ...] = ()
    replace: tuple[tuple[str, str], ...] = ()
    add: tuple[str, ...] = ()

    def apply(self, args: Sequence[str]) -> list[str]:
        out = [a for a in args if a not in self.delete]
        table = dict(self.replace)
        out = [table.get(a, a) for a in out]
        return out + list(self.add)


def parse_cmd(raw: bytes) -> tuple[str, ...]:
    """A `.cmd` file: cc1 arguments separated by NUL; empty fields are separators only.

    Arguments are interned: the modules of one build repeat the same few hundred flags, so
    a loaded corpus keeps one copy of each (a demo module's command is ~450 arguments).
    """
    return tuple(
        sys.intern(a.decode("utf-8", errors="surrogateescape")) for a in raw.split(b"\0") if a
    )


def format_cmd(args: Sequence[str]) -> bytes:
    """Encode cc1 arguments as LLVM's .llvmcmd section does: NUL-terminated fields."""
    return b"".join(a.encode("utf-8", errors="surrogateescape") + b"\0" for a in args)


def recompile_args(
    cmd: Sequence[str],
    *,
    input_bc: str,
    output_obj: str,
    opt_level: str | None = "-Oz",
    edits: FlagEdits = FlagEdits(),
) -> list[str]:
    """cc1 arguments (without the clang binary) that compile `input_bc` to `output_obj`.

    `opt_level` replaces whatever level was recorded: `zig cc -Oz` records `-Os`, and
    training/evaluation must run at the level the problem asks for.
    A change to what this returns must bump `evaluate.baseline.BASELINE_RECIPE_VERSION`.
    """
    out: list[str] = []
    i = 0
    while i < len(cmd):
        arg = cmd[i]
        if arg in _DROP_WITH_ARG or (arg == "-mllvm" and i + 1 < len(cmd)
                                     and cmd[i + 1].startswith(_DROP_LLVM_PREFIXES)):
            i += 2
            continue
        i += 1
        if arg in _DROP_ALONE:
            continue
        if opt_level is not None and arg in OPT_LEVELS:
            continue
        out.append(arg)
    if out and out[0] != "-cc1":
        out.insert(0, "-cc1")
    if opt_level is not None:
        out.insert(1, opt_level)
    out = edits.apply(out)
    return [*out, "-x", "ir", input_bc, "-o", output_obj]
