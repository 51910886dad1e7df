"""The compiler matrix of tests/test_compilers.py: real clangs of other LLVM versions.

Debian's clang-19 and clang-16 come from apt (`.ci/run` installs them when it runs as root).
The others are the `zig` binaries of older ziglang wheels, each bundling its own clang; they
are fetched with `pip download` (never installed: the project's ziglang stays 0.17.1) and
unpacked into $MLGO_TEST_COMPILERS (default ~/.cache/pymlgo-test-compilers), once.

    python -m tests.compilers      # fetch them all now (what .ci/run does)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

DIR_ENV_VAR = "MLGO_TEST_COMPILERS"

# ziglang release -> the clang major it bundles (`zig clang --version`).
ZIG_CLANGS = {"0.12.1": 17, "0.13.0": 18, "0.15.2": 20, "0.16.0": 21}


@dataclass(frozen=True)
class MatrixEntry:
    """One compiler of the matrix: `clang` is what --clang gets (None: the bundled one)."""

    name: str
    major: int
    zig_release: str | None = None
    apt_path: str | None = None


MATRIX = (
    MatrixEntry("bundled-clang-22", 22),
    MatrixEntry("debian-clang-19", 19, apt_path="/usr/bin/clang-19"),
    *(MatrixEntry(f"zig-{rel}-clang-{major}", major, zig_release=rel)
      for rel, major in ZIG_CLANGS.items()),
)


def compilers_dir() -> Path:
    root = os.environ.get(DIR_ENV_VAR)
    return Path(root) if root else Path.home() / ".cache" / "pymlgo-test-compilers"


def zig_path(release: str) -> Path:
    """Where the `zig` of ziglang==`release` is unpacked (it may not be there yet)."""
    return compilers_dir() / f"ziglang-{release}" / "ziglang" / "zig"


def zig_binary(release: str) -> Path:
    """The `zig` of ziglang==`release`, downloaded and unpacked on first use.

    Raises RuntimeError (with pip's last words) when it cannot be had, e.g. offline."""
    zig = zig_path(release)
    home = zig.parent.parent
    if zig.is_file():
        return zig
    compilers_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=compilers_dir(), prefix=".fetch-") as tmp:
        res = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--quiet", "-d", tmp, f"ziglang=={release}"],
            capture_output=True, text=True, timeout=900, check=False,
        )
        wheels = list(Path(tmp).glob("ziglang-*.whl"))
        if res.returncode != 0 or not wheels:
            tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-2:])
            raise RuntimeError(f"pip download ziglang=={release} failed: {tail}")
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as whl:
            whl.extractall(unpacked)
        (unpacked / "ziglang" / "zig").chmod(0o755)
        try:
            os.replace(unpacked, home)  # another process may have won the race: fine
        except OSError:
            if not zig.is_file():
                raise
    return zig


def clang_for(entry: MatrixEntry, *, fetch: bool = True) -> str | None:
    """--clang for `entry` (None: the bundled compiler); RuntimeError if not available.
    Without `fetch`, a zig not yet unpacked is not downloaded either: RuntimeError."""
    if entry.zig_release is not None:
        if not fetch and not zig_path(entry.zig_release).is_file():
            raise RuntimeError(f"{zig_path(entry.zig_release)} is missing "
                               f"(python -m tests.compilers fetches it)")
        return str(zig_binary(entry.zig_release))
    if entry.apt_path is not None:
        if shutil.which(entry.apt_path) is None:
            pkg = Path(entry.apt_path).name
            raise RuntimeError(f"{entry.apt_path} is not installed (apt-get install {pkg})")
        return entry.apt_path
    return None


def main() -> int:
    failed = 0
    for release in ZIG_CLANGS:
        try:
            print(f"ziglang {release}: {zig_binary(release)}")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"ziglang {release}: not available: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
