"""`mlgo export`'s SavedModel through the AOT path of LLVM's release build: compiled by
`saved_model_cli aot_compile_cpu` with LLVM's flags, linked with TensorFlow's XLA AOT runtime
into a C++ harness that binds buffers as LLVM's ReleaseModeModelRunner does, and fed every
call site of a real trace of the demo corpus's lz4 (`mlgo trace`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="the export extra: pip install 'pymlgo[export]'")

from pymlgo.corpus.command import format_cmd  # noqa: E402
from pymlgo.corpus.demo import cache_root  # noqa: E402
from pymlgo.corpus.format import load_corpus, write_corpus_description  # noqa: E402
from pymlgo.evaluate.trace import trace_columns  # noqa: E402
from pymlgo.policy import aot  # noqa: E402
from pymlgo.policy.export import TIME_STEP_SPECS  # noqa: E402
from pymlgo.policy.store import load_policy  # noqa: E402
from tests.shipped_network import shipped_network  # noqa: E402
from tests.test_export import balanced_policy  # noqa: E402

TRACED_PACKAGE = "lz4"


@pytest.fixture(scope="module")
def runtime() -> aot.Runtime:
    try:
        return aot.runtime(cache_root())
    except aot.AotError as exc:
        pytest.skip(f"the XLA AOT runtime cannot be built here: {exc}")


@pytest.fixture(scope="module")
def lz4_columns(demo_corpus_dir: Path, tmp_path_factory) -> dict[str, np.ndarray]:
    """Every call site clang's inliner asks about while compiling the demo corpus's lz4 at
    -Oz: `mlgo trace --policy default` on a corpus of just those modules."""
    root = tmp_path_factory.mktemp("aot")
    demo = load_corpus(demo_corpus_dir)
    names = [m.name for m in demo.modules if m.name.startswith(f"{TRACED_PACKAGE}/")]
    corpus = root / "corpus"
    for m in demo.modules:
        if m.name in names:
            dest = corpus / m.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(m.bc_path, f"{dest}.bc")
            Path(f"{dest}.cmd").write_bytes(format_cmd(m.cmd))
    write_corpus_description(corpus, names)
    res = subprocess.run(
        [sys.executable, "-m", "pymlgo.cli.main", "trace", "--corpus", str(corpus),
         "--policy", "default", "--output_dir", str(root / "trace"), "--workers", "2"],
        capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    cols = trace_columns(root / "trace")
    assert len(cols["callee_basic_block_count"]) >= 1000, "lz4 has over a thousand call sites"
    return cols


@pytest.fixture(scope="module")
def pretrained(lz4_columns, runtime, tmp_path_factory) -> aot.AotComparison:
    return aot.compare_with_policy(shipped_network(), lz4_columns,
                                   tmp_path_factory.mktemp("pretrained"), runtime)


def report(name: str, c: aot.AotComparison) -> None:
    print(f"{name}: {c.call_sites} call sites ({c.inlined} inlined), decisions equal "
          f"{c.decisions_equal}, max |logit diff| {c.max_abs_logit_diff:.3g}, smallest |logit| "
          f"{c.min_abs_logit:.3g}; aot_compile_cpu {c.model.seconds:.1f} s wall, "
          f"{c.model.cpu_seconds:.1f} s CPU; runtime linked: {len(c.harness.runtime_sources)} "
          f"sources")


def assert_decides_like_numpy(c: aot.AotComparison) -> None:
    assert c.decisions_equal == c.call_sites
    assert c.logit_model_decisions_equal == c.call_sites
    # the same float32 network, its sums in XLA's order: differences of rounding size only
    # (1.07e-4 for the bc-trained shipped model, whose logits are large; a wrong input or
    # weight moves a logit by whole units, and the nearest decision is 1.19 away)
    assert c.max_abs_logit_diff < 1e-3


def test_the_aot_command_is_the_one_llvms_cmake_runs_for_the_inliner():
    # llvm/cmake/modules/TensorFlowCompile.cmake (tf_compile) with the arguments of
    # llvm/lib/Analysis/CMakeLists.txt: tag set serve, signature action, class
    # llvm::InlinerSizeModel, output prefix <build dir>/InlinerSizeModel.
    cmd = aot.llvm_aot_command(Path("/tf/bin/saved_model_cli"), Path("/m"), Path("/b/X"),
                               triple="x86_64-pc-linux")
    assert cmd == ["/tf/bin/saved_model_cli", "aot_compile_cpu", "--multithreading", "false",
                   "--dir", "/m", "--tag_set", "serve", "--signature_def_key", "action",
                   "--output_prefix", "/b/X", "--cpp_class", "llvm::InlinerSizeModel",
                   "--target_triple", "x86_64-pc-linux"]


def test_the_aot_compiled_shipped_network_decides_like_numpy_on_every_call_site(pretrained):
    report("pretrained:inlining-oz's network", pretrained)
    assert_decides_like_numpy(pretrained)
    assert pretrained.model.command[1] == "aot_compile_cpu"


def test_an_aot_compiled_random_policy_decides_like_numpy_on_every_call_site(
    lz4_columns, runtime, tmp_path
):
    c = aot.compare_with_policy(balanced_policy(lz4_columns), lz4_columns, tmp_path, runtime)
    report("random", c)
    assert_decides_like_numpy(c)
    assert 0.2 < c.inlined / c.call_sites < 0.8  # both answers, not a constant


def test_the_compiled_model_has_the_buffers_llvms_release_runner_binds(pretrained):
    features = load_policy("pretrained:inlining-oz").vocab.features
    # one int64 [1] buffer per feature, found by "feed_" + name, nothing else
    assert pretrained.run.args == {f"feed_{f}": 8 for f in features}
    assert pretrained.run.results == {"fetch_inlining_decision": 8}
    assert set(pretrained.types.values()) == {"int64_t"}
    assert set(pretrained.types) == {*pretrained.run.args, *pretrained.run.results}
    # LLVM reports an error for a model with a model_selector input it was not told about
    assert not pretrained.run.has_model_selector
    # the time-step inputs LLVM never feeds in release mode are pruned away, not left unset
    assert not {f"feed_{s.name}" for s in TIME_STEP_SPECS} & set(pretrained.run.args)

