"""Policies the compile path runs with numpy only: quantile vocab, MLP, save/load.

Nothing here may import torch: compile workers load policies from this package.
"""

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import MLPParams, init_mlp
from pymlgo.policy.store import PolicyLoadError, load_policy, load_policy_dir, save_policy
from pymlgo.policy.vocab import Vocab, build_vocab, load_vocab, save_vocab

__all__ = [
    "InliningPolicy",
    "MLPParams",
    "PolicyLoadError",
    "Vocab",
    "build_vocab",
    "init_mlp",
    "load_policy",
    "load_policy_dir",
    "load_vocab",
    "save_policy",
    "save_vocab",
]
