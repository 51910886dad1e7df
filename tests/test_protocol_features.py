"""Feature versioning: a model may know fewer features than the compiler sends, never more."""

import pytest

from pymlgo.protocol.features import FeatureMismatchError, select_features
from pymlgo.protocol.tensor_spec import TensorSpec

SENT = [
    TensorSpec("callee_users", "int64_t", (1,)),
    TensorSpec("new_in_llvm_23", "int64_t", (1,)),
    TensorSpec("node_count", "int64_t", (1,)),
    TensorSpec("weights", "float", (1, 33)),
]


def test_a_model_that_knows_fewer_features_gets_their_header_positions() -> None:
    assert select_features(SENT, ["callee_users", "node_count"]) == [0, 2]


def test_positions_follow_the_models_order_not_the_headers() -> None:
    assert select_features(SENT, ["weights", "callee_users"]) == [3, 0]


def test_a_missing_feature_is_named_along_with_what_the_compiler_sent() -> None:
    with pytest.raises(FeatureMismatchError) as error:
        select_features(SENT, ["node_count", "sroa_savings", "threshold"])

    message = str(error.value)
    assert "sroa_savings, threshold" in message
    assert "it sent: callee_users, new_in_llvm_23, node_count, weights" in message
    assert isinstance(error.value, ValueError)


def test_required_specs_must_agree_on_type_and_shape() -> None:
    assert select_features(SENT, [TensorSpec("weights", "float", (1, 33)), "node_count"]) == [3, 2]

    with pytest.raises(FeatureMismatchError, match=r"weights: model expects float\[1, 32\]"):
        select_features(SENT, [TensorSpec("weights", "float", (1, 32))])
    with pytest.raises(FeatureMismatchError, match=r"compiler sends int64_t\[1\]"):
        select_features(SENT, [TensorSpec("node_count", "int32_t", (1,))])


def test_nothing_required_selects_nothing() -> None:
    assert select_features(SENT, []) == []
