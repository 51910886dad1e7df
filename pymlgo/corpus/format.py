"""The corpus on disk, in the layout LLVM's mlgo-utils writes and ml-compiler-opt reads.

A corpus directory holds `corpus_description.json`:

    {"modules": ["rel/path", ...], "has_thinlto": false, "global_command_override": [...]?}

and for every module `rel/path.bc` (the pre-optimization bitcode), `rel/path.cmd` (the cc1
arguments, NUL-terminated, first `-cc1`; optional when `global_command_override` is set) and,
for ThinLTO corpora, `rel/path.thinlto.bc` (the module's summary index).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import posixpath
import shlex
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pymlgo.corpus.allowlist import check_cc1_args, unsafe_driver_flags
from pymlgo.corpus.command import FlagEdits, parse_cmd

DESCRIPTION_FILE = "corpus_description.json"
BC_SUFFIX = ".bc"
CMD_SUFFIX = ".cmd"
THINLTO_SUFFIX = ".thinlto.bc"
# Written by mlgo-utils' extract for local ThinLTO: the user must fill in a real command.
UNSPECIFIED_OVERRIDE = ("<UNSPECIFIED>",)


class CorpusError(ValueError):
    """A corpus (or its input) is missing, malformed or inconsistent."""


def package_of(module: str) -> str:
    """The source package of a module name: its first path component (`mlgo corpus
    snapshot` and `mlgo corpus debian` name modules PKG/...; splits are by package)."""
    return module.split("/", 1)[0]


@dataclass(frozen=True)
class Module:
    """One compilation unit: its bitcode and the cc1 command that compiles it."""

    name: str
    bc_path: Path
    cmd: tuple[str, ...]
    thinlto_index: Path | None = field(default=None, compare=False)

    @property
    def package(self) -> str:
        """Source package, the first path component of the name (splits are by package)."""
        return package_of(self.name)

    def read_bitcode(self) -> bytes:
        return self.bc_path.read_bytes()


@dataclass(frozen=True)
class Corpus:
    """A loaded, validated corpus. `global_command_override` is as the description (or the
    caller) gave it, driver or cc1 flags; every module's `cmd` already has it applied, as cc1
    arguments."""

    root: Path
    modules: tuple[Module, ...]
    has_thinlto: bool = False
    global_command_override: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self.modules)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.modules)

    @property
    def packages(self) -> tuple[str, ...]:
        """Distinct packages, sorted."""
        return tuple(sorted({m.package for m in self.modules}))

    @functools.cached_property
    def _by_name(self) -> dict[str, Module]:
        return {m.name: m for m in self.modules}

    def module(self, name: str) -> Module:
        try:
            return self._by_name[name]
        except KeyError:
            raise CorpusError(f"no module {name!r} in corpus {self.root}") from None

    def subset(self, names: Iterable[str]) -> Corpus:
        """The modules named (corpus order kept); unknown names are an error, not skipped."""
        wanted = set(names)
        unknown = sorted(wanted - self._by_name.keys())
        if unknown:
            raise CorpusError(
                f"{len(unknown)} module(s) not in corpus {self.root}: {_first(unknown)}"
            )
        return replace(self, modules=tuple(m for m in self.modules if m.name in wanted))

    def with_edits(self, edits: FlagEdits) -> Corpus:
        """Every module's command with `edits` applied (delete, replace, then add).

        Apply edits here or in `recompile_args`, not both: additions would be doubled.
        """
        return replace(
            self, modules=tuple(replace(m, cmd=tuple(edits.apply(m.cmd))) for m in self.modules)
        )


def _first(items: Sequence[str], n: int = 5) -> str:
    shown = ", ".join(items[:n])
    return shown + (f", ... ({len(items) - n} more)" if len(items) > n else "")


def check_module_name(name: object) -> str:
    """A module name must be a relative, normalized POSIX path that stays inside the corpus."""
    if not isinstance(name, str) or not name:
        raise CorpusError(f"module name must be a non-empty string, got {name!r}")
    if "\0" in name or "\\" in name:
        raise CorpusError(f"module name {name!r} contains a NUL or a backslash")
    if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
        raise CorpusError(f"module name {name!r} is an absolute path; names are relative")
    parts = name.split("/")
    if ".." in parts:
        raise CorpusError(f"module name {name!r} contains '..' and would leave the corpus dir")
    if any(p in ("", ".") for p in parts):
        raise CorpusError(f"module name {name!r} is not a normalized path")
    return name


def read_description(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed corpus_description.json, with its types checked."""
    root = Path(root)
    path = root / DESCRIPTION_FILE
    if not root.is_dir():
        raise CorpusError(f"corpus directory {root} does not exist")
    if not path.is_file():
        raise CorpusError(
            f"{root} is not a corpus: it has no {DESCRIPTION_FILE} "
            "(make one with `mlgo corpus extract`, `make` or `capture`)"
        )
    try:
        desc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise CorpusError(f"{path} is not valid JSON: {exc}") from exc
    except OSError as exc:
        raise CorpusError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not isinstance(desc, dict):
        raise CorpusError(f"{path} must hold a JSON object")
    modules = desc.get("modules")
    if not isinstance(modules, list):
        raise CorpusError(f"{path} has no \"modules\" list")
    if not isinstance(desc.get("has_thinlto", False), bool):
        raise CorpusError(f"{path}: \"has_thinlto\" must be true or false")
    override = desc.get("global_command_override")
    if override is not None and not (
        isinstance(override, list) and all(isinstance(a, str) for a in override)
    ):
        raise CorpusError(f"{path}: \"global_command_override\" must be a list of strings")
    return desc


def write_corpus_description(
    root: str | os.PathLike[str],
    module_names: Iterable[str],
    *,
    has_thinlto: bool = False,
    global_command_override: Sequence[str] | None = None,
) -> Path:
    """Write corpus_description.json as mlgo-utils does (indent 2, override key first).

    The file is replaced atomically, so a reader never sees half of it.
    """
    names = [check_module_name(n) for n in module_names]
    desc: dict[str, Any] = {}
    if global_command_override is not None:
        desc["global_command_override"] = list(global_command_override)
    desc["has_thinlto"] = has_thinlto
    desc["modules"] = names
    return write_description_dict(root, desc)


def write_description_dict(root: str | os.PathLike[str], desc: dict[str, Any]) -> Path:
    """Write an already-built description (key order kept) atomically."""
    path = Path(root) / DESCRIPTION_FILE
    _atomic_write_text(path, json.dumps(desc, indent=2))
    return path


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_corpus(
    root: str | os.PathLike[str],
    *,
    command_override: Sequence[str] | None = None,
    edits: FlagEdits | None = None,
    clang: str | os.PathLike[str] | None = None,
    allow_flags: Sequence[str] = (),
) -> Corpus:
    """Read and validate a corpus; raise CorpusError naming the first problems found.

    Every `.cmd` and the override must pass the cc1 flag allowlist
    (`pymlgo.corpus.allowlist`): a flag that loads code, reads a file named by the corpus
    or writes outside the compile's work dir is refused, naming it. `allow_flags` accepts
    extra exact flags (or `-flag=` prefixes) the user has checked. The module files must
    lie inside the corpus directory (no symlink out of it). `edits` come from the user and
    are applied after the check.

    `command_override` replaces the corpus' own `global_command_override` (and every `.cmd`).
    An override written as clang *driver* flags (as mlgo-utils' `make_corpus --default_args`
    and ml-compiler-opt expect, e.g. `["-O2", "-c"]`) is turned into cc1 arguments with
    `clang -###` (the compiler from `clang`, $MLGO_CLANG or the bundled one); an override
    starting with `-cc1` is used as is. `edits` are applied to every module's command.
    """
    root = Path(root).absolute()
    desc = read_description(root)
    has_thinlto = bool(desc.get("has_thinlto", False))
    names = [check_module_name(n) for n in desc["modules"]]
    dupes = sorted(n for n, count in Counter(names).items() if count > 1)
    if dupes:
        raise CorpusError(f"{root}: modules listed more than once: {_first(dupes)}")

    override: tuple[str, ...] | None
    if command_override is not None:
        override = tuple(command_override)
    elif desc.get("global_command_override") is not None:  # null means absent
        override = tuple(desc["global_command_override"])
    else:
        override = None
    if override == UNSPECIFIED_OVERRIDE:
        raise CorpusError(
            f"{root / DESCRIPTION_FILE}: global_command_override is the placeholder "
            f"{list(UNSPECIFIED_OVERRIDE)}; fill in the compile flags for the modules"
        )
    override_cc1 = None
    if override is not None:
        override_cc1 = _override_as_cc1(override, clang)
        origin = "command override" if command_override is not None else (
            f"{root / DESCRIPTION_FILE}: global_command_override")
        _check_flags(override_cc1, origin, recorded=False, thinlto=has_thinlto,
                     allow_flags=allow_flags)
    real_root = root.resolve()

    problems: list[str] = []
    modules: list[Module] = []
    for name in names:
        try:
            loaded = _load_module(root, real_root, name, has_thinlto=has_thinlto,
                                  override_cc1=override_cc1, edits=edits,
                                  allow_flags=allow_flags)
        except OSError as exc:  # e.g. a name too long for the file system, no permission
            loaded = f"{name}: cannot read its files: {exc.strerror or exc}"
        except CorpusError as exc:
            loaded = str(exc)
        if isinstance(loaded, Module):
            modules.append(loaded)
        else:
            problems.append(loaded)
    if problems:
        raise CorpusError(
            f"corpus {root} is invalid ({len(problems)} problem(s)): " + "; ".join(problems[:5])
            + (f"; ... ({len(problems) - 5} more)" if len(problems) > 5 else "")
        )
    if not modules:
        raise CorpusError(f"corpus {root} lists no modules")
    return Corpus(
        root=root, modules=tuple(modules), has_thinlto=has_thinlto,
        global_command_override=override,
    )


def _load_module(
    root: Path, real_root: Path, name: str, *, has_thinlto: bool,
    override_cc1: tuple[str, ...] | None, edits: FlagEdits | None, allow_flags: Sequence[str],
) -> Module | str:
    """The module, or the problem that keeps it from loading."""
    outside = "outside the corpus directory (a symlink out of the corpus)"
    bc = root / (name + BC_SUFFIX)
    if not bc.is_file():
        return f"{name}: missing {bc.name}"
    if not _inside(bc, real_root):
        return f"{name}: {bc.name} resolves to {bc.resolve()}, {outside}"
    index = root / (name + THINLTO_SUFFIX) if has_thinlto else None
    if index is not None and not index.is_file():
        return f"{name}: has_thinlto is set but {index.name} is missing"
    if index is not None and not _inside(index, real_root):
        return f"{name}: {index.name} resolves to {index.resolve()}, {outside}"
    if override_cc1 is not None:
        cmd = override_cc1
    else:
        cmd_path = root / (name + CMD_SUFFIX)
        if not cmd_path.is_file():
            return f"{name}: missing {cmd_path.name} (and no global_command_override)"
        if not _inside(cmd_path, real_root):
            return f"{name}: {cmd_path.name} resolves to {cmd_path.resolve()}, {outside}"
        cmd = parse_cmd(cmd_path.read_bytes())
        if not cmd or cmd[0] != "-cc1":
            shown = " ".join(cmd[:3]) if cmd else "an empty command"
            return f"{name}: {cmd_path.name} must start with -cc1, found {shown!r}"
        _check_flags(cmd, f"{name}: {cmd_path.name}", recorded=True, thinlto=has_thinlto,
                     allow_flags=allow_flags)
    if index is not None:
        cmd = _point_at_index(cmd, index)
    if edits is not None:
        cmd = tuple(edits.apply(cmd))
    return Module(name=name, bc_path=bc, cmd=cmd, thinlto_index=index)


def _inside(path: Path, real_root: Path) -> bool:
    """`path`, symlinks resolved, lies under the (resolved) corpus root."""
    return path.resolve().is_relative_to(real_root)


def _check_flags(
    cmd: Sequence[str], origin: str, *, recorded: bool, thinlto: bool,
    allow_flags: Sequence[str],
) -> None:
    try:
        check_cc1_args(cmd, origin=origin, recorded=recorded, thinlto=thinlto,
                       extra_allowed=allow_flags)
    except ValueError as exc:
        raise CorpusError(str(exc)) from exc


def _point_at_index(cmd: tuple[str, ...], index: Path) -> tuple[str, ...]:
    """The recorded -fthinlto-index names a file in the build tree; use the corpus copy.

    `-thinlto-assume-merged` because the bitcode was saved after imports were merged.
    """
    kept = tuple(a for a in cmd if not a.startswith("-fthinlto-index="))
    return (*kept, f"-fthinlto-index={index}", "-mllvm", "-thinlto-assume-merged")


def _override_as_cc1(
    override: tuple[str, ...], clang: str | os.PathLike[str] | None
) -> tuple[str, ...]:
    if override and override[0] == "-cc1":
        return override
    refused = unsafe_driver_flags(override)
    if refused:
        # Checked before clang's driver sees them: it would expand @FILE itself.
        raise CorpusError(
            "global_command_override: refused flag(s): " + "; ".join(map(str, refused[:5]))
        )
    return driver_to_cc1(override, clang=None if clang is None else str(clang))


@functools.lru_cache(maxsize=32)
def driver_to_cc1(driver_args: tuple[str, ...], *, clang: str | None = None) -> tuple[str, ...]:
    """The cc1 arguments clang's driver would use to compile bitcode with `driver_args`.

    Asks the driver itself (`clang -### ARGS -c -x ir FILE`), so the flags mean exactly what
    they would on a command line; the input and output names are removed.
    """
    from pymlgo.toolchain.compiler import CompilerError, find_compiler
    from pymlgo.toolchain.run import private_tmpdir, run

    try:
        compiler = find_compiler(clang)
    except CompilerError as exc:
        raise CorpusError(f"cannot translate global_command_override: {exc}") from exc
    with private_tmpdir("mlgo-override-") as tmp:
        src, obj = tmp / "module.bc", tmp / "module.o"
        src.write_bytes(b"")
        argv = [*compiler.clang_argv, "-###", *driver_args, "-c", "-x", "ir", str(src)]
        res = run([*argv, "-o", str(obj)], timeout=60)
    lines = [ln for ln in res.stderr.splitlines() if '"-cc1"' in ln]
    if res.returncode != 0 or len(lines) != 1:
        # `-###` echoes the long cc1 line it would run; clang's own complaints are the lines
        # that say `error:` (e.g. "unsupported option '-mcpu='"), so show those first.
        errors = [ln.strip() for ln in res.stderr.splitlines() if "error:" in ln]
        raise CorpusError(
            f"clang does not accept global_command_override {list(driver_args)}: "
            + ("; ".join(errors) if errors else res.stderr.strip())[-500:]
        )
    argv = shlex.split(lines[0])
    cc1 = argv[argv.index("-cc1"):]
    out: list[str] = []
    i = 0
    while i < len(cc1):
        if cc1[i] in ("-o", "-main-file-name", "-x"):
            i += 2  # per-invocation names; recompile_args supplies its own
            continue
        if cc1[i] != str(src):
            out.append(cc1[i])
        i += 1
    return tuple(out)


@contextlib.contextmanager
def staged_dir(target: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Build an output directory next to `target` and move it into place only on success.

    An interrupted or failed build leaves `target` as it was (absent, empty, or the previous
    corpus); the staging dir is a hidden sibling, so the final rename is atomic.
    """
    target = Path(target).absolute()
    if target.exists():
        if not target.is_dir():
            raise CorpusError(f"output {target} exists and is not a directory")
        if any(target.iterdir()) and not overwrite:
            raise CorpusError(
                f"output directory {target} is not empty; choose another or pass --overwrite"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    # mkdtemp makes the dir 0700; the corpus should get the usual umask-based mode.
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    try:
        yield tmp
        if target.exists():
            old = target.with_name(f".{target.name}.{os.getpid()}.old")
            os.rename(target, old)
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
