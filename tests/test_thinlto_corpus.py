"""A ThinLTO corpus compiles each module as its ThinLTO backend would: the module after its
imports were merged, with its summary index. A real distributed ThinLTO build of the minic
program (four files calling each other) through lld's index-only link: the backend compile
is served through the channel, `default` gives the stock backend's object, `always` does not,
and the link-time (cross-module) call sites are among the decisions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pymlgo.cli.main import main
from pymlgo.corpus.capture import CaptureError, capture
from pymlgo.corpus.extract import extract_objects, objects_from_compile_commands
from pymlgo.corpus.format import load_corpus
from pymlgo.corpus.thinlto import backend_flags, index_links
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.lld import lld_command
from pymlgo.toolchain.size import object_size
from tests.conftest import TARGET_FLAGS
from tests.test_cc import MINIC

MODULES = ("b64", "main", "sort", "table")


@pytest.fixture(scope="module")
def thinlto_minic(tmp_path_factory: pytest.TempPathFactory, compiler: Compiler) -> Path:
    """minic built for distributed ThinLTO at -Oz: bitcode objects, lld's index-only link,
    and one backend compile per module that embeds the post-import module and its command."""
    if not compiler.bundled:
        pytest.skip("needs the bundled zig's lld")
    root = tmp_path_factory.mktemp("thinlto-minic")
    for f in MINIC.iterdir():
        (root / f.name).write_bytes(f.read_bytes())
    # zig's driver for the sources (its libc headers), clang's own for the IR backends
    cc = [*compiler.cc_argv, *TARGET_FLAGS, "-Oz", "-Xclang", "-Oz"]
    clang = [*compiler.clang_argv, "--target=x86_64-linux-gnu", "-Oz"]
    for m in MODULES:
        subprocess.run([*cc, "-flto=thin", "-c", f"{m}.c", "-o", f"{m}.o"], cwd=root,
                       check=True)
    objs = [f"{m}.o" for m in MODULES]
    subprocess.run([str(compiler.path), "ld.lld", "--thinlto-index-only", "-r", *objs,
                    "-o", "minic.index"], cwd=root, check=True)
    entries = []
    for m in MODULES:
        args = [*clang, "-c", "-x", "ir", f"{m}.o", f"-fthinlto-index={m}.o.thinlto.bc",
                "-mllvm", "-lto-embed-bitcode=post-merge-pre-opt", "-o", f"{m}.native.o"]
        subprocess.run(args, cwd=root, check=True)
        entries.append({"directory": str(root), "arguments": args, "file": f"{m}.o"})
    (root / "compile_commands.json").write_text(json.dumps(entries))
    return root


@pytest.fixture(scope="module")
def thinlto_jobs(thinlto_minic: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> list[CompileJob]:
    out = tmp_path_factory.mktemp("corpus") / "c"
    objs = objects_from_compile_commands(thinlto_minic / "compile_commands.json")
    extract_objects(objs, out, thinlto_build="distributed", obj_base_dir=thinlto_minic,
                    progress=False)
    corpus = load_corpus(out)
    assert corpus.has_thinlto and len(corpus.modules) == len(MODULES)
    return [CompileJob(m.name, m.read_bitcode(), m.cmd) for m in corpus.modules]


def test_default_through_the_channel_is_the_stock_thinlto_backend(thinlto_minic, thinlto_jobs,
                                                                   compiler):
    for job in thinlto_jobs:
        base = compile_baseline(compiler, job)
        served = compile_with_policy(compiler, job, builtin_policy("default"))
        assert base.error is None and served.error is None, (base.error, served.error)
        backend = object_size(thinlto_minic / f"{job.module}.o").allocated
        assert served.size == base.size == backend, job.module


def test_other_policies_differ_and_the_imported_callees_are_decided(thinlto_jobs, compiler):
    main = next(j for j in thinlto_jobs if j.module == "main.native")
    default = compile_with_policy(compiler, main, builtin_policy("default"))
    always = compile_with_policy(compiler, main, builtin_policy("always"))
    # main.c defines only main(): every call site it decides on calls a function the ThinLTO
    # index imported from another module (compiled alone, main.c has none)
    assert default.error is None and always.error is None
    assert default.decisions > 0 and always.size != default.size


# --- capture: a real `make` of a -flto=thin build --------------------------------------------


@pytest.fixture(scope="module")
def captured_thinlto(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("capture") / "minic"
    shutil.copytree(MINIC, src)
    out = src.parent / "corpus"
    result = capture(["make", "-s", "CFLAGS=-Oz -flto=thin"], out, cwd=src, progress=False)
    assert result.extract.modules == list(MODULES)
    # the build itself linked its program with ThinLTO, unchanged
    assert subprocess.run([str(src / "minic")], capture_output=True).returncode == 0
    return out


def test_capture_of_a_thinlto_make_writes_each_module_with_its_index(captured_thinlto):
    corpus = load_corpus(captured_thinlto)
    assert corpus.has_thinlto and [m.name for m in corpus.modules] == list(MODULES)
    for m in corpus.modules:
        assert m.thinlto_index is not None and m.thinlto_index.read_bytes()[:4] == b"BC\xc0\xde"
        assert f"-fthinlto-index={m.thinlto_index}" in m.cmd


def test_a_captured_thinlto_corpus_compiles_default_as_the_baseline(captured_thinlto, compiler):
    corpus = load_corpus(captured_thinlto)
    for m in corpus.modules:
        job = CompileJob(m.name, m.read_bitcode(), m.cmd)
        base = compile_baseline(compiler, job)
        served = compile_with_policy(compiler, job, builtin_policy("default"))
        assert base.error is None and served.size == base.size, (m.name, served.error)
        if m.name == "main":  # its callees all come from the other modules
            assert served.decisions > 0


def test_default_through_the_channel_is_the_stock_backend_object_to_the_byte(
        captured_thinlto, compiler, tmp_path):
    for m in load_corpus(captured_thinlto).modules:
        job = CompileJob(m.name, m.read_bitcode(), m.cmd)
        stock, served = tmp_path / f"{m.name}.stock.o", tmp_path / f"{m.name}.default.o"
        assert compile_baseline(compiler, job, keep_object=stock).error is None
        result = compile_with_policy(compiler, job, builtin_policy("default"),
                                     keep_object=served)
        assert result.error is None, result.error
        assert served.read_bytes() == stock.read_bytes(), m.name


def test_each_captured_module_compiles_to_the_object_lld_made_in_the_real_link(
        captured_thinlto, compiler, tmp_path):
    """The build linked in-process (lld ran the ThinLTO backends); the corpus is made from
    the same link's index, so a module compiled as training compiles it is the object the
    real link's backend made, byte for byte: same imports, same internalized symbols."""
    src = captured_thinlto.parent / "minic"
    objs = [f"{m}.o" for m in MODULES]
    # the build's link again (capture's target flags, the Makefile's), keeping lld's
    # in-process backend objects (<dir>/<output>.lto.<module>.o)
    lld = lld_command(compiler.cc_argv, [*TARGET_FLAGS, "-Oz", "-flto=thin", *objs],
                      "again", dict(os.environ), tmp_path, cwd=src)
    subprocess.run([*lld, "--save-temps", "--thinlto-jobs=1"], cwd=src, check=True)
    for m in load_corpus(captured_thinlto).modules:
        job = CompileJob(m.name, m.read_bitcode(), m.cmd)
        ours = tmp_path / f"{m.name}.o"
        assert compile_baseline(compiler, job, keep_object=ours).error is None
        assert ours.read_bytes() == (src / f"again.lto.{m.name}.o").read_bytes(), m.name


def test_the_backend_flags_follow_the_link(compiler):
    static = backend_flags(["--lto-O2", "-no-pie", "-o", "prog"])
    assert static == ["-fno-pic", "-fno-pie", "-ffunction-sections", "-fdata-sections",
                      "-fvectorize", "-fslp-vectorize"]
    assert backend_flags(["-shared", "--lto-O2"])[0] == "-fpic"
    assert backend_flags(["-pie"])[0] == "-fpie"  # lld's default level is 2: vectorized
    assert "-fvectorize" in backend_flags(["-pie"])
    assert "-fvectorize" not in backend_flags(["--lto-O1"])


def test_a_link_without_its_command_is_indexed_alone_and_said_to_be_approximate(
        captured_thinlto, compiler, tmp_path):
    src = captured_thinlto.parent / "minic"
    objs = [str(src / f"{m}.o") for m in MODULES]
    # a log written before links recorded their command: only the bitcode they read
    indexed = index_links(compiler, [{"directory": str(src), "link": objs}], set(objs),
                          tmp_path)
    assert sorted(indexed.index) == sorted(objs) and not indexed.problems
    assert all(indexed.index[o].read_bytes()[:4] == b"BC\xc0\xde" for o in objs)
    assert set(indexed.approximate) == set(objs)
    assert all(indexed.flags[o] == [] for o in objs)


# --- training and evaluation on a ThinLTO corpus ----------------------------------------------


def test_mlgo_train_and_eval_run_on_a_captured_thinlto_corpus(captured_thinlto, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--corpus", str(captured_thinlto), "--algo", "es", "--iterations",
                 "1", "--workers", "1", "--output_dir", str(run), "--no-tensorboard"]) == 0
    scalars = [json.loads(line) for line in (run / "scalars.jsonl").read_text().splitlines()]
    es = [s for s in scalars if "compiles" in s]
    assert len(es) == 1 and es[0]["compiles"] > 0 and es[0]["failures"] == 0

    reports = []
    for policy in ("default", str(run / "final")):
        out = tmp_path / f"eval{len(reports)}.json"
        assert main(["eval", "--corpus", str(captured_thinlto), "--policy", policy,
                     "--workers", "1", "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text()))
    default, trained = reports
    for report in reports:
        assert [m["name"] for m in report["modules"]] == list(MODULES)
        assert all(m["error"] is None for m in report["modules"])
        # main's call sites are all into functions the index imported from other modules
        assert next(m for m in report["modules"] if m["name"] == "main")["decisions"] > 0
    assert all(m["policy_bytes"] == m["baseline_bytes"] for m in default["modules"])
    assert trained["total"]["baseline_bytes"] == default["total"]["baseline_bytes"]


def test_capture_of_a_full_lto_build_says_why_it_makes_no_corpus(tmp_path):
    src = tmp_path / "minic"
    shutil.copytree(MINIC, src)
    with pytest.raises(CaptureError, match=r"full LTO \(-flto\).*-flto=thin"):
        capture(["make", "-s", "CFLAGS=-Oz -flto"], tmp_path / "corpus", cwd=src,
                progress=False)
    assert not (tmp_path / "corpus").exists()
