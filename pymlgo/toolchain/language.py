"""The source language of a compile, "c" or "c++" (None: another one): from a recorded cc1
command or from a source file as a compiler driver is given it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

LANGUAGES = ("c", "c++")
# by file suffix, as clang's driver types its inputs (zig's `c++` too: it compiles .c as C)
_BY_SUFFIX = {".c": "c", ".i": "c", ".h": "c",
              **dict.fromkeys((".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CPP", ".ii",
                               ".hh", ".hpp", ".hxx", ".H"), "c++")}
# by `-x LANG`
_BY_NAME = {"c": "c", "c-header": "c", "cpp-output": "c",
            "c++": "c++", "c++-header": "c++", "c++-cpp-output": "c++"}


def source_language(source: str, x: str | None = None) -> str | None:
    """The language a driver compiles `source` as: `-x X` if one is in force, else the file
    suffix; None for every other language (assembly, Objective-C, bitcode, ...)."""
    if x is not None and x != "none":
        return _BY_NAME.get(x)
    return _BY_SUFFIX.get(PurePath(source).suffix)


def cc1_language(args: Sequence[str]) -> str:
    """"c++" or "c" for a recorded cc1 command, which names no input: its -main-file-name
    (the source it was compiled from), else whether it names a C++ standard."""
    for i, arg in enumerate(args[:-1]):
        if arg == "-main-file-name":
            return "c++" if _BY_SUFFIX.get(PurePath(args[i + 1]).suffix) == "c++" else "c"
    return "c++" if any(a.startswith(("-std=c++", "-std=gnu++")) for a in args) else "c"
