"""Saved policy directories and `load_policy` for every kind of policy spec."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pymlgo.policy import store
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.store import PolicyLoadError, load_policy, load_policy_dir, save_policy
from pymlgo.problems.inlining.policies import ConstantPolicy, HeuristicPolicy, RandomPolicy
from tests.test_policy_inlining import as_matrix, make_policy, observations


def decisions(policy: InliningPolicy, module: str = "m") -> list[int]:
    decide = policy.for_module(module)
    return [decide(o) for o in observations(n=500)]


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_saved_directory_is_self_describing(tmp_path):
    policy = make_policy()
    save_policy(policy, tmp_path / "p")
    assert sorted(files(tmp_path / "p")) == ["policy.json", "vocab.json", "weights.npz"]
    doc = json.loads((tmp_path / "p" / "policy.json").read_text())
    assert doc["version"] == "inlining-1.0" and doc["problem"] == "inlining"
    assert doc["network"]["hidden"] == [40, 40, 20]
    assert doc["network"]["input_dim"] == policy.vocab.input_dim
    assert [f["name"] for f in doc["features"]] == list(policy.vocab.features)
    assert doc["features"][0] == {
        "name": policy.vocab.features[0],
        "type": "int64_t",
        "port": 0,
        "shape": [1],
    }
    assert doc["advice"]["name"] == "inlining_decision"
    assert doc["hyperparameters"] == {"lr": 0.001}
    assert len(doc["files"]["weights.npz"]["sha256"]) == 64
    with np.load(tmp_path / "p" / "weights.npz") as npz:  # plain numpy can read the weights
        assert sorted(npz.files) == ["b0", "b1", "b2", "b3", "w0", "w1", "w2", "w3"]
        assert np.array_equal(npz["w0"], policy.params.weights[0])


def test_round_trip_gives_identical_decisions_and_identical_bytes(tmp_path):
    policy = make_policy()
    save_policy(policy, tmp_path / "a")
    loaded = load_policy_dir(tmp_path / "a")
    assert loaded.required_features == policy.required_features
    assert loaded.hidden == policy.hidden and dict(loaded.hyperparameters) == {"lr": 0.001}
    x = as_matrix(policy, observations())
    assert np.array_equal(loaded.probabilities(x), policy.probabilities(x))
    assert decisions(loaded) == decisions(policy)
    assert decisions(loaded.sampling(9)) == decisions(policy.sampling(9))
    save_policy(loaded, tmp_path / "b")
    assert files(tmp_path / "b") == files(tmp_path / "a")


def test_saving_the_same_policy_twice_gives_the_same_bytes(tmp_path):
    save_policy(make_policy(seed=1), tmp_path / "a")
    save_policy(make_policy(seed=1), tmp_path / "b")
    assert files(tmp_path / "a") == files(tmp_path / "b")
    save_policy(make_policy(seed=2), tmp_path / "c")
    assert files(tmp_path / "c")["weights.npz"] != files(tmp_path / "a")["weights.npz"]


def test_sampling_mode_and_seed_are_not_part_of_the_saved_policy(tmp_path):
    save_policy(make_policy(), tmp_path / "a")
    save_policy(make_policy().sampling(5), tmp_path / "b")
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert not load_policy_dir(tmp_path / "b").sample


@pytest.mark.parametrize("victim", ["weights.npz", "vocab.json"])
def test_a_modified_file_is_a_checksum_error(tmp_path, victim):
    save_policy(make_policy(), tmp_path / "p")
    path = tmp_path / "p" / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(PolicyLoadError, match=f"{victim}: checksum mismatch"):
        load_policy_dir(tmp_path / "p")


@pytest.mark.parametrize("victim", ["policy.json", "weights.npz", "vocab.json"])
def test_a_missing_file_is_named(tmp_path, victim):
    save_policy(make_policy(), tmp_path / "p")
    (tmp_path / "p" / victim).unlink()
    with pytest.raises(PolicyLoadError, match=f"missing {victim}"):
        load_policy_dir(tmp_path / "p")


def test_a_newer_major_version_is_refused_an_older_minor_is_not(tmp_path):
    save_policy(make_policy(), tmp_path / "p")
    doc_path = tmp_path / "p" / "policy.json"
    doc = json.loads(doc_path.read_text())
    doc_path.write_text(json.dumps({**doc, "version": "inlining-1.7"}))
    assert load_policy_dir(tmp_path / "p").version == "inlining-1.7"
    doc_path.write_text(json.dumps({**doc, "version": "inlining-2.0"}))
    with pytest.raises(PolicyLoadError, match=r"inlining-2.0 .*reads inlining-1.x"):
        load_policy_dir(tmp_path / "p")
    doc_path.write_text(json.dumps({**doc, "version": "regalloc-1.0"}))
    with pytest.raises(PolicyLoadError, match="not an inlining policy"):
        load_policy_dir(tmp_path / "p")


def test_garbage_policy_json_is_a_clear_error(tmp_path):
    save_policy(make_policy(), tmp_path / "p")
    (tmp_path / "p" / "policy.json").write_text("{not json")
    with pytest.raises(PolicyLoadError, match="policy.json: not valid JSON"):
        load_policy_dir(tmp_path / "p")


def test_saving_replaces_an_older_policy_in_place(tmp_path):
    save_policy(make_policy(seed=1), tmp_path / "p")
    save_policy(make_policy(seed=2), tmp_path / "p")
    assert decisions(load_policy_dir(tmp_path / "p")) == decisions(make_policy(seed=2))
    assert sorted(files(tmp_path / "p")) == ["policy.json", "vocab.json", "weights.npz"]


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("default", HeuristicPolicy),
        ("never", ConstantPolicy),
        ("always", ConstantPolicy),
        ("random:0.3", RandomPolicy),
        ("random:0.3:9", RandomPolicy),
    ],
)
def test_load_policy_resolves_builtin_names(spec, kind):
    assert isinstance(load_policy(spec), kind)


def test_load_policy_passes_the_seed_to_stochastic_policies(tmp_path):
    assert load_policy("random:0.5", seed=4).name == "random:0.5:4"
    save_policy(make_policy(), tmp_path / "p")
    assert load_policy(str(tmp_path / "p"), seed=4).seed == 4


def test_load_policy_reads_a_saved_directory_and_names_it_by_its_path(tmp_path):
    save_policy(make_policy(), tmp_path / "p")
    policy = load_policy(str(tmp_path / "p"))
    assert isinstance(policy, InliningPolicy) and policy.name == str(tmp_path / "p")
    assert decisions(policy) == decisions(make_policy())


def test_load_policy_reads_pretrained_package_data(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "pretrained_root", lambda: tmp_path)
    save_policy(make_policy(), tmp_path / "size-v1")
    policy = load_policy("pretrained:size-v1")
    assert isinstance(policy, InliningPolicy) and policy.name == "pretrained:size-v1"
    with pytest.raises(PolicyLoadError,
                       match=r"'nope' of this problem \(available: pretrained:size-v1\)"):
        load_policy("pretrained:nope")


def test_each_problem_is_offered_only_the_pretrained_policies_of_its_own_format(
        tmp_path, monkeypatch):
    from pymlgo.policy import regalloc

    monkeypatch.setattr(store, "pretrained_root", lambda: tmp_path)
    save_policy(make_policy(), tmp_path / "size-v1")
    regalloc.save_policy(regalloc.initial_policy(seed=3), tmp_path / "evict-v1")

    evict = load_policy("pretrained:evict-v1", problem="regalloc-evict")
    assert isinstance(evict, regalloc.EvictionPolicy) and evict.name == "pretrained:evict-v1"
    with pytest.raises(PolicyLoadError, match=r"available: pretrained:size-v1\)"):
        load_policy("pretrained:evict-v1")  # inlining
    with pytest.raises(PolicyLoadError, match=r"available: pretrained:evict-v1\)"):
        load_policy("pretrained:size-v1", problem="regalloc-evict")
    with pytest.raises(PolicyLoadError, match="not a policy of --problem regalloc-priority"):
        load_policy("pretrained:evict-v1", problem="regalloc-priority")


def test_missing_pretrained_policy_lists_what_is_there(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "pretrained_root", lambda: tmp_path / "none")
    with pytest.raises(PolicyLoadError, match="none installed"):
        load_policy("pretrained:size-v1")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sometimes", "unknown inlining policy 'sometimes'.*no directory"),
        ("random:2", "P must be in"),
        ("/no/such/policy", "no directory '/no/such/policy'"),
    ],
)
def test_load_policy_rejects_unknown_specs_clearly(spec, message):
    with pytest.raises(ValueError, match=message):
        load_policy(spec)


def test_load_policy_rejects_files_and_other_problems(tmp_path):
    (tmp_path / "weights.npz").write_bytes(b"")
    with pytest.raises(PolicyLoadError, match="must be a directory"):
        load_policy(str(tmp_path / "weights.npz"))
    with pytest.raises(PolicyLoadError, match="problem 'vectorize'"):
        load_policy("default", problem="vectorize")
    with pytest.raises(PolicyLoadError, match="not a policy directory"):
        load_policy_dir(tmp_path / "absent")
