"""What a compile that exited with 0 left behind: the object's bytes by group, or why not."""

from __future__ import annotations

from pathlib import Path

from pymlgo.toolchain.elf import NotELFError
from pymlgo.toolchain.size import ObjectSize, object_size

_FORMATS = ((b"\xcf\xfa\xed\xfe", "Mach-O"), (b"\xce\xfa\xed\xfe", "Mach-O"),
            (b"\xfe\xed\xfa\xcf", "Mach-O"), (b"\xfe\xed\xfa\xce", "Mach-O"),
            (b"\x00asm", "WebAssembly"), (b"\x64\x86", "COFF"), (b"\x4c\x01", "COFF"),
            (b"\x64\xaa", "COFF"), (b"\xc4\x01", "COFF"), (b"\x01\xdf", "XCOFF"),
            (b"\x01\xf7", "XCOFF"))


def _triple(cmd: tuple[str, ...]) -> str:
    return next((b for a, b in zip(cmd, cmd[1:], strict=False) if a == "-triple"), "?")


def measure_object(obj: Path, stderr: str, cmd: tuple[str, ...]
                   ) -> tuple[ObjectSize | None, str | None]:
    """(bytes by section group, None), or (None, why) when a compile that succeeded left no
    object."""
    tail = " | ".join(stderr.strip().splitlines()[-5:])
    try:
        return object_size(obj), None
    except FileNotFoundError:
        return None, "compiler exited with 0 but wrote no object" + (f": {tail}" if tail else "")
    except NotELFError as exc:
        head = obj.read_bytes()[:4]
        fmt = next((name for magic, name in _FORMATS if head.startswith(magic)), None)
        if fmt is not None:  # a corpus built for another platform
            return None, (
                f"the compiler wrote a {fmt} object because the corpus targets {_triple(cmd)};"
                " pymlgo measures ELF objects: rebuild the corpus for an ELF target (e.g."
                " -target x86_64-linux-gnu) or override its -triple"
            )
        return None, f"compiler output is not an object ({exc})" + (f": {tail}" if tail else "")
