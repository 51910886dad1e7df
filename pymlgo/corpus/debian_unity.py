"""Unity modules: big corpus modules made from a package's own recorded compiles.

Most real modules are small; a policy must also see big ones (many functions, long call
chains), as unity/amalgamated builds make them. After a package's build, its recorded
compiles are grouped by their flags (same directory, language and options but the source
and output), and each group is cut into batches of at most a few hundred KiB of source.
A batch becomes one file `_unity/...` that `#include`s its sources by absolute path, and is
compiled with the group's flags, for the build's target, with bitcode embedded.

This works for any build system (CMake, autotools, plain make), unlike CMake's
UNITY_BUILD. Sources that do not compile together (two `static` functions of one name, a
macro one file leaves behind) make a batch fail at the first source that clashes with an
earlier one: the sources before it become one module, and the batch goes on from that source
(when no source can be blamed, each half is tried on its own); pieces too small to be big
modules are dropped (their sources are in the corpus as ordinary modules anyway).

The modules land in the package's sub-corpus as `_unity/...`, so
their names start with the package and a split never separates them from it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymlgo.corpus.capture import DEFAULT_CPU, DEFAULT_TARGET, EMBED_FLAGS, target_flags
from pymlgo.toolchain.compiler import Compiler

UNITY_DIR = "_unity"
# Per batch: own source bytes (headers not counted) and files. Measured on libpng: 512 KiB
# of C gave 45-57 KiB of -Oz code, so C batches take 1 MiB to pass 64 KiB; C++ sources pull
# in far more from headers and templates, so its batches are smaller.
BATCH_BYTES = {"c": 1024 * 1024, "c++": 384 * 1024}
BATCH_FILES = 96
MIN_SOURCES = 2
# A batch with less source than this is no big module: not worth a second compile.
MIN_BATCH_BYTES = 24 * 1024
COMPILE_TIMEOUT = 1800.0
# Template-heavy C++ (gmock's tests) made 2.9 MB of code from 384 KiB of source: a unity
# object past this much code is split in two, so no module dwarfs the rest of the corpus.
MAX_CODE_BYTES = 512 * 1024

# Per-object options: they name this object's files, not how it is compiled.
_PER_OBJECT_WITH_VALUE = frozenset({"-o", "-MF", "-MT", "-MQ", "-MJ"})
_PER_OBJECT = frozenset({"-c", "-MD", "-MMD", "-MP"})
_C_EXTS = frozenset({".c"})
_CXX_EXTS = frozenset({".cc", ".cpp", ".cxx", ".c++", ".C"})


@dataclass(frozen=True)
class UnityResult:
    modules: int  # unity objects compiled
    sources: int  # sources they cover
    failed_batches: int  # batches (of >= 2 sources) that never compiled


@dataclass(frozen=True)
class _Group:
    directory: str
    lang: str
    options: tuple[str, ...]
    sources: tuple[Path, ...]
    out_dir: str  # the first object's directory relative to the build copy


def _strip_options(args: Sequence[str], source: str) -> list[str] | None:
    """The compile options of a recorded command, without driver, target, embedding and the
    per-object ones; None when the command is not one plain source compile."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-target", "--target") or arg in _PER_OBJECT_WITH_VALUE:
            i += 2
            continue
        if arg == "-Xclang" and i + 1 < len(args) and args[i + 1].startswith("-fembed-bitcode"):
            i += 2
            continue
        if (arg in _PER_OBJECT or arg == source or arg.startswith(("--target=", "-mcpu=", "-o"))
                or arg.startswith(("-Wp,-M", "-Werror")) or arg.startswith("-MF")):
            i += 1
            continue
        if arg.startswith("@"):
            return None  # response files: the options are not all visible here
        out.append(arg)
        i += 1
    return out


def plan_groups(entries: Sequence[dict[str, Any]], compiler: Compiler,
                workdir: Path) -> list[_Group]:
    """Recorded compiles grouped by everything but their source and object."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[Path]] = {}
    out_dirs: dict[tuple[str, str, tuple[str, ...]], str] = {}
    seen: set[Path] = set()
    for entry in entries:
        args = [str(a) for a in entry.get("arguments", ())]
        if args[:len(compiler.cxx_argv)] == list(compiler.cxx_argv):
            lang, rest = "c++", args[len(compiler.cxx_argv):]
        elif args[:len(compiler.cc_argv)] == list(compiler.cc_argv):
            lang, rest = "c", args[len(compiler.cc_argv):]
        else:
            continue
        directory = str(entry.get("directory", ""))
        src = Path(directory, str(entry.get("file", "")))
        ext = src.suffix
        # The driver decides the language by the extension unless -x says otherwise; keep
        # only sources whose extension matches, so the unity file's own extension agrees.
        if (ext not in (_CXX_EXTS if lang == "c++" else _C_EXTS)) or "-x" in rest:
            continue
        src = Path(os.path.normpath(src))
        if src in seen or not src.is_file():
            continue
        options = _strip_options(rest, str(entry.get("file", "")))
        if options is None:
            continue
        seen.add(src)
        key = (directory, lang, tuple(options))
        groups.setdefault(key, []).append(src)
        if key not in out_dirs:
            out = Path(directory, str(entry.get("output", ""))).parent
            try:
                out_dirs[key] = out.relative_to(workdir).as_posix()
            except ValueError:
                out_dirs[key] = "other"
    return [_Group(d, lang, opts, tuple(srcs), out_dirs[(d, lang, opts)])
            for (d, lang, opts), srcs in groups.items() if len(srcs) >= MIN_SOURCES]


def batches(group: _Group) -> list[list[Path]]:
    """Consecutive sources (sorted by path, so neighbours go together) up to the limits."""
    limit = BATCH_BYTES[group.lang]
    out: list[list[Path]] = []
    current: list[Path] = []
    size = 0
    for src in sorted(group.sources):
        n = src.stat().st_size
        if current and (size + n > limit or len(current) >= BATCH_FILES):
            out.append(current)
            current, size = [], 0
        current.append(src)
        size += n
    if current:
        out.append(current)
    return [b for b in out if len(b) >= MIN_SOURCES
            and sum(s.stat().st_size for s in b) >= MIN_BATCH_BYTES]


def code_bytes(obj: Path) -> int:
    """Executable bytes of an object (0 if it cannot be read: then it is kept as is)."""
    from pymlgo.toolchain.size import object_size

    try:
        return int(object_size(obj).code)
    except (OSError, ValueError):
        return 0


def big_enough(batch: Sequence[Path], factor: int) -> bool:
    """At least `factor` times the minimum a unity batch needs, in sources and bytes."""
    return (len(batch) >= factor * MIN_SOURCES
            and sum(s.stat().st_size for s in batch) >= factor * MIN_BATCH_BYTES)


def first_clash(stderr_lines: Sequence[str], unity_src: Path, batch: Sequence[Path]
                ) -> int | None:
    """Index in `batch` of the source where the first error of a unity compile is: the file
    of the error itself, or the unity file's `#include` line the error came through."""
    index = {str(s): i for i, s in enumerate(batch)}
    included_at: int | None = None
    prefix = f"In file included from {unity_src}:"
    for line in stderr_lines:
        if line.startswith(prefix):
            number = line[len(prefix):].split(":")[0]
            # Line 1 is the comment; source i is included on line i + 2.
            included_at = int(number) - 2 if number.isdigit() else None
            continue
        if "error:" in line:
            where = line.split(":")[0]
            if where in index:
                return index[where]
            return included_at if included_at is not None and 0 <= included_at < len(
                batch) else None
        if not line.startswith("In file included from"):
            included_at = None  # a note or a snippet: the chain above is over
    return None


def build_unity_modules(
    entries: Sequence[dict[str, Any]],
    workdir: Path,
    compiler: Compiler,
    *,
    jobs: int = 2,
    log: Any = None,
    target: str = DEFAULT_TARGET,
    cpu: str = DEFAULT_CPU,
) -> tuple[list[dict[str, Any]], UnityResult]:
    """Compile the unity batches of a build in `workdir` (still holding its build).

    Returns compile_commands entries for the objects made (under `workdir/_unity/`), ready for
    extraction with `obj_base_dir=workdir`, and counts. `target` and `cpu` are the build's
    (its other target flags, e.g. `-mthumb` or a stock clang's libc headers, are among the
    recorded options each group keeps).
    """
    driver_flags = target_flags(compiler, target, cpu)
    groups = plan_groups(entries, compiler, workdir)
    jobs_list: list[tuple[_Group, list[Path], Path]] = []
    # Groups that share an output directory (one directory compiled twice with other
    # defines, as openssl's providers are) need names of their own: with one name, one
    # group's failed batch deleted the other's unity source.
    per_dir: dict[str, int] = {}
    for group in groups:
        n = per_dir[group.out_dir] = per_dir.get(group.out_dir, -1) + 1
        prefix = "unity" if n == 0 else f"g{n}unity"
        for k, batch in enumerate(batches(group)):
            stem = Path(workdir, UNITY_DIR, group.out_dir, f"{prefix}{k}")
            jobs_list.append((group, batch, stem))

    def compile_batch(group: _Group, batch: list[Path], stem: Path) -> list[dict[str, Any]]:
        ext = ".cc" if group.lang == "c++" else ".c"
        src = stem.with_suffix(ext)
        obj = stem.with_suffix(ext + ".o")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(
            f"/* pymlgo unity module: {len(batch)} sources compiled as one */\n"
            + "".join(f'#include "{s}"\n' for s in batch), encoding="utf-8")
        driver = list(compiler.cxx_argv if group.lang == "c++" else compiler.cc_argv)
        argv = [*driver, *driver_flags, *EMBED_FLAGS, *group.options, "-c", str(src),
                "-o", str(obj)]
        try:
            proc = subprocess.run(argv, cwd=group.directory, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=COMPILE_TIMEOUT,
                                  check=False)
            ok = proc.returncode == 0
            lines = proc.stderr.strip().splitlines()
            why = ([ln for ln in lines if "error:" in ln] or lines)[:2] if not ok else []
        except subprocess.TimeoutExpired:
            ok, lines, why = False, [], ["timed out"]
        if ok and len(batch) >= 2 and code_bytes(obj) > MAX_CODE_BYTES:
            if log is not None:
                print(f"mlgo unity: {src.relative_to(workdir)} ({len(batch)} sources) has "
                      f"over {MAX_CODE_BYTES} bytes of code: split", file=log, flush=True)
            obj.unlink(missing_ok=True)
            src.unlink(missing_ok=True)
            k = len(batch) // 2
            halves = [(batch[:k], "a"), (batch[k:], "b")]
            return [e for half, tag in halves if len(half) >= MIN_SOURCES
                    for e in compile_batch(group, half, stem.with_name(stem.name + tag))]
        if ok:
            return [{"directory": group.directory, "arguments": argv, "file": str(src),
                     "output": str(obj)}]
        if log is not None:
            print(f"mlgo unity: {src.relative_to(workdir)} ({len(batch)} sources) failed: "
                  + " | ".join(why), file=log, flush=True)
        src.unlink(missing_ok=True)
        if not big_enough(batch, 2):
            return []
        k = first_clash(lines, src, batch)
        if k is None:
            # No source to blame (a timeout, an unusual message): try each half on its own.
            k = len(batch) // 2
            return [*compile_batch(group, batch[:k], stem.with_name(stem.name + "a")),
                    *compile_batch(group, batch[k:], stem.with_name(stem.name + "b"))]
        # Source k clashes with one before it, which all compiled together up to there: keep
        # those as one module and go on from source k (it may fit with the ones after it).
        head = compile_batch(group, batch[:k], stem.with_name(stem.name + "a")) if (
            big_enough(batch[:k], 1)) else []
        rest = batch[max(k, 1):]
        tail = compile_batch(group, rest, stem.with_name(stem.name + "b")) if (
            big_enough(rest, 1)) else []
        return [*head, *tail]

    made: list[dict[str, Any]] = []
    failed = 0
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for done in pool.map(lambda j: compile_batch(*j), jobs_list):
            made.extend(done)
            failed += not done
    covered = sum(Path(e["file"]).read_text(encoding="utf-8").count("#include") for e in made)
    return made, UnityResult(modules=len(made), sources=covered, failed_batches=failed)
