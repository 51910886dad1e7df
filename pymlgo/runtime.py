"""The per-user runtime directory that holds pymlgo's sockets (shared pools, `mlgo cc`'s
policy servers). Imports nothing heavy: `mlgo cc` uses it before starting the compiler."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

RUNTIME_DIR_ENV = "MLGO_RUNTIME_DIR"


def private_dir(subdir: str, override: str | os.PathLike[str] | None = None) -> Path:
    """`<base>/<subdir>`, created with mode 0700, where base is `override`,
    $MLGO_RUNTIME_DIR, $XDG_RUNTIME_DIR/pymlgo, or <tmp>/pymlgo-<uid>.

    PermissionError if the directory belongs to someone else or others may enter it: on a
    shared /tmp, another user could otherwise plant or read the sockets in it."""
    if override is not None:
        base = Path(override)
    elif os.environ.get(RUNTIME_DIR_ENV):
        base = Path(os.environ[RUNTIME_DIR_ENV])
    elif os.environ.get("XDG_RUNTIME_DIR"):
        base = Path(os.environ["XDG_RUNTIME_DIR"]) / "pymlgo"
    else:
        base = Path(tempfile.gettempdir()) / f"pymlgo-{os.getuid()}"
    path = base / subdir
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} must be owned by you with mode 0700 (it holds sockets)")
    return path
