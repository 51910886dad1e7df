"""Shared fixtures: the real bundled compiler, real corpora built from C sources, and one
`mlgo train` run of every registered problem."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pymlgo.corpus.capture import ZIG_OZ_FLAGS
from pymlgo.corpus.command import parse_cmd
from pymlgo.problems.base import CompileJob
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.toolchain.elf import read_sections

if TYPE_CHECKING:
    from tests.train_runs import Run

DATA = Path(__file__).parent / "data"
MINIC = DATA / "minic"
TARGET_FLAGS = ("-target", "x86_64-linux-gnu", "-mcpu=baseline")


@pytest.fixture(scope="session")
def compiler() -> Compiler:
    return find_compiler(None)


def build_jobs(compiler: Compiler, sources: list[Path], out_dir: Path) -> list[CompileJob]:
    """Compile C files with embedded bitcode and turn each object into a CompileJob."""
    jobs = []
    for src in sources:
        obj = out_dir / (src.stem + ".o")
        subprocess.run(
            # at -Oz as `mlgo corpus capture` records it: zig's driver alone runs cc1 at -Os
            [*compiler.cc_argv, "-c", *TARGET_FLAGS, "-Oz", *(ZIG_OZ_FLAGS if compiler.zig else ()),
             "-Xclang", "-fembed-bitcode=all", str(src), "-o", str(obj)],
            check=True,
        )
        sec = read_sections(obj, (".llvmbc", ".llvmcmd"))
        assert sec[".llvmbc"] and sec[".llvmcmd"]
        jobs.append(CompileJob(f"minic/{src.stem}", sec[".llvmbc"], parse_cmd(sec[".llvmcmd"])))
    return jobs


@pytest.fixture(scope="session")
def minic_jobs(compiler: Compiler, tmp_path_factory: pytest.TempPathFactory) -> list[CompileJob]:
    """The four modules of tests/data/minic (a small self-checking C program)."""
    return build_jobs(compiler, sorted(MINIC.glob("*.c")), tmp_path_factory.mktemp("minic"))


@pytest.fixture(scope="session")
def demo_corpus_dir() -> Path:
    """The real demo corpus (zstd, brotli, lz4), built once and cached across runs."""
    from pymlgo.corpus.demo import ensure_demo_corpus

    return ensure_demo_corpus(progress=False)



def clang_behind_script(compiler: Compiler, directory: Path) -> Path:
    """The bundled clang behind a shell script named `clang`: a plain clang driver (no zig
    defaults) with a compiler identity of its own."""
    if not compiler.bundled:
        pytest.skip("needs the bundled zig to stand in for a second clang")
    script = directory / "clang"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\nexec "{compiler.path}" clang "$@"\n')
    script.chmod(0o755)
    return script


def assert_one_error_line(res: subprocess.CompletedProcess[str], starts_with: str) -> None:
    """A CLI failure as users should see it: exit 1 and a single line, no traceback."""
    assert res.returncode == 1, res
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(starts_with), lines[0]


@pytest.fixture(scope="session")
def demo_o2_corpus_dir() -> Path:
    """The demo corpus recorded at -O2, the level register allocation compiles at (at -Oz
    the functions are minsize, and the priority advisor is asked nothing)."""
    from pymlgo.corpus.demo import ensure_demo_corpus

    return ensure_demo_corpus(progress=False, level="-O2")


@pytest.fixture(scope="session")
def train_corpus(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo modules every problem's shared run trains on (tests/train_runs.py)."""
    from tests.test_train_algorithms import copy_demo_subset
    from tests.train_runs import MODULES

    return copy_demo_subset(demo_corpus_dir, tmp_path_factory.mktemp("train-runs") / "corpus",
                            MODULES)


@pytest.fixture(scope="session")
def train_corpus_o2(demo_o2_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same modules recorded at -O2, for the register allocation problems' runs."""
    from tests.test_train_algorithms import copy_demo_subset
    from tests.train_runs import MODULES

    return copy_demo_subset(demo_o2_corpus_dir,
                            tmp_path_factory.mktemp("train-runs-o2") / "corpus", MODULES)


@pytest.fixture(scope="session")
def trained(train_corpus: Path, train_corpus_o2: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Callable[[str], Run]:
    """`trained(problem)`: the problem's uninterrupted `mlgo train` run (tests/train_runs.py),
    trained once per session on the training modules recorded at the problem's level."""
    from pymlgo.problems import registry
    from tests.train_runs import Run, config_text, mlgo_train

    runs: dict[str, Run] = {}
    by_level = {"-Oz": train_corpus, "-O2": train_corpus_o2}

    def run(problem: str) -> Run:
        if problem not in runs:
            train_corpus = by_level[registry.problem(problem).opt_level]
            root = tmp_path_factory.mktemp(f"run-{problem}")
            config = root / "ppo.toml"
            config.write_text(config_text(problem))
            done = subprocess.run(mlgo_train(train_corpus, config, root / "a"),
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            runs[problem] = Run(problem, train_corpus, config, root / "a")
        return runs[problem]

    return run
