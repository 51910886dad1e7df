"""IR2Native: post-inlining IR features and native sizes from real compiles, the model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.ir2native.dataset import build_dataset, extract_module, function_sizes, load_dataset
from pymlgo.ir2native.features import FEATURE_NAMES, module_features
from pymlgo.ir2native.model import (
    L2_GRID,
    InstructionCountModel,
    IR2NativeModel,
    load_model,
    nnls,
    select_l2,
)
from pymlgo.ir2native.train import evaluate_heldout, module_folds
from pymlgo.toolchain.size import text_size

# Two small modules per package: enough functions to fit, cheap to compile.
SUBSET = ("zstd/lib/compress/hist", "zstd/lib/common/entropy_common",
          "brotli/c/enc/histogram", "brotli/c/dec/huffman",
          "lz4/lz4libs/xxhash")
# Held-out quality is measured on the demo modules under this much bitcode (47 of 63,
# about 440 functions of all three packages): the few large encoders and decoders take
# most of the compile time. `benchmarks/ir2native_quality.py` measures all 63.
HELDOUT_MAX_BITCODE = 75_000

IR = """\
; *** IR Dump After InlinerPass on (f) ***
define internal i32 @f(i32 %0, ptr %1) {
  %3 = add i32 %0, 7
  br label %4

4:                                                ; preds = %4, %2
  %5 = phi i32 [ %3, %2 ], [ %7, %4 ]
  store i32 %5, ptr %1, align 4
  %6 = icmp eq i32 %5, 0
  %7 = shl i32 %5, 1
  br i1 %6, label %8, label %4

8:
  switch i32 %7, label %9 [
    i32 1, label %9
    i32 2, label %8
  ]

9:
  call void @llvm.lifetime.start.p0(ptr %1)
  %10 = tail call i32 @g(i32 %7, i32 3)
  ret i32 %10
}
; *** IR Dump After InlinerPass on (f) ***
define internal i32 @f(i32 %0, ptr %1) {
  ret i32 0
}
"""


def test_features_count_blocks_opcodes_loops_and_calls():
    f = module_features(IR.split("; *** IR Dump After InlinerPass on (f) ***\ndefine internal"
                                 " i32 @f(i32 %0, ptr %1) {\n  ret")[0])["f"]
    assert f["arguments"] == 2
    assert f["blocks"] == 4
    assert f["instructions"] == 11
    assert (f["op_int_arith"], f["op_shift"], f["op_compare"], f["op_store"]) == (1, 1, 1, 1)
    assert f["op_phi"] == 1 and f["op_branch"] == 2 and f["op_switch"] == 1
    assert f["cond_branches"] == 1
    assert f["back_edges"] == 2  # %4 -> %4 and the switch case %8 -> %8
    assert f["switch_cases"] == 2
    assert f["calls_direct"] == 1 and f["calls_free_intrinsic"] == 1
    assert f["call_args"] == 2


def test_the_last_dump_of_a_function_wins():
    assert module_features(IR)["f"]["instructions"] == 1


@pytest.fixture(scope="module")
def jobs(demo_corpus_dir):
    return corpus_jobs(load_corpus(demo_corpus_dir), SUBSET)


def test_a_real_module_pairs_each_surviving_function_with_its_symbol_size(compiler, jobs,
                                                                          tmp_path):
    job = next(j for j in jobs if j.module == "zstd/lib/compress/hist")
    res = extract_module(compiler, job)
    assert res.error is None
    names = {r.function for r in res.rows}
    assert {"HIST_count_simple", "HIST_count"} <= names
    assert all(r.size > 0 and len(r.features) == len(FEATURE_NAMES) for r in res.rows)
    big = max(res.rows, key=lambda r: r.size)
    assert big.features[FEATURE_NAMES.index("instructions")] > 20
    assert res.ir_only >= 1  # e.g. MEM_read32: inlined everywhere, then deleted
    # Symbol sizes cannot exceed the object's executable bytes.
    from pymlgo.corpus.command import recompile_args
    from pymlgo.toolchain import run

    (tmp_path / "m.bc").write_bytes(job.bitcode)
    argv = [*compiler.clang_argv, *recompile_args(job.cmd, input_bc="m.bc", output_obj="m.o"),
            "-ffunction-sections"]
    assert run.run(argv, cwd=tmp_path).returncode == 0
    assert sum(r.size for r in res.rows) <= text_size(tmp_path / "m.o")
    assert {r.function: r.size for r in res.rows}.items() <= function_sizes(
        tmp_path / "m.o").items()


def test_nnls_keeps_weights_non_negative_and_solves_exact_systems():
    rng = np.random.default_rng(0)
    a = np.c_[rng.random((50, 3)), np.ones(50)]
    w = nnls(a, a @ np.array([2.0, 0.0, 5.0, -1.0]))
    assert np.allclose(w, [2.0, 0.0, 5.0, -1.0], atol=1e-6)
    w = nnls(a, a @ np.array([2.0, -3.0, 1.0, 0.0]))
    assert (w[:3] >= 0).all() and w[1] == 0.0


def test_dataset_training_and_cli_on_real_modules(compiler, jobs, tmp_path, capsys):
    ds = build_dataset(compiler, jobs, workers=1)
    assert not ds.failed_modules
    assert {r.package for r in ds.rows} == {"zstd", "brotli", "lz4"}
    path = tmp_path / "ds.json"
    ds.save(path)
    again = load_dataset(path)
    assert again.rows == ds.rows

    ev = evaluate_heldout(ds)
    assert [f.heldout for f in ev.folds] == [("brotli",), ("lz4",), ("zstd",)]
    assert ev.pooled_model.functions == len(ds.rows)
    assert np.isfinite([ev.pooled_model.mae, ev.pooled_baseline.mae]).all()

    out, report = tmp_path / "model.json", tmp_path / "eval.json"
    assert main(["ir2native", "train", "--dataset", str(path), "--output", str(out),
                 "--heldout", "lz4", "--json", str(report)]) == 0
    assert "IR2Native MAE" in capsys.readouterr().out
    model = load_model(out)
    x = np.array([r.features for r in ds.rows])
    assert np.allclose(model.predict(x), model.predict(x.copy()))
    assert json.loads(report.read_text())["folds"][0]["heldout_packages"] == ["lz4"]

    assert main(["ir2native", "train", "--dataset", str(path), "--split", "module",
                 "--folds", "2", "--json", str(report)]) == 0
    by_module = json.loads(report.read_text())
    assert by_module["split"] == "module"
    assert sorted(m for f in by_module["folds"] for m in f["heldout_modules"]) == sorted(SUBSET)


def test_model_learns_additive_byte_costs():
    """Functions whose size is a sum of per-class costs are predicted almost exactly,
    and better than by the instruction count alone."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 40, size=(300, len(FEATURE_NAMES))).astype(float)
    ic = FEATURE_NAMES.index("instructions")
    x[:, ic] = np.delete(x, ic, axis=1).sum(axis=1)
    costs = rng.uniform(0, 6, size=len(FEATURE_NAMES))
    costs[ic] = 0
    y = x @ costs + 10
    model = IR2NativeModel.fit(FEATURE_NAMES, x[:200], y[:200])
    base = InstructionCountModel.fit(FEATURE_NAMES, x[:200], y[:200])
    err = np.abs(model.predict(x[200:]) - y[200:]).mean()
    assert err < 0.5 * np.abs(base.predict(x[200:]) - y[200:]).mean()


@pytest.fixture(scope="module")
def heldout_dataset(compiler, demo_corpus_dir):
    jobs = [j for j in corpus_jobs(load_corpus(demo_corpus_dir))
            if len(j.bitcode) < HELDOUT_MAX_BITCODE]
    ds = build_dataset(compiler, jobs, workers=2)
    assert not ds.failed_modules and len(ds.rows) > 300
    return ds


def test_on_a_held_out_package_the_model_beats_the_instruction_count_line(heldout_dataset):
    """Fitted on brotli and lz4 only, IR2Native predicts zstd's functions with a lower
    mean absolute error than a line on the instruction count fitted on the same data."""
    ev = evaluate_heldout(heldout_dataset, [["zstd"]])
    (fold,) = ev.folds
    assert fold.model.functions > 100
    assert fold.model.mae < fold.baseline.mae
    assert fold.model.r2 > 0.8


def test_on_held_out_modules_the_model_beats_the_instruction_count_line(heldout_dataset):
    ev = evaluate_heldout(heldout_dataset, split="module", folds=5, seed=0)
    assert ev.pooled_model.functions == len(heldout_dataset.rows)
    assert ev.pooled_model.mae < ev.pooled_baseline.mae
    assert ev.pooled_model.r2 > ev.pooled_baseline.r2


def test_module_folds_partition_the_modules_and_depend_only_on_the_seed():
    names = [f"p/m{i}" for i in range(11)]
    folds = module_folds(names, 3, seed=4)
    assert sorted(m for f in folds for m in f) == sorted(names)
    assert sorted(len(f) for f in folds) == [3, 4, 4]
    assert module_folds(list(reversed(names)), 3, seed=4) == folds
    assert module_folds(names, 3, seed=5) != folds
    with pytest.raises(ValueError, match="between 2"):
        module_folds(names, 1, seed=0)


def test_the_penalty_is_chosen_by_error_on_held_out_groups():
    """When bytes per instruction follow the opcode mix, a light penalty predicts held-out
    groups best; when they are one random factor per group, the heaviest does."""
    rng = np.random.default_rng(2)
    x = rng.integers(1, 30, size=(240, len(FEATURE_NAMES))).astype(float)
    ic = FEATURE_NAMES.index("instructions")
    x[:, ic] = np.delete(x, ic, axis=1).sum(axis=1)
    groups = np.repeat(np.arange(24), 10)
    mix = x[:, FEATURE_NAMES.index("op_load")] / x[:, ic]
    clean = x[:, ic] * np.exp(1.0 + 8.0 * mix)
    assert select_l2(x, clean, ic, groups) == min(L2_GRID)
    noisy = x[:, ic] * np.exp(rng.normal(0, 1.0, size=24))[groups]
    assert select_l2(x, noisy, ic, groups) == max(L2_GRID)
    model = IR2NativeModel.fit(FEATURE_NAMES, x, noisy, groups=groups)
    assert model.l2 == max(L2_GRID)
    assert IR2NativeModel.fit(FEATURE_NAMES, x, noisy, l2=7.0).l2 == 7.0


def test_train_rejects_an_unknown_heldout_package(compiler, jobs, tmp_path, capsys):
    ds = build_dataset(compiler, jobs[:2], workers=1)
    path = tmp_path / "ds.json"
    ds.save(path)
    assert main(["ir2native", "train", "--dataset", str(path), "--heldout", "nope"]) == 2
    assert "not in the data set" in capsys.readouterr().err


def test_a_file_that_is_not_a_dataset_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main(["ir2native", "train", "--dataset", str(bad)]) == 2
    assert "not an IR2Native data set" in capsys.readouterr().err
