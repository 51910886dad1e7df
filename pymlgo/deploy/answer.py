"""Answering one compile's inliner channel with a loaded policy: every session of one
compiler driver command, counted. Used by `mlgo cc` itself (a policy it loaded) and by its
policy server (`cc_server`), so neither of the two imports the other for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ServeStats:
    sessions: int = 0
    decisions: int = 0
    inlined: int = 0
    served_by: str = "process"  # "server": the policy server; "launcher": it, via the launcher
    counted: bool = True  # False: a server answered but its counts were lost


def serve_sessions(base: Path, policy: Any, module: str, timeout: float,
                   alive: Callable[[], bool]) -> ServeStats:
    """Answer every channel session at `base` with `policy` until `alive()` turns False
    (the compiler exited): one driver command may run cc1 once per source, and a ThinLTO
    link runs one backend per module (`serve_channel_sessions` answers them all)."""
    from pymlgo.protocol.channel import ChannelError, ChannelSession, serve_channel_sessions

    required = policy.required_features
    stats = ServeStats()
    stale = 0

    def ended(session: ChannelSession) -> None:
        stats.sessions += 1
        stats.decisions += len(session.decisions)

    while True:
        try:
            serve_channel_sessions(base, _advisor(policy.for_module(module), required, stats),
                                   ended, timeout=timeout, compiler_alive=alive)
            return stats  # it returns once the compiler exited
        except ChannelError as exc:
            if not alive():
                return stats  # the compiler is done (never opened the channel: a cached build)
            # A compiler may still hold the read end of a channel that just ended when we
            # open it: that looks like a session without a header. Retry a while.
            if "without sending a header" in str(exc) and stale < 2000:
                stale += 1
                time.sleep(0.005)
                continue
            raise


def _advisor(decide: Any, required: Sequence[str], stats: ServeStats) -> Any:
    """The channel callback for the sessions of one opening: features by name -> the
    policy's decision."""
    from pymlgo.protocol.features import select_features

    indices: list[int] = []
    indexed: Any = None  # the header `indices` were selected from: one per session

    def advise(context: str, obs: Any, header: Any) -> int:
        nonlocal indices, indexed
        if header is not indexed:
            indices, indexed = select_features(header.features, required), header
        value = int(decide({header.features[i].name: obs.tensors[i] for i in indices}))
        stats.inlined += value != 0
        return value

    return advise
