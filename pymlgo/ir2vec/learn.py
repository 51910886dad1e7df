"""Learn a seed vocabulary from a corpus's own IR: text IR -> entities -> triplets -> TransE."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pymlgo.corpus.format import Corpus
from pymlgo.ir2vec.entities import REQUIRED, SECTIONS, all_entities
from pymlgo.ir2vec.ir_text import parse_module
from pymlgo.ir2vec.module_ir import ModuleIRError, check_stages, module_ir
from pymlgo.ir2vec.transe import TransEConfig, TransEResult, train_transe
from pymlgo.ir2vec.triplets import RELATIONS, Triplet, count_triplets
from pymlgo.ir2vec.vocab_file import IR2VecVocab
from pymlgo.toolchain.compiler import Compiler

# Digits written per vector component: the file stays readable and the bytes reproducible.
DECIMALS = 6


@dataclass
class CorpusTriplets:
    counts: Counter[Triplet] = field(default_factory=Counter)
    modules: int = 0
    instructions: int = 0
    unknown_lines: int = 0
    failed: list[str] = field(default_factory=list)


def corpus_triplets(compiler: Compiler, corpus: Corpus, stages: Sequence[str],
                    *, timeout: float = 300.0,
                    on_module: Callable[[str], None] | None = None) -> CorpusTriplets:
    """Triplet counts over every module of `corpus` at each IR stage. A module the compiler
    cannot turn into IR is listed in `failed`, not fatal."""
    out = CorpusTriplets()
    for module in corpus.modules:
        for stage in check_stages(stages):
            try:
                parsed = parse_module(module_ir(compiler, module, stage, timeout=timeout))
            except ModuleIRError as exc:
                out.failed.append(str(exc))
                continue
            out.unknown_lines += parsed.unknown
            out.instructions += sum(len(b) for b in parsed.functions.values())
            count_triplets(parsed.functions.values(), out.counts)
        out.modules += 1
        if on_module is not None:
            on_module(module.name)
    return out


@dataclass(frozen=True)
class LearnedVocab:
    vocab: IR2VecVocab
    training: TransEResult
    unseen: tuple[str, ...]  # entities no triplet mentions: their vectors are initial values
    seconds: float


def learn_vocab(counts: Counter[Triplet], config: TransEConfig) -> LearnedVocab:
    """A vocabulary with every entity clang 22 looks up, trained on `counts`."""
    started = time.monotonic()
    entities = all_entities()
    result = train_transe(counts, entities, RELATIONS, config)
    seen = {x for h, _, t in counts for x in (h, t)}
    sections = {
        s: {n: tuple(round(float(v), DECIMALS) for v in result.entities[n]) for n in REQUIRED[s]}
        for s in SECTIONS
    }
    unseen = tuple(e for e in entities if e not in seen)
    return LearnedVocab(IR2VecVocab(sections), result, unseen, time.monotonic() - started)
