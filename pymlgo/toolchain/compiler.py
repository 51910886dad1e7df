"""Find the clang that pymlgo drives: the bundled `zig clang`, or any clang >= 17."""

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
    """A clang that can be run as cc1 (`clang_argv`) and as a driver (`cc_argv`, `cxx_argv`)."""

    path: Path
    version: str
    bundled: bool

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def clang_argv(self) -> tuple[str, ...]:
        """Prefix that runs the clang binary itself (add `-cc1 ...` or driver args)."""
        return (str(self.path), "clang") if self.bundled else (str(self.path),)

    @property
    def cc_argv(self) -> tuple[str, ...]:
        """Prefix for a C compiler driver (zig's driver brings its own libc headers)."""
        return (str(self.path), "cc") if self.bundled else (str(self.path),)

    @property
    def cxx_argv(self) -> tuple[str, ...]:
        if self.bundled:
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


def _query_version(argv: list[str]) -> str:
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
    m = _VERSION_RE.search(out.stdout + out.stderr)
    if not m:
        raise CompilerError(
            f"{argv[0]!r} does not look like clang: `--version` printed "
            f"{(out.stdout + out.stderr).strip()[:200]!r}"
        )
    return ".".join(m.groups())


def find_compiler(clang: str | os.PathLike[str] | None = None) -> Compiler:
    """Resolve the compiler: explicit `clang` argument, then $MLGO_CLANG, then bundled zig.

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
    version = _query_version([str(path)])
    major = int(version.split(".")[0])
    if major < MIN_CLANG_MAJOR:
        raise CompilerError(
            f"{path} is clang {version}; pymlgo needs clang >= {MIN_CLANG_MAJOR} because "
            "older LLVM has no interactive model runner (-inliner-interactive-channel-base), "
            "so a policy cannot answer the compiler. Use the bundled clang (drop --clang and "
            f"unset ${CLANG_ENV_VAR}) or point --clang at clang {MIN_CLANG_MAJOR} or newer"
        )
    return Compiler(path=path, version=version, bundled=False)
