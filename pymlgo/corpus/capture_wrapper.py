"""The CC/CXX that `mlgo corpus capture` puts in front of a build.

Run by a generated shell script (`exec python -E -S capture_wrapper.py --config F --lang c --
ARGS...`) once per compiler invocation, so it imports nothing but the standard library.
For a compile-only (`-c`) invocation it adds the fixed target and `-Xclang
-fembed-bitcode=all` (and, for zig's driver at `-Oz`, `-Xclang -Oz`: see `size_level_flags`),
runs the real driver, and on success appends the command and the
object path to a JSON-lines log (under a file lock: builds run compilers in parallel).
An LTO compile (`-flto*`) gets no bitcode section (its object is bitcode) and is logged with
its LTO kind; a link that reads bitcode is run, then logged with the bitcode files it read
and its command (the ThinLTO index is made as that link makes it).
Everything else (links, preprocessing, `--version` probes) gets the same target flags and is
exec'd directly; with a `link` entry in the config (a stock clang building for another
target, `toolchain/cross.py`), links are exec'd with that driver and its target flags.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# Driver options whose value is the next argument; the value is not a source file.
_TAKES_VALUE = frozenset({
    "-o", "-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote", "-idirafter",
    "-iprefix", "-iwithprefix", "-iwithprefixbefore", "-isysroot", "--sysroot", "-x", "-MF",
    "-MT", "-MQ", "-MJ", "-Xclang", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-mllvm",
    "-L", "-l", "-target", "--target", "-arch", "-F", "-framework", "-u", "-z", "-T", "-e",
    "-include-pch", "-aux-info", "-dependency-file", "--param", "-G", "-B", "-soname",
    "-Xopenmp-target", "-Xcuda-ptxas", "-Xarch_host", "-Xarch_device", "-ivfsoverlay",
})
_SOURCE_EXTS = frozenset({
    ".c", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CPP", ".m", ".mm", ".M", ".i", ".ii",
    ".s", ".S", ".sx", ".asm", ".cu",
})
_ASM_EXTS = frozenset({".s", ".S", ".sx", ".asm"})
# With any of these, `-c` does not produce a native object with embedded bitcode.
_NOT_AN_OBJECT = frozenset({"-E", "-S", "-fsyntax-only", "-M", "-MM", "-emit-llvm", "-###"})
# Flags that would pick the host's CPU or another target: the corpus has one fixed target.
_NATIVE = frozenset({"-march=native", "-mcpu=native", "-mtune=native"})


def expand_response_files(args: Sequence[str], cwd: Path, depth: int = 0) -> list[str]:
    """`@file` arguments replaced by the file's arguments (only to understand the command)."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("@") and depth < 8:
            try:
                text = (cwd / arg[1:]).read_text(encoding="utf-8", errors="surrogateescape")
                inner = shlex.split(text)
            except (OSError, ValueError):
                # Unreadable or badly quoted: keep it as is and let the compiler report it
                # rather than breaking the build with a traceback from the wrapper.
                out.append(arg)
                continue
            out.extend(expand_response_files(inner, cwd, depth + 1))
        else:
            out.append(arg)
    return out


def strip_target_flags(args: Sequence[str]) -> list[str]:
    """The user's arguments without target selection and `native` CPU flags."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-target", "--target"):
            skip = True
            continue
        if arg.startswith(("--target=", "-target=")) or arg in _NATIVE:
            continue
        out.append(arg)
    return out


def sources_and_output(args: Sequence[str]) -> tuple[list[str], str | None, bool]:
    """Source files, the `-o` value, and whether an explicit `-x` language was given."""
    sources: list[str] = []
    output: str | None = None
    explicit_lang = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _TAKES_VALUE:
            value = args[i + 1] if i + 1 < len(args) else None
            if arg == "-o":
                output = value
            elif arg == "-x" and value not in (None, "none"):
                explicit_lang = True
            i += 2
            continue
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-obj"):
            output = arg[2:]
        elif arg == "-" or not arg.startswith("-"):
            ext = os.path.splitext(arg)[1]
            if ext in _SOURCE_EXTS or (explicit_lang and arg != "-"):
                sources.append(arg)
        i += 1
    return sources, output, explicit_lang


def lto_kind(args: Sequence[str]) -> str | None:
    """"thin" or "full" after the last `-flto*` / `-fno-lto`, else None."""
    kind: str | None = None
    for arg in args:
        if arg == "-flto=thin":
            kind = "thin"
        elif arg in ("-flto", "-flto=full", "-flto=auto", "-flto=jobserver"):
            kind = "full"
        elif arg == "-fno-lto":
            kind = None
    return kind


# pymlgo.toolchain.opt_level's LEVELS: run with `python -S`, this script cannot import pymlgo
# (tests/test_opt_level.py holds the two equal).
_LEVELS = frozenset({"-O0", "-O1", "-O2", "-O3", "-O4", "-O", "-Os", "-Oz", "-Ofast", "-Og"})


def last_opt_level(args: Sequence[str]) -> str | None:
    """The driver's optimization level: its last `-O` flag (`-O` alone is `-O1`), or None."""
    level: str | None = None
    for arg in args:
        if arg in _LEVELS:
            level = arg if arg != "-O" else "-O1"
    return level


def size_level_flags(args: Sequence[str], oz_flags: Sequence[str]) -> list[str]:
    """`oz_flags` when the driver compiles at `-Oz`, else nothing.

    zig's driver hands cc1 `-Os` for `-Oz`, and the front end then marks every function
    `optsize` without `minsize`. The recorded bitcode keeps those attributes, so a corpus
    recompiled at -Oz would still be generated as -Os code, not what `clang -Oz` or
    `mlgo cc -Oz` ships (zstd_lazy.c: 136,665 bytes against 119,922). `-Xclang -Oz` makes the
    front end write `minsize`, as a real -Oz build does.
    """
    return list(oz_flags) if last_opt_level(args) == "-Oz" else []


def plan(
    user_args: Sequence[str], cwd: Path, *, target_flags: Sequence[str],
    embed_flags: Sequence[str], oz_flags: Sequence[str] = (), level: str | None = None,
) -> tuple[list[str], list[tuple[str, str]]]:
    """Arguments to pass to the driver, and the (source, object) pairs to log if it succeeds.

    Only a compile-only invocation of non-assembly sources gets `embed_flags` (not with LTO:
    its object is the bitcode itself), `level` last (so it wins over the build's own `-O`:
    a corpus for one level, whatever a package's configure picked) and, at `-Oz`,
    `oz_flags`; the pairs are empty for anything else.
    """
    args = strip_target_flags(user_args)
    seen = expand_response_files(args, cwd)
    if "-c" not in seen or _NOT_AN_OBJECT.intersection(seen):
        return [*target_flags, *args], []
    sources, output, explicit_lang = sources_and_output(seen)
    real = [s for s in sources if s != "-"]
    if not real or all(os.path.splitext(s)[1] in _ASM_EXTS for s in real) and not explicit_lang:
        return [*target_flags, *args], []
    if output is not None:
        pairs = [(real[0], output)] if len(real) == 1 else []
    else:
        pairs = [(s, os.path.splitext(os.path.basename(s))[0] + ".o") for s in real]
    embed = [] if lto_kind(seen) else list(embed_flags)
    forced = [level] if level else []
    return [*target_flags, *embed, *args, *forced,
            *size_level_flags([*seen, *forced], oz_flags)], pairs


_BITCODE_MAGICS = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")


def bitcode_operands(args: Sequence[str], cwd: Path) -> list[str]:
    """The link's file operands that are LLVM bitcode (absolute paths)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _TAKES_VALUE:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        path = cwd / arg
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError:
            continue
        if head in _BITCODE_MAGICS:
            out.append(str(path))
    return out


# Driver invocations that only ask the driver something: never links.
_QUERIES = frozenset({"--version", "-v", "-dumpmachine", "-dumpversion", "-dumpfullversion",
                      "--help", "-help"})


def is_link(args: Sequence[str]) -> bool:
    """Whether a driver invocation links (it neither stops before linking nor only asks)."""
    if "-c" in args or _NOT_AN_OBJECT.intersection(args) or _QUERIES.intersection(args):
        return False
    if any(a.startswith(("-print-", "--print-")) for a in args):
        return False
    return any(not a.startswith("-") or a.startswith("-l") for a in args)


def append_log(log: Path, entries: Sequence[dict[str, object]]) -> None:
    """Append JSON lines under an exclusive lock, so parallel compilers never interleave."""
    data = "".join(json.dumps(e) + "\n" for e in entries).encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
    finally:
        os.close(fd)  # also releases the lock


def main(argv: Sequence[str]) -> int:
    if len(argv) < 5 or argv[0] != "--config" or argv[2] != "--lang" or argv[4] != "--":
        print("usage: capture_wrapper.py --config FILE --lang c|c++ -- ARGS...", file=sys.stderr)
        return 2
    config = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    driver: list[str] = config["drivers"][argv[3]]
    user_args = list(argv[5:])
    cwd = Path.cwd()
    args, pairs = plan(
        user_args, cwd, target_flags=config["target_flags"], embed_flags=config["embed_flags"],
        oz_flags=config.get("oz_flags", ()), level=config.get("level"),
    )
    full = [*driver, *args]
    link = config.get("link")
    if not pairs and link and is_link(expand_response_files(user_args, cwd)):
        driver = link["drivers"][argv[3]]
        full = [*driver, *link["target_flags"], *strip_target_flags(user_args)]
    seen = expand_response_files(user_args, cwd)
    linked = bitcode_operands(seen, cwd) if not pairs and is_link(seen) else []
    if not pairs and not linked:
        os.execv(full[0], full)  # nothing to record: become the driver
    returncode = subprocess.call(full)
    if returncode == 0:
        kind = lto_kind(seen)
        entries: list[dict[str, object]] = [
            {"directory": str(cwd), "arguments": full, "file": src,
             "output": str(cwd / obj), **({"lto": kind} if kind else {})}
            for src, obj in pairs
        ]
        if linked:  # an LTO link: the bitcode it links and its command, for the index
            entries.append({"directory": str(cwd), "link": linked, "driver": driver,
                            "arguments": full[len(driver):]})
        append_log(Path(config["log"]), entries)
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
