"""The IR entities clang's IR2Vec looks up in a vocabulary, by section, as clang 22 names them.

Facts (llvm/lib/Analysis/IR2Vec.cpp and llvm/include/llvm/Analysis/IR2Vec.h, LLVM 22; checked
on the bundled clang 22.1.8 with a one-hot vocabulary over the demo corpus: every
instruction's opcode, type and comparison predicate fell on one of these names):

- `Opcodes`: the instruction opcodes under their `Instruction.def` names (`Br`, `GetElementPtr`,
  `AtomicCmpXchg`, ...). LLVM after 22 splits `Br` into `UncondBr`/`CondBr` and adds
  `BitInsert`/`BitExtract`; clang ignores names it does not look up, so a vocabulary may
  carry both spellings.
- `Types`: 12 canonical types (every float kind is `FloatTy`, fixed and scalable vectors
  are `VectorTy`, target extension types `UnknownTy`).
- `Arguments`: the operand kinds `Function`, `Pointer`, `Constant`, `Variable` (tested in
  that order: a function, else a pointer-typed value, else a constant, else anything),
  and the comparison predicates `FCMP_<pred>` / `ICMP_<pred>` (`ICMP_slt`, `FCMP_oeq`).

An instruction's vector is opcode + type + the sum over its operands, plus the predicate
of a comparison; a function's is the sum over the instructions of its reachable blocks.
clang scales each section by a weight (`-ir2vec-opc-weight` 1.0, `-ir2vec-type-weight`
0.5, `-ir2vec-arg-weight` 0.2; predicates count as arguments). An entity missing from the
file becomes a zero vector without any message (the release build prints neither its
debug line nor its statistic), so pymlgo checks for missing names itself.
"""

from __future__ import annotations

SECTIONS = ("Opcodes", "Types", "Arguments")

OPCODES = (
    "Ret", "Br", "Switch", "IndirectBr", "Invoke", "Resume", "Unreachable", "CleanupRet",
    "CatchRet", "CatchSwitch", "CallBr",
    "FNeg",
    "Add", "FAdd", "Sub", "FSub", "Mul", "FMul", "UDiv", "SDiv", "FDiv", "URem", "SRem",
    "FRem", "Shl", "LShr", "AShr", "And", "Or", "Xor",
    "Alloca", "Load", "Store", "GetElementPtr", "Fence", "AtomicCmpXchg", "AtomicRMW",
    "Trunc", "ZExt", "SExt", "FPToUI", "FPToSI", "UIToFP", "SIToFP", "FPTrunc", "FPExt",
    "PtrToInt", "PtrToAddr", "IntToPtr", "BitCast", "AddrSpaceCast",
    "CleanupPad", "CatchPad",
    "ICmp", "FCmp", "PHI", "Call", "Select", "UserOp1", "UserOp2", "VAArg", "ExtractElement",
    "InsertElement", "ShuffleVector", "ExtractValue", "InsertValue", "LandingPad", "Freeze",
)  # fmt: skip

TYPES = (
    "FloatTy", "VoidTy", "LabelTy", "MetadataTy", "VectorTy", "TokenTy", "IntegerTy",
    "FunctionTy", "PointerTy", "StructTy", "ArrayTy", "UnknownTy",
)  # fmt: skip

OPERAND_KINDS = ("Function", "Pointer", "Constant", "Variable")
FCMP_PREDICATES = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "uno", "ueq",
                   "ugt", "uge", "ult", "ule", "une", "true")
ICMP_PREDICATES = ("eq", "ne", "ugt", "uge", "ult", "ule", "sgt", "sge", "slt", "sle")
PREDICATES = (tuple(f"FCMP_{p}" for p in FCMP_PREDICATES)
              + tuple(f"ICMP_{p}" for p in ICMP_PREDICATES))

# What clang 22 looks up, per section of the vocabulary file.
REQUIRED: dict[str, tuple[str, ...]] = {
    "Opcodes": OPCODES,
    "Types": TYPES,
    "Arguments": OPERAND_KINDS + PREDICATES,
}

# clang's default section weights (the -ir2vec-*-weight options).
SECTION_WEIGHTS = {"Opcodes": 1.0, "Types": 0.5, "Arguments": 0.2}

# Textual IR opcode -> entity name, where the text is not simply the name in lower case.
_TEXT_SPELLINGS = {"cmpxchg": "AtomicCmpXchg", "va_arg": "VAArg"}
TEXT_OPCODES: dict[str, str] = {name.lower(): name for name in OPCODES}
TEXT_OPCODES.update(_TEXT_SPELLINGS)
del TEXT_OPCODES["atomiccmpxchg"], TEXT_OPCODES["vaarg"]


def section_of(entity: str) -> str:
    """The vocabulary section an entity name belongs in (KeyError for an unknown name)."""
    for section, names in REQUIRED.items():
        if entity in names:
            return section
    raise KeyError(f"{entity!r} is not an IR2Vec entity clang 22 looks up")


def all_entities() -> tuple[str, ...]:
    """Every entity, sections in file order."""
    return tuple(name for section in SECTIONS for name in REQUIRED[section])
