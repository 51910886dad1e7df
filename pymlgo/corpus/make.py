"""Make a corpus from loose `.bc` files (no recorded commands), as mlgo-utils' `make_corpus`.

Such bitcode has no `.cmd`, so the corpus gets a `global_command_override`: the flags every
module is compiled with. Like mlgo-utils, the default is an empty list, which the loader
turns into clang's default cc1 command for bitcode (`clang -### -c -x ir`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from pymlgo.corpus.format import (
    BC_SUFFIX,
    THINLTO_SUFFIX,
    CorpusError,
    check_module_name,
    staged_dir,
    write_corpus_description,
)


def find_bitcode(input_dir: str | os.PathLike[str]) -> list[str]:
    """Module names (relative paths without `.bc`) of the bitcode files under `input_dir`.

    ThinLTO index files (`*.thinlto.bc`) are summaries, not modules, and are left out.
    """
    base = Path(input_dir)
    if not base.is_dir():
        raise CorpusError(f"input directory {base} does not exist")
    names = []
    for path in base.rglob("*" + BC_SUFFIX):
        if path.name.endswith(THINLTO_SUFFIX) or not path.is_file():
            continue
        rel = path.relative_to(base).as_posix()
        names.append(check_module_name(rel[: -len(BC_SUFFIX)]))
    return sorted(names)


def make_corpus(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    default_args: Sequence[str] = (),
    overwrite: bool = False,
) -> list[str]:
    """Copy every `.bc` under `input_dir` into a new corpus at `output_dir`; returns the
    module names. Nothing is written unless the whole copy succeeds."""
    names = find_bitcode(input_dir)
    if not names:
        raise CorpusError(f"no .bc files under {input_dir}")
    src_root = Path(input_dir)
    with staged_dir(output_dir, overwrite=overwrite) as tmp:
        for name in names:
            dest = tmp / (name + BC_SUFFIX)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src_root / (name + BC_SUFFIX), dest)
        write_corpus_description(
            tmp, names, has_thinlto=False, global_command_override=list(default_args)
        )
    return names
