"""An IR2Vec vocabulary file: read, check, write, identify, and the flags that make clang use it.

The format is the one clang reads (`-ir2vec-vocab-path`): a JSON object with the sections
`Opcodes`, `Types` and `Arguments`, each mapping an entity name to a list of numbers, all
of one length (the dimension). clang rejects a missing section or unequal lengths with an
error; it silently uses zeros for a missing entity, which `missing_entities` reports.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymlgo.ir2vec.entities import REQUIRED, SECTIONS
from pymlgo.toolchain.files import write_atomic


class VocabFileError(ValueError):
    """The file is not a vocabulary clang would accept; the message says why."""


class MissingEntityWarning(UserWarning):
    """The vocabulary lacks entities clang looks up: they embed as zeros."""


@dataclass(frozen=True)
class IR2VecVocab:
    """Section -> entity -> vector (tuples of floats, every vector of length `dim`)."""

    sections: Mapping[str, Mapping[str, tuple[float, ...]]]

    def __post_init__(self) -> None:
        dims = set()
        for section in SECTIONS:
            entries = self.sections.get(section)
            if not entries:
                raise VocabFileError(f"IR2Vec vocabulary: section {section!r} is missing or "
                                     "empty (clang refuses it)")
            for name, vec in entries.items():
                if not vec or not all(math.isfinite(v) for v in vec):
                    raise VocabFileError(f"IR2Vec vocabulary: {section}.{name} must be a "
                                         "non-empty list of finite numbers")
                dims.add(len(vec))
        if len(dims) != 1:
            raise VocabFileError(f"IR2Vec vocabulary: vectors of different lengths "
                                 f"{sorted(dims)} (clang needs one dimension)")

    @property
    def dim(self) -> int:
        return len(next(iter(self.sections[SECTIONS[0]].values())))

    def missing_entities(self) -> list[str]:
        """`Section.name` of every entity clang 22 looks up that this file lacks."""
        return [f"{section}.{name}" for section, names in REQUIRED.items()
                for name in names if name not in self.sections[section]]

    def to_json(self) -> dict[str, Any]:
        return {s: {n: list(v) for n, v in sorted(self.sections[s].items())} for s in SECTIONS}

    @classmethod
    def from_json(cls, doc: Any) -> IR2VecVocab:
        if not isinstance(doc, Mapping):
            raise VocabFileError("IR2Vec vocabulary: the JSON root must be an object")
        sections: dict[str, dict[str, tuple[float, ...]]] = {}
        for section in SECTIONS:
            entries = doc.get(section)
            if not isinstance(entries, Mapping):
                raise VocabFileError(f"IR2Vec vocabulary: no {section!r} object (clang needs "
                                     f"the sections {', '.join(SECTIONS)})")
            out: dict[str, tuple[float, ...]] = {}
            for name, vec in entries.items():
                if not isinstance(vec, list) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in vec
                ):
                    raise VocabFileError(f"IR2Vec vocabulary: {section}.{name} is not a list "
                                         "of numbers")
                out[str(name)] = tuple(float(v) for v in vec)
            sections[section] = out
        return cls(sections)


def dumps(vocab: IR2VecVocab) -> str:
    """Stable text (sorted names, one entity per line): equal vocabularies, equal bytes."""
    lines = ["{"]
    for i, section in enumerate(SECTIONS):
        entries = sorted(vocab.sections[section].items())
        lines.append(f"  {json.dumps(section)}: {{")
        for j, (name, vec) in enumerate(entries):
            comma = "," if j < len(entries) - 1 else ""
            lines.append(f"    {json.dumps(name)}: {json.dumps([float(v) for v in vec])}{comma}")
        lines.append("  }" + ("," if i < len(SECTIONS) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(vocab: IR2VecVocab, path: Path) -> None:
    write_atomic(Path(path), dumps(vocab).encode())


def load(path: Path) -> IR2VecVocab:
    """Read and check a vocabulary file (`VocabFileError` with the path if it is unusable)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise VocabFileError(f"{path}: cannot read the IR2Vec vocabulary ({exc.strerror})"
                             ) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise VocabFileError(f"{path}: not valid JSON ({exc})") from exc
    try:
        return IR2VecVocab.from_json(doc)
    except VocabFileError as exc:
        raise VocabFileError(f"{path}: {exc}") from exc


def warn_missing(vocab: IR2VecVocab, where: str) -> list[str]:
    """Warn (MissingEntityWarning) when `vocab` lacks entities clang looks up; return them."""
    missing = vocab.missing_entities()
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8
                                          else "")
        warnings.warn(f"{where}: the IR2Vec vocabulary lacks {len(missing)} entities clang "
                      f"looks up ({shown}); clang embeds them as zeros without saying so",
                      MissingEntityWarning, stacklevel=2)
    return missing


def file_sha256(path: Path) -> str:
    """The identity of a vocabulary file: the sha256 of its bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def clang_flags(path: Path) -> list[str]:
    """The cc1 flags that make clang's ML inliner send `callee_embedding` and
    `caller_embedding`: both are needed. The inliner's flag alone fails the advisor's setup
    ("IR2Vec vocabulary file path not specified"); IR2Vec's alone sends no embeddings."""
    path = Path(path).absolute()
    return ["-mllvm", f"-ml-inliner-ir2vec-vocab-file={path}",
            "-mllvm", f"-ir2vec-vocab-path={path}"]


EMBEDDING_FEATURES = ("callee_embedding", "caller_embedding")
