"""The greedy register allocator's spill/reload/copy remarks: parse them, weigh them.

cc1 writes them with `-opt-record-file FILE -opt-record-passes regalloc`, as a stream of
YAML documents, one per remark:

    --- !Missed
    Pass:            regalloc
    Name:            SpillReloadCopies          (LoopSpillReloadCopies for a loop)
    DebugLoc:        { File: 'a.c', Line: 14,   (only with debug info; may wrap)
                       Column: 1 }
    Function:        sort_range
    Args:
      - NumSpills:       '2'
      - String:          ' spills '
      - TotalSpillsCost: '1.000000e+00'
      ...
    ...

A function remark sums the whole function, loops included; a loop remark covers that loop
and its subloops, so loop remarks are never added to function totals. A function with no
spill, reload or copy gets no remark at all: its cost is 0. Costs are counts weighted by
block frequency relative to the entry block.

The documents are flat and LLVM lays them out the same way every time, so a line scanner
is enough (no YAML dependency); it decodes the three scalar styles LLVM writes: plain,
'single' and "double" quoted.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REMARK_PASS = "regalloc"
FUNCTION_REMARK = "SpillReloadCopies"
LOOP_REMARK = "LoopSpillReloadCopies"

# Remark argument -> SpillStats field. Counts are integers, costs floats.
_ARG_FIELDS = {
    "NumSpills": "spills",
    "TotalSpillsCost": "spills_cost",
    "NumFoldedSpills": "folded_spills",
    "TotalFoldedSpillsCost": "folded_spills_cost",
    "NumReloads": "reloads",
    "TotalReloadsCost": "reloads_cost",
    "NumFoldedReloads": "folded_reloads",
    "TotalFoldedReloadsCost": "folded_reloads_cost",
    "NumZeroCostFoldedReloads": "zero_cost_folded_reloads",
    "NumVRCopies": "copies",
    "TotalCopiesCost": "copies_cost",
}


class RemarkFormatError(ValueError):
    """The remark file is not the YAML document stream LLVM writes."""


@dataclass(frozen=True)
class CostWeights:
    """Relative cost of a store, a load and a copy: LLVM's RegAllocScore defaults
    (-regalloc-store-weight 1, -regalloc-load-weight 4, -regalloc-copy-weight 0.2).

    A folded spill is a store, a folded reload a load: both are memory accesses the
    allocator caused, only merged into another instruction.
    """

    store: float = 1.0
    load: float = 4.0
    copy: float = 0.2


DEFAULT_WEIGHTS = CostWeights()


@dataclass(frozen=True)
class SpillStats:
    """What one remark reports (absent arguments are 0)."""

    spills: int = 0
    spills_cost: float = 0.0
    folded_spills: int = 0
    folded_spills_cost: float = 0.0
    reloads: int = 0
    reloads_cost: float = 0.0
    folded_reloads: int = 0
    folded_reloads_cost: float = 0.0
    zero_cost_folded_reloads: int = 0
    copies: int = 0
    copies_cost: float = 0.0

    def __add__(self, other: SpillStats) -> SpillStats:
        # getattr over field names: dataclasses.astuple deep-copies and dominated parsing
        return SpillStats(*(getattr(self, n) + getattr(other, n) for n in _FIELD_NAMES))

    def weighted_cost(self, weights: CostWeights = DEFAULT_WEIGHTS) -> float:
        """Block-frequency weighted cost of the allocator's spill code (lower is better)."""
        return (weights.store * (self.spills_cost + self.folded_spills_cost)
                + weights.load * (self.reloads_cost + self.folded_reloads_cost)
                + weights.copy * self.copies_cost)

    def to_json(self) -> dict[str, float]:
        return dataclasses.asdict(self)


ZERO = SpillStats()
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(SpillStats))


@dataclass(frozen=True)
class RemarkReport:
    """Per-function totals (functions without a remark are absent: all zero) and loops."""

    functions: Mapping[str, SpillStats] = field(default_factory=dict)
    loops: tuple[tuple[str, SpillStats], ...] = ()

    @property
    def total(self) -> SpillStats:
        out = ZERO
        for stats in self.functions.values():
            out = out + stats
        return out

    def function_costs(self, weights: CostWeights = DEFAULT_WEIGHTS) -> dict[str, float]:
        return {name: s.weighted_cost(weights) for name, s in self.functions.items()}


def parse_remarks(lines: Iterable[str]) -> RemarkReport:
    """Regalloc spill remarks of a remark stream; other passes' remarks are skipped.

    A function reported twice (a target that runs the greedy allocator once per register
    class group) gets the sum.
    """
    functions: dict[str, SpillStats] = {}
    loops: list[tuple[str, SpillStats]] = []
    for doc in _documents(lines):
        if doc.get("Pass") != REMARK_PASS or doc.get("Name") not in (FUNCTION_REMARK,
                                                                      LOOP_REMARK):
            continue
        fn = doc.get("Function")
        if fn is None:
            raise RemarkFormatError(f"{doc.get('Name')} remark without a Function")
        stats = _stats(doc)
        if doc["Name"] == FUNCTION_REMARK:
            functions[fn] = functions[fn] + stats if fn in functions else stats
        else:
            loops.append((fn, stats))
    return RemarkReport(functions, tuple(loops))


def read_remarks(path: str | os.PathLike[str]) -> RemarkReport:
    """Parse a remark file; a missing file means the allocator reported nothing."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return parse_remarks(f)
    except FileNotFoundError:
        return RemarkReport()


def _stats(doc: Mapping[str, str]) -> SpillStats:
    values: dict[str, int | float] = {}
    for arg, name in _ARG_FIELDS.items():
        raw = doc.get(f"Args.{arg}")
        if raw is None:
            continue
        try:
            values[name] = int(raw) if name in _INT_FIELDS else float(raw)
        except ValueError:
            raise RemarkFormatError(f"argument {arg}: {raw!r} is not a number") from None
    return SpillStats(**values)  # type: ignore[arg-type]


_INT_FIELDS = frozenset(f.name for f in dataclasses.fields(SpillStats) if f.type == "int")


def _documents(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """Each document as {key: scalar}; list items under `Args:` as `Args.<key>`."""
    doc: dict[str, str] | None = None
    in_args = False
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if line.startswith("---"):
            if doc is not None:
                yield doc
            doc, in_args = {}, False
            continue
        if line == "...":
            if doc is not None:
                yield doc
            doc = None
            continue
        if doc is None or not line.strip():
            continue
        if line[0] != " ":  # a top-level `Key: value`
            key, sep, rest = line.partition(":")
            if not sep:
                raise RemarkFormatError(f"line {lineno}: expected `Key: value`, got {line!r}")
            in_args = key == "Args"
            value = rest.strip()
            if value and not value.startswith("{"):  # flow mappings (DebugLoc) are not used
                doc[key] = _scalar(value, lineno)
        elif in_args and line.lstrip().startswith("- "):
            key, sep, rest = line.lstrip()[2:].partition(":")
            if sep and key != "String":
                value = rest.strip()
                if value and not value.startswith("{"):
                    doc[f"Args.{key}"] = _scalar(value, lineno)
        # anything else continues a wrapped flow mapping or nests under an argument
    if doc is not None:
        yield doc


_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f",
            "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
            "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


def _scalar(text: str, lineno: int) -> str:
    """A one-line YAML scalar as LLVM writes it: plain, 'single' or "double" quoted."""
    if text[0] == "'":
        if len(text) < 2 or text[-1] != "'":
            raise RemarkFormatError(f"line {lineno}: unterminated quoted scalar {text!r}")
        return text[1:-1].replace("''", "'")
    if text[0] != '"':
        return text
    if len(text) < 2 or text[-1] != '"':
        raise RemarkFormatError(f"line {lineno}: unterminated quoted scalar {text!r}")
    body, out, i = text[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = body[i + 1 : i + 2]
        if esc in _HEX_LEN:
            n = _HEX_LEN[esc]
            digits = body[i + 2 : i + 2 + n]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise RemarkFormatError(f"line {lineno}: bad escape in {text!r}") from None
            i += 2 + n
        elif esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        else:
            raise RemarkFormatError(f"line {lineno}: bad escape in {text!r}")
    return "".join(out)


def remark_file(directory: Path) -> Path:
    """Where a compile in `directory` writes its remarks."""
    return Path(directory) / "regalloc-remarks.yaml"
