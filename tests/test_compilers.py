"""pymlgo on real clangs of other LLVM versions than the bundled one (tests/compilers.py).

For every compiler of the matrix: a corpus captured from a real build with it, `default`
through the channel gives plain -Oz's bytes, `never` does not, the policy reads the features
the compiler's header declares, and the register allocator's channel works. LLVM 17-20 send
clang's own inlining decision in place of `callee_basic_block_count` (`heuristic_check`):
pymlgo must find that out by itself, read the decision from there for `default`, and refuse
what it cannot do right (recording trajectories) with a message that says why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.common import resolve_corpus
from pymlgo.corpus.capture import capture
from pymlgo.corpus.demo import INFO_FILE, ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob, CompileSettings, Decide
from pymlgo.problems.inlining import compile as inl
from pymlgo.problems.inlining.heuristic_check import (
    DISPLACED_FEATURE,
    HeuristicUnavailableError,
    check_heuristic,
    probe,
)
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE, builtin_policy
from pymlgo.problems.regalloc import compile as ra
from pymlgo.problems.regalloc.policies import builtin_policy as regalloc_policy
from pymlgo.toolchain.compiler import Compiler, CompilerError, find_compiler
from tests.compilers import MATRIX, MatrixEntry, clang_for
from tests.conftest import MINIC

# LLVM 21 moved clang's decision to its own slot (llvm-project PR #141453).
DISPLACED_MAJORS = range(17, 21)
RECORD = CompileSettings(record=True)  # keep every decision's features


@dataclass
class Matrix:
    entry: MatrixEntry
    clang: str | None
    compiler: Compiler
    corpus: Path
    jobs: list[CompileJob] = field(default_factory=list)


@pytest.fixture(scope="module", params=MATRIX, ids=[e.name for e in MATRIX])
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    """A compiler of the matrix and the minic program captured with it (`make`, links
    included)."""
    entry: MatrixEntry = request.param
    try:
        clang = clang_for(entry)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{entry.name} cannot be installed here: {exc}")
    compiler = find_compiler(clang)
    project = tmp_path_factory.mktemp(entry.name) / "minic"
    shutil.copytree(MINIC, project)
    out = project.parent / "corpus"
    capture(["make"], out, cwd=project, clang=clang, progress=False,
            build_output=subprocess.DEVNULL)
    corpus = load_corpus(out, clang=clang)
    return Matrix(entry, clang, compiler, out, corpus_jobs(corpus))


def _results(m: Matrix, policy: str) -> list[inl.ModuleResult]:
    return [inl.compile_with_policy(m.compiler, j, builtin_policy(policy)) for j in m.jobs]


def test_the_matrix_compiler_is_the_clang_version_it_claims(matrix: Matrix) -> None:
    assert matrix.compiler.major == matrix.entry.major
    assert len(matrix.jobs) == 4


def test_default_gives_plain_oz_bytes_in_every_section_group(matrix: Matrix) -> None:
    baseline = [inl.compile_baseline(matrix.compiler, j) for j in matrix.jobs]
    default = _results(matrix, "default")

    assert [r.error for r in baseline + default] == [None] * (2 * len(matrix.jobs))
    assert [r.sizes for r in default] == [r.sizes for r in baseline]
    assert sum(r.decisions for r in default) > 0


def test_never_gives_other_bytes_than_default(matrix: Matrix) -> None:
    default = sum(r.size or 0 for r in _results(matrix, "default"))
    never = sum(r.size or 0 for r in _results(matrix, "never"))

    assert never != default


def test_the_probe_finds_where_clang_sends_its_decision(matrix: Matrix) -> None:
    check = probe(matrix.compiler)

    expected = (DISPLACED_FEATURE if matrix.compiler.major in DISPLACED_MAJORS
                else DEFAULT_FEATURE)
    assert check.feature == expected, check.detail
    assert check_heuristic(matrix.compiler) == check  # what later compiles go by


@dataclass(frozen=True)
class _Reads:
    """Never inline; keep every value of the features it reads (in-process only)."""

    required_features: tuple[str, ...]
    seen: list[dict[str, np.ndarray]] = field(default_factory=list, compare=False)
    name: str = "reads"

    def for_module(self, module: str) -> Decide:
        def decide(features: Mapping[str, np.ndarray]) -> int:
            self.seen.append(dict(features))
            return 0

        return decide


def test_a_policy_reads_the_features_the_header_declares(matrix: Matrix) -> None:
    policy = _Reads(("callee_basic_block_count", "callee_users", "cost_estimate"))

    results = [inl.compile_with_policy(matrix.compiler, j, policy) for j in matrix.jobs]

    assert [r.error for r in results] == [None] * len(results)
    assert len(policy.seen) == sum(r.decisions for r in results) > 0
    # Unswapped (clang's decision was not asked for): a defined callee has >= 1 block.
    assert all(int(s["callee_basic_block_count"].reshape(-1)[0]) >= 1 for s in policy.seen)
    assert len({int(s["cost_estimate"].reshape(-1)[0]) for s in policy.seen}) > 1


def test_recording_decisions_works_or_is_refused_with_the_reason(matrix: Matrix) -> None:
    job = max(matrix.jobs, key=lambda j: len(j.bitcode))
    if matrix.compiler.major in DISPLACED_MAJORS:
        with pytest.raises(HeuristicUnavailableError,
                           match=r"callee_basic_block_count.*#141453.*clang >= 21"):
            inl.compile_with_policy(matrix.compiler, job, builtin_policy("default"), RECORD)
        return
    res = inl.compile_with_policy(matrix.compiler, job, builtin_policy("default"), RECORD)
    assert res.trajectory is not None
    labels = set(res.trajectory.features[DEFAULT_FEATURE].reshape(-1).tolist())
    assert labels == {0, 1}


def test_the_register_allocator_channel_asks_and_the_stock_advisor_is_plain_o2(
        matrix: Matrix) -> None:
    job = max(matrix.jobs, key=lambda j: len(j.bitcode))
    plain = ra.compile_baseline(matrix.compiler, job)
    stock = ra.compile_with_policy(matrix.compiler, job, regalloc_policy("default"))
    channel = ra.compile_with_policy(matrix.compiler, job, regalloc_policy("heuristic"),
                                     RECORD)

    assert plain.error is None and stock.error is None and channel.error is None, (
        plain.error, stock.error, channel.error)
    assert stock.sizes == plain.sizes
    assert channel.decisions > 0 and channel.trajectory is not None
    assert channel.trajectory.features["mask"].shape[0] == channel.decisions


def _mlgo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pymlgo.cli.main", *args], capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def clang19_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("/usr/bin/clang-19") is None:
        pytest.skip("Debian's clang-19 is not installed (apt-get install clang-19)")
    project = tmp_path_factory.mktemp("c19") / "minic"
    shutil.copytree(MINIC, project)
    out = project.parent / "corpus"
    capture(["make"], out, cwd=project, clang="/usr/bin/clang-19", progress=False,
            build_output=subprocess.DEVNULL)
    return out


def test_eval_default_on_debian_clang_19_matches_plain_oz(clang19_corpus: Path) -> None:
    res = _mlgo("eval", "--clang", "/usr/bin/clang-19", "--corpus", str(clang19_corpus),
                "--policy", "default", "--workers", "1")

    assert res.returncode == 0, res.stderr
    total = [ln for ln in res.stdout.splitlines() if ln.lower().startswith("total")]
    assert total and "+0.00%" in total[0], res.stdout


def test_the_demo_corpus_for_another_clang_is_built_by_that_clang() -> None:
    """clang 19 cannot compile the bundled clang 22's demo modules (their cc1 commands hold
    flags it does not know: "unknown argument: '-fdwarf2-cfi-asm'"): `--corpus demo` with
    `--clang clang-19` must get the demo corpus built by clang-19 (cached per version)."""
    if shutil.which("/usr/bin/clang-19") is None:
        pytest.skip("Debian's clang-19 is not installed (apt-get install clang-19)")
    compiler = find_compiler("/usr/bin/clang-19")

    corpus = resolve_corpus("demo", clang="/usr/bin/clang-19")

    bundled = ensure_demo_corpus(progress=False)
    info = json.loads((corpus.root / INFO_FILE).read_text())
    assert info["compiler"] == compiler.version and corpus.root != bundled
    assert len(corpus) == len(load_corpus(bundled))
    job, = corpus_jobs(corpus, ["lz4/lz4libs/xxhash"])
    res = inl.compile_baseline(compiler, job)
    assert res.error is None and res.size


def test_trace_on_debian_clang_19_is_refused_in_one_line(clang19_corpus: Path,
                                                          tmp_path: Path) -> None:
    res = _mlgo("trace", "--clang", "/usr/bin/clang-19", "--corpus", str(clang19_corpus),
                "--policy", "default", "--output_dir", str(tmp_path / "t"), "--workers", "1")

    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    # (the progress bar shares stderr, without a newline before the message)
    errors = [ln[ln.index("mlgo trace:"):] for ln in res.stderr.splitlines()
              if "mlgo trace:" in ln]
    assert len(errors) == 1 and "policy 'default' cannot run on" in errors[0], res.stderr
    assert "callee_basic_block_count" in errors[0] and "clang >= 21" in errors[0]
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.log"))


def test_clang_16_is_refused_with_the_reason() -> None:
    if shutil.which("/usr/bin/clang-16") is None:
        pytest.skip("Debian's clang-16 is not installed (apt-get install clang-16)")

    with pytest.raises(CompilerError, match=r"clang 16\.\d+\.\d+; pymlgo needs clang >= 17"):
        find_compiler("/usr/bin/clang-16")
    res = _mlgo("eval", "--clang", "/usr/bin/clang-16", "--corpus", "demo")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("mlgo eval: ") and res.stderr.count("\n") == 1
    assert "clang 16" in res.stderr and "interactive model runner" in res.stderr


def test_mlgo_cc_default_on_debian_clang_19_compiles_plain_oz_and_says_why(
        tmp_path: Path) -> None:
    """clang 19 sends its own decision in another feature's place: `mlgo cc` must not hand
    a policy that reads it a constant 0 (that is `never`), but compile plainly and say so."""
    if shutil.which("/usr/bin/clang-19") is None:
        pytest.skip("Debian's clang-19 is not installed (apt-get install clang-19)")
    src = next(p for p in sorted(MINIC.glob("*.c")))
    flags = ["--target=x86_64-linux-gnu", "-Oz", "-c", str(src)]
    plain = subprocess.run(["/usr/bin/clang-19", *flags, "-o", str(tmp_path / "plain.o")],
                           capture_output=True, text=True, check=False, cwd=MINIC)
    assert plain.returncode == 0, plain.stderr
    res = _mlgo("cc", "--clang", "/usr/bin/clang-19", "--mlgo-policy", "default", *flags,
                "-o", str(tmp_path / "mlgo.o"))
    assert res.returncode == 0, res.stderr
    assert "does not send its own inlining decision" in res.stderr
    assert (tmp_path / "mlgo.o").read_bytes() == (tmp_path / "plain.o").read_bytes()
