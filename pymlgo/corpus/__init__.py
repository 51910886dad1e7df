"""Corpora: the modules of real programs before optimization, with their compile commands.

On disk in the layout of LLVM's mlgo-utils (see `format`); made by `capture` (any build),
`extract` (objects with embedded bitcode), `make` (loose bitcode), `combine` and `demo`;
split by package or module (`split`) and sampled for training (`sample`).
"""

from pymlgo.corpus.format import (
    Corpus,
    CorpusError,
    Module,
    load_corpus,
    write_corpus_description,
)

__all__ = ["Corpus", "CorpusError", "Module", "load_corpus", "write_corpus_description"]
