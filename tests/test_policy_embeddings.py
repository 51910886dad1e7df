"""Policies that read IR2Vec embeddings: float[dim] inputs z-scored by a fixed, saved
normalization, the same in batch and per decision, saved with the policy's vocabulary."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from pymlgo.ir2vec import vocab_file
from pymlgo.ir2vec.entities import REQUIRED, SECTIONS
from pymlgo.policy.inlining import InliningPolicy, _row_logit_fn
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.store import PolicyLoadError, load_policy_dir, save_policy
from pymlgo.policy.vocab import (
    EMBEDDING_CLIP,
    Vocab,
    build_vocab,
    dumps_vocab,
    fit_embedding,
    load_vocab,
    save_vocab,
)
from tests.test_policy_vocab import skewed_columns

DIM = 6
NAMES = vocab_file.EMBEDDING_FEATURES


def embedding_values(seed: int, n: int) -> np.ndarray:
    """IR2Vec-like float32 sums: per dimension another offset and spread, heavy tails, one
    dimension constant."""
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=(n, DIM)) * np.array([1, 10, 100, 0.1, 3, 1])
    x += np.array([0, -50, 400, 2, 0, 0])
    x[:, -1] = 7.25
    return x.astype(np.float32)


def ir2vec_file(tmp_path, dim: int = DIM):
    path = tmp_path / f"ir2vec-{dim}.json"
    vocab_file.save(vocab_file.IR2VecVocab(
        {s: {n: (0.25,) * dim for n in REQUIRED[s]} for s in SECTIONS}), path)
    return path


def embedding_vocab() -> Vocab:
    return dataclasses.replace(
        build_vocab(skewed_columns()),
        embeddings=tuple(fit_embedding(name, embedding_values(i, 4000))
                         for i, name in enumerate(NAMES)))


def embedding_policy(tmp_path) -> InliningPolicy:
    vocab = embedding_vocab()
    params = init_mlp(vocab.input_dim, (16, 8), np.random.default_rng(3))
    return InliningPolicy(vocab, params, hidden=(16, 8), ir2vec_vocab=ir2vec_file(tmp_path))


def observations(vocab: Vocab, n: int = 300) -> list[dict[str, np.ndarray]]:
    """What the compile path hands `decide`: scalars int64 [1], embeddings float32 [dim]."""
    cols = skewed_columns(9, n)
    emb = {name: embedding_values(20 + i, n) * 1.5 for i, name in enumerate(NAMES)}
    return [{**{k: v[i:i + 1] for k, v in cols.items() if k in vocab.features},
             **{k: v[i] for k, v in emb.items()}} for i in range(n)]


def test_each_dimension_is_z_scored_by_the_training_mean_and_deviation_and_clipped():
    x = embedding_values(0, 4000)
    emb = fit_embedding("callee_embedding", x)
    z = emb.normalize(x)
    assert z.dtype == np.float32 and z.shape == x.shape
    assert np.abs(z).max() <= EMBEDDING_CLIP
    inside = np.abs(z[:, 0]) < EMBEDDING_CLIP
    assert abs(float(z[inside, 0].mean())) < 0.1 and 0.5 < float(z[:, 0].std()) < 1.1
    assert (z[:, -1] == 0).all() and emb.scale[-1] == 1  # a constant dimension: scale 1
    assert emb.normalize(np.full(DIM, 1e9, np.float32))[:-1].tolist() == [EMBEDDING_CLIP] * 5


def test_inputs_are_the_quantile_values_their_squares_then_each_embedding():
    vocab = embedding_vocab()
    assert vocab.raw_features == (*vocab.features, *NAMES)
    assert vocab.raw_width == len(vocab.features) + 2 * DIM
    assert vocab.input_dim == 2 * len(vocab.features) + 2 * DIM
    obs = observations(vocab, 50)
    x = vocab.matrix({k: np.stack([o[k] for o in obs]) for k in obs[0]})
    out = vocab.normalize(x)
    nf = len(vocab.features)
    plain = dataclasses.replace(vocab, embeddings=())
    assert np.array_equal(out[:, :2 * nf], plain.normalize(x[:, :nf]))
    for k, emb in enumerate(vocab.embeddings):
        at = 2 * nf + k * DIM
        assert np.array_equal(out[:, at:at + DIM], emb.normalize(x[:, nf + k * DIM:][:, :DIM]))


def test_every_decision_gets_exactly_the_batch_logit(tmp_path):
    policy = embedding_policy(tmp_path)
    obs = observations(policy.vocab)
    x = policy.vocab.matrix({k: np.stack([o[k] for o in obs]) for k in obs[0]})
    logits = policy.logits(x)
    row = _row_logit_fn(policy.vocab, policy.params)
    decide = policy.for_module("m")
    assert 0 < (logits >= 0).mean() < 1  # both decisions occur
    for i, o in enumerate(obs):
        assert row(o) == float(logits[i])
        assert decide(o) == int(logits[i] >= 0)


def test_the_embeddings_change_decisions():
    vocab = embedding_vocab()
    params = init_mlp(vocab.input_dim, (16, 8), np.random.default_rng(3))
    obs = observations(vocab)
    x = vocab.matrix({k: np.stack([o[k] for o in obs]) for k in obs[0]})
    other = x.copy()
    other[:, len(vocab.features):] = other[::-1, len(vocab.features):]
    z = params.forward(vocab.normalize(x))
    assert ((z >= 0) != (params.forward(vocab.normalize(other)) >= 0)).any()


def test_the_normalization_is_saved_as_vocab_version_3_and_reads_back_exactly(tmp_path):
    vocab = embedding_vocab()
    save_vocab(vocab, tmp_path / "vocab.json")
    doc = json.loads((tmp_path / "vocab.json").read_text())
    assert doc["version"] == 3 and doc["tail"] == "clip"
    assert [(e["name"], e["dim"]) for e in doc["embeddings"]] == [(n, DIM) for n in NAMES]
    back = load_vocab(tmp_path / "vocab.json")
    assert dumps_vocab(back) == (tmp_path / "vocab.json").read_text()
    for a, b in zip(back.embeddings, vocab.embeddings, strict=True):
        assert np.array_equal(a.mean, b.mean) and np.array_equal(a.scale, b.scale)
    # a vocab without embeddings keeps version 1 and its bytes
    assert json.loads(dumps_vocab(dataclasses.replace(vocab, embeddings=())))["version"] == 1


def test_a_damaged_normalization_is_refused(tmp_path):
    doc = embedding_vocab().to_json()
    bad = [dict(doc, embeddings=[dict(doc["embeddings"][0], scale=[0.0] * DIM)]),
           dict(doc, embeddings=[dict(doc["embeddings"][0], dim=DIM + 1)]),
           dict(doc, embeddings=[]),
           dict(doc, version=1)]
    for d in bad:
        with pytest.raises(ValueError):
            Vocab.from_json(d)


def test_a_policy_reading_embeddings_must_carry_its_ir2vec_vocabulary(tmp_path):
    policy = embedding_policy(tmp_path)
    with pytest.raises(ValueError, match="must carry the IR2Vec vocabulary"):
        dataclasses.replace(policy, ir2vec_vocab=None)


def test_a_saved_policy_names_its_float_inputs_and_decides_alike_after_loading(tmp_path):
    policy = embedding_policy(tmp_path)
    save_policy(policy, tmp_path / "p")
    doc = json.loads((tmp_path / "p" / "policy.json").read_text())
    assert doc["features"][-2:] == [{"name": n, "type": "float", "shape": [DIM], "port": 0}
                                    for n in NAMES]
    assert doc["normalization"]["embeddings"] == {"kind": "zscore-clip",
                                                  "clip": EMBEDDING_CLIP, "features": list(NAMES)}
    assert doc["network"]["input_dim"] == policy.vocab.input_dim
    back = load_policy_dir(tmp_path / "p")
    assert back.required_features == policy.required_features
    obs = observations(policy.vocab, 100)
    a, b = policy.for_module("m"), back.for_module("m")
    assert [a(o) for o in obs] == [b(o) for o in obs]


def test_a_policy_whose_ir2vec_vocabulary_has_another_dimension_is_refused(tmp_path):
    policy = embedding_policy(tmp_path)
    save_policy(dataclasses.replace(policy, ir2vec_vocab=ir2vec_file(tmp_path, DIM + 2)),
                tmp_path / "p")
    with pytest.raises(PolicyLoadError, match=f"dimension {DIM + 2}"):
        load_policy_dir(tmp_path / "p")
