"""One definition of an ELF file's size: its bytes by section group, and the size metrics.

Every allocated section (`SHF_ALLOC`) falls in exactly one group:

- `code`: executable sections (`SHF_EXECINSTR`): `.text`, `.text.*`, `.init`, `.plt`;
- `unwind`: unwind tables, one entry per function that survives: `.eh_frame`,
  `.eh_frame_hdr`, `.ARM.exidx*`, `.sframe`;
- `eh_tables`: exception-handling tables (landing pads): `.gcc_except_table*`, `.ARM.extab*`;
- `data`: other writable sections with contents: `.data*`, `.data.rel.ro*`, `.init_array`,
  `.got`;
- `rodata`: the other read-only sections with contents: `.rodata*`, string literals,
  `.note.*`, and in linked files the dynamic-linking tables (`.dynsym`, `.rela.dyn`, ...);
- `bss`: sections without file contents (`SHT_NOBITS`: `.bss`, `.tbss`): reported, never
  counted, since no file carries them.

Unwind and exception sections are named, not flagged, so the names decide first; the flags
decide the rest. Non-allocated sections (symbols, relocations, debug info, `.comment`,
`.llvm_addrsig`, embedded bitcode) are not shipped and never counted.

The metrics (`--size-metric`):

- `allocated` (the default): every group with file contents, i.e. code + rodata + unwind +
  eh_tables + data: the bytes a user's program carries. Inlining moves code against unwind
  tables (fewer surviving functions, fewer `.eh_frame` entries), so a metric must see both.
- `text`: executable sections only (`code`); what pymlgo measured before the metric existed.
- `llvm-size`: `llvm-size`'s Berkeley `text` column (ml-compiler-opt's reward): every
  allocated section that is executable or not writable (`SHT_NOBITS` included, as
  llvm-size counts it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Literal

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS

from pymlgo.toolchain.elf import NotELFError, load_bytes, open_elf

SizeMetric = Literal["allocated", "text", "llvm-size"]
SIZE_METRICS: tuple[str, ...] = ("allocated", "text", "llvm-size")
DEFAULT_SIZE_METRIC: SizeMetric = "allocated"
# what each metric counts, in words, for help texts and reports
METRIC_MEANING = {
    "allocated": "every allocated section with file contents: code, read-only data, unwind "
                 "and exception tables, data (what ships)",
    "text": "executable sections only",
    "llvm-size": "llvm-size's Berkeley text column (ml-compiler-opt's reward)",
}
METRIC_HELP = "; ".join(f"{m}: {w}" for m, w in METRIC_MEANING.items())
GROUPS: tuple[str, ...] = ("code", "rodata", "unwind", "eh_tables", "data")

_UNWIND = (".eh_frame", ".eh_frame_hdr", ".ARM.exidx", ".sframe")
_EH_TABLES = (".gcc_except_table", ".ARM.extab")
_SHT_NOBITS = "SHT_NOBITS"


class SizeMetricError(ValueError):
    """A size metric that does not exist."""


def check_metric(name: str) -> SizeMetric:
    """`name` if it is a size metric, else SizeMetricError listing the valid ones."""
    if name not in SIZE_METRICS:
        raise SizeMetricError(f"unknown size metric {name!r}: expected one of "
                              f"{', '.join(SIZE_METRICS)}")
    return name  # type: ignore[return-value]


def section_group(name: str, sh_type: str, flags: int) -> str | None:
    """The group of one section (see the module docstring); None if it is not allocated."""
    if not flags & SH_FLAGS.SHF_ALLOC:
        return None
    if sh_type == _SHT_NOBITS:
        return "bss"
    if name.startswith(_UNWIND):
        return "unwind"
    if name.startswith(_EH_TABLES):
        return "eh_tables"
    if flags & SH_FLAGS.SHF_EXECINSTR:
        return "code"
    if flags & SH_FLAGS.SHF_WRITE:
        return "data"
    return "rodata"


def _berkeley_text(flags: int) -> bool:
    return bool(flags & SH_FLAGS.SHF_ALLOC) and bool(
        flags & SH_FLAGS.SHF_EXECINSTR or not flags & SH_FLAGS.SHF_WRITE)


@dataclass(frozen=True)
class ObjectSize:
    """Bytes of one ELF file (or a sum of several) by section group, plus llvm-size's text.

    `berkeley_text` is kept on its own: it follows the flags, not the groups (a writable
    `.eh_frame`, as some targets emit, is Berkeley data but still an unwind table).
    """

    code: int = 0
    rodata: int = 0
    unwind: int = 0
    eh_tables: int = 0
    data: int = 0
    bss: int = 0
    berkeley_text: int = 0

    @property
    def allocated(self) -> int:
        """Every allocated section with file contents: what the file ships."""
        return self.code + self.rodata + self.unwind + self.eh_tables + self.data

    def metric(self, name: str) -> int:
        """This size by one metric (SizeMetricError for an unknown one)."""
        check_metric(name)
        if name == "allocated":
            return self.allocated
        if name == "text":
            return self.code
        return self.berkeley_text

    def metrics(self) -> dict[str, int]:
        return {m: self.metric(m) for m in SIZE_METRICS}

    def groups(self) -> dict[str, int]:
        """Counted groups, in GROUPS order."""
        return {g: getattr(self, g) for g in GROUPS}

    def __add__(self, other: ObjectSize) -> ObjectSize:
        return ObjectSize(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                             for f in fields(self)})

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ObjectSize:
        """From `to_json`'s dict; ValueError (or KeyError) if a field is missing or bad."""
        values = {}
        for f in fields(cls):
            v = data[f.name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"size field {f.name!r} must be a byte count, not {v!r}")
            values[f.name] = v
        return cls(**values)


def total(sizes: Iterable[ObjectSize]) -> ObjectSize:
    """The sum of several sizes (an empty sum is all zeros)."""
    out = ObjectSize()
    for s in sizes:
        out = out + s
    return out


def object_size(obj: bytes | os.PathLike[str] | str) -> ObjectSize:
    """Bytes by group of an ELF object, executable or shared library (any class, any
    byte order). NotELFError if it is not ELF."""
    data, origin = load_bytes(obj)
    elf = open_elf(data, origin)
    counts = dict.fromkeys((f.name for f in fields(ObjectSize)), 0)
    try:
        for sec in elf.iter_sections():
            flags, size = sec["sh_flags"], sec["sh_size"]
            group = section_group(sec.name, sec["sh_type"], flags)
            if group is not None:
                counts[group] += size
            if _berkeley_text(flags):
                counts["berkeley_text"] += size
    except ELFError as exc:
        raise NotELFError(f"{origin}: malformed ELF: {exc}") from exc
    return ObjectSize(**counts)


def text_size(obj: bytes | os.PathLike[str] | str) -> int:
    """Bytes of executable code: the `text` metric."""
    return object_size(obj).code
