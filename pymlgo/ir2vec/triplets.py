"""(head, relation, tail) triplets over IR entities, IR2Vec's training data.

The relations are those of the IR2Vec paper (VenkataKeerthy et al., TACO 2020): an
instruction's opcode to the next instruction's opcode (`Next`), to its type (`Type`), and
to the kind of its i-th operand (`Arg0`, `Arg1`, ...). Positions from `MAX_ARG_RELATIONS - 1`
on share the last relation (calls have long argument lists). pymlgo adds `Predicate` from a
comparison's opcode to its predicate, an entity clang 22 looks up.

Triplets are counted, not listed: a corpus repeats the same few thousand distinct triplets
millions of times, and training samples them in proportion to their counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pymlgo.ir2vec.ir_text import Instruction

MAX_ARG_RELATIONS = 4
RELATIONS = ("Next", "Type", *(f"Arg{i}" for i in range(MAX_ARG_RELATIONS)), "Predicate")

Triplet = tuple[str, str, str]


def function_triplets(body: Sequence[Instruction]) -> Iterable[Triplet]:
    """The triplets of one function's instructions, in text order."""
    for i, inst in enumerate(body):
        if i + 1 < len(body):
            yield inst.opcode, "Next", body[i + 1].opcode
        yield inst.opcode, "Type", inst.type
        for k, kind in enumerate(inst.operands):
            yield inst.opcode, f"Arg{min(k, MAX_ARG_RELATIONS - 1)}", kind
        if inst.predicate is not None:
            yield inst.opcode, "Predicate", inst.predicate


def count_triplets(functions: Iterable[Sequence[Instruction]],
                   into: Counter[Triplet] | None = None) -> Counter[Triplet]:
    """Add the triplets of every function to `into` (a new counter by default)."""
    counts: Counter[Triplet] = Counter() if into is None else into
    for body in functions:
        counts.update(function_triplets(body))
    return counts
