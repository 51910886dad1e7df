"""`pymlgo/Inlining-v0`: a Gymnasium env answering the real clang's inliner step by step."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pymlgo.env
from pymlgo.env import InliningEnv, ReplayPolicy
from pymlgo.evaluate.eval import evaluate
from pymlgo.workers import WorkSpec, make_executor
from tests.test_toolchain import children_of_self

MODULE = "zstd/lib/compress/hist"  # small, ~25 call sites


@pytest.fixture(scope="module")
def env(demo_corpus_dir):
    e = InliningEnv(demo_corpus_dir, modules=[MODULE, "brotli/c/enc/histogram"])
    yield e
    e.close()


def play(env, module: str, seed: int) -> tuple[list[int], float, dict]:
    """One uniformly random episode; returns the actions sent, the final reward and info."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed, options={"module": module})
    assert obs in env.observation_space
    sent, done, reward = [], False, 0.0
    while not done:
        assert info["action_mask"].tolist() == [1, 1]
        assert info["default_action"] in (0, 1)
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(2)))
        sent.append(info["sent_action"])
        done = terminated or truncated
        if not done:
            assert reward == 0.0  # the size is known only once the compile has finished
    assert "error" not in info, info.get("error")
    return sent, reward, info


def test_gymnasium_env_checker_passes(demo_corpus_dir):
    env = InliningEnv(demo_corpus_dir, modules=[MODULE])
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_registered_id_makes_the_env_with_spaces_from_the_compiler_header(demo_corpus_dir):
    env = gym.make(pymlgo.env.INLINING_ID, corpus=demo_corpus_dir, modules=[MODULE])
    try:
        names = set(env.observation_space.spaces)
        assert {"callee_basic_block_count", "cost_estimate", "sroa_savings"} <= names
        assert "inlining_default" not in names  # given as info["default_action"] instead
        assert all(s.shape == (1,) and s.dtype == np.int64
                   for s in env.observation_space.spaces.values())
        assert env.action_space == gym.spaces.Discrete(2)
    finally:
        env.close()


def test_random_episode_reward_matches_mlgo_eval_of_the_same_decisions(env, compiler):
    sent, reward, info = play(env, MODULE, seed=3)
    assert len(sent) == info["decisions"] > 10
    assert reward == pytest.approx(1.0 - info["size"] / info["baseline_size"])
    job = next(j for j in env.jobs if j.module == MODULE)
    with make_executor(None, 1) as executor:
        report = evaluate(executor, compiler, [job], ReplayPolicy({MODULE: tuple(sent)}),
                          spec=WorkSpec(problem="inlining"))
    row = report.modules[0]
    assert row.error is None
    assert (row.policy_bytes, row.baseline_bytes) == (info["size"], info["baseline_size"])
    assert row.decisions == len(sent)
    assert -row.change == pytest.approx(reward)


def test_following_the_default_decision_reproduces_oz(env):
    obs, info = env.reset(options={"module": MODULE})
    done = False
    while not done:
        obs, reward, done, _, step_info = env.step(info["default_action"])
        info = step_info
    assert info["size"] == info["baseline_size"]
    assert reward == 0.0


def test_the_same_seed_draws_the_same_modules(env):
    draws = [[env.reset(seed=s)[1]["module"] for s in (1, 2, 3, 4)] for _ in range(2)]
    env.close()
    assert draws[0] == draws[1]


def test_closing_mid_episode_leaves_no_compiler_or_fifo(env):
    before = children_of_self()
    env.reset(options={"module": MODULE})
    for _ in range(3):
        env.step(1)
    session = env.session
    assert session is not None and session.alive()
    pid, tmp = session.proc.pid, session.tmp
    fifos = sorted(p.name for p in tmp.iterdir() if p.is_fifo())
    assert fifos == ["channel.in", "channel.out"]
    assert pid in children_of_self()
    env.close()
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped: not even a zombie
    assert not tmp.exists()
    assert children_of_self() <= before
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_reset_mid_episode_ends_the_running_compile(env):
    env.reset(options={"module": MODULE})
    env.step(0)
    old = env.session
    pid, tmp = old.proc.pid, old.tmp
    env.reset(options={"module": MODULE})
    assert not Path(f"/proc/{pid}").exists() and not tmp.exists()
    env.close()


def test_unknown_module_is_a_clear_error(env):
    with pytest.raises(ValueError, match="no module 'nope'"):
        env.reset(options={"module": "nope"})


def test_a_module_without_call_sites_ends_at_the_first_step(demo_corpus_dir):
    env = InliningEnv(demo_corpus_dir, modules=[MODULE, "zstd/lib/common/threading"])
    try:
        obs, info = env.reset(options={"module": "zstd/lib/common/threading"})
        assert info["no_decisions"] and obs in env.observation_space
        _, reward, terminated, _, info = env.step(0)
        assert terminated and info["decisions"] == 0
        assert reward == 0.0 and info["size"] == info["baseline_size"]
    finally:
        env.close()
