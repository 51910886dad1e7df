"""The shipped inlining model taken apart for tests that need a learned policy on C code:
its network alone (no window, every language: decides from clang's features alone,
exports, and `mlgo cc` does not ask clang for its decision), and the whole model deciding
every language (window kept; the shipped one decides C++ only and leaves C to clang)."""

from __future__ import annotations

import atexit
import dataclasses
import functools
import shutil
import tempfile
from pathlib import Path

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.store import load_policy, save_policy


def shipped_network() -> InliningPolicy:
    policy = load_policy("pretrained:inlining-oz")
    assert isinstance(policy, InliningPolicy) and policy.window and policy.languages
    return dataclasses.replace(policy, window="", languages=())


def saved_shipped_network(directory: Path) -> Path:
    """`shipped_network()` saved to `directory` (a policy spec `mlgo cc` accepts)."""
    save_policy(shipped_network(), directory)
    return directory


def saved_shipped_every_language(directory: Path) -> Path:
    """The shipped model, window and all, deciding C as well, saved to `directory`."""
    policy = load_policy("pretrained:inlining-oz")
    assert isinstance(policy, InliningPolicy) and policy.languages
    save_policy(dataclasses.replace(policy, languages=()), directory)
    return directory


@functools.cache
def every_language_spec() -> str:
    """`saved_shipped_every_language` saved once per test process (removed at its exit), as
    a policy spec: for tests of serving C code the way the shipped model serves C++."""
    directory = Path(tempfile.mkdtemp(prefix="mlgo-test-shipped-every-language-"))
    atexit.register(shutil.rmtree, directory, True)
    return str(saved_shipped_every_language(directory / "policy"))
