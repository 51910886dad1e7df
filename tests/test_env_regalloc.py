"""`pymlgo/RegallocEviction-v0`: choosing evictions for the real greedy allocator."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pymlgo.env
from pymlgo.env import RegallocEvictionEnv, ReplayPolicy
from pymlgo.problems.regalloc.compile import COST_KEY, compile_with_policy
from pymlgo.problems.regalloc.reward import relative_change

MODULE = "zstd/lib/compress/hist"


@pytest.fixture(scope="module")
def env(demo_corpus_dir):
    e = RegallocEvictionEnv(demo_corpus_dir, modules=[MODULE])
    yield e
    e.close()


def test_gymnasium_env_checker_passes(env):
    check_env(env, skip_render_check=True)


def test_spaces_come_from_the_eviction_header(demo_corpus_dir):
    env = gym.make(pymlgo.env.REGALLOC_EVICTION_ID, corpus=demo_corpus_dir, modules=[MODULE])
    try:
        n = env.action_space.n
        assert n >= 2
        spaces = env.observation_space.spaces
        assert spaces["mask"].shape == (1, n)
        assert spaces["progress"].shape == (1,)
        assert spaces["liverange_size"].dtype == np.float32
    finally:
        env.close()


def test_random_masked_episode_reward_matches_a_replayed_compile(env, compiler):
    rng = np.random.default_rng(7)
    obs, info = env.reset(seed=7, options={"module": MODULE})
    sent, contexts, done = [], set(), False
    while not done:
        mask = info["action_mask"]
        assert mask.tolist() == (obs["mask"].reshape(-1) == 1).astype(int).tolist()
        contexts.add(info["context"])
        action = int(rng.choice(np.flatnonzero(mask)))
        obs, reward, done, _, info = env.step(action)
        assert not info["corrected_action"]
        assert info["sent_action"] == action
        sent.append(action)
    assert "error" not in info, info.get("error")
    assert len(sent) > 5 and len(contexts) > 1  # one context per machine function
    assert reward == pytest.approx(-relative_change(info["weighted_cost"],
                                                    info["baseline_cost"]))
    job = next(j for j in env.jobs if j.module == MODULE)
    replayed = compile_with_policy(compiler, job, ReplayPolicy({MODULE: tuple(sent)}))
    assert replayed.error is None
    assert replayed.size == info["size"]
    assert replayed.decisions == len(sent)
    assert replayed.extra[COST_KEY] == pytest.approx(info["weighted_cost"])


def test_an_action_outside_the_mask_is_corrected_not_sent(env):
    obs, info = env.reset(options={"module": MODULE})
    masked = np.flatnonzero(info["action_mask"] == 0)
    bad = int(masked[0]) if masked.size else env.action_space.n  # else: out of range
    _, _, _, _, info = env.step(bad)
    assert info["corrected_action"]
    assert info["sent_action"] != bad
    env.close()


def test_closing_mid_episode_kills_the_compiler_and_removes_the_fifos(env):
    obs, info = env.reset(options={"module": MODULE})
    env.step(int(np.flatnonzero(info["action_mask"])[-1]))
    session = env.session
    pid, tmp = session.proc.pid, session.tmp
    assert session.alive() and (tmp / "channel.in").is_fifo()
    env.close()
    assert not Path(f"/proc/{pid}").exists()
    assert not tmp.exists()
