"""Which cc1 flags a corpus may carry: the check that keeps a hostile corpus from running code.

A corpus is data the user often did not write, yet every `.cmd` (and the description's
`global_command_override`) becomes a compiler command line that pymlgo runs thousands of
times. A flag can make clang load a shared object, read a file named by the corpus or write
one anywhere on disk. `check_cc1_args` therefore accepts a command only if every argument is
on the allowlist below; anything else is refused at corpus load, naming the flag.

Allowed (cc1 spelling; a value in the next argument where the flag takes one):

- the action `-emit-obj` and the frontend housekeeping flags clang itself writes
  (`-disable-free`, `-clear-ast-before-backend`, `-disable-llvm-verifier`,
  `-discard-value-names`, `-sys-header-deps`, `-MV`, `-v`, ...), and the optimization
  levels `-O*`;
- target description: `-triple`, `-aux-triple`, `-target-cpu`, `-target-feature`,
  `-tune-cpu`, `-target-abi`, `-target-linker-version`, `-target-sdk-version=`;
- code generation: `-m*` (`-mrelocation-model`, `-mframe-pointer=`, ...), `-pic-level`,
  `-pic-is-pie`, `-stack-protector`, `-vectorize-loops`, `-vectorize-slp`, ...;
- language and semantics: `-f*` and `-fno-*`, `-std=`, `-W*`, `-w`, `-pedantic`, `-R*`
  (remarks go to stderr);
- debug info: `-g*`, `-debug-info-kind=`, `-dwarf-version=`, `-debugger-tuning=`,
  `-split-dwarf-file` (a name recorded in the object; nothing is written unless
  `-split-dwarf-output` is given, and that one is refused);
- preprocessor and header search (no effect on bitcode input): `-D`, `-U`, `-I`,
  `-isystem`, `-internal-isystem`, `-internal-externc-isystem`, `-iquote`, `-idirafter`,
  `-isysroot`, `-resource-dir`, `-nostdsysteminc`, `-nobuiltininc`;
- `-mllvm OPTION`, except the options listed below;
- in a recorded `.cmd` only: the output names of the original build, `-o`,
  `-dependency-file`, `-MT`, `-MQ`, `-MF` (separate-argument form), `-main-file-name` and
  `-x`. `recompile_args` removes them before every compile (each compile writes only into
  its private temp dir), so they cannot write anywhere; a `global_command_override` is
  written by hand and may not name outputs at all.

Refused, whatever the family above says:

- code loading: `-load`, `-plugin`, `-add-plugin`, `-plugin-arg-*`, `-fplugin=`,
  `-fplugin-arg-*`, `-fpass-plugin=`, `-mllvm -load`, `-mllvm -pass-plugin`;
- other files read or linked in: `-mlink-bitcode-file`, `-mlink-builtin-bitcode`,
  `-include`, `-fembed-offload-object=`, `-fprofile-*-use*`, `-fprofile-list=`,
  `-fsanitize-*list=`, `-fxray-*=`, `-fmodule-file=`, ...;
- files written: `-opt-record-file`, `-split-dwarf-output`, `-stats-file=`,
  `-ftime-trace=`, `-header-include-file`, `-diagnostic-log-file`, `-coverage-*-file=`,
  `-fcrash-diagnostics-dir=`, `-fmodules-cache-path=`, the joined forms `-oPATH`, ...;
- actions other than `-emit-obj` (`-S`, `-E`, `-emit-llvm`, `-fsyntax-only`, ...):
  pymlgo measures an object file;
- a response file `@FILE` anywhere (clang expands it before parsing anything);
- a bare argument (it would be read as another input file);
- any `-f...=VALUE` or `-mllvm -...=VALUE` whose VALUE is a path (contains `/`), except
  the path-as-string flags `-fdebug-compilation-dir=`, `-fcoverage-compilation-dir=` and
  the `-f*-prefix-map=` family;
- `-mllvm` options whose name says they touch files or the host's channel (`file`,
  `output`, `path`, `dir`, `log`, `channel`, `plugin`, `model` as a word of the name) and
  `-view-*` (opens a viewer program).

`extra_allowed` (exact arguments, or prefixes ending in `=`; on the command line the
space-separated $MLGO_ALLOW_FLAGS) lets a user accept a flag the allowlist refuses, after
checking it is harmless; `-fthinlto-index=` is accepted in
ThinLTO corpora because the loader replaces it with the corpus' own index file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# cc1 flags whose value is the next argument (so the value is not a stray input).
_SEPARATE_VALUE = frozenset({
    "-triple", "-aux-triple", "-target-cpu", "-target-feature", "-tune-cpu", "-target-abi",
    "-target-linker-version", "-mrelocation-model", "-pic-level", "-pie-level",
    "-mthread-model", "-mfloat-abi", "-mlimit-float-precision", "-mregparm", "-mdebug-pass",
    "-meabi", "-mcode-model", "-stack-protector", "-stack-protector-buffer-size",
    "-ferror-limit", "-fmessage-length", "-ftemplate-depth", "-fconstexpr-depth",
    "-fconstexpr-steps", "-fbracket-depth", "-ftemplate-backtrace-limit",
    "-fconstexpr-backtrace-limit", "-fmacro-backtrace-limit", "-ftabstop", "-fvisibility",
    "-ftype-visibility", "-dwarf-debug-flags", "-record-command-line", "-split-dwarf-file",
    "-opt-record-format", "-opt-record-passes", "-resource-dir", "-isystem",
    "-internal-isystem", "-internal-externc-isystem", "-iquote", "-idirafter", "-isysroot",
    "-iprefix", "-iwithprefix", "-iwithprefixbefore", "-D", "-U", "-I", "-fdebug-compilation-dir",
    "-fcoverage-compilation-dir", "-exception-model", "-fobjc-dispatch-method",
    "-mfpmath",
    # RISC-V: the size limit of small-data globals, which stock clang writes for every
    # riscv compile (zig does not)
    "-msmall-data-limit",
})  # fmt: skip

# Output/input names of the original build; recompile_args drops them with their value.
_STRIPPED_WITH_VALUE = frozenset({"-o", "-dependency-file", "-MT", "-MQ", "-MF", "-x",
                                  "-main-file-name"})
_OUTPUT_NAMES = frozenset({"-o", "-dependency-file", "-MF"})

_EXACT = frozenset({
    "-emit-obj", "-disable-free", "-clear-ast-before-backend", "-disable-llvm-verifier",
    "-disable-llvm-passes", "-discard-value-names", "-sys-header-deps", "-MV", "-v",
    "-pic-is-pie", "-vectorize-loops", "-vectorize-slp", "-nostdsysteminc", "-nobuiltininc",
    "-nostdinc++", "-w", "-pedantic", "-pedantic-errors", "-faddrsig", "-Qn", "-Qy",
    "-enable-tlsdesc", "-no-enable-noundef-analysis", "-dwarf-ext-refs", "-dwarf-explicit-import",
    "-ffreestanding", "-cfguard", "-cfguard-no-checks", "-ehcontguard", "-menable-no-infs",
    "-fno-verbose-asm", "-mdisable-tail-calls", "-fdwarf2-cfi-asm",
    # -MP (autotools' depcomp): phony targets in a dependency file, and recompiles drop
    # -dependency-file, so it writes nothing.
    "-MP",
    # -fno-strict-aliasing (expat) and -pthread (libwebp, via CMake Threads): codegen only.
    "-relaxed-aliasing", "-pthread",
    # soft-float targets (a Cortex-M4 with no FPU): no implicit FP or vector code, codegen only
    "-no-implicit-float",
})  # fmt: skip

_PREFIXES = (
    "-O", "-std=", "-W", "-R", "-f", "-m", "-g", "-debug-info-kind=", "-dwarf-version=",
    "-debugger-tuning=", "-target-sdk-version=", "-D", "-U", "-I", "-isystem",
    "-fvisibility=", "-exception-model=", "-stack-protector-",
)

_CODE = "loads code into the compiler"
_READS = "makes the compiler read a file named by the corpus"
_WRITES = "makes the compiler write a file outside its private work dir"
_ACTION = "changes what the compiler produces; pymlgo measures an object file (-emit-obj)"
_TOOL = "passes options to another tool"

# Exact flags (or `-flag=` prefixes) refused whatever family they belong to.
_DENIED: dict[str, str] = {
    "-load": _CODE, "-plugin": _CODE, "-add-plugin": _CODE, "-plugin-arg-": _CODE,
    "-fplugin=": _CODE, "-fplugin-arg-": _CODE, "-fpass-plugin=": _CODE,
    "-mlink-bitcode-file": _READS, "-mlink-builtin-bitcode": _READS,
    "-mlink-cuda-bitcode": _READS, "-include": _READS, "-include-pch": _READS,
    "-include-pth": _READS, "-imacros": _READS, "-remap-file": _READS,
    "-fembed-offload-object=": _READS, "-fprofile-instrument-use-path=": _READS,
    "-fprofile-sample-use=": _READS, "-fprofile-use=": _READS, "-fprofile-list=": _READS,
    "-fprofile-remapping-file=": _READS, "-fsanitize-ignorelist=": _READS,
    "-fsanitize-blacklist=": _READS, "-fsanitize-system-ignorelist=": _READS,
    "-fsanitize-coverage-allowlist=": _READS, "-fsanitize-coverage-ignorelist=": _READS,
    "-fxray-always-instrument=": _READS, "-fxray-never-instrument=": _READS,
    "-fxray-attr-list=": _READS, "-fmodule-file=": _READS, "-fmodule-map-file=": _READS,
    "-fcuda-include-gpubinary": _READS, "-fopenmp-host-ir-file-path": _READS,
    "-frandomize-layout-seed-file=": _READS, "-foverride-record-layout=": _READS,
    "-fthinlto-index=": _READS,
    "-opt-record-file": _WRITES, "-split-dwarf-output": _WRITES, "-stats-file=": _WRITES,
    "-ftime-trace=": _WRITES, "-ftime-trace": _WRITES, "-header-include-file": _WRITES,
    "-diagnostic-log-file": _WRITES, "-coverage-notes-file=": _WRITES,
    "-coverage-data-file=": _WRITES, "-fcrash-diagnostics-dir=": _WRITES,
    "-fmodules-cache-path=": _WRITES, "-fprofile-instrument-path=": _WRITES,
    "-module-dependency-dir": _WRITES, "-fdepfile-entry=": _WRITES,
    "-S": _ACTION, "-E": _ACTION, "-emit-llvm": _ACTION, "-emit-llvm-bc": _ACTION,
    "-emit-llvm-only": _ACTION, "-emit-codegen-only": _ACTION, "-fsyntax-only": _ACTION,
    "-emit-pch": _ACTION, "-emit-module": _ACTION, "-emit-html": _ACTION,
    "-emit-interface-stubs": _ACTION, "-ast-dump": _ACTION, "-ast-print": _ACTION,
    "-ast-list": _ACTION, "-ast-view": _ACTION, "-dump-tokens": _ACTION,
    "-dump-raw-tokens": _ACTION, "-print-stats": _ACTION, "-Wl,": _TOOL, "-Wa,": _TOOL,
    "-Wp,": _TOOL, "-Xclang": _TOOL, "-Xlinker": _TOOL, "-Xassembler": _TOOL,
}  # fmt: skip

# `-f...=/path` flags whose value is a path used only as a string (recorded in debug info).
_PATH_STRING_FLAGS = ("-fdebug-compilation-dir=", "-fcoverage-compilation-dir=",
                      "-fdebug-prefix-map=", "-fmacro-prefix-map=", "-fcoverage-prefix-map=",
                      "-ffile-prefix-map=", "-fprofile-prefix-map=")

# cc1 flags that merely start like `-o`: not joined output names.
_NOT_OUTPUT = ("-opt-record-", "-object-file-name=")

_MLLVM_DENIED = {"load": _CODE, "pass-plugin": _CODE, "load-pass-plugin": _CODE}
_MLLVM_FILE_WORDS = frozenset({"file", "files", "output", "path", "dir", "directory", "log",
                               "channel", "plugin", "model"})


class UnsafeFlagError(ValueError):
    """A compile command carries a flag outside the allowlist; the message names it."""


@dataclass(frozen=True)
class FlagProblem:
    flag: str
    reason: str

    def __str__(self) -> str:
        return f"{self.flag!r} {self.reason}"


def _denied_reason(arg: str) -> str | None:
    if arg in _DENIED:
        return _DENIED[arg]
    for key, reason in _DENIED.items():
        if (key.endswith(("=", "-", ",")) or key in ("-load", "-include")) and arg.startswith(
            key
        ):
            return reason
    # Joined forms of output names (`-o/path`, `-MF/path`): recompile_args only strips the
    # separate form, so a joined one would reach the compiler.
    for out in ("-o", "-MF", "-dependency-file"):
        if arg.startswith(out) and arg != out and not arg.startswith(_NOT_OUTPUT):
            return _WRITES
    return None


def _mllvm_problem(value: str) -> str | None:
    if value.startswith("@"):
        return "is a response file, which clang expands by reading it"
    if not value.startswith("-"):
        return "is not an LLVM option (-mllvm takes -NAME or -NAME=VALUE)"
    name, eq, optval = value.lstrip("-").partition("=")
    if name in _MLLVM_DENIED:
        return _MLLVM_DENIED[name]
    if name.startswith("view-"):
        return "makes the compiler start a viewer program"
    words = set(re.split(r"[-_.]", name))
    if words & _MLLVM_FILE_WORDS:
        return "names a file, a log, a model or the host's channel (pymlgo owns those)"
    if eq and "/" in optval:
        return "has a path as its value"
    return None


def _allowed_by_family(arg: str) -> bool:
    return arg in _EXACT or arg.startswith(_PREFIXES)


def unsafe_flags(
    args: Sequence[str],
    *,
    recorded: bool = True,
    thinlto: bool = False,
    extra_allowed: Iterable[str] = (),
) -> list[FlagProblem]:
    """Every argument of the cc1 command `args` (first `-cc1`) that is not allowed.

    `recorded`: a `.cmd` written by a build, whose output names are stripped before each
    compile; False for a hand-written override, which may not name outputs. `thinlto`: the
    corpus is ThinLTO, whose `-fthinlto-index=` the loader replaces.
    """
    extra = tuple(extra_allowed)

    def user_allowed(a: str) -> bool:
        return a in extra or any(e.endswith("=") and a.startswith(e) for e in extra)

    problems: list[FlagProblem] = []
    i = 1 if args and args[0] == "-cc1" else 0
    while i < len(args):
        arg = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        i += 1
        if arg.startswith("@"):
            problems.append(FlagProblem(arg, "is a response file, which clang expands by "
                                        "reading it"))
            continue
        if user_allowed(arg):
            continue
        if thinlto and arg.startswith("-fthinlto-index="):
            continue
        if not arg.startswith("-") or arg == "-":
            problems.append(FlagProblem(arg, "is a bare argument, which clang would read as "
                                        "another input file"))
            continue
        if arg == "-mllvm":
            i += 1
            if value is None:
                problems.append(FlagProblem(arg, "has no option after it"))
                continue
            if user_allowed(value):
                continue
            reason = _mllvm_problem(value)
            if reason:
                problems.append(FlagProblem(f"-mllvm {value}", reason))
            continue
        if arg in _STRIPPED_WITH_VALUE:
            i += 1
            if value is None:
                problems.append(FlagProblem(arg, "has no value after it"))
            elif value.startswith("@"):
                problems.append(FlagProblem(value, "is a response file, which clang expands "
                                            "by reading it"))
            elif not recorded and arg in _OUTPUT_NAMES:
                problems.append(FlagProblem(f"{arg} {value}", "names an output file; a "
                                            "global_command_override may not (each compile "
                                            "chooses its own output)"))
            continue
        reason = _denied_reason(arg)
        if reason:
            problems.append(FlagProblem(arg, reason))
            if arg in ("-load", "-plugin", "-add-plugin", "-include", "-opt-record-file",
                       "-split-dwarf-output", "-header-include-file", "-diagnostic-log-file",
                       "-mlink-bitcode-file", "-mlink-builtin-bitcode", "-include-pch"):
                i += 1  # skip the value: it is part of this problem, not another one
            continue
        if arg in _SEPARATE_VALUE:
            i += 1
            if value is None:
                problems.append(FlagProblem(arg, "has no value after it"))
            elif value.startswith("@"):
                problems.append(FlagProblem(value, "is a response file, which clang expands "
                                            "by reading it"))
            continue
        if arg.startswith("-f") and "=" in arg and "/" in arg.partition("=")[2] and not (
            arg.startswith(_PATH_STRING_FLAGS)
        ):
            problems.append(FlagProblem(arg, "has a path as its value; only the allowlisted "
                                        "path-string flags may (a flag you have checked can be "
                                        "allowed with MLGO_ALLOW_FLAGS)"))
            continue
        if not _allowed_by_family(arg):
            problems.append(FlagProblem(arg, "is not on the cc1 flag allowlist (see "
                                        "pymlgo.corpus.allowlist; a flag you have checked can "
                                        "be allowed with MLGO_ALLOW_FLAGS)"))
    return problems


def check_cc1_args(
    args: Sequence[str],
    *,
    origin: str,
    recorded: bool = True,
    thinlto: bool = False,
    extra_allowed: Iterable[str] = (),
) -> None:
    """Raise UnsafeFlagError naming every refused flag of `args` (from `origin`)."""
    problems = unsafe_flags(args, recorded=recorded, thinlto=thinlto,
                            extra_allowed=extra_allowed)
    if problems:
        shown = "; ".join(str(p) for p in problems[:5])
        more = f"; ... ({len(problems) - 5} more)" if len(problems) > 5 else ""
        raise UnsafeFlagError(f"{origin}: refused flag(s): {shown}{more}")


# Driver flags refused in a global_command_override before clang's driver even sees it:
# the driver expands @FILE itself, and these name outputs or plugins.
_DRIVER_DENIED: dict[str, str] = {
    "-o": _WRITES, "-MF": _WRITES, "-MD": _WRITES, "-MMD": _WRITES, "-save-temps": _WRITES,
    "-save-temps=": _WRITES, "-fsave-optimization-record": _WRITES,
    "-foptimization-record-file=": _WRITES, "-fproc-stat-report": _WRITES,
    "-ftime-trace": _WRITES, "-gsplit-dwarf": _WRITES, "-fplugin=": _CODE,
    "-fpass-plugin=": _CODE, "-fplugin-arg-": _CODE, "-Xclang": _TOOL, "-Wl,": _TOOL,
    "-Xlinker": _TOOL, "-B": "points the driver at other tool binaries",
    "--config": _READS, "--config=": _READS,
}  # fmt: skip


def unsafe_driver_flags(args: Sequence[str]) -> list[FlagProblem]:
    """Refused arguments of a driver-form override (before it is turned into cc1 flags)."""
    problems = []
    for i, arg in enumerate(args):
        prev = args[i - 1] if i else ""
        if arg.startswith("@"):
            problems.append(FlagProblem(arg, "is a response file, which clang expands by "
                                        "reading it"))
        elif prev == "-mllvm":
            reason = _mllvm_problem(arg)
            if reason:
                problems.append(FlagProblem(f"-mllvm {arg}", reason))
        elif arg in _DRIVER_DENIED:
            problems.append(FlagProblem(arg, _DRIVER_DENIED[arg]))
        else:
            for key, reason in _DRIVER_DENIED.items():
                joined = key.endswith(("=", "-", ",")) or key in ("-B", "-MF", "-ftime-trace")
                if joined and arg.startswith(key):
                    problems.append(FlagProblem(arg, reason))
                    break
    return problems
