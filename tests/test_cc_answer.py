"""`serve_sessions`, what `mlgo cc` and its policy server answer a compiler command with: every
channel session of the command, counted, including sessions that reach the host on one stream
(lld's ThinLTO backends run one after another in one process, and the next one may open the
FIFOs before the host has read the end of the previous one's stream). Recorded protocol bytes
from a scripted compiler (`tests.channel_fakes`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pymlgo.deploy.answer import ServeStats, serve_sessions
from pymlgo.policy.store import load_policy
from pymlgo.protocol.channel import ChannelError
from tests.channel_fakes import (
    INLINER_HEADER,
    OPEN,
    FakeCompiler,
    context,
    inliner_payload,
    observation,
)

pytest_plugins = ("tests.channel_fixtures",)  # fixtures: base, start_fake_compiler

Steps = list[tuple[str, object]]


def session_steps(defaults: list[int]) -> Steps:
    """One inliner session on already open FIFOs: header, context, and one observation per
    clang default, each waiting for its 8-byte advice."""
    steps: Steps = [("send", INLINER_HEADER + context(""))]
    for index, default in enumerate(defaults):
        steps += [("send", observation(index, inliner_payload(default, index))), ("recv", 8)]
    return steps


def serve_default(base: Path, compiler: FakeCompiler) -> ServeStats:
    return serve_sessions(base, load_policy("default"), "m", timeout=10, alive=compiler.alive)


def test_a_next_session_arriving_before_the_end_of_the_previous_stream_is_served(
    base: Path, start_fake_compiler: Callable[[Steps], FakeCompiler]
) -> None:
    # The race, deterministically: the second backend opens `.in` afresh while the first
    # one's stream on `.out` was never closed, so its header follows the first session's
    # last observation on the same stream.
    compiler = start_fake_compiler([*OPEN, *session_steps([1, 0]), ("close_in", None),
                                    ("open_in", None), *session_steps([1])])

    stats = serve_default(base, compiler)

    code, advice = compiler.finish()
    assert code == 0
    assert advice == np.array([1, 0, 1], dtype=np.int64).tobytes()
    assert (stats.sessions, stats.decisions, stats.inlined) == (2, 3, 2)


def test_sessions_on_one_stream_may_be_empty(
    base: Path, start_fake_compiler: Callable[[Steps], FakeCompiler]
) -> None:
    compiler = start_fake_compiler([*OPEN, *session_steps([]), *session_steps([0]),
                                    *session_steps([])])

    stats = serve_default(base, compiler)

    assert compiler.finish() == (0, bytes(8))
    assert (stats.sessions, stats.decisions, stats.inlined) == (3, 1, 0)


def test_a_header_inside_a_cut_off_observation_is_still_a_bad_stream(
    base: Path, start_fake_compiler: Callable[[Steps], FakeCompiler]
) -> None:
    # The first session ends in the middle of an observation's tensor bytes: the next header
    # is read as tensor bytes and the observation is not closed by its newline.
    cut = observation(0, inliner_payload(1, 0))[:150]
    compiler = start_fake_compiler(
        [*OPEN, ("send", INLINER_HEADER + context("") + cut + INLINER_HEADER + context("")),
         ("sleep", 30)])

    with pytest.raises(ChannelError, match="bad stream from the compiler: observation 0: "
                                           "expected newline after tensor data"):
        serve_default(base, compiler)


def test_a_header_inside_a_cut_off_line_is_still_a_bad_stream(
    base: Path, start_fake_compiler: Callable[[Steps], FakeCompiler]
) -> None:
    compiler = start_fake_compiler(
        [*OPEN, ("send", INLINER_HEADER + b'{"cont' + INLINER_HEADER), ("sleep", 30)])

    with pytest.raises(ChannelError, match="bad stream from the compiler: malformed JSON"):
        serve_default(base, compiler)
