"""`mlgo export`: SavedModel and TFLite models that LLVM binds to and that decide exactly as
the native numpy policy, checked on every observation of a real trace."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pymlgo.policy import export
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import MLPParams, init_mlp
from pymlgo.policy.store import save_policy
from pymlgo.policy.vocab import build_vocab
from pymlgo.protocol.log import Header, Observation, read_events
from tests.shipped_network import shipped_network
from tests.test_train_corpus import build_tiny_corpus

pytest.importorskip("tensorflow", reason="the export extra: pip install 'pymlgo[export]'")

TRAINING_ONLY = {"discount": np.float32, "reward": np.float32, "step_type": np.int32}


def mlgo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pymlgo.cli.main", *args],
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def trace_columns(tmp_path_factory) -> dict[str, np.ndarray]:
    """Every observation of a real trace: `mlgo trace` of clang's decisions on a small real
    corpus, read back from its LLVM training logs (feature name -> one value per decision)."""
    root = tmp_path_factory.mktemp("export")
    corpus = build_tiny_corpus(root / "corpus")
    res = mlgo("trace", "--corpus", str(corpus), "--policy", "default",
               "--output_dir", str(root / "trace"), "--workers", "1")
    assert res.returncode == 0, res.stderr
    rows: dict[str, list[np.ndarray]] = {}
    for log in sorted((root / "trace").rglob("*.log")):
        with open(log, "rb") as f:
            header = None
            for event in read_events(f):
                if isinstance(event, Header):
                    header = event
                elif isinstance(event, Observation):
                    assert header is not None
                    for spec, tensor in zip(header.features, event.tensors, strict=True):
                        rows.setdefault(spec.name, []).append(tensor.reshape(-1))
    cols = {k: np.concatenate(v) for k, v in rows.items()}
    assert len(cols["callee_basic_block_count"]) >= 50, "the trace should have many decisions"
    return cols


def balanced_policy(cols: dict[str, np.ndarray], differences: tuple[str, ...] = ()
                    ) -> InliningPolicy:
    """A policy whose vocab comes from the trace (so values sit exactly on quantile
    boundaries) and whose output bias splits the trace's decisions about half and half."""
    features = [k for k in cols if k not in ("inlining_default", "inlining_decision")]
    vocab = build_vocab(cols, features=features, quantiles=100, differences=differences)
    params = init_mlp(vocab.input_dim, (40, 40, 20), np.random.default_rng(7))
    logits = params.forward(vocab.normalize(vocab.matrix(cols)))
    bias = params.biases[-1] - np.float32(np.median(logits)) + np.float32(1e-3)
    params = MLPParams(params.weights, (*params.biases[:-1], bias.astype(np.float32)))
    return InliningPolicy(vocab=vocab, params=params)


def native_decisions(policy: InliningPolicy, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Decisions of the per-call-site path `mlgo cc` and training compiles use."""
    decide = policy.for_module("trace")
    n = len(next(iter(cols.values())))
    return np.array([decide({k: v[i : i + 1] for k, v in cols.items()}) for i in range(n)])


@pytest.mark.parametrize("which", ["shipped-network", "balanced", "balanced-with-margin"])
def test_exported_models_decide_like_the_native_policy_on_every_traced_call_site(
    which, trace_columns, tmp_path
):
    policy = (shipped_network() if which == "shipped-network"
              else balanced_policy(trace_columns) if which == "balanced"
              else balanced_policy(trace_columns, ("threshold-cost_estimate",)))
    assert isinstance(policy, InliningPolicy)
    native = native_decisions(policy, trace_columns)
    export.export_policy(policy, "savedmodel", tmp_path / "sm")
    export.export_policy(policy, "tflite", tmp_path / "tflite")

    saved = export.saved_model_decisions(tmp_path / "sm", trace_columns)
    lite = export.tflite_decisions(tmp_path / "tflite", trace_columns)

    print(f"{which}: {len(native)} decisions, {int(native.sum())} inline")
    assert saved.tolist() == native.tolist()
    assert lite.tolist() == native.tolist()
    if which != "shipped-network":  # equality on a mix of both answers, not on a constant
        assert 0.2 < native.mean() < 0.8


def test_savedmodel_has_the_action_signature_release_mode_compiles(trace_columns, tmp_path):
    import tensorflow as tf

    policy = balanced_policy(trace_columns)
    export.export_policy(policy, "savedmodel", tmp_path / "sm")
    assert (tmp_path / "sm" / "saved_model.pb").is_file()
    sig = tf.saved_model.load(str(tmp_path / "sm")).signatures["action"]
    _, inputs = sig.structured_input_signature
    expected = {name: tf.int64 for name in policy.vocab.features}
    expected.update({k: tf.as_dtype(v) for k, v in TRAINING_ONLY.items()})
    assert {k: s.dtype for k, s in inputs.items()} == expected
    assert all(s.shape.as_list() == [1] for s in inputs.values())
    (name, out), = sig.structured_outputs.items()
    assert name == "inlining_decision" and out.dtype == tf.int64 and out.shape.as_list() == [1]


def test_tflite_tensors_carry_the_names_llvms_development_mode_looks_up(
    trace_columns, tmp_path
):
    import tensorflow as tf

    policy = balanced_policy(trace_columns)
    export.export_policy(policy, "tflite", tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "model.tflite", "output_spec.json", "pymlgo_policy.json"]
    interp = tf.lite.Interpreter(model_path=str(tmp_path / "m" / "model.tflite"))
    names = {d["name"]: d["dtype"] for d in interp.get_input_details()}
    want = {f"action_{f}:0": np.int64 for f in policy.vocab.features}
    want.update({f"action_{k}:0": v for k, v in TRAINING_ONLY.items()})
    assert names == want

    spec = json.loads((tmp_path / "m" / "output_spec.json").read_text())
    assert spec[0]["logging_name"] == "inlining_decision"  # LLVM requires it first
    ts = spec[0]["tensor_spec"]
    assert ts["type"] == "int64_t" and ts["shape"] == [1]
    outputs = {d["name"]: d["dtype"] for d in interp.get_output_details()}
    assert outputs == {f"{ts['name']}:{ts['port']}": np.int64}


def test_export_cli_writes_the_model_and_refuses_what_it_cannot_export(tmp_path):
    save_policy(shipped_network(), tmp_path / "net")
    out = tmp_path / "pre"
    res = mlgo("export", "--policy", str(tmp_path / "net"), "--format", "tflite",
               "--output_dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / "model.tflite").stat().st_size > 1000 and (out / "output_spec.json").is_file()

    again = mlgo("export", "--policy", str(tmp_path / "net"), "--format", "tflite",
                 "--output_dir", str(out))
    assert again.returncode == 2 and "--overwrite" in again.stderr

    builtin = mlgo("export", "--policy", "default", "--format", "savedmodel",
                   "--output_dir", str(tmp_path / "d"))
    assert builtin.returncode == 2 and "only learned inlining policies" in builtin.stderr
    windowed = mlgo("export", "--policy", "pretrained:inlining-oz", "--format", "savedmodel",
                    "--output_dir", str(tmp_path / "w"))
    assert windowed.returncode == 2 and "within the window" in windowed.stderr
    assert "mlgo cc --mlgo-policy" in windowed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net", "pre"]  # no staging left


def test_integer_thresholds_count_like_float_boundaries():
    bounds = np.array([-np.inf, -2.5, 0.0, 0.5, 3.0, 1e30, np.inf])
    t = export.integer_thresholds(bounds)
    for x in range(-5, 10):
        assert int((t <= x).sum()) == int(np.searchsorted(bounds, x, side="right"))
