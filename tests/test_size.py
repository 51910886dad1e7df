"""One size definition (`toolchain.size`), checked on real objects against Debian's
llvm-size 19 and against section flags read with pyelftools, on x86-64 and 32-bit Arm."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.elf import NotELFError
from pymlgo.toolchain.size import (
    GROUPS,
    ObjectSize,
    SizeMetricError,
    object_size,
    section_group,
    total,
)

# C++ with everything a real object ships: code, an exception table, unwind tables,
# read-only data (strings, a const table), data, bss and thread-local bss.
SOURCE = r"""
#include <stdexcept>
#include <string>
static int helper(int x) { if (x < 0) throw std::runtime_error("negative"); return x * 2; }
int table[64] = {1, 2, 3};
extern const int squares[8] = {0, 1, 4, 9, 16, 25, 36, 49};
int guarded(int x) { try { return helper(x) + helper(x + 1); } catch (...) { return -1; } }
std::string label(int x) { return std::to_string(x) + " items"; }
static thread_local int calls;
int zeros[512];
int count() { return calls++ + zeros[3] + squares[calls & 7]; }
"""

TARGETS = {"x86-64": ("x86_64-linux-gnu", "baseline"),
           "arm32": ("arm-linux-gnueabihf", "generic")}
UNWIND_SECTION = {"x86-64": ".eh_frame", "arm32": ".ARM.exidx"}


def llvm_size() -> str | None:
    for name in ("llvm-size-19", "/usr/lib/llvm-19/bin/llvm-size"):
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    return None


@pytest.fixture(scope="module", params=sorted(TARGETS))
def target_object(request, compiler: Compiler, tmp_path_factory) -> tuple[str, Path]:
    target, cpu = TARGETS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    src = d / "shipped.cpp"
    src.write_text(SOURCE)
    obj = d / "shipped.o"
    if not compiler.bundled:
        pytest.skip("cross-compiles C++ with the bundled zig's own libc++ headers")
    subprocess.run([str(compiler.path), "c++", "-c", "-Oz", "-target", target, f"-mcpu={cpu}",
                    str(src), "-o", str(obj)], check=True)
    return request.param, obj


def flag_sums(obj: Path) -> dict[str, int]:
    """Sizes summed straight from pyelftools' section headers, by flags alone."""
    out = {"exec": 0, "alloc_with_contents": 0}
    with open(obj, "rb") as f:
        for s in ELFFile(f).iter_sections():
            flags = s["sh_flags"]
            if flags & SH_FLAGS.SHF_EXECINSTR:
                out["exec"] += s["sh_size"]
            if flags & SH_FLAGS.SHF_ALLOC and s["sh_type"] != "SHT_NOBITS":
                out["alloc_with_contents"] += s["sh_size"]
    return out


def test_text_and_allocated_agree_with_the_section_flags(target_object):
    _, obj = target_object
    sizes, sums = object_size(obj), flag_sums(obj)
    assert sizes.metric("text") == sums["exec"]
    assert sizes.metric("allocated") == sums["alloc_with_contents"]
    assert sizes.allocated == sum(sizes.groups().values())


def test_every_metric_agrees_with_llvm_size_19(target_object):
    tool = llvm_size()
    if tool is None:
        pytest.skip("Debian's llvm-19 is not installed (apt-get install llvm-19; .ci/run does)")
    name, obj = target_object
    sizes = object_size(obj)
    berkeley = subprocess.run([tool, str(obj)], capture_output=True, text=True, check=True)
    text, data, bss = (int(v) for v in berkeley.stdout.splitlines()[1].split()[:3])
    assert sizes.metric("llvm-size") == text
    assert sizes.metric("allocated") == text + data  # no read-only NOBITS in a C++ object
    assert sizes.bss == bss
    sysv = subprocess.run([tool, "-A", str(obj)], capture_output=True, text=True, check=True)
    sections = {m[1]: int(m[2]) for m in re.finditer(r"^(\S+)\s+(\d+)\s+\d+$", sysv.stdout,
                                                     re.M)}
    assert sizes.unwind == sections[UNWIND_SECTION[name]] > 0
    eh_tables = sum(v for k, v in sections.items()
                    if k.startswith((".gcc_except_table", ".ARM.extab")))
    assert sizes.eh_tables == eh_tables > 0
    assert sizes.code == sum(v for k, v in sections.items() if k.startswith(".text")) > 0


def test_the_real_object_has_every_group(target_object):
    sizes = object_size(target_object[1])
    assert all(sizes.groups()[g] > 0 for g in GROUPS), sizes
    assert sizes.bss >= 512 * 4  # reported, never counted
    assert sizes.allocated < sizes.allocated + sizes.bss


@pytest.mark.parametrize(("name", "sh_type", "flags", "group"), [
    (".text.f", "SHT_PROGBITS", 0x6, "code"),
    (".eh_frame", "SHT_X86_64_UNWIND", 0x2, "unwind"),
    (".eh_frame", "SHT_PROGBITS", 0x3, "unwind"),  # writable on some targets: still unwind
    (".ARM.exidx.text.f", "SHT_ARM_EXIDX", 0x82, "unwind"),
    (".gcc_except_table.f", "SHT_PROGBITS", 0x2, "eh_tables"),
    (".ARM.extab.text.f", "SHT_PROGBITS", 0x2, "eh_tables"),
    (".rodata.str1.1", "SHT_PROGBITS", 0x32, "rodata"),
    (".data.rel.ro", "SHT_PROGBITS", 0x3, "data"),
    (".tbss", "SHT_NOBITS", 0x403, "bss"),
    (".comment", "SHT_PROGBITS", 0x30, None),
    (".rela.eh_frame", "SHT_RELA", 0x40, None),
])
def test_section_groups(name, sh_type, flags, group):
    assert section_group(name, sh_type, flags) == group


def test_sizes_add_and_round_trip_through_json():
    a = ObjectSize(code=10, rodata=2, unwind=3, eh_tables=0, data=1, bss=5, berkeley_text=15)
    b = ObjectSize(code=1, berkeley_text=1)
    assert total([a, b]) == a + b == ObjectSize(11, 2, 3, 0, 1, 5, 16)
    assert ObjectSize.from_json(a.to_json()) == a
    with pytest.raises(ValueError):
        ObjectSize.from_json({**a.to_json(), "code": -1})
    assert a.metrics() == {"allocated": 16, "text": 10, "llvm-size": 15}


def test_unknown_metric_and_non_elf_input_are_clear_errors(tmp_path):
    with pytest.raises(SizeMetricError, match="allocated, text, llvm-size"):
        ObjectSize().metric("bytes")
    not_elf = tmp_path / "x.o"
    not_elf.write_bytes(b"\xcf\xfa\xed\xfe" + b"\0" * 60)
    with pytest.raises(NotELFError, match="not an ELF object"):
        object_size(not_elf)
