"""Which LLVM wrote a bitcode file, and what to tell the user when clang cannot read it.

LLVM reads bitcode from its own and older releases only. A corpus built with a newer clang
fails with messages such as "Incompatible epoch" or "Unknown attribute kind" that do not
say the real cause; the producer string in the bitcode's IDENTIFICATION block does.
"""

from __future__ import annotations

import re
import struct

RAW_MAGIC = b"BC\xc0\xde"
WRAPPER_MAGIC = 0x0B17C0DE
# How a bitcode file starts: raw, or in its wrapper header (the magic, little-endian).
MAGICS = (RAW_MAGIC, WRAPPER_MAGIC.to_bytes(4, "little"))
IDENTIFICATION_BLOCK_ID = 13
_CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")

# clang's words when its bitcode reader gives up on a module (LLVM's reader capitalizes
# its messages; clang's own diagnostics, e.g. "invalid target", are lower case).
_READ_ERRORS = ("error: Invalid ", "error: Incompatible epoch", "error: Unknown attribute kind",
                "error: Malformed", "error: Failed to ", "error: Unterminated",
                "error: Corrupted", "error: Never resolved", "error: Expected a single module",
                "Producer:")


def is_bitcode(data: bytes) -> bool:
    """Whether `data` starts as LLVM bitcode does (raw or wrapped)."""
    return data.startswith(MAGICS)


class _Bits:
    """LSB-first bit reader over LLVM's bitstream."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def fixed(self, n: int) -> int:
        if self.pos + n > len(self.data) * 8:
            raise EOFError
        value = int.from_bytes(self.data[self.pos // 8:(self.pos + n + 7) // 8 + 1], "little")
        value = (value >> (self.pos % 8)) & ((1 << n) - 1)
        self.pos += n
        return value

    def vbr(self, n: int) -> int:
        out, shift = 0, 0
        while True:
            chunk = self.fixed(n)
            out |= (chunk & ((1 << (n - 1)) - 1)) << shift
            shift += n - 1
            if not chunk >> (n - 1):
                return out
            if shift > 64:
                raise ValueError("VBR value too long")


def _records(bits: _Bits, width: int, end: int) -> dict[int, list[int]]:
    """Records of the block at `bits` (after its header), by code; nested blocks skipped."""
    abbrevs: list[list[tuple[str, int]]] = []
    out: dict[int, list[int]] = {}
    while bits.pos < end:
        abbrev = bits.fixed(width)
        if abbrev == 0:  # END_BLOCK
            break
        if abbrev == 1:  # ENTER_SUBBLOCK: skip it whole
            bits.vbr(8)
            bits.vbr(4)
            bits.pos = (bits.pos + 31) // 32 * 32
            length = bits.fixed(32)
            bits.pos += length * 32
            continue
        if abbrev == 2:  # DEFINE_ABBREV
            ops: list[tuple[str, int]] = []
            for _ in range(bits.vbr(5)):
                if bits.fixed(1):
                    ops.append(("lit", bits.vbr(8)))
                else:
                    enc = bits.fixed(3)
                    kind = {1: "fixed", 2: "vbr", 3: "array", 4: "char6", 5: "blob"}[enc]
                    ops.append((kind, bits.vbr(5) if enc in (1, 2) else 0))
            abbrevs.append(ops)
            continue
        if abbrev == 3:  # UNABBREV_RECORD
            code = bits.vbr(6)
            out[code] = [bits.vbr(6) for _ in range(bits.vbr(6))]
            continue
        values = _abbreviated(bits, abbrevs[abbrev - 4])
        if values:
            out[values[0]] = values[1:]
    return out


def _scalar(bits: _Bits, kind: str, arg: int) -> int:
    if kind == "lit":
        return arg
    if kind == "fixed":
        return bits.fixed(arg)
    if kind == "vbr":
        return bits.vbr(arg)
    if kind == "char6":
        return ord(_CHAR6[bits.fixed(6)])
    raise ValueError(f"unexpected operand {kind}")


def _abbreviated(bits: _Bits, ops: list[tuple[str, int]]) -> list[int]:
    values: list[int] = []
    i = 0
    while i < len(ops):
        kind, arg = ops[i]
        if kind == "array":
            elem_kind, elem_arg = ops[i + 1]
            values += [_scalar(bits, elem_kind, elem_arg) for _ in range(bits.vbr(6))]
            i += 2
            continue
        if kind == "blob":
            n = bits.vbr(6)
            bits.pos = (bits.pos + 31) // 32 * 32
            values += [bits.fixed(8) for _ in range(n)]
            bits.pos = (bits.pos + 31) // 32 * 32
        else:
            values.append(_scalar(bits, kind, arg))
        i += 1
    return values


def producer(bitcode: bytes) -> str | None:
    """The producer string (e.g. "LLVM22.1.8") of a bitcode file; None if it has none or
    the bytes are not bitcode. Reads only the first block, so it is cheap."""
    try:
        data = bitcode
        if len(data) >= 20 and struct.unpack_from("<I", data)[0] == WRAPPER_MAGIC:
            offset, size = struct.unpack_from("<II", data, 8)
            data = data[offset:offset + size]
        if not data.startswith(RAW_MAGIC):
            return None
        bits = _Bits(data, 32)
        while bits.pos < len(data) * 8:
            if bits.fixed(2) != 1:  # top level holds blocks only (abbrev width 2)
                return None
            block_id, width = bits.vbr(8), bits.vbr(4)
            bits.pos = (bits.pos + 31) // 32 * 32
            length = bits.fixed(32)
            end = bits.pos + length * 32
            if block_id == IDENTIFICATION_BLOCK_ID:
                string = _records(bits, width, end).get(1)
                return "".join(map(chr, string)) if string else None
            bits.pos = end
    except (EOFError, ValueError, IndexError, KeyError, struct.error):
        return None
    return None


def _version(text: str) -> tuple[int, ...] | None:
    m = _VERSION.search(text)
    return None if m is None else tuple(int(g) for g in m.groups() if g is not None)


def read_error_hint(stderr: str, bitcode: bytes, compiler_version: str) -> str | None:
    """What to do when clang failed to read `bitcode`: None if stderr shows no read error.

    Names the LLVM that wrote the bitcode when it is newer than the compiler.
    """
    if not any(s in stderr for s in _READ_ERRORS):
        return None
    made_by = producer(bitcode)
    if made_by is None:
        return ("the module is not readable LLVM bitcode (no producer record): the corpus "
                "file is damaged; rebuild the corpus")
    theirs, ours = _version(made_by), _version(compiler_version)
    if theirs and ours and theirs[:2] > ours[:2]:
        return (f"the bitcode was written by {made_by}, newer than this compiler (clang "
                f"{compiler_version}); LLVM reads only bitcode from its own and older "
                "releases: run with that newer clang (--clang PATH or $MLGO_CLANG, clang >= "
                f"{theirs[0]}) or rebuild the corpus with this one")
    return (f"clang {compiler_version} could not read bitcode written by {made_by}: the "
            "corpus file is damaged or from an incompatible build; rebuild the corpus")
