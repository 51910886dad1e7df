"""Read ELF objects in Python: executable-code size and embedded sections."""

from __future__ import annotations

import os

from pymlgo.toolchain.size import ELF_MAGIC, NotELFError, load_bytes, object_size, open_elf

__all__ = ["ELF_MAGIC", "NotELFError", "read_sections", "text_size"]


def text_size(obj: bytes | os.PathLike[str] | str) -> int:
    """Bytes of executable code (the `text` metric of `toolchain.size`)."""
    return object_size(obj).code


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
