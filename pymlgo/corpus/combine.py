"""Merge sub-corpora into one, as mlgo-utils' `combine_training_corpus`.

`ROOT/*/corpus_description.json` are combined into `ROOT/corpus_description.json` with each
module name prefixed by its sub-directory; the files stay where they are. Sub-corpora must
agree on everything but their modules (ThinLTO or not, command override), else the merged
description would lie about some of them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pymlgo.corpus.format import (
    DESCRIPTION_FILE,
    CorpusError,
    check_module_name,
    read_description,
    write_description_dict,
)


def combine_corpora(root_dir: str | os.PathLike[str]) -> list[str]:
    """Write ROOT/corpus_description.json for the sub-corpora of ROOT; returns the names."""
    root = Path(root_dir)
    if not root.is_dir():
        raise CorpusError(f"{root} is not a directory")
    subs = sorted(p.parent for p in root.glob(f"*/{DESCRIPTION_FILE}"))
    if not subs:
        raise CorpusError(f"no sub-corpora under {root} (expected {root}/*/{DESCRIPTION_FILE})")
    names: list[str] = []
    reference: tuple[str, dict[str, Any]] | None = None
    for sub in subs:
        desc = read_description(sub)
        rest = {k: v for k, v in desc.items() if k != "modules"}
        rest.setdefault("has_thinlto", False)
        if reference is None:
            reference = (sub.name, rest)
        elif rest != reference[1]:
            diffs = sorted(k for k in set(rest) | set(reference[1])
                           if rest.get(k) != reference[1].get(k))
            detail = "; ".join(
                f"{k}: {reference[0]}/ has {reference[1].get(k, '(absent)')!r}, "
                f"{sub.name}/ has {rest.get(k, '(absent)')!r}"
                for k in diffs
            )
            raise CorpusError(
                f"cannot combine sub-corpora of {root}: they differ in more than their "
                f"modules ({detail})"
            )
        names.extend(check_module_name(f"{sub.name}/{check_module_name(n)}")
                     for n in desc["modules"])
    assert reference is not None
    # Keys other than the three known ones are kept, as mlgo-utils does.
    merged = {**reference[1], "modules": names}
    write_description_dict(root, merged)
    return names
