"""Freeze several corpora into one: every module of each, under one root, for one run.

A training or benchmark run needs one corpus whose data does not change under it, while the
corpora it draws on may still grow (`mlgo corpus debian --all` adds packages as it builds)
and live in different places (the demo corpus in the cache, Debian packages elsewhere).
`snapshot_corpora` links (or, across file systems, copies) each module's `.bc` and `.cmd`
into ROOT and writes one `corpus_description.json`, so the result is an ordinary corpus
that LLVM's mlgo-utils and every `mlgo` command read.

A source is `[PREFIX=]DIR` or `demo` (the demo corpus recorded at the snapshot's `level`:
-Oz for inlining, -O2 for register allocation). Module names are kept, so a module's package
is still the first component of its name; `PREFIX=DIR` puts DIR's modules under `PREFIX/`
(one Debian package's sub-corpus as `PKG=.../debian/PKG`). A name given twice is an error,
not a silent overwrite. A source that does not load is left out and reported, so one broken
or half-built package does not take the others down. Corpora with a global command override
or ThinLTO are refused: their modules cannot be merged with others as they are.

The snapshot is written to a temporary directory and renamed into place; an existing
snapshot at ROOT is loaded as it is (a rerun keeps the data its first run froze), and
`snapshot.json` there says which sources it came from.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pymlgo.corpus.command import format_cmd
from pymlgo.corpus.format import Corpus, CorpusError, load_corpus, write_corpus_description

SNAPSHOT_FILE = "snapshot.json"
DEMO = "demo"


@dataclass(frozen=True)
class Snapshot:
    corpus: Corpus
    sources: tuple[str, ...]  # the sources given
    skipped: dict[str, str]  # source -> why it was left out


def _load_source(path: str, allow_flags: Sequence[str], level: str) -> Corpus:
    if path == DEMO and not Path(path).exists():
        from pymlgo.corpus.demo import ensure_demo_corpus

        return load_corpus(ensure_demo_corpus(level=level), allow_flags=allow_flags)
    return load_corpus(path, allow_flags=allow_flags)


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)  # the source may be replaced later; a link keeps this content
    except OSError:
        shutil.copyfile(src, dest)


def snapshot_corpora(sources: Sequence[str], root: str | os.PathLike[str], *,
                     allow_flags: Sequence[str] = (), level: str = "-Oz") -> Snapshot:
    """One corpus at `root` holding every module of `sources` (see the module docstring).
    `allow_flags`: cc1 flags beyond the corpus allowlist the caller has checked; `level`:
    the -O level a `demo` source is recorded at."""
    root = Path(root)
    if (root / "corpus_description.json").is_file():
        info = json.loads((root / SNAPSHOT_FILE).read_text()) if (
            root / SNAPSHOT_FILE).is_file() else {}
        return Snapshot(load_corpus(root, allow_flags=allow_flags),
                        tuple(info.get("sources", ())),
                        dict(info.get("skipped", {})))
    if not sources:
        raise CorpusError("a snapshot needs at least one source corpus")
    staging = root.with_name(root.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    names: list[str] = []
    skipped: dict[str, str] = {}
    try:
        for spec in sources:
            prefix, _, path = spec.rpartition("=")
            try:
                corpus = _load_source(path, allow_flags, level)
            except CorpusError as exc:
                skipped[spec] = str(exc)[:300]
                continue
            if corpus.global_command_override or corpus.has_thinlto:
                raise CorpusError(f"{spec}: a corpus with a command override or ThinLTO "
                                  "cannot be merged with others")
            for m in corpus.modules:
                name = f"{prefix}/{m.name}" if prefix else m.name
                dest = staging / name
                bc, cmd = Path(f"{dest}.bc"), Path(f"{dest}.cmd")  # names may end in .c
                if bc.exists():
                    raise CorpusError(f"module {name} appears in two of the sources")
                dest.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(m.bc_path, bc)
                cmd.write_bytes(format_cmd(m.cmd))
                names.append(name)
        if not names:
            raise CorpusError("no source corpus could be loaded: " + "; ".join(
                f"{k}: {v}" for k, v in skipped.items()))
        write_corpus_description(staging, names)
        (staging / SNAPSHOT_FILE).write_text(json.dumps(
            {"sources": list(sources), "skipped": skipped, "modules": len(names)},
            indent=2) + "\n")
        os.rename(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Snapshot(load_corpus(root, allow_flags=allow_flags), tuple(sources), skipped)
