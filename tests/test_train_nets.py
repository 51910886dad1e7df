"""The torch network mirrors the numpy policy exactly; worker-side wrappers stay torch-free."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.vocab import build_vocab
from pymlgo.train.nets import MLP, logit_params_from_q, q_from_logit_params, tensor
from pymlgo.train.policies import EpsilonGreedy, PolicyBatch, tag_job, untag

FEATURES = ("a", "b", "c")


def random_policy(seed: int = 0, hidden: tuple[int, ...] = (8, 4)) -> InliningPolicy:
    rng = np.random.default_rng(seed)
    columns = {f: rng.integers(0, 50, size=500) for f in FEATURES}
    vocab = build_vocab(columns, quantiles=20)
    return InliningPolicy(vocab, init_mlp(vocab.input_dim, hidden, rng), hidden=hidden)


def raw_rows(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 60, size=(n, len(FEATURES)))


def test_torch_mlp_from_params_gives_the_numpy_logits():
    policy = random_policy()
    x = policy.vocab.normalize(raw_rows(300))
    net = MLP.from_params(policy.params)
    with torch.no_grad():
        torch_logits = net(tensor(x))[:, 0].numpy()
    np.testing.assert_allclose(torch_logits, policy.params.forward(x), rtol=1e-5, atol=1e-6)


def test_params_round_trip_through_torch_bit_for_bit():
    params = random_policy().params
    back = MLP.from_params(params).to_params()
    assert back.flat().tobytes() == params.flat().tobytes()


def test_a_trained_torch_net_decides_like_the_numpy_policy_in_workers():
    policy = random_policy()
    net = MLP.from_params(policy.params)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    x = tensor(policy.vocab.normalize(raw_rows(200)))
    for _ in range(5):
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
    trained = policy.with_params(net.to_params())
    rows = raw_rows(200, seed=3)
    with torch.no_grad():
        torch_inline = (net(tensor(policy.vocab.normalize(rows)))[:, 0] >= 0).numpy()
    decide = trained.for_module("m")
    worker_inline = [decide({f: np.array([v]) for f, v in zip(FEATURES, row, strict=True)})
                     for row in rows]
    assert list(torch_inline.astype(int)) == worker_inline


def test_q_net_from_a_logit_keeps_decisions_and_exports_q1_minus_q0():
    policy = random_policy()
    q = q_from_logit_params(policy.params)
    x = policy.vocab.normalize(raw_rows(300))
    with torch.no_grad():
        qv = q(tensor(x)).numpy()
    np.testing.assert_allclose(qv[:, 1] - qv[:, 0], policy.params.forward(x), atol=1e-5)
    exported = logit_params_from_q(q)
    assert exported.hidden == policy.params.hidden
    np.testing.assert_allclose(exported.forward(x), qv[:, 1] - qv[:, 0], atol=1e-5)
    assert ((exported.forward(x) >= 0) == (qv[:, 1] >= qv[:, 0])).mean() > 0.99


def test_job_tags_round_trip_and_keep_the_module_path():
    from pymlgo.problems.base import CompileJob

    job = tag_job(CompileJob("zstd/lib/a", b"bc", ("-cc1",)), 12)
    assert job.module == "zstd/lib/a#12" and untag(job.module) == ("zstd/lib/a", 12)


def test_policy_batch_routes_each_tagged_module_to_its_member():
    policy = random_policy()
    members = (EpsilonGreedy(policy, 1.0, seed=1), EpsilonGreedy(policy, 1.0, seed=2))
    batch = PolicyBatch(members)
    feats = {f: np.array([1]) for f in FEATURES}

    def stream(decide):
        return [decide(feats) for _ in range(64)]

    assert stream(batch.for_module("m#0")) == stream(members[0].for_module("m"))
    assert stream(batch.for_module("m#1")) == stream(members[1].for_module("m"))
    assert stream(batch.for_module("m#0")) != stream(batch.for_module("m#1"))


@pytest.mark.parametrize("epsilon", [0.0, 0.3])
def test_epsilon_greedy_is_greedy_at_zero_and_seeded_by_module(epsilon):
    policy = random_policy()
    rows = raw_rows(200)
    feats = [{f: np.array([v]) for f, v in zip(FEATURES, row, strict=True)} for row in rows]
    greedy = policy.greedy().for_module("m")
    runs = []
    for _ in range(2):
        decide = EpsilonGreedy(policy, epsilon, seed=5).for_module("m")
        runs.append([decide(f) for f in feats])
    assert runs[0] == runs[1]
    agree = np.mean([a == greedy(f) for a, f in zip(runs[0], feats, strict=True)])
    assert agree == 1.0 if epsilon == 0 else 0.7 < agree < 0.95


def test_worker_side_training_modules_do_not_import_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import pymlgo.train, pymlgo.train.policies, pymlgo.train.env, pymlgo.train.es\n"
            "import pymlgo.train.config\n")
    subprocess.run([sys.executable, "-c", code], check=True)
