"""Quantile vocabulary: how raw feature values become network inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pymlgo.policy.vocab import Vocab, build_vocab, dumps_vocab, load_vocab, save_vocab


def skewed_columns(seed: int = 0, n: int = 5000) -> dict[str, np.ndarray]:
    """Inliner-like int64 features: mostly small counts, some zeros, a long tail."""
    rng = np.random.default_rng(seed)
    return {
        "callee_basic_block_count": rng.geometric(0.2, n).astype(np.int64),
        "cost_estimate": rng.integers(-200, 5000, n, dtype=np.int64),
        "nr_ctant_params": (rng.random(n) < 0.1).astype(np.int64),
        "is_callee_avail_external": np.zeros(n, dtype=np.int64),
    }


def test_normalized_values_lie_in_unit_interval_and_are_float32():
    cols = skewed_columns()
    vocab = build_vocab(cols)
    x = vocab.matrix(cols)
    out = vocab.normalize(x)
    assert out.dtype == np.float32
    assert out.shape == (len(x), vocab.input_dim) == (len(x), 2 * len(cols))
    assert out.min() >= 0.0 and out.max() <= 1.0
    # values never seen in training still land in [0, 1]
    extreme = np.array([[-(10**12)] * 4, [10**12] * 4])
    assert np.array_equal(vocab.normalize(extreme)[:, :4], [[0.0] * 4, [1.0] * 4])


def test_normalization_is_monotone_in_each_feature():
    vocab = build_vocab(skewed_columns())
    grid = np.arange(-300, 6000, dtype=np.int64)
    x = np.repeat(grid[:, None], len(vocab.features), axis=1)
    v = vocab.normalize(x)[:, : len(vocab.features)]
    assert (np.diff(v, axis=0) >= 0).all()


def test_value_is_fraction_of_distinct_quantile_boundaries_at_or_below_it():
    # Five distinct observed values -> five boundaries, each worth 1/5 of [0, 1].
    vocab = build_vocab({"f": np.array([0, 0, 0, 0, 1, 1, 2, 3, 7])}, quantiles=100)
    assert vocab.boundaries[0].tolist() == [0, 1, 2, 3, 7]
    v = vocab.normalize(np.array([[-1], [0], [1], [5], [7], [100]]))
    assert v[:, 0].tolist() == pytest.approx([0.0, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_square_inputs_follow_the_normalized_values():
    vocab = build_vocab(skewed_columns())
    x = vocab.matrix(skewed_columns(seed=1))
    out = vocab.normalize(x)
    f = len(vocab.features)
    assert np.array_equal(out[:, f:], out[:, :f] * out[:, :f])
    plain = Vocab(vocab.features, vocab.boundaries, with_square=False)
    assert plain.input_dim == f
    assert np.array_equal(plain.normalize(x), out[:, :f])


def test_boundaries_are_observed_values_deduplicated():
    cols = skewed_columns()
    vocab = build_vocab(cols, quantiles=1000)
    for name, b in zip(vocab.features, vocab.boundaries, strict=True):
        assert (np.diff(b) > 0).all(), name
        assert set(b.tolist()) <= set(cols[name].tolist()), name
        assert b.size <= 1000


def test_constant_feature_has_one_boundary_and_maps_to_a_constant():
    vocab = build_vocab({"always_zero": np.zeros(100, dtype=np.int64)})
    assert vocab.boundaries[0].tolist() == [0.0]
    v = vocab.normalize(np.array([[0], [0], [3], [-1]]))
    assert np.isfinite(v).all()
    assert v[:, 0].tolist() == [1.0, 1.0, 1.0, 0.0]


def test_feature_without_any_value_normalizes_to_zero():
    vocab = build_vocab({"never_seen": np.zeros(0, dtype=np.int64)})
    assert vocab.boundaries[0].size == 0
    assert vocab.normalize(np.array([[5], [-5]])).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_building_is_deterministic_to_the_byte(tmp_path):
    a, b = build_vocab(skewed_columns()), build_vocab(skewed_columns())
    save_vocab(a, tmp_path / "a.json")
    save_vocab(b, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_features_argument_selects_and_orders_inputs():
    cols = skewed_columns()
    vocab = build_vocab(cols, features=["nr_ctant_params", "cost_estimate"])
    assert vocab.features == ("nr_ctant_params", "cost_estimate")
    assert vocab.matrix(cols)[:, 0].tolist() == cols["nr_ctant_params"].tolist()
    with pytest.raises(KeyError, match="no_such_feature"):
        build_vocab(cols, features=["no_such_feature"])


def test_json_round_trip_preserves_normalization(tmp_path):
    cols = skewed_columns()
    vocab = build_vocab(cols, with_square=False)
    save_vocab(vocab, tmp_path / "vocab.json")
    again = load_vocab(tmp_path / "vocab.json")
    assert again.features == vocab.features and again.with_square is False
    x = vocab.matrix(skewed_columns(seed=3))
    assert np.array_equal(again.normalize(x), vocab.normalize(x))
    assert dumps_vocab(again) == dumps_vocab(vocab)


def test_wrong_input_width_is_rejected():
    vocab = build_vocab(skewed_columns())
    with pytest.raises(ValueError, match=r"\(n, 4\)"):
        vocab.normalize(np.zeros((3, 5)))


def test_unsorted_boundaries_and_foreign_json_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="strictly increasing"):
        Vocab(("f",), (np.array([2.0, 1.0]),))
    (tmp_path / "v.json").write_text('{"features": []}')
    with pytest.raises(ValueError, match="pymlgo-vocab"):
        load_vocab(tmp_path / "v.json")


# --- values beyond the last boundary (issue 24) ---------------------------------------------


def test_clip_tail_maps_everything_beyond_the_last_boundary_to_one():
    """What every policy before `tail` saw: a module bigger than any training module
    (node_count 50,000 against a last quantile of 3,000) looks exactly like the biggest."""
    vocab = Vocab(("node_count",), (np.array([0.0, 10.0, 100.0, 1000.0, 3000.0]),))
    assert vocab.tail == "clip"
    got = vocab.normalize(np.array([[3000], [3001], [50_000], [10**12]]))[:, 0]
    assert got.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_log_tail_extrapolates_by_the_top_deciles_log_slope():
    import math

    from pymlgo.policy.vocab import TAIL_CAP, tail_params, tail_value

    b = np.array([0.0, 10.0, 100.0, 1000.0, 3000.0])
    clip = Vocab(("node_count",), (b,))
    log = Vocab(("node_count",), (b,), tail="log")
    inside = np.array([[-5], [0], [7], [10], [999], [3000]])
    # everything the vocab has seen maps as before
    assert np.array_equal(log.normalize(inside), clip.normalize(inside))
    # k = 5 boundaries, m = max(1, round(0.5)) = 1: slope = (1/5) / (g(3000) - g(1000))
    slope = 0.2 / (math.log1p(3000) - math.log1p(1000))
    assert tail_params(b) == (3000.0, math.log1p(3000), slope)
    want = 1.0 + slope * (math.log1p(50_000) - math.log1p(3000))
    got = log.normalize(np.array([[50_000]]))
    assert got[0, 0] == np.float32(want) and 1.0 < got[0, 0] < 1.6
    assert got[0, 1] == np.float32(want) * np.float32(want)  # the square follows
    assert tail_value(50_000.0, tail_params(b)) == want
    # monotone past the boundary, capped far out
    far = log.normalize(np.array([[3001], [6000], [10**6], [10**300]]))[:, 0]
    assert (np.diff(far) > 0).all() and far[-1] == TAIL_CAP


def test_log_tail_leaves_features_without_spread_clipped():
    vocab = Vocab(("a", "b"), (np.array([0.0]), np.zeros(0)), tail="log")
    assert vocab.normalize(np.array([[5, 5]]))[0, :2].tolist() == [1.0, 0.0]


def test_log_tail_is_written_as_version_2_and_clip_keeps_version_1_bytes(tmp_path):
    cols = skewed_columns()
    clip = build_vocab(cols)
    log = build_vocab(cols, tail="log")
    assert clip.to_json()["version"] == 1 and "tail" not in clip.to_json()
    assert log.to_json()["version"] == 2 and log.to_json()["tail"] == "log"
    save_vocab(log, tmp_path / "v.json")
    back = load_vocab(tmp_path / "v.json")
    assert back.tail == "log"
    x = np.array([[10**6, 10**6, 1, 0]])
    assert np.array_equal(back.normalize(x), log.normalize(x))
    d = log.to_json() | {"version": 1}  # a log tail must not pass for an old vocab
    with pytest.raises(ValueError, match="tail"):
        Vocab.from_json(d)


def test_log_tail_decides_alike_per_decision_and_in_batch():
    from pymlgo.policy.inlining import InliningPolicy
    from pymlgo.policy.mlp import init_mlp

    cols = skewed_columns()
    vocab = build_vocab(cols, tail="log")
    params = init_mlp(vocab.input_dim, (8,), np.random.default_rng(1))
    policy = InliningPolicy(vocab=vocab, params=params, hidden=(8,))
    rng = np.random.default_rng(2)
    x = np.stack([rng.integers(0, 10**5, 200) for _ in vocab.features], axis=1)
    beyond = x > np.array([b[-1] for b in vocab.boundaries])
    assert beyond.any(axis=0)[:2].all()  # the test does reach the tail
    logits = policy.logits(x)
    decide = policy.for_module("m")
    from pymlgo.policy.inlining import _row_logit_fn

    row = _row_logit_fn(vocab, params)
    for i in range(len(x)):
        feats = {f: np.array([x[i, j]]) for j, f in enumerate(vocab.features)}
        assert row(feats) == float(logits[i])
        assert decide(feats) == int(logits[i] >= 0)


def test_log_tail_policy_saves_its_normalization_kind_and_export_refuses_it(tmp_path):
    import json

    from pymlgo.policy.export import ExportError, export_policy
    from pymlgo.policy.inlining import InliningPolicy
    from pymlgo.policy.mlp import init_mlp
    from pymlgo.policy.store import PolicyLoadError, load_policy_dir, save_policy

    vocab = build_vocab(skewed_columns(), tail="log")
    params = init_mlp(vocab.input_dim, (8,), np.random.default_rng(1))
    policy = InliningPolicy(vocab=vocab, params=params, hidden=(8,))
    save_policy(policy, tmp_path / "p")
    doc = json.loads((tmp_path / "p" / "policy.json").read_text())
    assert doc["normalization"]["kind"] == "quantile-log-tail"
    back = load_policy_dir(tmp_path / "p")
    assert back.vocab.tail == "log"
    x = np.array([[10**7, 10**7, 1, 0]])
    assert np.array_equal(back.logits(x), policy.logits(x))
    with pytest.raises(ExportError, match="log"):
        export_policy(back, "tflite", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    doc["normalization"]["kind"] = "quantile-magic"
    (tmp_path / "p" / "policy.json").write_text(json.dumps(doc))
    with pytest.raises(PolicyLoadError, match="quantile-magic"):
        load_policy_dir(tmp_path / "p")


def test_pretrained_policy_keeps_the_clip_tail():
    from pymlgo.policy.store import load_policy_dir, pretrained_root

    policy = load_policy_dir(pretrained_root() / "inlining-oz")
    assert policy.vocab.tail == "clip"


def margin_columns(seed: int = 0, n: int = 3000) -> dict[str, np.ndarray]:
    """Clang-like cost model: a threshold taking few values, a cost estimate near it."""
    rng = np.random.default_rng(seed)
    threshold = rng.choice([5, 45, 250], n).astype(np.int64)
    return {"threshold": threshold,
            "cost_estimate": threshold + rng.integers(-40, 40, n, dtype=np.int64),
            "callee_users": rng.geometric(0.3, n).astype(np.int64)}


def test_a_difference_is_quantile_normalized_after_the_features_from_its_own_boundaries():
    cols = margin_columns()
    vocab = build_vocab(cols, differences=["threshold-cost_estimate"])
    (d,) = vocab.differences
    assert d.name == "threshold-cost_estimate"
    margin = cols["threshold"] - cols["cost_estimate"]
    # one boundary per margin seen: margins 0 and 1 are told apart, whatever the threshold
    assert d.boundaries.tolist() == sorted(set(margin.tolist()))
    assert vocab.input_dim == 2 * (3 + 1) and vocab.raw_width == 3  # no raw column added
    out = vocab.normalize(vocab.matrix(cols))
    expected = np.searchsorted(d.boundaries, margin, side="right") / d.boundaries.size
    assert np.array_equal(out[:, 3], expected.astype(np.float32))
    assert np.array_equal(out[:, 4:], out[:, :4] * out[:, :4])  # squares of all four
    plain = build_vocab(cols)
    assert np.array_equal(out[:, :3], plain.normalize(plain.matrix(cols))[:, :3])


def test_a_difference_decides_alike_per_decision_and_in_batch_with_either_tail():
    from pymlgo.policy.inlining import InliningPolicy, _row_logit_fn
    from pymlgo.policy.mlp import init_mlp

    cols = margin_columns()
    for tail in ("clip", "log"):
        vocab = build_vocab(cols, differences=["threshold-cost_estimate",
                                               "callee_users-threshold"], tail=tail)
        params = init_mlp(vocab.input_dim, (8,), np.random.default_rng(1))
        policy = InliningPolicy(vocab=vocab, params=params, hidden=(8,))
        wide = margin_columns(seed=3)
        wide["cost_estimate"] = wide["cost_estimate"] - 500  # margins beyond the vocab's
        x = vocab.matrix(wide)
        logits = policy.logits(x)
        row = _row_logit_fn(vocab, params)
        for i in range(0, len(x), 7):
            feats = {f: np.array([x[i, j]]) for j, f in enumerate(vocab.features)}
            assert row(feats) == float(logits[i])


def test_a_vocab_with_differences_is_version_4_and_round_trips(tmp_path):
    cols = margin_columns()
    vocab = build_vocab(cols, differences=["threshold-cost_estimate"])
    save_vocab(vocab, tmp_path / "v.json")
    text = (tmp_path / "v.json").read_text()
    assert '"version": 4' in text and '"differences": [' in text
    back = load_vocab(tmp_path / "v.json")
    assert [d.name for d in back.differences] == ["threshold-cost_estimate"]
    x = vocab.matrix(margin_columns(seed=5))
    assert np.array_equal(back.normalize(x), vocab.normalize(x))
    assert dumps_vocab(back) == text
    # without differences the bytes are what they always were
    assert '"version": 1' in dumps_vocab(build_vocab(cols))


def test_a_difference_of_features_the_vocab_does_not_read_is_refused(tmp_path):
    cols = margin_columns()
    with pytest.raises(KeyError, match="callee_users"):
        build_vocab(cols, features=["threshold", "cost_estimate"],
                    differences=["threshold-callee_users"])
    with pytest.raises(ValueError, match="MINUEND-SUBTRAHEND"):
        build_vocab(cols, differences=["threshold"])
    with pytest.raises(ValueError, match="always 0"):
        build_vocab(cols, differences=["threshold-threshold"])
    doc = json.loads(dumps_vocab(build_vocab(cols, differences=["threshold-cost_estimate"])))
    del doc["differences"]
    (tmp_path / "v.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="differences"):
        load_vocab(tmp_path / "v.json")
