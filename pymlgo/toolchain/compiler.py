"""Find the clang that pymlgo drives: the bundled `zig clang`, any clang >= 17, or the clang
inside another `zig` binary (each zig release bundles its own LLVM)."""

from __future__ import annotations

import errno
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The interactive (host-on-FIFOs) model runner first shipped in LLVM 17.
MIN_CLANG_MAJOR = 17
CLANG_ENV_VAR = "MLGO_CLANG"

_VERSION_RE = re.compile(r"clang version (\d+)\.(\d+)\.(\d+)")


class CompilerError(RuntimeError):
    """The compiler cannot be found or is not usable by pymlgo."""


@dataclass(frozen=True)
class Compiler:
    """A clang that can be run as cc1 (`clang_argv`) and as a driver (`cc_argv`, `cxx_argv`).

    `bundled`: the `zig` of the installed ziglang wheel, the one a worker finds by itself.
    `zig`: `path` is a zig binary whose clang runs as `zig clang` / `zig cc` (true for the
    bundled one, and for any other zig given as --clang).
    """

    path: Path
    version: str
    bundled: bool
    zig: bool = False

    def __post_init__(self) -> None:
        if self.bundled and not self.zig:
            object.__setattr__(self, "zig", True)

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def clang_argv(self) -> tuple[str, ...]:
        """Prefix that runs the clang binary itself (add `-cc1 ...` or driver args)."""
        return (str(self.path), "clang") if self.zig else (str(self.path),)

    @property
    def cc_argv(self) -> tuple[str, ...]:
        """Prefix for a C compiler driver (zig's driver brings its own libc headers)."""
        return (str(self.path), "cc") if self.zig else (str(self.path),)

    @property
    def cxx_argv(self) -> tuple[str, ...]:
        if self.zig:
            return (str(self.path), "c++")
        return (str(_cxx_sibling(self.path)),)

    @property
    def identity(self) -> str:
        """Stable key for caches that depend on the compiler (baseline sizes)."""
        st = self.path.stat()
        return f"{self.version}:{self.path}:{st.st_size}:{int(st.st_mtime)}"

    def describe(self) -> dict[str, str]:
        return {"path": str(self.path), "version": self.version}


def _cxx_sibling(clang: Path) -> Path:
    """clang-18 -> clang++-18 next to it, else the clang binary itself (it accepts C++)."""
    name = clang.name.replace("clang", "clang++", 1)
    cand = clang.with_name(name)
    return cand if cand.exists() else clang


def bundled_zig() -> Path:
    """The `zig` binary inside the installed `ziglang` wheel (called directly: ~2x faster
    than `python -m ziglang`)."""
    try:
        import ziglang
    except ImportError as exc:  # pragma: no cover - hard dependency
        raise CompilerError(
            "the bundled compiler is missing: `pip install ziglang==0.17.1` "
            "or select another clang with --clang PATH / MLGO_CLANG"
        ) from exc
    exe = Path(ziglang.__file__).parent / ("zig.exe" if os.name == "nt" else "zig")
    if not exe.is_file():
        raise CompilerError(
            f"ziglang is installed but has no zig binary at {exe}: ziglang ships the binary "
            f"in a wheel per platform, and none was installed for this one "
            f"({platform.system()} {platform.machine()}). Reinstall it with "
            "`pip install --force-reinstall --only-binary :all: ziglang==0.17.1`, or use "
            f"another clang >= {MIN_CLANG_MAJOR} with --clang PATH / ${CLANG_ENV_VAR}"
        )
    return exe


def _run_version(argv: list[str]) -> str:
    """What `argv --version` prints (stdout and stderr)."""
    try:
        out = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        hint = ""
        if exc.errno == errno.ENOEXEC:
            hint = (f": it is a binary for another platform than this one "
                    f"({platform.system()} {platform.machine()}); install the build for this "
                    f"platform or use another clang >= {MIN_CLANG_MAJOR} with --clang PATH / "
                    f"${CLANG_ENV_VAR}")
        raise CompilerError(f"cannot run {argv[0]!r}: {exc}{hint}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CompilerError(f"cannot run {argv[0]!r}: {exc}") from exc
    return out.stdout + out.stderr


def _not_clang(argv: list[str], printed: str) -> CompilerError:
    return CompilerError(
        f"{argv[0]!r} does not look like clang: `--version` printed {printed.strip()[:200]!r}"
    )


def _query_version(argv: list[str]) -> str:
    printed = _run_version(argv)
    m = _VERSION_RE.search(printed)
    if not m:
        raise _not_clang(argv, printed)
    return ".".join(m.groups())


def _looks_like_zig(path: Path, printed: str) -> bool:
    """zig has no `--version` (it answers with its usage, which names zig)."""
    return path.name.startswith("zig") or "Usage: zig" in printed


def find_compiler(clang: str | os.PathLike[str] | None = None) -> Compiler:
    """Resolve the compiler: explicit `clang` argument, then $MLGO_CLANG, then bundled zig.

    The argument may name a clang driver or a `zig` binary (its clang is used).

    Refuses clang older than 17: it has no interactive model runner, so the policy
    could never be asked.
    """
    chosen = clang if clang is not None else os.environ.get(CLANG_ENV_VAR) or None
    if chosen is None:
        zig = bundled_zig()
        return Compiler(path=zig, version=_query_version([str(zig), "clang"]), bundled=True)
    found = shutil.which(str(chosen))
    if found is None:
        raise CompilerError(f"clang not found: {chosen!r} (from --clang or ${CLANG_ENV_VAR})")
    path = Path(found).resolve()
    printed = _run_version([str(path)])
    m = _VERSION_RE.search(printed)
    zig = m is None and _looks_like_zig(path, printed)
    if m is not None:
        version = ".".join(m.groups())
    elif zig:  # another ziglang release: its clang is `zig clang`
        version = _query_version([str(path), "clang"])
    else:
        raise _not_clang([str(path)], printed)
    major = int(version.split(".")[0])
    if major < MIN_CLANG_MAJOR:
        raise CompilerError(
            f"{path} is clang {version}; pymlgo needs clang >= {MIN_CLANG_MAJOR} because "
            "older LLVM has no interactive model runner (-inliner-interactive-channel-base), "
            "so a policy cannot answer the compiler. Use the bundled clang (drop --clang and "
            f"unset ${CLANG_ENV_VAR}) or point --clang at clang {MIN_CLANG_MAJOR} or newer"
        )
    return Compiler(path=path, version=version, bundled=False, zig=zig)
