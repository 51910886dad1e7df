"""Export an inlining policy to the model formats LLVM's own advisors load.

- `savedmodel`: a TensorFlow SavedModel (tag `serve`) with the signature `action`, the one
  LLVM's release mode AOT-compiles (`-DLLVM_INLINER_MODEL_PATH=DIR`, `saved_model_cli
  aot_compile_cpu --tag_set serve --signature_def_key action`). Inputs are named by feature
  (int64 [1] each) plus the time-step inputs a TF-Agents policy takes (`step_type` int32,
  `reward` and `discount` float32, all [1]); the output is `inlining_decision` int64 [1].
  The release runner looks them up as `feed_<name>` / `fetch_inlining_decision`. A policy
  that reads IR2Vec embeddings also takes `callee_embedding` and `caller_embedding`
  (float32 [dim]) after the features, as clang sends them; its IR2Vec vocabulary is
  exported beside the model as `ir2vec.json` (clang must run with it: both
  `-ml-inliner-ir2vec-vocab-file` and `-ir2vec-vocab-path`).
- `tflite`: `model.tflite` plus `output_spec.json`, what development mode loads with
  `-ml-inliner-model-under-training=DIR`. LLVM binds the interpreter's tensors by name:
  inputs `action_<feature>:0` (the converter names them signature key + `_` + input name),
  plus `action_discount:0`, `action_reward:0`, `action_step_type:0`, which LLVM always
  feeds; every model input must be one LLVM feeds. `output_spec.json` maps the logging
  name `inlining_decision` (LLVM requires it first) to the output tensor's name and port.

The graph computes exactly what `InliningPolicy` does: per feature (and per difference of
two features, computed in int64) the number of vocab boundaries `<= x` divided by their
count (compared as integers: for an integer `x`, `b <= x` iff `ceil(b) <= x`, so no float
rounding enters), squares if the vocab has them,
embeddings z-scored and clipped as `policy.vocab.EmbeddingInput` does (float32), the ReLU
MLP in float32, and `inlining_decision = logit >= 0`.

TensorFlow is an optional dependency: `pip install 'pymlgo[export]'`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.vocab import EMBEDDING_CLIP
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE
from pymlgo.protocol.tensor_spec import TensorSpec

FORMATS = ("savedmodel", "tflite")
SIGNATURE_KEY = "action"  # the signature LLVM's build compiles and TFLite's names derive from
SAVED_MODEL_TAG = "serve"
DECISION_NAME = "inlining_decision"
LOGIT_NAME = "logit"  # only in diagnostic exports (write_saved_model(with_logit=True))
# A TF-Agents policy's time-step inputs besides the observation; LLVM's development-mode
# runner feeds them (as `action_<name>`) and never reads them, release mode leaves them 0.
TIME_STEP_SPECS = (
    TensorSpec("discount", "float", (1,)),
    TensorSpec("reward", "float", (1,)),
    TensorSpec("step_type", "int32_t", (1,)),
)
FEATURE_SPEC_TYPE = "int64_t"
EMBEDDING_SPEC_TYPE = "float"
TFLITE_FILE, OUTPUT_SPEC_FILE = "model.tflite", "output_spec.json"
PYMLGO_POLICY_FILE = "pymlgo_policy.json"  # provenance: which policy this model came from
IR2VEC_EXPORT_FILE = "ir2vec.json"  # a model reading embeddings: the vocabulary they need
_LARGEST_INT64_FLOAT = float(np.nextafter(2.0**63, 0.0))  # 2**63 - 1024


class ExportError(RuntimeError):
    """The policy cannot be exported (TensorFlow missing, unsupported policy, ...)."""


def import_tensorflow() -> Any:
    """TensorFlow, or ExportError saying how to install it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep CUDA/oneDNN chatter out
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ExportError(
            "exporting needs TensorFlow: pip install 'pymlgo[export]'"
        ) from exc
    return tf


def feature_input_names(policy: InliningPolicy) -> tuple[str, ...]:
    """The signature's feature inputs, in the policy's input order."""
    return tuple(policy.vocab.features)


def signature_input_specs(policy: InliningPolicy) -> tuple[TensorSpec, ...]:
    """Every input of the `action` signature: the features, the IR2Vec embeddings (float32
    [dim], named as clang sends them), then the time-step inputs."""
    feats = tuple(TensorSpec(n, FEATURE_SPEC_TYPE, (1,)) for n in feature_input_names(policy))
    embs = tuple(TensorSpec(e.name, EMBEDDING_SPEC_TYPE, (e.dim,))
                 for e in policy.vocab.embeddings)
    return feats + embs + TIME_STEP_SPECS


def tflite_input_name(name: str) -> str:
    """The interpreter tensor name LLVM looks an input up by (`action_<name>:0`)."""
    return f"{SIGNATURE_KEY}_{name}:0"


def integer_thresholds(boundaries: np.ndarray) -> np.ndarray:
    """int64 `t` with `count(t <= x) == count(boundaries <= x)` for every int64 `x`."""
    b = np.ceil(np.asarray(boundaries, dtype=np.float64))
    # Clip instead of overflowing (float(2**63 - 1) rounds up to 2**63, out of range): a
    # huge or infinite boundary then only counts for x within 1024 of the int64 maximum.
    return np.clip(b, -(2.0**63), _LARGEST_INT64_FLOAT).astype(np.int64)


def _policy_fn(
    tf: Any, policy: InliningPolicy, *, with_logit: bool = False
) -> Callable[..., dict[str, Any]]:
    names = feature_input_names(policy)
    tables = [
        (tf.constant(integer_thresholds(b), dtype=tf.int64), float(b.size))
        for _, b in policy.vocab.scalar_inputs
    ]
    differences = policy.vocab.difference_columns
    layers = [
        (tf.constant(w, dtype=tf.float32), tf.constant(b, dtype=tf.float32))
        for w, b in zip(policy.params.weights, policy.params.biases, strict=True)
    ]
    with_square = policy.vocab.with_square
    n_inputs = len(names)
    n_scalars = len(tables)
    clip = tf.constant(EMBEDDING_CLIP, tf.float32)
    embeddings = [(tf.constant(e.mean, tf.float32), tf.constant(e.scale, tf.float32), e.dim)
                  for e in policy.vocab.embeddings]

    def action(*inputs: Any) -> dict[str, Any]:
        values = []
        # a difference of two int64 features, as int64: exact, as the float64 of the vocab
        # for every value below 2**53
        scalars = [*inputs[:n_inputs], *(inputs[a] - inputs[b] for a, b in differences)]
        for x, (thresholds, k) in zip(scalars, tables, strict=True):
            if k == 0:
                values.append(tf.zeros([], tf.float32))  # no data: always 0.0, as the vocab
                continue
            hits = tf.cast(tf.less_equal(thresholds, tf.reshape(x, [1])), tf.float32)
            values.append(tf.reduce_sum(hits) / tf.constant(k, tf.float32))
        v = tf.reshape(tf.stack(values), [1, n_scalars])
        parts = [v, v * v] if with_square else [v]
        # the float32 arithmetic of EmbeddingInput.normalize, op for op
        embedded = inputs[n_inputs:n_inputs + len(embeddings)]  # time steps follow
        for x, (mean, scale, dim) in zip(embedded, embeddings, strict=True):
            z = (tf.reshape(x, [1, dim]) - mean) / scale
            parts.append(tf.clip_by_value(z, -clip, clip))
        h = tf.concat(parts, axis=1) if len(parts) > 1 else v
        last = len(layers) - 1
        for i, (w, b) in enumerate(layers):
            h = tf.matmul(h, w) + b
            if i < last:
                h = tf.nn.relu(h)
        decision = tf.cast(tf.greater_equal(h, 0.0), tf.int64)
        out = {DECISION_NAME: tf.reshape(decision, [1], name=DECISION_NAME)}
        if with_logit:
            out[LOGIT_NAME] = tf.reshape(h, [1], name=LOGIT_NAME)
        return out

    return action


def _tf_spec(tf: Any, spec: TensorSpec) -> Any:
    return tf.TensorSpec(list(spec.shape), tf.as_dtype(spec.dtype), name=spec.name)


def _require_mlp(policy: object) -> InliningPolicy:
    if not isinstance(policy, InliningPolicy):
        name = getattr(policy, "name", type(policy).__name__)
        raise ExportError(
            f"only learned inlining policies (a saved policy directory or pretrained:NAME) "
            f"can be exported; {name!r} is not one"
        )
    return policy


def write_saved_model(
    tf: Any, policy: InliningPolicy, directory: Path, *, with_logit: bool = False
) -> None:
    """The `action` SavedModel; `with_logit` adds the float32 output `logit` (diagnostics:
    how far from 0 a decision was; LLVM binds only `inlining_decision` and ignores it)."""
    module = tf.Module()
    specs = [_tf_spec(tf, s) for s in signature_input_specs(policy)]
    module.action = tf.function(_policy_fn(tf, policy, with_logit=with_logit),
                                input_signature=specs)
    concrete = module.action.get_concrete_function()
    tf.saved_model.save(module, str(directory), signatures={SIGNATURE_KEY: concrete})


@dataclass(frozen=True)
class ExportResult:
    directory: Path
    format: str
    files: tuple[str, ...]


def _provenance(policy: InliningPolicy, fmt: str) -> bytes:
    doc = {
        "format": fmt,
        "policy": policy.name,
        "version": policy.version,
        "signature": SIGNATURE_KEY,
        "inputs": [s.to_json() for s in signature_input_specs(policy)],
        "output": TensorSpec(DECISION_NAME, "int64_t", (1,)).to_json(),
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def export_policy(
    policy: object, fmt: str, output_dir: Path, *, overwrite: bool = False
) -> ExportResult:
    """Write `policy` as `fmt` to `output_dir`, which appears only once complete."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    mlp = _require_mlp(policy)
    check_finite(mlp)
    if mlp.window:
        # outside its window the policy gives clang's decision, which release mode lacks
        raise ExportError(f"this policy decides only within the window {mlp.window} and "
                          f"gives clang's own decision ({DEFAULT_FEATURE}) elsewhere, which "
                          f"only the interactive channel sends: serve it with `mlgo cc "
                          f"--mlgo-policy DIR` instead of compiling it into clang")
    if mlp.languages:
        # a model compiled into clang decides every module it compiles, whatever its language
        raise ExportError(f"this policy decides only {', '.join(mlp.languages)} and leaves "
                          f"other languages to clang's own decisions, which a model compiled "
                          f"into clang cannot: serve it with `mlgo cc --mlgo-policy DIR` "
                          f"instead")
    if DEFAULT_FEATURE in mlp.vocab.features:
        # clang's release mode feeds a compiled-in model its own features only
        raise ExportError(f"this policy reads clang's own decision ({DEFAULT_FEATURE}), which "
                          f"only the interactive channel sends: serve it with `mlgo cc "
                          f"--mlgo-policy DIR` instead of compiling it into clang")
    if mlp.vocab.tail != "clip":
        # the graph only counts boundaries; a log tail would need ops it does not build
        raise ExportError(f"policies with a {mlp.vocab.tail!r} feature tail (normalization "
                          f"'quantile-log-tail') cannot be exported yet; train with "
                          f"out_of_range = 'clip' to export")
    output_dir = Path(output_dir)
    if output_dir.exists() and not overwrite:
        raise ExportError(f"{output_dir} exists (pass --overwrite to replace it)")
    tf = import_tensorflow()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        if fmt == "savedmodel":
            write_saved_model(tf, mlp, staging)
        else:
            _write_tflite(tf, mlp, staging)
        (staging / PYMLGO_POLICY_FILE).write_bytes(_provenance(mlp, fmt))
        if mlp.vocab.embeddings:
            # the model's embedding inputs exist only when clang runs with this very file
            # (both IR2Vec flags, `pymlgo.ir2vec.vocab_file.clang_flags`)
            shutil.copyfile(mlp.ir2vec_vocab, staging / IR2VEC_EXPORT_FILE)
        for path in staging.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # mkdtemp makes 0700
        if output_dir.exists():
            shutil.rmtree(output_dir)
        os.replace(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = tuple(sorted(str(p.relative_to(output_dir)) for p in output_dir.rglob("*")
                         if p.is_file()))
    return ExportResult(output_dir, fmt, files)


def _write_tflite(tf: Any, policy: InliningPolicy, directory: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pymlgo-savedmodel-") as tmp:
        write_saved_model(tf, policy, Path(tmp))
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp, signature_keys=[SIGNATURE_KEY])
        model = converter.convert()
    (directory / TFLITE_FILE).write_bytes(model)
    (directory / OUTPUT_SPEC_FILE).write_bytes(output_spec_json(tf, model))


def _tflite_interpreter(tf: Any, model: bytes) -> Any:
    import warnings

    with warnings.catch_warnings():  # tf.lite.Interpreter warns it moves to LiteRT
        warnings.simplefilter("ignore")
        interpreter = tf.lite.Interpreter(model_content=model)
    interpreter.allocate_tensors()
    return interpreter


def output_spec_json(tf: Any, model: bytes) -> bytes:
    """`output_spec.json` for a converted model: its decision output, named as the
    interpreter names it (e.g. `PartitionedCall:0` -> name `PartitionedCall`, port 0)."""
    outputs = _tflite_interpreter(tf, model).get_output_details()
    if len(outputs) != 1:
        raise ExportError(f"the converted model has {len(outputs)} outputs, expected 1")
    full = str(outputs[0]["name"])
    name, _, port = full.rpartition(":")
    if not name or not port.isdigit():
        name, port = full, "0"
    spec = TensorSpec(name, "int64_t", (1,), port=int(port))
    doc = [{"logging_name": DECISION_NAME, "tensor_spec": spec.to_json()}]
    return (json.dumps(doc, indent=2) + "\n").encode()


# --- running exported models (the decision-equality tests) ----------------------------


def saved_model_decisions(
    directory: Path, features: dict[str, np.ndarray]
) -> np.ndarray:
    """Decisions of a SavedModel's `action` signature on feature columns (name -> (n,))."""
    tf = import_tensorflow()
    fn = tf.saved_model.load(str(directory)).signatures[SIGNATURE_KEY]
    _, kwargs = fn.structured_input_signature
    n = _rows(features)
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        feed = {}
        for name, spec in kwargs.items():
            if name in features:  # a scalar feature's value, or an embedding's row
                feed[name] = tf.constant(np.reshape(features[name][i], spec.shape),
                                         dtype=spec.dtype)
            else:  # time-step inputs: what LLVM feeds (zeros)
                feed[name] = tf.zeros(spec.shape, dtype=spec.dtype)
        out[i] = int(fn(**feed)[DECISION_NAME].numpy().reshape(-1)[0])
    return out


def tflite_decisions(directory: Path, features: dict[str, np.ndarray]) -> np.ndarray:
    """Decisions of `model.tflite`, binding tensors the way LLVM's TFLite runner does:
    inputs by `action_<feature>:0`, the output by the name:port in `output_spec.json`."""
    tf = import_tensorflow()
    interpreter = _tflite_interpreter(tf, (Path(directory) / TFLITE_FILE).read_bytes())
    spec = json.loads((Path(directory) / OUTPUT_SPEC_FILE).read_text())[0]["tensor_spec"]
    out_name = f"{spec['name']}:{spec['port']}"
    outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    if out_name not in outputs:
        raise ExportError(f"output_spec.json names {out_name}, the model has {list(outputs)}")
    inputs = {d["name"]: d for d in interpreter.get_input_details()}
    n = _rows(features)
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        for tname, d in inputs.items():
            feature = tname[len(SIGNATURE_KEY) + 1 : -2] if tname.endswith(":0") else tname
            value = features[feature][i] if feature in features else 0
            interpreter.set_tensor(d["index"], np.reshape(np.asarray(value, dtype=d["dtype"]),
                                                          d["shape"]))
        interpreter.invoke()
        out[i] = int(interpreter.get_tensor(outputs[out_name]).reshape(-1)[0])
    return out


def _rows(features: dict[str, np.ndarray]) -> int:
    sizes = {len(np.asarray(v)) for v in features.values()}  # rows: (n,) or (n, dim)
    if len(sizes) > 1:
        raise ValueError("feature columns have different lengths")
    return sizes.pop() if sizes else 0


def check_finite(policy: InliningPolicy) -> None:
    """Refuse parameters that would export to a model LLVM evaluates differently."""
    for w in (*policy.params.weights, *policy.params.biases):
        if not np.isfinite(w).all():
            raise ExportError("the policy has non-finite weights")
