"""`pymlgo/RegallocEviction-v0`: choosing evictions for the real greedy allocator."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pymlgo.env
from pymlgo.env import RegallocEvictionEnv, ReplayPolicy
from pymlgo.evaluate.eval import evaluate
from pymlgo.problems.regalloc.reward import COST_FLOOR, relative_change
from pymlgo.protocol.channel import fifo_paths
from pymlgo.workers import WorkSpec, make_executor
from tests.test_toolchain import children_of_self

MODULE = "zstd/lib/compress/hist"


@pytest.fixture(scope="module")
def env(demo_o2_corpus_dir):
    e = RegallocEvictionEnv(demo_o2_corpus_dir, modules=[MODULE])
    yield e
    e.close()


def test_gymnasium_env_checker_passes(env):
    check_env(env, skip_render_check=True)


def test_spaces_come_from_the_eviction_header(demo_o2_corpus_dir):
    env = gym.make(pymlgo.env.REGALLOC_EVICTION_ID, corpus=demo_o2_corpus_dir, modules=[MODULE])
    try:
        n = env.action_space.n
        assert n >= 2
        spaces = env.observation_space.spaces
        assert spaces["mask"].shape == (1, n)
        assert spaces["progress"].shape == (1,)
        assert spaces["liverange_size"].dtype == np.float32
    finally:
        env.close()


def test_random_masked_episode_reward_matches_mlgo_eval_of_the_same_decisions(env, compiler):
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
    # `mlgo eval --problem regalloc`'s path, answering with the episode's actions
    job = next(j for j in env.jobs if j.module == MODULE)
    with make_executor(None, 1) as executor:
        report = evaluate(executor, compiler, [job], ReplayPolicy({MODULE: tuple(sent)}),
                          spec=WorkSpec(problem="regalloc"))
    (row,) = report.to_json()["modules"]
    assert row["error"] is None
    assert (row["policy_bytes"], row["baseline_bytes"]) == (info["size"], info["baseline_size"])
    assert row["decisions"] == len(sent) and row["invalid_advice"] == 0
    assert row["policy_cost"] == pytest.approx(info["weighted_cost"])
    assert row["baseline_cost"] == pytest.approx(info["baseline_cost"])
    # above the floor the env's reward is eval's relative cost change, negated
    assert row["baseline_cost"] >= COST_FLOOR
    assert row["cost_change"] is not None and row["cost_change"] != 0.0
    assert reward == pytest.approx(-row["cost_change"])


def test_an_action_outside_the_mask_is_corrected_not_sent(env):
    obs, info = env.reset(options={"module": MODULE})
    masked = np.flatnonzero(info["action_mask"] == 0)
    bad = int(masked[0]) if masked.size else env.action_space.n  # else: out of range
    _, _, _, _, info = env.step(bad)
    assert info["corrected_action"]
    assert info["sent_action"] != bad
    env.close()


def test_closing_mid_episode_leaves_no_compiler_or_fifo(env):
    before = children_of_self()
    obs, info = env.reset(options={"module": MODULE})
    env.step(int(np.flatnonzero(info["action_mask"])[-1]))
    session = env.session
    assert session is not None and session.alive()
    pid, tmp, fifos = session.proc.pid, session.tmp, fifo_paths(session.base)
    assert all(f.is_fifo() for f in fifos)
    assert sorted(p.name for p in tmp.iterdir() if p.is_fifo()) == sorted(f.name for f in fifos)
    assert pid in children_of_self()
    env.close()
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped: not even a zombie
    assert not any(f.exists() for f in fifos)
    assert not tmp.exists()
    assert children_of_self() <= before
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
