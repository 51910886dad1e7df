"""The shipped inlining model's network without its window: a learned policy that decides
from clang's features alone (exports; `mlgo cc` does not ask clang for its decision)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.store import load_policy, save_policy


def shipped_network() -> InliningPolicy:
    policy = load_policy("pretrained:inlining-oz")
    assert isinstance(policy, InliningPolicy) and policy.window
    return dataclasses.replace(policy, window="")


def saved_shipped_network(directory: Path) -> Path:
    """`shipped_network()` saved to `directory` (a policy spec `mlgo cc` accepts)."""
    save_policy(shipped_network(), directory)
    return directory
