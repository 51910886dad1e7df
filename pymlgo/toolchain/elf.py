"""Read ELF objects in Python: open them (with a clear error for anything else) and read
embedded sections."""

from __future__ import annotations

import io
import os
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"


class NotELFError(ValueError):
    """The file is not an ELF object."""


def open_elf(data: bytes, origin: str) -> ELFFile:
    """An ELFFile over `data`; NotELFError if it is not (well-formed) ELF."""
    if not data.startswith(ELF_MAGIC):
        raise NotELFError(f"{origin}: not an ELF object (starts with {data[:4]!r})")
    try:
        return ELFFile(io.BytesIO(data))
    except ELFError as exc:
        raise NotELFError(f"{origin}: malformed ELF: {exc}") from exc


def load_bytes(obj: bytes | os.PathLike[str] | str) -> tuple[bytes, str]:
    """(contents, a name for messages) of a file or of bytes already read."""
    if isinstance(obj, bytes):
        return obj, "<bytes>"
    return Path(obj).read_bytes(), str(obj)


def read_sections(
    obj: bytes | os.PathLike[str] | str, names: tuple[str, ...]
) -> dict[str, bytes | None]:
    """Contents of the named sections (None where absent)."""
    data, origin = load_bytes(obj)
    elf = open_elf(data, origin)
    out: dict[str, bytes | None] = {}
    for name in names:
        sec = elf.get_section_by_name(name)
        out[name] = None if sec is None else sec.data()
    return out
