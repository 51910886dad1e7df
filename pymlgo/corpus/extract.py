"""Extract a corpus from a build: each object's embedded bitcode and cc1 command.

Objects compiled with `-Xclang -fembed-bitcode=all` carry the pre-optimization module in
section `.llvmbc` and the cc1 arguments in `.llvmcmd`; both are read here in Python (no
llvm-objcopy). Input lists come from a `compile_commands.json`, a linker parameters file, or
a directory walk, as in LLVM's mlgo-utils `extract_ir`, and the output is the same layout.

Module names are object paths relative to the object base directory, with the `.o`
extension dropped (`lib/compress/zstd_compress.o` -> `lib/compress/zstd_compress`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from tqdm import tqdm

from pymlgo.corpus.format import (
    BC_SUFFIX,
    CMD_SUFFIX,
    THINLTO_SUFFIX,
    UNSPECIFIED_OVERRIDE,
    CorpusError,
    check_module_name,
    staged_dir,
    write_corpus_description,
)
from pymlgo.toolchain.elf import NotELFError, read_sections

ThinLTOBuild = Literal["distributed", "local"]
OBJECT_SUFFIXES = (".o", ".obj")
# lld's --save-temps name for the post-import, pre-optimization module of a local ThinLTO link.
LOCAL_THINLTO_SUFFIX = ".3.import.bc"
_SHOW = 5  # names shown per category in the report


@dataclass(frozen=True)
class ObjectInput:
    """An object file to read and the module name it gets in the corpus."""

    path: Path
    name: str


@dataclass
class ExtractResult:
    """What happened to every input object; only `modules` made it into the corpus."""

    output_dir: Path
    modules: list[str] = field(default_factory=list)
    no_bitcode: list[str] = field(default_factory=list)
    not_elf: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    filtered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)

    def record(self, outcome: str, detail: str) -> None:
        """File `detail` under `outcome`, one of: ok, missing, no_bitcode, not_elf, filtered,
        failed."""
        getattr(self, "modules" if outcome == "ok" else outcome).append(detail)

    @property
    def total(self) -> int:
        return sum(
            len(x) for x in (self.modules, self.no_bitcode, self.not_elf, self.missing,
                             self.filtered, self.failed, self.duplicates)
        )

    def summary(self) -> str:
        lines = [f"extracted {len(self.modules)} module(s) of {self.total} object(s)"]
        for items, what in (
            (self.no_bitcode, "had no embedded bitcode (.llvmbc/.llvmcmd); compile them with "
             "-Xclang -fembed-bitcode=all (objects built from assembly never have it)"),
            (self.not_elf, "are not ELF objects"),
            (self.missing, "do not exist (not built, or deleted by the build)"),
            (self.filtered, "did not match --cmd_filter"),
            (self.failed, "failed"),
            (self.duplicates, "map to a module name already taken, skipped"),
        ):
            if items:
                shown = ", ".join(items[:_SHOW]) + (", ..." if len(items) > _SHOW else "")
                lines.append(f"  {len(items)} {what}: {shown}")
        return "\n".join(lines)


def module_name_for(obj: Path, base: Path, *, strip: Sequence[str] = OBJECT_SUFFIXES) -> str:
    """Corpus name for an object: its path under `base`, without the object extension.

    An object outside `base` keeps its absolute path minus the leading `/`, so it can never
    escape the corpus dir or collide with a relative name by accident.
    """
    obj = Path(os.path.normpath(obj.absolute()))
    base = Path(os.path.normpath(base.absolute()))
    rel = obj.relative_to(base) if obj.is_relative_to(base) else obj.relative_to(obj.anchor)
    name = PurePosixPath(*rel.parts).as_posix()
    for suffix in strip:
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return check_module_name(name)


# --- input lists ---------------------------------------------------------------------------


def _output_of(entry: dict[str, Any]) -> str | None:
    if isinstance(entry.get("output"), str):
        return str(entry["output"])
    if isinstance(entry.get("arguments"), list):
        args = [str(a) for a in entry["arguments"]]
    elif isinstance(entry.get("command"), str):
        args = shlex.split(entry["command"])  # ValueError on unbalanced quotes
    else:
        return None
    for i, arg in enumerate(args):
        if arg == "-o" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-obj"):
            return arg[2:]
    return None


def objects_from_compile_commands(
    entries: Iterable[dict[str, Any]] | str | os.PathLike[str],
    *,
    obj_base_dir: str | os.PathLike[str] | None = None,
) -> list[ObjectInput]:
    """Objects named by `-o` (or an `output` key) in a compilation database.

    Names are relative to `obj_base_dir` when given, else to each entry's `directory`.
    Entries with no output (not a compile, or a tool other than a compiler) are skipped.
    """
    default_dir = Path.cwd()
    if isinstance(entries, (str, os.PathLike)):
        path = Path(entries)
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CorpusError(f"cannot read compilation database {path}: {exc}") from exc
        if not isinstance(loaded, list):
            raise CorpusError(f"{path} must hold a JSON list of compile commands")
        entries, default_dir = loaded, path.parent.absolute()
    out: list[ObjectInput] = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise CorpusError(f"compile command is not a JSON object: {entry!r:.200}")
        try:
            output = _output_of(entry)
        except ValueError as exc:
            raise CorpusError(
                f"compile command #{number} (file {entry.get('file', '?')!r}) has a "
                f"malformed \"command\" string ({exc}): {entry['command']!r:.200}"
            ) from exc
        if output is None:
            continue
        directory = Path(entry.get("directory") or default_dir)
        obj = directory / output
        base = Path(obj_base_dir) if obj_base_dir is not None else directory
        out.append(ObjectInput(path=obj, name=module_name_for(obj, base)))
    return out


def objects_from_params(
    params: str | os.PathLike[str], *, obj_base_dir: str | os.PathLike[str] | None = None
) -> list[ObjectInput]:
    """Objects named in a linker parameters (response) file; relative to `obj_base_dir`
    (default: the current directory), like the linker that read it."""
    path = Path(params)
    try:
        args = shlex.split(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorpusError(f"cannot read linker parameters file {path}: {exc}") from exc
    base = Path(obj_base_dir) if obj_base_dir else Path.cwd()
    out: list[ObjectInput] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        if arg == "-o":
            skip_next = True  # the link output, not an input
            continue
        if arg.startswith("-") or not arg.endswith(OBJECT_SUFFIXES):
            continue
        obj = base / arg
        out.append(ObjectInput(path=obj, name=module_name_for(obj, base)))
    return out


def objects_from_directory(directory: str | os.PathLike[str]) -> list[ObjectInput]:
    """Every `*.o` / `*.obj` under `directory`, named relative to it."""
    base = Path(directory)
    if not base.is_dir():
        raise CorpusError(f"input directory {base} does not exist")
    objs = sorted(p for p in base.rglob("*") if p.name.endswith(OBJECT_SUFFIXES) and p.is_file())
    return [ObjectInput(path=p, name=module_name_for(p, base)) for p in objs]


def objects_for_local_thinlto(obj_base_dir: str | os.PathLike[str]) -> list[ObjectInput]:
    """The `*.3.import.bc` files lld's `--save-temps=import` left under `obj_base_dir`."""
    base = Path(obj_base_dir)
    if not base.is_dir():
        raise CorpusError(f"object base directory {base} does not exist")
    found = sorted(base.rglob("*" + LOCAL_THINLTO_SUFFIX))
    strip = (*(s + LOCAL_THINLTO_SUFFIX for s in OBJECT_SUFFIXES), LOCAL_THINLTO_SUFFIX)
    return [ObjectInput(path=p, name=module_name_for(p, base, strip=strip)) for p in found]


# --- extraction ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    out_root: Path
    obj_base_dir: Path | None
    cmd_filter: str | None
    thinlto_build: ThinLTOBuild | None
    cmd_section: str
    bitcode_section: str


def _matches(cmd: bytes, pattern: str) -> bool:
    """mlgo-utils semantics: the regex is searched in each argument separately."""
    rx = re.compile(pattern)
    return any(rx.search(a.decode("utf-8", "surrogateescape")) for a in cmd.split(b"\0") if a)


def _extract_one(obj: ObjectInput, opt: _Options) -> tuple[str, str]:
    """Write one module's files; returns (outcome, detail) for the report."""
    dest = opt.out_root / obj.name
    if opt.thinlto_build == "local":
        index = Path(str(obj.path)[: -len(LOCAL_THINLTO_SUFFIX)] + THINLTO_SUFFIX)
        if not obj.path.is_file():
            return "missing", str(obj.path)
        if not index.is_file():
            return "failed", f"{obj.path}: no ThinLTO index {index.name}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(obj.path, str(dest) + BC_SUFFIX)
        shutil.copyfile(index, str(dest) + THINLTO_SUFFIX)
        return "ok", obj.name
    try:
        data = obj.path.read_bytes()
    except FileNotFoundError:
        return "missing", str(obj.path)
    except OSError as exc:
        return "failed", f"{obj.path}: {exc}"
    try:
        sections = read_sections(data, (opt.bitcode_section, opt.cmd_section))
    except NotELFError:
        return "not_elf", str(obj.path)
    bitcode, cmd = sections[opt.bitcode_section], sections[opt.cmd_section]
    if not bitcode or cmd is None:
        return "no_bitcode", str(obj.path)
    if opt.cmd_filter is not None and not _matches(cmd, opt.cmd_filter):
        return "filtered", str(obj.path)
    index_src: Path | None = None
    if opt.thinlto_build == "distributed":
        flag = b"-fthinlto-index="
        found = [a[len(flag):] for a in cmd.split(b"\0") if a.startswith(flag)]
        if not found:
            return "failed", f"{obj.path}: command has no -fthinlto-index="
        base = opt.obj_base_dir if opt.obj_base_dir is not None else Path.cwd()
        index_src = base / os.fsdecode(found[0])
        if not index_src.is_file():
            return "failed", f"{obj.path}: ThinLTO index {index_src} not found"
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The .cmd is the raw section: byte-identical to llvm-objcopy --dump-section.
    Path(str(dest) + CMD_SUFFIX).write_bytes(cmd)
    Path(str(dest) + BC_SUFFIX).write_bytes(bitcode)
    if index_src is not None:
        shutil.copyfile(index_src, str(dest) + THINLTO_SUFFIX)
    return "ok", obj.name


def _extract_star(job: tuple[ObjectInput, _Options]) -> tuple[str, str]:
    return _extract_one(*job)


def _run(jobs: list[tuple[ObjectInput, _Options]], workers: int) -> Iterator[tuple[str, str]]:
    # Reading ELF with pyelftools is CPU-bound Python: processes, not threads. A handful of
    # objects is faster in-process than a pool's start-up.
    if workers == 1 or len(jobs) < 16:
        yield from map(_extract_star, jobs)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(_extract_star, jobs, chunksize=max(1, len(jobs) // (workers * 8)))


def extract_objects(
    objects: Sequence[ObjectInput],
    output_dir: str | os.PathLike[str],
    *,
    num_workers: int | None = None,
    obj_base_dir: str | os.PathLike[str] | None = None,
    cmd_filter: str | None = None,
    thinlto_build: ThinLTOBuild | None = None,
    cmd_section_name: str = ".llvmcmd",
    bitcode_section_name: str = ".llvmbc",
    overwrite: bool = False,
    progress: bool = True,
    extra_files: dict[str, bytes] | None = None,
) -> ExtractResult:
    """Write a corpus of `objects` into `output_dir`, all or nothing.

    Objects without embedded bitcode, non-ELF files and missing files are reported in the
    result, not fatal; no module at all is a CorpusError. `extra_files` (relative name ->
    bytes) are written into the corpus dir too (capture keeps its compile_commands.json).
    """
    if cmd_filter is not None:
        try:
            re.compile(cmd_filter)
        except re.error as exc:
            raise CorpusError(f"--cmd_filter {cmd_filter!r} is not a valid regex: {exc}") from exc
    result = ExtractResult(output_dir=Path(output_dir).absolute())
    unique: list[ObjectInput] = []
    by_name: dict[str, Path] = {}
    for obj in objects:
        seen = by_name.get(obj.name)
        if seen is None:
            by_name[obj.name] = obj.path
            unique.append(obj)
        elif os.path.normpath(seen.absolute()) != os.path.normpath(obj.path.absolute()):
            result.duplicates.append(f"{obj.path} (as {obj.name})")
    with staged_dir(output_dir, overwrite=overwrite) as tmp:
        opts = _Options(
            out_root=tmp,
            obj_base_dir=None if obj_base_dir is None else Path(obj_base_dir).absolute(),
            cmd_filter=cmd_filter,
            thinlto_build=thinlto_build,
            cmd_section=cmd_section_name,
            bitcode_section=bitcode_section_name,
        )
        workers = max(1, num_workers or os.cpu_count() or 1)
        jobs = [(obj, opts) for obj in unique]
        with tqdm(total=len(jobs), desc="extract", unit="obj", disable=not progress,
                  file=sys.stderr, dynamic_ncols=True) as bar:
            for kind, detail in _run(jobs, workers):
                result.record(kind, detail)
                bar.update(1)
        if not result.modules:
            raise CorpusError("no module extracted, nothing written\n" + result.summary())
        result.modules.sort()
        for rel, data in (extra_files or {}).items():
            (tmp / rel).write_bytes(data)
        # Local ThinLTO records no command: mlgo-utils writes a placeholder to fill in.
        placeholder = list(UNSPECIFIED_OVERRIDE) if thinlto_build == "local" else None
        write_corpus_description(
            tmp, result.modules, has_thinlto=thinlto_build is not None,
            global_command_override=placeholder,
        )
    return result
