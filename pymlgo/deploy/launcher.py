"""The native launcher of `mlgo cc`: `launcher.c`, built with the bundled zig at first use.

`mlgo cc --mlgo-launcher` prints a compiler command for a build (`CC="$(mlgo cc
--mlgo-launcher)"`): the launcher's path, or, when it cannot be built here, the Python
command `mlgo cc` itself. The launcher needs no Python for a compile that a running policy
server answers, nor for one without a policy; everything else it hands to the Python path.

It is built for the host's architecture with a fixed target (`<arch>-linux-musl`, static,
baseline CPU: it starts in well under a millisecond and depends on no system library), with
the paths of this installation built in (zig, this Python, this pymlgo, the parts of the
policy servers' key that name them), and cached in `<cache>/launcher/<version>-<hash>/`
where the hash covers the source and those paths. `mlgo-c++` beside it is the same binary
(the tool is read from the name it is run by).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("launcher.c")
# zig's names for the architectures whose Linux musl target the launcher is built for.
_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64",
           "riscv64": "riscv64"}


# = cc.pretrained_dir(NAME).parent (a test checks it; cc imports this module)
PRETRAINED_ROOT = Path(__file__).resolve().parents[1] / "policy" / "pretrained"
# Everything but the target and the -D's (which the cache key covers as well).
BUILD_FLAGS = ("-mcpu=baseline", "-O2", "-static", "-s", "-std=c11", "-Wall", "-Wextra",
               "-Werror")


class LauncherError(RuntimeError):
    """The launcher cannot be built here; the message says why."""


def _c_string(value: str) -> str:
    """A C string literal for -D (no shell in between)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_config() -> dict[str, str]:
    """What the launcher has built in (launcher.c's MLGO_* macros)."""
    from pymlgo.deploy.cc_server import key_prefix
    from pymlgo.problems.inlining.builtin_specs import BUILTINS
    from pymlgo.toolchain.compiler import bundled_zig

    zig = str(bundled_zig())
    version, python, server = key_prefix()
    return {
        "MLGO_ZIG": zig,
        "MLGO_PYTHON": sys.executable,
        "MLGO_PKG_ROOT": str(Path(__file__).resolve().parents[2]),
        "MLGO_KEY_VERSION": version,
        "MLGO_KEY_PYTHON": python,
        "MLGO_KEY_SERVER": server,
        "MLGO_PRETRAINED_ROOT": str(PRETRAINED_ROOT),
        "MLGO_ENV_CC": shlex.join([zig, "cc"]),  # = cc.compiler_env
        "MLGO_ENV_CXX": shlex.join([zig, "c++"]),
        "MLGO_BUILTIN_POLICIES": " ".join(b.key for b in BUILTINS),  # keyed without a dir
    }


def launcher_dir(config: dict[str, str]) -> Path:
    """Where this launcher is cached: per pymlgo version and a hash of the source, the
    build flags and the built-in paths."""
    from pymlgo import __version__
    from pymlgo.corpus.demo import cache_root

    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update("\0".join((target(), *BUILD_FLAGS)).encode())
    for key in sorted(config):
        digest.update(f"\0{key}={config[key]}".encode())
    return cache_root() / "launcher" / f"{__version__}-{digest.hexdigest()[:16]}"


def target() -> str:
    arch = _ARCHES.get(platform.machine().lower())
    if arch is None or not sys.platform.startswith("linux"):
        raise LauncherError(f"no launcher for {sys.platform}/{platform.machine()}: "
                            "only Linux on x86_64, aarch64 and riscv64")
    return f"{arch}-linux-musl"


def build(dest_dir: Path, config: dict[str, str]) -> Path:
    """Compile the launcher into `dest_dir` (atomically: a concurrent build of the same
    launcher writes the same bytes); the path of `mlgo-cc`."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    binary = dest_dir / "mlgo-cc"
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".mlgo-cc.", suffix=".tmp")
    os.close(fd)
    cmd = [config["MLGO_ZIG"], "cc", "-target", target(), *BUILD_FLAGS,
           *(f"-D{k}={_c_string(v)}" for k, v in sorted(config.items())),
           "-o", tmp, str(SOURCE)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if res.returncode != 0:
            raise LauncherError(f"building the launcher failed: {res.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, binary)
    finally:
        Path(tmp).unlink(missing_ok=True)
    cxx = dest_dir / "mlgo-c++"
    if not cxx.is_symlink():
        link = dest_dir / f".mlgo-c++.{os.getpid()}"
        link.unlink(missing_ok=True)
        link.symlink_to("mlgo-cc")
        os.replace(link, cxx)
    return binary


def launcher_path(tool: str = "cc") -> Path:
    """The launcher for `tool` (cc or c++), built if it is not cached yet; LauncherError if
    it cannot be built here."""
    config = build_config()
    where = launcher_dir(config)
    binary = where / "mlgo-cc"
    if not (binary.is_file() and os.access(binary, os.X_OK) and (where / "mlgo-c++").exists()):
        try:
            build(where, config)
        except (OSError, subprocess.SubprocessError) as exc:
            raise LauncherError(f"building the launcher failed: {exc}") from exc
    return where / ("mlgo-c++" if tool == "c++" else "mlgo-cc")


def python_command(tool: str) -> list[str]:
    """`mlgo TOOL` run by this Python, with this pymlgo (the launcher's fallback too)."""
    return [sys.executable, "-m", "pymlgo.cli.main", tool]


def command(tool: str) -> tuple[list[str], str | None]:
    """The compiler command to give a build, and why it is not the launcher (None if it
    is)."""
    try:
        return [str(launcher_path(tool))], None
    except LauncherError as exc:
        return python_command(tool), str(exc)
