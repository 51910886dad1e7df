"""Modules compiled with linker relaxation on are named: their object bytes overstate the
linked program's, so every command that measures them says so, and says how to measure
them exactly (a build with `-mno-relax`; the setting lives in the bitcode)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from pymlgo.corpus.capture import capture
from pymlgo.corpus.command import FlagEdits, recompile_args
from pymlgo.corpus.format import load_corpus
from pymlgo.corpus.relaxation import relaxation_warning, relaxes
from tests.conftest import DATA

CLANG_19 = "/usr/bin/clang-19"
R_RISCV_RELAX = 51


def test_the_last_relax_target_feature_decides() -> None:
    assert relaxes(["-cc1", "-target-feature", "+relax"])
    assert not relaxes(["-cc1", "-target-feature", "-relax"])
    # zig's own command names +relax first and turns it off later
    assert not relaxes(["-cc1", "-target-feature", "+relax", "-target-feature", "+c",
                        "-target-feature", "-relax"])
    assert relaxes(["-cc1", "-target-feature", "-relax", "-target-feature", "+relax"])
    assert not relaxes(["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-Oz"])
    assert not relaxes(["-cc1", "+relax"])  # only as a target feature's value


def test_the_warning_names_a_few_modules_and_the_cure() -> None:
    assert relaxation_warning([]) is None
    text = relaxation_warning(["a", "b", "c", "d", "e"])
    assert text is not None
    assert "5 module(s)" in text and "a, b, c and 2 more" in text and "-mno-relax" in text


def _relax_relocations(obj: Path) -> int:
    with open(obj, "rb") as f:
        elf = ELFFile(f)
        return sum(1 for s in elf.iter_sections() if isinstance(s, RelocationSection)
                   for r in s.iter_relocations() if r["r_info_type"] == R_RISCV_RELAX)


def _capture(root: Path, cflags: str) -> Path:
    project = root / "ringlib"
    shutil.copytree(DATA / "ringlib", project)
    with open(root / "build.log", "wb") as out:
        capture(["make", f"CFLAGS={cflags}"], root / "corpus", cwd=project, clang=CLANG_19,
                target="riscv64-linux-gnu", progress=False, build_output=out.fileno())
    return root / "corpus"


@pytest.fixture(scope="module")
def riscv_corpora(tmp_path_factory) -> dict[str, Path]:
    """A real make build captured with Debian's clang 19 for riscv64, which relaxes by
    default, and the same build with -mno-relax."""
    if shutil.which(CLANG_19) is None:
        pytest.skip(f"{CLANG_19} is not installed (apt-get install clang-19)")
    return {"relaxed": _capture(tmp_path_factory.mktemp("relax"), "-Oz -Iinclude"),
            "exact": _capture(tmp_path_factory.mktemp("norelax"), "-Oz -Iinclude -mno-relax")}


def _compile(module, obj: Path, edits: FlagEdits = FlagEdits()) -> int:
    args = recompile_args(module.cmd, input_bc=str(module.bc_path), output_obj=str(obj),
                          edits=edits)
    subprocess.run([CLANG_19, *args], check=True, capture_output=True)
    return _relax_relocations(obj)


def test_relaxation_is_in_the_bitcode_and_only_a_build_without_it_drops_it(
        riscv_corpora: dict[str, Path], tmp_path: Path) -> None:
    relaxed, exact = ({m.name: m for m in load_corpus(riscv_corpora[k], clang=CLANG_19).modules}
                      for k in ("relaxed", "exact"))
    assert relaxes(relaxed["app"].cmd) and not relaxes(exact["app"].cmd)
    assert _compile(relaxed["app"], tmp_path / "relaxed.o") > 0  # app calls: relaxable
    # cc1's target feature does not override the functions' own attributes
    assert _compile(relaxed["app"], tmp_path / "edited.o",
                    FlagEdits(replace=(("+relax", "-relax"),))) > 0
    assert _compile(exact["app"], tmp_path / "exact.o") == 0


def test_eval_warns_about_a_relaxing_build_and_not_about_one_without_relaxation(
        riscv_corpora: dict[str, Path]) -> None:
    def run(corpus: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pymlgo.cli.main", "eval", "--corpus", str(corpus),
             "--clang", CLANG_19, "--policy", "never", "--workers", "1"],
            capture_output=True, text=True, check=False)

    warned = run(riscv_corpora["relaxed"])
    assert warned.returncode == 0, warned.stderr
    assert "linker relaxation on" in warned.stderr and "3 module(s)" in warned.stderr
    assert "-mno-relax" in warned.stderr
    exact = run(riscv_corpora["exact"])
    assert exact.returncode == 0, exact.stderr
    assert "linker relaxation" not in exact.stderr
