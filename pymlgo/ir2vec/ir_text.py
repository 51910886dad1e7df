"""Read textual LLVM IR (`.ll`) as IR2Vec sees it: per function, each instruction's opcode,
canonical result type, operand kinds and comparison predicate, under clang's entity names.

Only what IR2Vec needs is parsed; the rules follow IR2Vec's own (`pymlgo.ir2vec.entities`):
an operand is `Function` (a function of the module), else `Pointer` (pointer-typed), else
`Constant` (a literal or constant expression), else `Variable` (SSA values, arguments,
block labels, metadata). Debug records and debug intrinsics are not instructions to IR2Vec
(it walks `instructionsWithoutDebug`) and are skipped. A line this reader cannot place is
counted (`ParsedModule.unknown`), never guessed into an entity.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pymlgo.ir2vec.entities import TEXT_OPCODES

_FLOAT_TYPES = frozenset(
    ("half", "bfloat", "float", "double", "x86_fp80", "fp128", "ppc_fp128"))
_SIMPLE_TYPES = {"void": "VoidTy", "label": "LabelTy", "metadata": "MetadataTy",
                 "token": "TokenTy", "x86_amx": "VectorTy", "ptr": "PointerTy"}
# Words that may stand between an opcode and its first type (flags, fast-math, orderings).
_FLAGS = frozenset((
    "nuw", "nsw", "exact", "disjoint", "nneg", "samesign", "inbounds", "nusw", "volatile",
    "atomic", "weak", "fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc",
    "inalloca", "swifterror", "tail", "musttail", "notail",
))
_RESULT = re.compile(r'^\s*(?:%[-\w$.]+|%"(?:[^"\\]|\\.)*")\s*=\s*')
_DEFINE = re.compile(r'^define\b[^@]*@([-\w$.]+|"(?:[^"\\]|\\.)*")\s*\(')
_GLOBAL_FN = re.compile(r'^(?:define|declare)\b[^@]*@([-\w$.]+|"(?:[^"\\]|\\.)*")\s*\(')
_TYPEDEF = re.compile(r'^(%[-\w$.]+|%"(?:[^"\\]|\\.)*")\s*=\s*type\s+(.*)$')
_DEBUG_CALLEES = ("@llvm.dbg.", "@llvm.pseudoprobe")
_OPENERS, _CLOSERS = "([{<", ")]}>"


@dataclass(frozen=True)
class Instruction:
    """One instruction as IR2Vec embeds it (entity names)."""

    opcode: str
    type: str
    operands: tuple[str, ...]
    predicate: str | None = None


@dataclass
class ParsedModule:
    """Instructions of every defined function, in text order; `unknown` counts lines that
    looked like instructions but could not be read."""

    functions: dict[str, list[Instruction]] = field(default_factory=dict)
    unknown: int = 0

    def instructions(self) -> Iterator[Instruction]:
        for body in self.functions.values():
            yield from body


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside brackets and quotes, pieces stripped, empties dropped."""
    out, depth, start, quoted, i = [], 0, 0, False, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            depth -= 1
        elif depth == 0 and (c == sep or (sep == " " and c.isspace())):
            out.append(text[start:i])
            start = i + 1
        i += 1
    out.append(text[start:])
    return [p.strip() for p in out if p.strip()]


def words(text: str) -> list[str]:
    """Top-level space-separated tokens; a bracketed group stays one token with what touches it
    (`@f(i32 1)`, `range(i32 0, 4)`, `{ i32, i1 }`)."""
    return split_top(text, " ")


def canonical_type(t: str) -> str:
    """A type's text -> IR2Vec's canonical type name."""
    t = t.strip()
    if t.startswith("<{"):
        return "StructTy"
    if t.startswith("<"):
        return "VectorTy"
    if t.startswith("{") or t.startswith("%"):  # identified types are structs
        return "StructTy"
    if t.startswith("["):
        return "ArrayTy"
    head = t.split(None, 1)[0] if t else ""
    head = head.split("(", 1)[0]
    if re.fullmatch(r"i\d+", head):
        return "IntegerTy"
    if head in _FLOAT_TYPES:
        return "FloatTy"
    if head == "target":
        return "UnknownTy"
    if head in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[head]
    if "(" in t:  # a function type, e.g. `i32 (ptr, ...)`
        return "FunctionTy"
    return "UnknownTy"


def _take_type(tokens: list[str]) -> tuple[str, list[str]]:
    """The type at the start of `tokens` (`ptr addrspace(1)` is two tokens), and the rest."""
    if not tokens:
        return "", []
    if tokens[0] == "ptr" and len(tokens) > 1 and tokens[1].startswith("addrspace("):
        return "ptr " + tokens[1], tokens[2:]
    return tokens[0], tokens[1:]


class _Module:
    """What a module's parse needs besides the line: its functions and named types."""

    def __init__(self, functions: set[str], typedefs: dict[str, str]) -> None:
        self.functions = functions
        self.typedefs = typedefs

    def kind(self, type_text: str, value: str) -> str:
        """Operand kind of `value` of type `type_text` (IR2Vec's order of tests)."""
        if value.startswith("@") and value[1:].split("(", 1)[0] in self.functions:
            return "Function"
        ctype = canonical_type(type_text)
        if ctype == "PointerTy":
            return "Pointer"
        if ctype in ("MetadataTy", "LabelTy") or value.startswith("%"):
            return "Variable"
        return "Constant"

    def typed(self, item: str) -> tuple[str, str]:
        """`TYPE [attrs] VALUE` -> (TYPE, VALUE): the value is the last top-level token."""
        tokens = words(item)
        t, rest = _take_type(tokens)
        return t, (rest[-1] if rest else "")

    def typed_kind(self, item: str) -> str:
        return self.kind(*self.typed(item))

    def member(self, agg: str, index: int) -> str:
        """The type of member `index` of aggregate type `agg`."""
        agg = agg.strip()
        if agg.startswith("%"):
            agg = self.typedefs.get(agg, "")
        if agg.startswith("<{"):
            agg = agg[1:-1]
        if agg.startswith("{"):
            parts = split_top(agg[1:-1])
            return parts[index] if index < len(parts) else ""
        m = re.fullmatch(r"[\[<]\s*\d+\s+x\s+(.*)[\]>]", agg, re.S)
        return m.group(1).strip() if m else ""


def parse_module(text: str) -> ParsedModule:
    """Every defined function's instructions, in the order of the text."""
    lines = text.splitlines()
    functions = set()
    typedefs = {}
    for line in lines:
        m = _GLOBAL_FN.match(line)
        if m:
            functions.add(m.group(1))
        t = _TYPEDEF.match(line)
        if t:
            typedefs[t.group(1)] = t.group(2).strip()
    mod = _Module(functions, typedefs)
    out = ParsedModule()
    current: list[Instruction] | None = None
    for stmt in _statements(lines):
        if current is None:
            m = _DEFINE.match(stmt)
            if m and stmt.rstrip().endswith("{"):
                current = out.functions.setdefault(m.group(1), [])
            continue
        if stmt.startswith("}"):
            current = None
            continue
        inst = _instruction(stmt, mod)
        if inst is None:
            if _looks_like_instruction(stmt):
                out.unknown += 1
            continue
        current.append(inst)
    return out


def _statements(lines: Sequence[str]) -> Iterator[str]:
    """Lines joined into whole statements: an instruction continues while brackets are open
    and onto lines that start with an invoke's or landingpad's continuation."""
    buf = ""
    for raw in lines:
        line = _strip_comment(raw)
        stripped = line.strip()
        if buf and not buf.startswith("define") and (
                stripped.startswith(("to label", "unwind ", "catch ", "filter ", "cleanup"))
                or _depth(buf) > 0):
            buf += " " + stripped
            continue
        if buf:
            yield buf
        buf = line if stripped else ""
    if buf:
        yield buf


def _strip_comment(line: str) -> str:
    quoted = False
    for i, c in enumerate(line):
        if c == '"':
            quoted = not quoted
        elif c == ";" and not quoted:
            return line[:i].rstrip()
    return line.rstrip()


def _depth(text: str) -> int:
    depth, quoted = 0, False
    for c in text:
        if c == '"':
            quoted = not quoted
        elif not quoted and c in "([{":
            depth += 1
        elif not quoted and c in ")]}":
            depth -= 1
    return depth


def _looks_like_instruction(stmt: str) -> bool:
    s = stmt.strip()
    return bool(s) and not s.endswith(":") and not s.startswith(("#dbg_", "!"))


def _operands_and_metadata(rest: str) -> list[str]:
    """Comma-separated items of `rest`, without `!md !N` attachments and `align N` and the
    like that follow the operands."""
    return [p for p in split_top(rest)
            if not p.startswith(("!", "align ", "addrspace(", "syncscope("))]


def _instruction(stmt: str, mod: _Module) -> Instruction | None:
    s = stmt.strip()
    if not s or s.endswith(":") or s.startswith(("#dbg_", "!")) or ":" in s.split(" ", 1)[0]:
        return None
    s = _RESULT.sub("", s, count=1)
    tokens = words(s)
    while tokens and tokens[0] in _FLAGS:
        tokens = tokens[1:]
    if not tokens:
        return None
    op = TEXT_OPCODES.get(tokens[0])
    if op is None:
        return None
    rest = s[s.index(tokens[0]) + len(tokens[0]):].strip()
    try:
        return _PARSERS.get(op, _generic)(op, rest, mod)
    except (IndexError, ValueError):
        return None


def _skip_flags(rest: str) -> str:
    tokens = words(rest)
    i = 0
    while i < len(tokens) and tokens[i] in _FLAGS:
        i += 1
    return " ".join(tokens[i:])


def _binary(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))
    t, v0 = mod.typed(items[0])
    kinds = [mod.kind(t, v0)] + [mod.kind(t, words(x)[-1]) for x in items[1:]]
    return Instruction(op, canonical_type(t), tuple(kinds))


def _compare(op: str, rest: str, mod: _Module) -> Instruction:
    tokens = [w for w in words(rest) if w not in _FLAGS]
    pred, body = tokens[0], " ".join(tokens[1:])
    items = _operands_and_metadata(body)
    t, v0 = mod.typed(items[0])
    kinds = (mod.kind(t, v0), mod.kind(t, words(items[1])[-1]))
    result = "VectorTy" if canonical_type(t) == "VectorTy" else "IntegerTy"
    prefix = "ICMP_" if op == "ICmp" else "FCMP_"
    return Instruction(op, result, kinds, prefix + pred)


def _cast(op: str, rest: str, mod: _Module) -> Instruction:
    tokens = words(_operands_and_metadata(_skip_flags(rest))[0])
    at = tokens.index("to")
    t, v = _take_type(tokens[:at])
    return Instruction(op, canonical_type(" ".join(tokens[at + 1:])), (mod.kind(t, v[-1]),))


def _alloca(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))
    count = mod.typed_kind(items[1]) if len(items) > 1 else "Constant"  # implicit `i32 1`
    return Instruction(op, "PointerTy", (count,))


def _load(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))
    return Instruction(op, canonical_type(items[0]), (mod.typed_kind(items[1]),))


def _typed_operands(op: str, rest: str, mod: _Module, result: str) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))
    return Instruction(op, result, tuple(mod.typed_kind(x) for x in items))


def _store(op: str, rest: str, mod: _Module) -> Instruction:
    return _typed_operands(op, rest, mod, "VoidTy")


def _gep(op: str, rest: str, mod: _Module) -> Instruction:
    body = " ".join(w for w in words(_skip_flags(rest)) if not w.startswith("inrange("))
    items = _operands_and_metadata(body)[1:]  # the first item is the source element type
    typed = [mod.typed(x) for x in items]
    vector = any(canonical_type(t) == "VectorTy" for t, _ in typed)
    return Instruction(op, "VectorTy" if vector else "PointerTy",
                       tuple(mod.kind(t, v) for t, v in typed))


def _cmpxchg(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))[:3]
    items[-1] = " ".join(words(items[-1])[:2])  # drop the orderings after the new value
    return Instruction(op, "StructTy", tuple(mod.typed_kind(x) for x in items))


def _atomicrmw(op: str, rest: str, mod: _Module) -> Instruction:
    tokens = words(_skip_flags(rest))
    items = _operands_and_metadata(" ".join(tokens[1:]))[:2]  # tokens[0]: the operation
    t, _ = mod.typed(items[1])
    items[1] = " ".join(words(items[1])[:2])
    return Instruction(op, canonical_type(t), tuple(mod.typed_kind(x) for x in items))


def _phi(op: str, rest: str, mod: _Module) -> Instruction:
    tokens = words(_skip_flags(rest))
    t, incoming = _take_type(tokens)
    values = []
    for group in split_top(" ".join(incoming)):
        inner = group.strip()
        if inner.startswith("["):
            values.append(mod.kind(t, split_top(inner[1:-1])[0]))
    return Instruction(op, canonical_type(t), tuple(values))


def _select(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))
    return Instruction(op, canonical_type(mod.typed(items[1])[0]),
                       tuple(mod.typed_kind(x) for x in items[:3]))


def _call(op: str, rest: str, mod: _Module) -> Instruction | None:
    tokens = words(rest)
    callee_at = next((i for i, w in enumerate(tokens)
                      if w[:1] in "@%" and "(" in w and not w.startswith("%struct")), None)
    asm = "asm" in tokens
    if callee_at is None and asm:
        callee_at = next(i for i, w in enumerate(tokens) if w.startswith('"') and "(" in w)
    if callee_at is None:
        raise ValueError("no callee")
    callee_tok = tokens[callee_at]
    if callee_tok.startswith(_DEBUG_CALLEES):
        return None
    paren = callee_tok.index("(", callee_tok.rfind('"') + 1 if asm else 0)
    callee, args = callee_tok[:paren], callee_tok[paren + 1:-1]
    before = tokens[:tokens.index("asm")] if asm else tokens[:callee_at]
    if before and before[-1].startswith("("):  # an explicit function type's parameters
        before = before[:-1]
    ret = before[-1] if before else "void"
    if ret.startswith("addrspace("):
        ret = "ptr"
    kinds = [mod.typed_kind(a) for a in split_top(args)]
    if op != "Call":  # invoke / callbr: the destinations come before the callee
        tail = " ".join(tokens[callee_at + 1:])
        kinds += ["Variable"] * len(re.findall(r"\blabel\s", tail))
    kinds.append("Pointer" if asm else mod.kind("ptr", callee))
    return Instruction(op, canonical_type(ret), tuple(kinds))


def _ret(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(rest)
    if not items or words(items[0])[0] == "void":
        return Instruction(op, "VoidTy", ())
    return Instruction(op, "VoidTy", (mod.typed_kind(items[0]),))


_CASE = re.compile(r'([^\s,\[\]]+)\s+([^\s,\[\]]+)\s*,\s*label\s+(%[-\w$.]+|%"[^"]*")')


def _branches(op: str, rest: str, mod: _Module) -> Instruction:
    """br / indirectbr: typed operands (an indirectbr's bracketed labels flattened)."""
    flat = rest.replace("[", ",").replace("]", ",")
    return Instruction(op, "VoidTy",
                       tuple(mod.typed_kind(x) for x in _operands_and_metadata(flat)))


def _switch(op: str, rest: str, mod: _Module) -> Instruction:
    """`switch T v, label %d [ T c, label %x ... ]`: condition, default, then per case its
    value and its destination (cases are not comma-separated from each other)."""
    head, _, cases = rest.partition("[")
    kinds = [mod.typed_kind(x) for x in _operands_and_metadata(head)]
    for t, value, _dest in _CASE.findall(cases):
        kinds += [mod.kind(t, value), "Variable"]
    return Instruction(op, "VoidTy", tuple(kinds))


def _landingpad(op: str, rest: str, mod: _Module) -> Instruction:
    tokens = words(rest)
    t, clauses = _take_type(tokens)
    kinds = []
    for i, w in enumerate(clauses):
        if w in ("catch", "filter") and i + 2 < len(clauses):
            kinds.append(mod.kind(clauses[i + 1], clauses[i + 2]))
    return Instruction(op, canonical_type(t), tuple(kinds))


def _extractvalue(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(rest)
    t, v = mod.typed(items[0])
    member = t
    for index in items[1:]:
        member = mod.member(member, int(index))
    return Instruction(op, canonical_type(member), (mod.kind(t, v),))


def _insertvalue(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(rest)
    return Instruction(op, canonical_type(mod.typed(items[0])[0]),
                       tuple(mod.typed_kind(x) for x in items[:2]))


def _extractelement(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(rest)
    t = mod.typed(items[0])[0]
    return Instruction(op, canonical_type(mod.member(t, 0)),
                       tuple(mod.typed_kind(x) for x in items[:2]))


def _vector_result(op: str, rest: str, mod: _Module, n: int) -> Instruction:
    items = _operands_and_metadata(rest)
    return Instruction(op, "VectorTy", tuple(mod.typed_kind(x) for x in items[:n]))


def _vaarg(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(rest)
    return Instruction(op, canonical_type(items[1]), (mod.typed_kind(items[0]),))


def _unary(op: str, rest: str, mod: _Module) -> Instruction:
    items = _operands_and_metadata(_skip_flags(rest))
    t, v = mod.typed(items[0])
    return Instruction(op, canonical_type(t), (mod.kind(t, v),))


def _generic(op: str, rest: str, mod: _Module) -> Instruction:
    """Exception-handling pads and the like (rare outside C++ on Windows): typed operands
    where they parse, a token or void result."""
    kinds = []
    for item in _operands_and_metadata(rest.replace("[", ",").replace("]", ",")):
        tokens = words(item)
        if len(tokens) >= 2:
            kinds.append(mod.kind(*_take_type(tokens)[:1], tokens[-1]))
    result = "TokenTy" if op in ("CleanupPad", "CatchPad", "CatchSwitch") else "VoidTy"
    return Instruction(op, result, tuple(kinds))


_PARSERS = {
    **{op: _binary for op in ("Add", "FAdd", "Sub", "FSub", "Mul", "FMul", "UDiv", "SDiv",
                              "FDiv", "URem", "SRem", "FRem", "Shl", "LShr", "AShr", "And",
                              "Or", "Xor")},
    **{op: _cast for op in ("Trunc", "ZExt", "SExt", "FPToUI", "FPToSI", "UIToFP", "SIToFP",
                            "FPTrunc", "FPExt", "PtrToInt", "PtrToAddr", "IntToPtr",
                            "BitCast", "AddrSpaceCast")},
    "ICmp": _compare, "FCmp": _compare,
    "Alloca": _alloca, "Load": _load, "Store": _store, "GetElementPtr": _gep,
    "Fence": lambda op, rest, mod: Instruction(op, "VoidTy", ()),
    "AtomicCmpXchg": _cmpxchg, "AtomicRMW": _atomicrmw,
    "PHI": _phi, "Select": _select, "Call": _call, "Invoke": _call, "CallBr": _call,
    "Ret": _ret, "Br": _branches, "Switch": _switch, "IndirectBr": _branches,
    "Unreachable": lambda op, rest, mod: Instruction(op, "VoidTy", ()),
    "Resume": lambda op, rest, mod: _typed_operands(op, rest, mod, "VoidTy"),
    "LandingPad": _landingpad, "ExtractValue": _extractvalue, "InsertValue": _insertvalue,
    "ExtractElement": _extractelement,
    "InsertElement": lambda op, rest, mod: _vector_result(op, rest, mod, 3),
    "ShuffleVector": lambda op, rest, mod: _vector_result(op, rest, mod, 2),
    "VAArg": _vaarg, "Freeze": _unary, "FNeg": _unary,
}  # fmt: skip
