"""`heuristic`: LLVM's stock eviction rule rebuilt as a walk over the allocation order, and
the versioned rule inputs of learned eviction policies (1.0's rules for 1.0 policies)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.policy.regalloc import (
    HEURISTIC_INPUT,
    INPUT_NAMES,
    INPUT_NAMES_1_0,
    RegallocPolicyError,
    encode,
    initial_policy,
    load_eviction_policy,
    load_spec,
    save_policy,
)
from pymlgo.problems.regalloc.compile import (
    COST_KEY,
    compile_baseline,
    compile_with_policy,
)
from pymlgo.problems.regalloc.policies import (
    heuristic_choice,
    heuristic_choice_1_0,
    heuristic_weights,
)
from pymlgo.toolchain.compiler import find_compiler
from tests.test_regalloc_policy import decision

CANDIDATE_WEIGHT = 0.5


def columns(*weights: float, candidate: float = CANDIDATE_WEIGHT, **overrides: list) -> dict:
    """A decision whose columns (allocation order, then the candidate) are all valid, with
    these normalized spill weights, no hints, nothing local or urgent; `overrides` sets a
    feature's values for the non-candidate columns."""
    n = len(weights) + 1
    f = {name: np.zeros((1, n), np.float32) for name in (
        "nr_urgent", "nr_broken_hints", "weighed_reads_by_max", "weighed_writes_by_max",
        "weighed_read_writes_by_max", "liverange_size")}
    f["use_def_density"] = np.array([[*weights, candidate]], np.float32)
    for name in ("is_hint", "is_local", "max_stage"):
        f[name] = np.zeros((1, n), np.int64)
    f["mask"] = np.ones((1, n), np.int64)
    for name, values in overrides.items():
        f[name][0, :-1] = values
    return f


def test_the_cheapest_lighter_interference_is_evicted_the_earliest_on_a_tie():
    assert heuristic_choice(columns(0.4, 0.2, 0.3, 0.2)) == 1


def test_interference_as_heavy_as_the_candidate_is_never_evicted():
    assert heuristic_choice(columns(0.5, 0.9, 0.6)) == 3  # the last column: evict nothing


def test_fewer_broken_hints_beat_a_lighter_weight_and_urgent_evictions_cost_most():
    assert heuristic_choice(columns(0.1, 0.3, nr_broken_hints=[1, 0])) == 1
    assert heuristic_choice(columns(0.1, 0.3, nr_urgent=[0, 1], nr_broken_hints=[1, 0])) == 0


def test_an_evictable_hint_register_ends_the_walk():
    f = columns(0.3, 0.1, is_hint=[1, 0])
    assert heuristic_choice(f) == 0
    # A heavier hint is not evictable, so the walk goes on to the next register.
    assert heuristic_choice(columns(0.6, 0.1, is_hint=[1, 0])) == 1
    # Unlike 1.0's rule, which took an unsplit hint register whatever its weight.
    assert heuristic_choice_1_0(columns(0.6, 0.1, is_hint=[1, 0])) == 0


def test_local_interference_is_evicted_only_while_nothing_else_was_found():
    assert heuristic_choice(columns(0.3, 0.1, is_local=[0, 1])) == 0
    assert heuristic_choice(columns(0.3, 0.1, is_local=[1, 0])) == 1


def test_a_candidate_that_must_be_placed_evicts_any_finite_weight_never_an_infinite_one():
    f = columns(np.inf, 0.0, 0.0, weighed_reads_by_max=[0.0, 0.9, 0.7])
    f["mask"][0, -1] = 0  # unspillable: "evict nothing" is not allowed
    assert heuristic_choice(f) == 2
    f["use_def_density"][0, 1:3] = np.nan  # LLVM's inf / inf
    assert heuristic_choice(f) == 0  # nothing evictable: the first valid column


def test_next_to_an_infinite_weight_the_walk_orders_by_weighted_uses_per_size():
    # x / inf made every finite weight 0; reads per size still tell the columns apart.
    f = columns(np.inf, 0.0, 0.0, candidate=0.0,
                weighed_reads_by_max=[0.0, 1.0, 0.2], liverange_size=[1.0, 0.5, 0.5])
    f["weighed_reads_by_max"][0, -1] = 0.5
    f["liverange_size"][0, -1] = 0.5
    weight = heuristic_weights(f)
    assert np.isinf(weight[0]) and weight[2] < weight[3] < weight[1]
    assert heuristic_choice(f) == 2  # lighter than the candidate; column 1 is heavier


def test_new_policies_see_the_walk_and_saved_1_0_policies_keep_their_own_inputs(tmp_path):
    f = columns(0.6, 0.1, is_hint=[1, 0])
    for name, values in decision(np.random.default_rng(0), 3).items():
        f.setdefault(name, values)
    walk, old = encode(f), encode(f, minor=0)
    assert walk[:, HEURISTIC_INPUT].tolist() == [0, 1, 0]
    assert old[:, HEURISTIC_INPUT].tolist() == [1, 0, 0]

    policy = initial_policy(0)
    assert policy.version == "regalloc-1.2" and policy.for_module("m")(f) == 1
    save_policy(policy, tmp_path / "new")
    doc = json.loads((tmp_path / "new" / "policy.json").read_text())
    assert doc["inputs"] == list(INPUT_NAMES) != list(INPUT_NAMES_1_0)  # 1.1 readers refuse
    # The same network saved as 1.0 is read with 1.0's input names and computes 1.0's inputs.
    doc.update(version="regalloc-1.0", inputs=list(INPUT_NAMES_1_0))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "policy.json").write_text(json.dumps(doc))
    old_policy = load_eviction_policy(tmp_path / "old")
    assert old_policy.minor == 0 and old_policy.for_module("m")(f) == 0
    doc.update(version="regalloc-1.3")
    (tmp_path / "old" / "policy.json").write_text(json.dumps(doc))
    with pytest.raises(RegallocPolicyError, match="regalloc-1.3.*reads regalloc-1.0 to"):
        load_eviction_policy(tmp_path / "old")


def test_the_shipped_policy_is_read_with_the_walk_inputs_it_was_trained_with():
    # since stop 52 the shipped model is trained from the walk (1.2); a 1.0 policy still
    # reads 1.0's rule (above)
    assert load_spec("pretrained:regalloc-evict").minor == 2  # type: ignore[attr-defined]


# Demo modules at -O2 with hundreds of eviction decisions, where 1.0's rule allocated
# differently from the stock advisor (+2.0%, +5.1%, +35.1% weighted cost) and the walk
# allocates as it does, to the byte.
STOCK_ALIKE = ("brotli/c/enc/cluster", "brotli/c/enc/metablock",
               "zstd/lib/compress/huf_compress")


def test_the_walk_allocates_as_the_stock_advisor_where_the_1_0_rule_did_not(
        demo_o2_corpus_dir):
    compiler = find_compiler(None)
    heuristic = load_spec("heuristic")
    for job in corpus_jobs(load_corpus(demo_o2_corpus_dir), STOCK_ALIKE):
        stock = compile_baseline(compiler, job)
        walked = compile_with_policy(compiler, job, heuristic)
        assert stock.error is None and walked.error is None
        assert walked.decisions > 100, job.module
        assert walked.size == stock.size, job.module
        assert walked.extra[COST_KEY] == stock.extra[COST_KEY], job.module
