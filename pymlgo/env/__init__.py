"""Gymnasium environments on a corpus, with the real compiler in the loop.

    import gymnasium as gym
    import pymlgo.env  # registers the ids

    env = gym.make("pymlgo/Inlining-v0", corpus="demo")
    obs, info = env.reset(seed=0, options={"module": "zstd/compress/zstd_double_fast"})

Ids: `pymlgo/Inlining-v0` (inlining for size, -Oz) and `pymlgo/RegallocEviction-v0`
(greedy allocator eviction, -O2). Needs the `gym` extra (`pip install pymlgo[gym]`).
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from pymlgo.env.base import CompilerEnv, EnvConfig
from pymlgo.env.inlining import InliningEnv
from pymlgo.env.regalloc import RegallocEvictionEnv
from pymlgo.env.replay import ReplayPolicy

INLINING_ID = "pymlgo/Inlining-v0"
REGALLOC_EVICTION_ID = "pymlgo/RegallocEviction-v0"

# Importing twice (e.g. reloads) must not warn about re-registration.
if INLINING_ID not in registry:
    register(id=INLINING_ID, entry_point="pymlgo.env.inlining:InliningEnv")
if REGALLOC_EVICTION_ID not in registry:
    register(id=REGALLOC_EVICTION_ID, entry_point="pymlgo.env.regalloc:RegallocEvictionEnv")

__all__ = [
    "INLINING_ID",
    "REGALLOC_EVICTION_ID",
    "CompilerEnv",
    "EnvConfig",
    "InliningEnv",
    "RegallocEvictionEnv",
    "ReplayPolicy",
]
