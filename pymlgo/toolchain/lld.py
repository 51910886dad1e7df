"""The linker command zig's driver runs for a link, so that lld can be run directly with
options the driver does not pass on (`-mllvm`, `--thinlto-jobs`, `--thinlto-index-only`).

zig's driver prints lld's command under `-v`. lld refuses an output path that is a directory
before it reads any input ("cannot open output file"), so the command costs one driver start.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


class LinkCommandError(RuntimeError):
    """The linker's command could not be had from the driver; the message says why."""


def _without_output(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "-o":
            skip = True
        elif not (arg.startswith("-o") and len(arg) > 2):
            out.append(arg)
    return out


def lld_command(driver: Sequence[str], args: Sequence[str], output: str,
                env: dict[str, str], scratch: Path, cwd: Path | None = None) -> list[str]:
    """The `zig ld.lld ...` command zig's driver runs for this link, writing `output`.

    The driver is run (in `cwd`, default this process's) with `-v` and an output path that
    is a directory: it prints lld's command, and lld stops before reading any input."""
    if any(any(c.isspace() for c in a) for a in args) or any(c.isspace() for c in str(scratch)):
        raise LinkCommandError("an argument contains whitespace, and zig prints the linker's "
                               "command unquoted")
    probe = scratch / "probe-output"
    probe.mkdir()
    proc = subprocess.run([*driver, *_without_output(args), "-o", str(probe), "-v"], env=env,
                          cwd=cwd, capture_output=True, text=True, check=False, timeout=600)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ld.lld ")]
    if len(lines) != 1:
        detail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise LinkCommandError(f"zig's driver printed {len(lines)} linker commands "
                               f"({detail[0]})")
    words = lines[0].split(" ")
    at = [i for i in range(len(words) - 1) if words[i] == "-o" and words[i + 1] == str(probe)]
    if len(at) != 1:
        raise LinkCommandError("the linker's command does not name the output once")
    words[at[0] + 1] = output
    return [driver[0], *words]
