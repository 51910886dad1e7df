"""`TensorSpec`: name, element type and shape of one tensor, as LLVM's MLGO code describes it.

The JSON form is the one LLVM writes in training-log and channel headers,
`{"name":...,"type":...,"port":...,"shape":[...]}`, serialized compactly so that a header we
write is byte-identical to one LLVM writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# C type names as LLVM's TensorSpec spells them, mapped to native-byte-order numpy dtypes.
C_TYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(scalar)
    for name, scalar in (
        ("float", np.float32),
        ("double", np.float64),
        ("int8_t", np.int8),
        ("uint8_t", np.uint8),
        ("int16_t", np.int16),
        ("uint16_t", np.uint16),
        ("int32_t", np.int32),
        ("uint32_t", np.uint32),
        ("int64_t", np.int64),
        ("uint64_t", np.uint64),
    )
}


def dumps_compact(obj: object) -> str:
    """JSON the way LLVM's `json::OStream` writes it: no spaces, non-ASCII kept as UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a header: `type` is the C type name (`float`, `int64_t`, ...)."""

    name: str
    type: str
    shape: tuple[int, ...]
    port: int = 0

    def __post_init__(self) -> None:
        if self.type not in C_TYPES:
            known = ", ".join(C_TYPES)
            raise ValueError(
                f"tensor {self.name!r}: unknown element type {self.type!r} (known: {known})"
            )
        # Accept lists (as JSON gives them) but store a hashable tuple.
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"tensor {self.name!r}: negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return C_TYPES[self.type]

    @property
    def element_count(self) -> int:
        return math.prod(self.shape)

    @property
    def byte_size(self) -> int:
        return self.element_count * self.dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        # Key order matters for byte-exact headers: it is LLVM's.
        return {"name": self.name, "type": self.type, "port": self.port, "shape": list(self.shape)}

    def to_json_line(self) -> str:
        return dumps_compact(self.to_json())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TensorSpec:
        if not isinstance(d, Mapping):
            raise ValueError(f"tensor spec must be a JSON object, got {d!r}")
        missing = [key for key in ("name", "type", "shape") if key not in d]
        if missing:
            raise ValueError(f"tensor spec {dict(d)!r} lacks {', '.join(missing)}")
        name, type_, shape, port = d["name"], d["type"], d["shape"], d.get("port", 0)
        if not isinstance(name, str) or not isinstance(type_, str):
            raise ValueError(f"tensor spec {dict(d)!r}: name and type must be strings")
        if not isinstance(shape, list) or not all(_is_int(x) for x in shape) or not _is_int(port):
            raise ValueError(f"tensor spec {dict(d)!r}: shape must be a list of ints, port an int")
        return cls(name=name, type=type_, shape=tuple(shape), port=port)


def _is_int(x: object) -> bool:
    # JSON `true` parses as a Python bool, which is an int subclass; it is not a dimension.
    return isinstance(x, int) and not isinstance(x, bool)
