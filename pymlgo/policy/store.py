"""Saved policies: a self-describing directory, and `load_policy` for every policy spec.

A policy directory holds:
- `policy.json`: format version, problem, network shape, the feature tensors it expects
  (TensorSpec JSON, matched by name against what the compiler sends), the advice it gives,
  hyperparameters, the sha256 of the other two files, and (version 1.1, only when it has
  one) the `window`: the shift rule outside which clang's own decision stands, and
  (version 1.2, only when it has them) the `languages` the network decides for: modules
  of other languages get clang's own decisions;
- `weights.npz`: `w0, b0, w1, b1, ...` (a zip of .npy files, readable with `np.load`);
- `vocab.json`: the quantile vocabulary (`pymlgo.policy.vocab`), and the fixed z-score
  normalization of the IR2Vec embeddings when the policy reads them;
- `ir2vec.json` (only a policy that carries one): the IR2Vec vocabulary clang embeds with.

Saving is byte-deterministic (sorted JSON keys, fixed zip entry order and timestamps), so
the same policy always gives the same bytes and checksums. Whether a policy samples, and
its seed, are run-time choices and are not saved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from pymlgo.policy.inlining import (
    CURRENT_VERSION,
    LANGUAGES_MINOR,
    PROBLEM,
    VERSION_MAJOR,
    WINDOW_MINOR,
    InliningPolicy,
    check_languages,
    parse_version,
)
from pymlgo.policy.mlp import MLPParams
from pymlgo.policy.vocab import EMBEDDING_CLIP, Vocab, dumps_vocab
from pymlgo.problems.base import Policy, Problem
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.problems.registry import DEFAULT, UnknownProblemError
from pymlgo.problems.registry import problem as registered
from pymlgo.protocol.tensor_spec import TensorSpec
from pymlgo.toolchain.files import write_atomic

POLICY_FILE, WEIGHTS_FILE, VOCAB_FILE = "policy.json", "weights.npz", "vocab.json"
IR2VEC_FILE = "ir2vec.json"  # the IR2Vec vocabulary clang embeds with, if the policy has one
# policy.json's normalization kind per vocab tail: "quantile" (values clipped at the last
# boundary, every policy saved before tails existed) or "quantile-log-tail"
NORMALIZATION_KINDS = {"clip": "quantile", "log": "quantile-log-tail"}
POLICY_FORMAT = "pymlgo-policy"
# Every inliner feature (and the decision) is an int64 tensor of shape [1] (LLVM >= 17).
FEATURE_TYPE, FEATURE_SHAPE = "int64_t", (1,)
# IR2Vec embeddings arrive as float [dim], normalized per dimension (`policy.vocab`)
EMBEDDING_TYPE, EMBEDDING_NORMALIZATION = "float", "zscore-clip"
ADVICE_SPEC = TensorSpec("inlining_decision", "int64_t", (1,))
PRETRAINED_PREFIX = "pretrained:"
# The earliest DOS date a zip entry can carry; any fixed value makes the bytes reproducible.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


class PolicyLoadError(ValueError):
    """A policy spec or saved policy directory cannot be used; the message says why."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def weights_bytes(params: MLPParams) -> bytes:
    """The `.npz` bytes of `params`, identical for identical parameters."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        for i, (w, b) in enumerate(zip(params.weights, params.biases, strict=True)):
            for key, arr in ((f"w{i}", w), (f"b{i}", b)):
                npy = io.BytesIO()
                np.lib.format.write_array(
                    npy, np.ascontiguousarray(arr), version=(1, 0), allow_pickle=False
                )
                info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
                info.create_system = 3  # the host OS is recorded otherwise
                info.external_attr = 0o644 << 16
                zf.writestr(info, npy.getvalue())
    return out.getvalue()


def _read_weights(data: bytes, where: Path) -> MLPParams:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise PolicyLoadError(f"{where}: not a readable .npz weights file ({exc})") from exc
    layers = len(arrays) // 2
    expected = {f"{p}{i}" for i in range(layers) for p in "wb"}
    if set(arrays) != expected or not layers:
        raise PolicyLoadError(
            f"{where}: expected arrays w0, b0, ..., got {', '.join(sorted(arrays)) or 'none'}"
        )
    try:
        return MLPParams(
            tuple(arrays[f"w{i}"] for i in range(layers)),
            tuple(arrays[f"b{i}"] for i in range(layers)),
        )
    except ValueError as exc:
        raise PolicyLoadError(f"{where}: {exc}") from exc


def policy_document(policy: InliningPolicy, weights_sha: str, vocab_sha: str,
                    ir2vec_sha: str | None = None) -> dict[str, Any]:
    files = {WEIGHTS_FILE: {"sha256": weights_sha}, VOCAB_FILE: {"sha256": vocab_sha}}
    if ir2vec_sha is not None:
        files[IR2VEC_FILE] = {"sha256": ir2vec_sha}
    return {
        "format": POLICY_FORMAT,
        "version": policy.version,
        "problem": PROBLEM,
        "name": policy.name,
        "network": {
            "kind": "mlp",
            "activation": "relu",
            "input_dim": policy.params.input_dim,
            "hidden": list(policy.hidden),
            "output": "logit of P(inline)",
        },
        "normalization": _normalization(policy.vocab),
        "features": [spec.to_json() for spec in feature_specs(policy.vocab)],
        "advice": ADVICE_SPEC.to_json(),
        "hyperparameters": dict(policy.hyperparameters),
        "files": files,
        # only when set: a policy without one keeps the bytes it always had
        **({"window": policy.window} if policy.window else {}),
        **({"languages": list(policy.languages)} if policy.languages else {}),
    }


def feature_specs(vocab: Vocab) -> list[TensorSpec]:
    """The tensors the policy reads, as clang sends them: the scalar features (int64 [1]),
    then the IR2Vec embeddings (float [dim])."""
    return [*(TensorSpec(name, FEATURE_TYPE, FEATURE_SHAPE) for name in vocab.features),
            *(TensorSpec(e.name, EMBEDDING_TYPE, (e.dim,)) for e in vocab.embeddings)]


def _normalization(vocab: Vocab) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": NORMALIZATION_KINDS[vocab.tail],
                           "with_square": vocab.with_square}
    if vocab.embeddings:  # policies without embeddings keep the bytes they always had
        doc["embeddings"] = {"kind": EMBEDDING_NORMALIZATION, "clip": EMBEDDING_CLIP,
                             "features": [e.name for e in vocab.embeddings]}
    return doc


def _without_kind(norm: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in norm.items() if k != "kind"}  # the kind is checked on its own


def save_policy(policy: InliningPolicy, directory: Path) -> None:
    """Write `policy` to `directory` (created if needed; the three files are replaced).

    `policy.json` is written last, so a reader never pairs it with other files' old bytes
    without noticing (their checksums are in it).
    """
    directory = Path(directory)
    parse_version(policy.version)
    weights = weights_bytes(policy.params)
    vocab = dumps_vocab(policy.vocab).encode()
    ir2vec = None if policy.ir2vec_vocab is None else Path(policy.ir2vec_vocab).read_bytes()
    doc = policy_document(policy, _sha256(weights), _sha256(vocab),
                          None if ir2vec is None else _sha256(ir2vec))
    try:
        text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise ValueError(f"policy hyperparameters must be plain JSON values: {exc}") from exc
    write_atomic(directory / WEIGHTS_FILE, weights)
    write_atomic(directory / VOCAB_FILE, vocab)
    if ir2vec is not None:
        write_atomic(directory / IR2VEC_FILE, ir2vec)
    write_atomic(directory / POLICY_FILE, text.encode())


def load_policy_dir(directory: Path) -> InliningPolicy:
    """Load a directory written by `save_policy`; `PolicyLoadError` says what is wrong."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PolicyLoadError(f"{directory}: not a policy directory (no such directory)")
    missing = [f for f in (POLICY_FILE, WEIGHTS_FILE, VOCAB_FILE) if not (directory / f).is_file()]
    if missing:
        raise PolicyLoadError(
            f"{directory}: incomplete policy directory, missing {', '.join(missing)}"
        )
    try:
        doc = json.loads((directory / POLICY_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PolicyLoadError(f"{directory / POLICY_FILE}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != POLICY_FORMAT:
        raise PolicyLoadError(f"{directory / POLICY_FILE}: not a {POLICY_FORMAT} file")
    version = doc.get("version")
    try:
        problem, major, _ = parse_version(str(version))
    except ValueError as exc:
        raise PolicyLoadError(f"{directory}: {exc}") from exc
    if problem != PROBLEM:
        raise PolicyLoadError(f"{directory}: a {problem!r} policy, not an {PROBLEM} policy")
    if major != VERSION_MAJOR:
        raise PolicyLoadError(
            f"{directory}: policy version {version} is not readable by this pymlgo, which "
            f"reads {PROBLEM}-{VERSION_MAJOR}.x (current: {CURRENT_VERSION})"
        )

    blobs = {}
    files = doc.get("files")
    has_ir2vec = isinstance(files, dict) and IR2VEC_FILE in files
    for fname in (WEIGHTS_FILE, VOCAB_FILE, *((IR2VEC_FILE,) if has_ir2vec else ())):
        try:
            data = (directory / fname).read_bytes()
        except FileNotFoundError:
            raise PolicyLoadError(f"{directory}: incomplete policy directory, missing {fname}"
                                  ) from None
        entry = files.get(fname) if isinstance(files, dict) else None
        want = entry.get("sha256") if isinstance(entry, dict) else None
        if want != _sha256(data):
            raise PolicyLoadError(
                f"{directory / fname}: checksum mismatch (policy.json says {want}, the file "
                f"has {_sha256(data)}): the file was changed or damaged after saving"
            )
        blobs[fname] = data

    params = _read_weights(blobs[WEIGHTS_FILE], directory / WEIGHTS_FILE)
    try:
        vocab = Vocab.from_json(json.loads(blobs[VOCAB_FILE]))
    except ValueError as exc:
        raise PolicyLoadError(f"{directory / VOCAB_FILE}: {exc}") from exc
    network = doc.get("network")
    try:
        expected = [TensorSpec.from_json(f) for f in doc.get("features", [])]
        if expected != feature_specs(vocab):
            raise ValueError("policy.json features do not match vocab.json")
        norm = doc.get("normalization")
        if not isinstance(norm, dict) or _without_kind(norm) != _without_kind(
                _normalization(vocab)):
            raise ValueError("policy.json normalization does not match vocab.json")
        if vocab.embeddings:
            _check_ir2vec_dim(directory, vocab, has_ir2vec)
        kind = norm.get("kind", "quantile")
        if kind not in NORMALIZATION_KINDS.values():
            raise ValueError(f"normalization kind {kind!r} is not supported by this pymlgo "
                             f"(it reads {', '.join(NORMALIZATION_KINDS.values())})")
        if kind != NORMALIZATION_KINDS[vocab.tail]:
            raise ValueError(f"policy.json normalization {kind!r} does not match vocab.json "
                             f"(tail {vocab.tail!r})")
        if not isinstance(network, dict) or not isinstance(network.get("hidden"), list):
            raise ValueError("policy.json lacks network.hidden")
        return InliningPolicy(
            vocab=vocab,
            params=params,
            hidden=tuple(network["hidden"]),
            version=str(version),
            hyperparameters=doc.get("hyperparameters") or {},
            name=str(doc.get("name", "mlp")),
            ir2vec_vocab=(directory / IR2VEC_FILE).absolute() if has_ir2vec else None,
            window=_window(doc, version),
            languages=_languages(doc, version),
        )
    except (ValueError, TypeError) as exc:
        raise PolicyLoadError(f"{directory}: {exc}") from exc


def _window(doc: dict[str, Any], version: object) -> str:
    window = doc.get("window", "")
    if not isinstance(window, str):
        raise ValueError(f"policy.json window must be a shift rule, not {window!r}")
    if window and parse_version(str(version))[2] < WINDOW_MINOR:
        # a reader of 1.0 would ignore the key and decide every call site itself
        raise ValueError(f"policy.json has a window but version {version} (a window needs "
                         f"{PROBLEM}-{VERSION_MAJOR}.{WINDOW_MINOR} or later)")
    return window


def _languages(doc: dict[str, Any], version: object) -> tuple[str, ...]:
    languages = doc.get("languages", [])
    if languages and parse_version(str(version))[2] < LANGUAGES_MINOR:
        # a reader of 1.0 or 1.1 would ignore the key and decide every language itself
        raise ValueError(f"policy.json has languages but version {version} (they need "
                         f"{PROBLEM}-{VERSION_MAJOR}.{LANGUAGES_MINOR} or later)")
    return check_languages(languages)


def _check_ir2vec_dim(directory: Path, vocab: Vocab, has_ir2vec: bool) -> None:
    """A policy reading embeddings needs the IR2Vec vocabulary that makes clang send them,
    of the dimension its network reads."""
    if not has_ir2vec:
        raise ValueError(f"the policy reads {', '.join(e.name for e in vocab.embeddings)} "
                         f"but carries no {IR2VEC_FILE} (clang sends no embeddings without it)")
    from pymlgo.ir2vec.vocab_file import VocabFileError, load

    try:
        dim = load(directory / IR2VEC_FILE).dim
    except VocabFileError as exc:
        raise ValueError(str(exc)) from exc
    wrong = [f"{e.name} [{e.dim}]" for e in vocab.embeddings if e.dim != dim]
    if wrong:
        raise ValueError(f"the policy reads {', '.join(wrong)}, but its {IR2VEC_FILE} has "
                         f"dimension {dim}")


def pretrained_root() -> Path:
    """Where `pretrained:NAME` policies ship: package data `pymlgo/policy/pretrained/NAME`."""
    return Path(__file__).resolve().parent / "pretrained"


def available_pretrained(policy_format: str | None = POLICY_FORMAT) -> list[str]:
    """The shipped policies saved in `policy_format` (each problem's codec has its own, so
    `pretrained:NAME` of one problem is never offered to another); None: of every format."""
    root = pretrained_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if (fmt := _format_of(p / POLICY_FILE)) is not None
                  and policy_format in (None, fmt))


def _format_of(path: Path) -> str | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc.get("format") if isinstance(doc, dict) else None


def pretrained_dir(spec: str, policy_format: str = POLICY_FORMAT) -> Path:
    """The directory of `pretrained:NAME` among the shipped policies of `policy_format`."""
    name = spec.removeprefix(PRETRAINED_PREFIX)
    available = available_pretrained(policy_format)
    if name not in available:
        listing = ", ".join(f"{PRETRAINED_PREFIX}{n}" for n in available) or "none installed"
        raise PolicyLoadError(f"no pretrained policy {name!r} of this problem "
                              f"(available: {listing})")
    return pretrained_root() / name


def load_policy(spec: str, *, problem: Problem | str = DEFAULT, seed: int = 0) -> Policy:
    """Resolve a policy spec of `problem` (a Problem, or its name) with the problem's policy
    codec (`Problem.policy_codec`). `seed` seeds stochastic policies."""
    try:
        codec = importlib.import_module(registered(problem).policy_codec)
    except UnknownProblemError as exc:
        raise PolicyLoadError(f"no policies for {exc}") from None
    return codec.load_spec(spec, seed=seed, problem=registered(problem))  # type: ignore[no-any-return]


def load_spec(spec: str, *, seed: int = 0, problem: Problem | None = None) -> Policy:
    """An inlining policy spec: a built-in (default, never, always, random:P[:SEED],
    shift:DOWN[:UP[:USERS[:MAX]]]),
    `pretrained:NAME`, or a saved policy directory. `seed` seeds stochastic policies.

    Built-in names win over a directory of the same name: write `./default` for that.
    """
    if spec.startswith(PRETRAINED_PREFIX):
        return _named(load_policy_dir(pretrained_dir(spec)), spec, seed)
    try:
        return builtin_policy(spec, seed=seed)
    except ValueError as exc:
        builtin_error = exc
    path = Path(spec)
    if path.is_dir():
        return _named(load_policy_dir(path), spec, seed)
    if spec.startswith("random:") or not path.exists():
        hint = "" if spec.startswith("random:") else f" (and no directory {spec!r} exists)"
        raise PolicyLoadError(f"{builtin_error}{hint}") from None
    raise PolicyLoadError(f"{spec}: a policy must be a directory with {POLICY_FILE}, not a file")


def _named(policy: InliningPolicy, spec: str, seed: int) -> InliningPolicy:
    # Reports name the policy as the user wrote it, not by its generic saved name.
    return dataclasses.replace(policy, name=spec, seed=seed)
