"""Read ELF objects in Python: executable-code size and embedded sections."""

from __future__ import annotations

import io
import os
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"


class NotELFError(ValueError):
    """The file is not an ELF object."""


def _open(data: bytes, origin: str) -> ELFFile:
    if not data.startswith(ELF_MAGIC):
        raise NotELFError(f"{origin}: not an ELF object (starts with {data[:4]!r})")
    try:
        return ELFFile(io.BytesIO(data))
    except ELFError as exc:
        raise NotELFError(f"{origin}: malformed ELF: {exc}") from exc


def _load(obj: bytes | os.PathLike[str] | str) -> tuple[bytes, str]:
    if isinstance(obj, bytes):
        return obj, "<bytes>"
    return Path(obj).read_bytes(), str(obj)


def text_size(obj: bytes | os.PathLike[str] | str) -> int:
    """Bytes of executable code: the sum of SHF_EXECINSTR section sizes.

    `size`'s Berkeley "text" column also counts .rodata, so it is not used.
    """
    data, origin = _load(obj)
    elf = _open(data, origin)
    return sum(
        s["sh_size"] for s in elf.iter_sections() if s["sh_flags"] & SH_FLAGS.SHF_EXECINSTR
    )


def read_sections(
    obj: bytes | os.PathLike[str] | str, names: tuple[str, ...]
) -> dict[str, bytes | None]:
    """Contents of the named sections (None where absent)."""
    data, origin = _load(obj)
    elf = _open(data, origin)
    out: dict[str, bytes | None] = {}
    for name in names:
        sec = elf.get_section_by_name(name)
        out[name] = None if sec is None else sec.data()
    return out
