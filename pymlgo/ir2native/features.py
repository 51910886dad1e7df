"""Per-function features from textual LLVM IR (as `-print-after=inline` dumps it).

A dump is a sequence of `; *** IR Dump After InlinerPass on (SCC) ***` sections, each with
the `define`s of one call-graph SCC after the inliner visited it. A function can be dumped
more than once (the inliner revisits an SCC whose call graph changed); the last dump is
its state after inlining, so later definitions replace earlier ones.

The features are counts a code-size model can weigh: blocks, instructions by opcode
class, calls split by kind (free intrinsics such as `llvm.lifetime.*` emit no code), memory
operations, switch cases, back-edges (a loop estimate: a branch to a block printed earlier),
vector operations, arguments. Only the text is parsed; no LLVM library is needed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# Opcode -> feature; the order of OPCODE_CLASSES is the feature order.
OPCODE_CLASSES: dict[str, tuple[str, ...]] = {
    "int_arith": ("add", "sub", "mul"),
    "int_div": ("udiv", "sdiv", "urem", "srem"),
    "float_arith": ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg"),
    "bitwise": ("and", "or", "xor"),
    "shift": ("shl", "lshr", "ashr"),
    "compare": ("icmp", "fcmp"),
    "cast": ("zext", "sext", "trunc", "bitcast", "ptrtoint", "inttoptr", "fptosi", "fptoui",
             "sitofp", "uitofp", "fpext", "fptrunc", "addrspacecast"),
    "load": ("load",),
    "store": ("store",),
    "alloca": ("alloca",),
    "gep": ("getelementptr",),
    "atomic": ("atomicrmw", "cmpxchg", "fence"),
    "phi": ("phi",),
    "select": ("select",),
    "branch": ("br",),
    "switch": ("switch",),
    "return": ("ret",),
    "unreachable": ("unreachable",),
    "vector": ("extractelement", "insertelement", "shufflevector"),
    "aggregate": ("extractvalue", "insertvalue"),
    "other": ("freeze", "va_arg", "indirectbr", "invoke", "callbr", "resume", "landingpad"),
}
_CLASS_OF = {op: cls for cls, ops in OPCODE_CLASSES.items() for op in ops}

# Intrinsics that emit no machine code.
_FREE_INTRINSICS = ("llvm.lifetime.", "llvm.dbg.", "llvm.assume", "llvm.experimental.noalias",
                    "llvm.pseudoprobe", "llvm.donothing", "llvm.invariant.", "llvm.sideeffect")
_MEM_INTRINSICS = ("llvm.memset.", "llvm.memcpy.", "llvm.memmove.")

FEATURE_NAMES: tuple[str, ...] = (
    "instructions",  # every instruction, as the baseline counts them
    "blocks",
    "arguments",
    "back_edges",
    "cond_branches",
    "switch_cases",
    *(f"op_{cls}" for cls in OPCODE_CLASSES),
    "calls_direct",
    "calls_indirect",
    "calls_intrinsic",  # intrinsics that become code (e.g. llvm.fshl, llvm.ctlz)
    "calls_mem_intrinsic",  # memset/memcpy/memmove
    "calls_free_intrinsic",  # lifetime markers, assumes, ...: no code
    "call_args",
    "vector_typed",  # instructions producing or taking <N x T> values
    "wide_int",  # instructions on i128 (multi-register arithmetic)
    "constant_operands",  # integer literals among operands
)

_DUMP_HEADER = re.compile(r"^; \*\*\* IR Dump After ")
_DEFINE = re.compile(r"^define\b[^@]*@(\"(?:[^\"\\]|\\.)*\"|[-\w.$]+)\((.*)\)")
_LABEL = re.compile(r"^(\"(?:[^\"\\]|\\.)*\"|[-\w.$]+):")
_INSTR = re.compile(r"^  (?:%[-\w.$\"]+ = )?(?:(?:tail|musttail|notail) )?([a-z_]+)\b")
_BR_TARGETS = re.compile(r"label %(\"(?:[^\"\\]|\\.)*\"|[-\w.$]+)")
_CALLEE = re.compile(r"@(\"(?:[^\"\\]|\\.)*\"|[-\w.$]+)\(")
_INT_LITERAL = re.compile(r"(?<![%@\w.])-?\d+\b(?!\s*x)")


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith('"') else name


def function_bodies(lines: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(name, lines from `define` to the closing `}`) for every definition in the text."""
    name: str | None = None
    body: list[str] = []
    for line in lines:
        line = line.rstrip("\n")
        if name is None:
            m = _DEFINE.match(line)
            if m:
                name, body = _unquote(m.group(1)), [line]
            continue
        body.append(line)
        if line == "}":
            yield name, body
            name = None
        elif _DUMP_HEADER.match(line):  # a truncated dump: drop the partial function
            name = None


def last_definitions(lines: Iterable[str]) -> dict[str, list[str]]:
    """Each function's last dumped body (its state after the inliner's last visit)."""
    out: dict[str, list[str]] = {}
    for name, body in function_bodies(lines):
        out.pop(name, None)  # keep dict order = order of the final dumps
        out[name] = body
    return out


def _count_args(params: str) -> int:
    depth, n, seen = 0, 0, False
    for ch in params:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            n += 1
        elif not ch.isspace():
            seen = True
    return n + 1 if seen and params.strip() != "..." else n


def function_features(body: list[str]) -> dict[str, float]:
    """Feature counts of one function body (`define ... {` through `}`)."""
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    m = _DEFINE.match(body[0])
    if m:
        f["arguments"] = float(_count_args(m.group(2)))
    block_index: dict[str, int] = {}
    # Numbered entry blocks are implicit; the entry block has index 0.
    blocks = 1
    for line in body[1:-1]:
        lm = _LABEL.match(line)
        if lm:
            block_index[_unquote(lm.group(1))] = blocks
            blocks += 1
    # The first label may name the entry block explicitly (no instructions before it).
    first_instr = next((i for i, ln in enumerate(body[1:-1]) if _INSTR.match(ln)), None)
    first_label = next((i for i, ln in enumerate(body[1:-1]) if _LABEL.match(ln)), None)
    if first_label is not None and (first_instr is None or first_label < first_instr):
        blocks -= 1
        block_index = {k: v - 1 for k, v in block_index.items()}
    f["blocks"] = float(blocks)

    current = 0
    in_switch = False
    for line in body[1:-1]:
        lm = _LABEL.match(line)
        if lm:
            current = block_index[_unquote(lm.group(1))]
            continue
        if in_switch:
            if line.strip() == "]":
                in_switch = False
            elif "label %" in line:
                f["switch_cases"] += 1
                f["back_edges"] += _back_edges(line, block_index, blocks, current)
            continue
        im = _INSTR.match(line)
        if not im:
            continue
        op = im.group(1)
        f["instructions"] += 1
        code = line.split(", !", 1)[0]  # metadata attachments are not operands
        if op == "call":
            _count_call(f, code)
        else:
            cls = _CLASS_OF.get(op)
            if cls is not None:
                f[f"op_{cls}"] += 1
        if op == "br":
            if code.count("label %") > 1:
                f["cond_branches"] += 1
            f["back_edges"] += _back_edges(code, block_index, blocks, current)
        elif op == "switch":
            f["back_edges"] += _back_edges(code, block_index, blocks, current)
            in_switch = not code.rstrip().endswith("]")
            f["switch_cases"] += code.count("label %") - 1  # the default destination
        if "x " in code and re.search(r"<\d+ x ", code):
            f["vector_typed"] += 1
        if "i128" in code:
            f["wide_int"] += 1
        if op not in ("br", "switch", "phi", "alloca"):
            f["constant_operands"] += len(_INT_LITERAL.findall(_operands(code)))
    return f


def _back_edges(code: str, block_index: dict[str, int], blocks: int, current: int) -> int:
    """Branch targets in `code` printed at or before the current block."""
    return sum(1 for t in _BR_TARGETS.findall(code)
               if block_index.get(_unquote(t), blocks) <= current)


def _operands(code: str) -> str:
    """The operand text of an instruction line, without the result name and alignment."""
    _, _, rest = code.partition("= ")
    text = rest or code
    return re.sub(r", align \d+", "", text)


def _count_call(f: dict[str, float], code: str) -> None:
    m = _CALLEE.search(code)
    if m is None:
        f["calls_indirect"] += 1
    else:
        callee = _unquote(m.group(1))
        if callee.startswith(_FREE_INTRINSICS):
            f["calls_free_intrinsic"] += 1
            return
        if callee.startswith(_MEM_INTRINSICS):
            f["calls_mem_intrinsic"] += 1
        elif callee.startswith("llvm."):
            f["calls_intrinsic"] += 1
        else:
            f["calls_direct"] += 1
    start = m.end() if m else code.find("(", code.find("call")) + 1
    f["call_args"] += float(_count_args(code[start:].rsplit(")", 1)[0]))


def module_features(text: str | Iterable[str]) -> dict[str, dict[str, float]]:
    """Function name -> features, from a whole `-print-after=inline` dump."""
    lines = text.splitlines() if isinstance(text, str) else text
    return {name: function_features(body) for name, body in last_definitions(lines).items()}
