"""Corpora for other targets than x86-64: AArch64, RISC-V 64, 32-bit Arm in Thumb-2 and a
bare-metal Cortex-M4 (the demo targets, `corpus/demo.py`).

For each, a real build (three C files and a static library made with the build's own `ar`
and `ranlib`) is captured for the target; every module compiled through the channel with
`default` gives plain -Oz's object byte for byte, `never` gives another one, and the size
metric counts the unwind table the target uses (`.eh_frame` on AArch64 and RISC-V,
`.ARM.exidx` on 32-bit Arm), which inlining moves against the code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.relocation import RelocationSection

from pymlgo.corpus.capture import capture
from pymlgo.corpus.demo import FREESTANDING_UNITS, INFO_FILE, ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.corpus.targets import HOST_TARGET, TARGETS, TargetError
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining import compile as inl
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler, bundled_zig
from pymlgo.toolchain.elf import open_elf
from pymlgo.toolchain.size import object_size
from tests.conftest import DATA, MINIC
from tests.test_cc import mlgo_cc, zig_cc

CROSS_TARGETS = [t for t in TARGETS.values() if t != HOST_TARGET]
# what each target's objects are: ELF class, machine, the unwind table its functions get
EXPECTED = {
    "aarch64": (64, "EM_AARCH64", ".eh_frame"),
    "riscv64": (64, "EM_RISCV", ".eh_frame"),
    "thumb2": (32, "EM_ARM", ".ARM.exidx"),
    "cortex-m4": (32, "EM_ARM", ".ARM.exidx"),
    "cortex-m4-musl": (32, "EM_ARM", ".ARM.exidx"),
}
R_RISCV_RELAX = 51

MAKEFILE = """\
CFLAGS = -Oz -Iinclude {flags}
OBJS = b64.o lib/crc.o lib/ring.o
libt.a: $(OBJS)
\t$(AR) rcs $@ $(OBJS)
\t$(RANLIB) $@
%.o: %.c
\t$(CC) $(CFLAGS) -c $< -o $@
"""


@dataclass
class Built:
    name: str
    project: Path
    jobs: list[CompileJob]


@pytest.fixture(scope="module", params=CROSS_TARGETS, ids=[t.name for t in CROSS_TARGETS])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A small library (freestanding C: a base64 codec, a CRC, a ring buffer) captured for
    one target with the target's own flags, archived with `ar` and `ranlib`."""
    target = request.param
    project = tmp_path_factory.mktemp(target.name) / "proj"
    shutil.copytree(DATA / "ringlib" / "include", project / "include")
    shutil.copytree(DATA / "ringlib" / "lib", project / "lib")
    shutil.copy(MINIC / "b64.c", project)
    shutil.copy(MINIC / "minic.h", project / "include")
    (project / "Makefile").write_text(MAKEFILE.format(flags=" ".join(target.flags)))
    out = project.parent / "corpus"
    capture(["make"], out, cwd=project, target=target.triple, cpu=target.cpu,
            progress=False, build_output=subprocess.DEVNULL)
    return Built(target.name, project, corpus_jobs(load_corpus(out)))


def _sections(obj: bytes) -> dict[str, tuple[int, int, str]]:
    """name -> (size, flags, type) of every section."""
    elf = open_elf(obj, "<object>")
    return {s.name: (s["sh_size"], s["sh_flags"], s["sh_type"]) for s in elf.iter_sections()}


def _compile(compiler: Compiler, job: CompileJob, policy: str | None, path: Path
             ) -> bytes:
    res = (inl.compile_baseline(compiler, job, keep_object=path) if policy is None else
           inl.compile_with_policy(compiler, job, builtin_policy(policy), keep_object=path))
    assert res.error is None, res.error
    return path.read_bytes()


def test_the_library_is_built_and_archived_for_the_target(built: Built) -> None:
    elf_class, machine, _ = EXPECTED[built.name]
    members = subprocess.run([str(bundled_zig()), "ar", "t", str(built.project / "libt.a")],
                             capture_output=True, text=True, check=True).stdout.split()
    assert members == ["b64.o", "crc.o", "ring.o"]
    assert sorted(j.module for j in built.jobs) == ["b64", "lib/crc", "lib/ring"]
    for obj in ("b64.o", "lib/crc.o", "lib/ring.o"):
        elf = open_elf((built.project / obj).read_bytes(), obj)
        assert (elf.elfclass, elf["e_machine"]) == (elf_class, machine)


def test_default_through_the_channel_is_plain_Oz_byte_for_byte(
        built: Built, compiler: Compiler, tmp_path: Path) -> None:
    differs = []
    for job in built.jobs:
        plain = _compile(compiler, job, None, tmp_path / "plain.o")
        assert _compile(compiler, job, "default", tmp_path / "default.o") == plain, job.module
        differs.append(_compile(compiler, job, "never", tmp_path / "never.o") != plain)
    assert any(differs)  # the channel's answers do reach the inliner on this target


def test_the_metric_counts_the_targets_unwind_table_which_never_inlining_grows(
        built: Built, compiler: Compiler, tmp_path: Path) -> None:
    _, _, unwind = EXPECTED[built.name]
    grew = 0
    for job in built.jobs:
        objects = {p: _compile(compiler, job, p, tmp_path / "o.o") for p in (None, "never")}
        for obj in objects.values():
            sections = _sections(obj)
            sizes = object_size(obj)
            assert sections[unwind][0] > 0 and sizes.unwind >= sections[unwind][0]
            shipped = sum(size for size, flags, kind in sections.values()
                          if flags & SH_FLAGS.SHF_ALLOC and kind != "SHT_NOBITS")
            assert sizes.allocated == shipped
        grew += object_size(objects["never"]).unwind > object_size(objects[None]).unwind
    assert grew  # functions kept out of line each get an entry: the metric sees them


@pytest.mark.parametrize("target", CROSS_TARGETS, ids=[t.name for t in CROSS_TARGETS])
def test_mlgo_cc_for_the_target_gives_plain_Oz_bytes_with_default(target, tmp_path: Path
                                                                  ) -> None:
    shutil.copy(MINIC / "b64.c", tmp_path)
    shutil.copy(MINIC / "minic.h", tmp_path)
    flags = ["-target", target.triple, f"-mcpu={target.cpu}", *target.flags, "-Oz", "-c",
             "b64.c"]
    for policy in ("default", "never"):
        res = mlgo_cc("--mlgo-policy", policy, *flags, "-o", f"{policy}.o", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    zig_cc(*flags, "-Xclang", "-Oz", "-o", "plain.o", cwd=tmp_path)
    plain = (tmp_path / "plain.o").read_bytes()
    assert open_elf(plain, "plain.o")["e_machine"] == EXPECTED[target.name][1]
    assert (tmp_path / "default.o").read_bytes() == plain
    assert (tmp_path / "never.o").read_bytes() != plain


def test_riscv_objects_carry_no_relaxation_so_their_bytes_are_the_linked_bytes(
        compiler: Compiler, tmp_path: Path) -> None:
    # zig turns RISC-V linker relaxation off (-target-feature -relax): calls stay auipc+jalr
    # in the linked program too, so the object does not overstate what ships.
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(MINIC / "sort.c", project)
    shutil.copy(MINIC / "minic.h", project)
    (project / "Makefile").write_text("sort.o: sort.c\n\t$(CC) -Oz -c sort.c -o sort.o\n")
    target = TARGETS["riscv64"]
    capture(["make"], tmp_path / "corpus", cwd=project, target=target.triple,
            cpu=target.cpu, progress=False, build_output=subprocess.DEVNULL)
    (job,) = corpus_jobs(load_corpus(tmp_path / "corpus"))
    elf = open_elf(_compile(compiler, job, None, tmp_path / "sort.o"), "sort.o")
    relocations = [r["r_info_type"] for s in elf.iter_sections()
                   if isinstance(s, RelocationSection) for r in s.iter_relocations()]
    assert relocations and R_RISCV_RELAX not in relocations


def test_the_bare_metal_demo_corpus_holds_the_freestanding_units_and_default_is_Oz(
        compiler: Compiler) -> None:
    corpus = ensure_demo_corpus(target="cortex-m4", progress=False)
    info = json.loads((corpus / INFO_FILE).read_text())
    assert (info["target"], info["cpu"]) == ("thumb-freestanding-eabi", "cortex_m4")
    jobs = corpus_jobs(load_corpus(corpus))
    assert sorted(f"{j.module}.c" for j in jobs) == sorted(FREESTANDING_UNITS)
    for job in jobs:
        assert "-ffreestanding" in job.cmd
        plain = inl.compile_baseline(compiler, job)
        default = inl.compile_with_policy(compiler, job, builtin_policy("default"))
        assert default.error is None and default.sizes == plain.sizes, job.module


HOSTED_TARGETS = [t for t in CROSS_TARGETS if not t.freestanding]
# one module of each demo package, from small to zstd's biggest hot path; every module of
# every target is checked by `benchmarks/targets.py` (63 of 63 identical, README)
DEMO_SAMPLE = ("lz4/lz4libs/lz4", "brotli/c/dec/decode", "zstd/lib/common/entropy_common",
               "zstd/lib/compress/zstd_fast")


@pytest.mark.parametrize("target", HOSTED_TARGETS, ids=[t.name for t in HOSTED_TARGETS])
def test_the_demo_corpus_built_for_the_target_compiles_with_default_to_plain_Oz(
        target, compiler: Compiler, tmp_path: Path) -> None:
    corpus = ensure_demo_corpus(target=target.name, progress=False)
    info = json.loads((corpus / INFO_FILE).read_text())
    assert (info["target"], info["cpu"]) == (target.triple, target.cpu)
    jobs = {j.module: j for j in corpus_jobs(load_corpus(corpus))}
    elf_class, machine, _ = EXPECTED[target.name]
    for name in DEMO_SAMPLE:
        plain = _compile(compiler, jobs[name], None, tmp_path / "plain.o")
        elf = open_elf(plain, name)
        assert (elf.elfclass, elf["e_machine"]) == (elf_class, machine), name
        assert _compile(compiler, jobs[name], "default", tmp_path / "default.o") == plain, name


def test_an_unknown_demo_target_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(TargetError, match="aarch64.*cortex-m4"):
        ensure_demo_corpus(target="sparc", progress=False)
