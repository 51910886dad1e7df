"""`shift:DOWN[:UP[:USERS[:MAX]]]`: clang's decision with its inline threshold moved."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.deploy.cc import policy_reads_default, saved_policy_dir
from pymlgo.policy.store import load_spec
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE, ShiftPolicy, builtin_policy
from tests.test_train_algorithms import copy_demo_subset

# Demo modules where shift:2 changes the object (at -Oz, zstd_ldm grows and lz4frame
# shrinks; zstd_ddict and fse_decompress did on the -Os bitcode recorded before stop 35) and
# one where no call site sits at the threshold.
CHANGED = ("zstd/lib/compress/zstd_ldm", "lz4/lz4libs/lz4frame")
UNCHANGED = ("zstd/lib/dictBuilder/fastcover",)


def site(default: int, threshold: int, cost: int, users: int = 1) -> dict[str, np.ndarray]:
    return {DEFAULT_FEATURE: np.array([default]), "threshold": np.array([threshold]),
            "cost_estimate": np.array([cost]), "callee_users": np.array([users])}


def decide(spec: str, **kw: int) -> int:
    return builtin_policy(spec).for_module("m")(site(**kw))


def test_down_refuses_the_call_sites_clang_takes_closer_than_down_to_the_threshold():
    assert decide("shift:2", default=1, threshold=5, cost=5) == 0  # margin 0
    assert decide("shift:2", default=1, threshold=5, cost=4) == 0  # margin 1
    assert decide("shift:2", default=1, threshold=5, cost=3) == 1  # margin 2
    assert decide("shift:2", default=0, threshold=5, cost=5) == 0  # never adds an inline


def test_up_takes_refused_call_sites_within_up_above_the_threshold_for_few_user_callees():
    assert decide("shift:0:30:3", default=0, threshold=5, cost=30, users=3) == 1
    assert decide("shift:0:30:3", default=0, threshold=5, cost=35, users=3) == 0  # margin -30
    assert decide("shift:0:30:3", default=0, threshold=5, cost=30, users=4) == 0
    assert decide("shift:0:30", default=0, threshold=5, cost=30, users=10**6) == 1


def test_max_leaves_the_call_sites_clang_refuses_far_below_its_threshold_refused():
    # clang refuses some call sites whose cost is far under the threshold (it defers them);
    # without MAX they are taken, with MAX 0 only those at or over the threshold are
    assert decide("shift:0:30:3", default=0, threshold=-19, cost=-280, users=2) == 1
    assert decide("shift:0:30:3:0", default=0, threshold=-19, cost=-280, users=2) == 0
    assert decide("shift:0:30:3:0", default=0, threshold=5, cost=5, users=2) == 1  # margin 0
    assert decide("shift:0:30:3:0", default=0, threshold=5, cost=4, users=2) == 0  # margin 1
    assert decide("shift:0:30:3:10", default=0, threshold=5, cost=-5, users=2) == 1
    assert decide("shift:0:30:3:0", default=0, threshold=5, cost=30, users=4) == 0
    assert decide("shift:2:30:3:0", default=1, threshold=5, cost=4) == 0  # DOWN unchanged


def test_shift_zero_is_clangs_own_decision_even_past_the_threshold():
    # clang sometimes takes a call site whose cost is above the threshold it reports
    for default, threshold, cost in ((1, 5, 9), (1, -3, 0), (0, 5, 0), (0, 5, 100)):
        assert decide("shift:0:0", default=default, threshold=threshold, cost=cost) == default


@pytest.mark.parametrize("spec", ["shift:", "shift:-1", "shift:x", "shift:1:2:3:4:5",
                                  "shift:1.5"])
def test_a_malformed_shift_is_a_clear_error(spec):
    with pytest.raises(ValueError, match="expected shift:DOWN"):
        builtin_policy(spec)


def test_the_name_round_trips_and_it_is_served_as_a_builtin_that_reads_clangs_decision():
    for spec in ("shift:2:0", "shift:2:30:3", "shift:2:30:3:0"):
        policy = load_spec(spec)
        assert isinstance(policy, ShiftPolicy) and policy.name == spec
        assert load_spec(policy.name).name == spec
    assert builtin_policy("shift:2").name == "shift:2:0"
    assert saved_policy_dir("shift:2") is None
    assert policy_reads_default("shift:2:30:3")


def test_real_compiles_shift_zero_is_oz_and_shift_two_changes_only_threshold_modules(
        demo_corpus_dir, tmp_path):
    corpus = copy_demo_subset(demo_corpus_dir, tmp_path / "corpus", CHANGED + UNCHANGED)
    reports = {}
    for spec in ("shift:0:0", "shift:2"):
        out = tmp_path / f"{spec.replace(':', '_')}.json"
        assert main(["eval", "--corpus", str(corpus), "--policy", spec, "--workers", "2",
                     "--json", str(out)]) == 0
        reports[spec] = {m["name"]: m for m in json.loads(out.read_text())["modules"]}
    for m in reports["shift:0:0"].values():
        assert m["error"] is None and m["policy_bytes"] == m["baseline_bytes"]
    shifted = reports["shift:2"]
    assert all(shifted[name]["policy_bytes"] != shifted[name]["baseline_bytes"]
               for name in CHANGED)
    assert all(shifted[name]["policy_bytes"] == shifted[name]["baseline_bytes"]
               for name in UNCHANGED)
