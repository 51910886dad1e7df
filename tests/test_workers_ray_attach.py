"""Attaching to a Ray cluster through Ray Client: a head that fails to start the driver's
own server is asked again, and a head that keeps failing is named with the setting it
needs. The errors are Ray Client's own, as recorded from a busy head (ray 2.60)."""

from __future__ import annotations

import threading
import time

import pytest

from pymlgo.workers import ExecutorError
from pymlgo.workers.ray_backend import (
    BUSY_HEAD_ENV,
    attach,
    connect_unstuck,
    head_start_failure,
)

ADDRESS = "ray://10.77.0.1:10001"

# What Ray Client raises when the head's proxy gave up waiting for the driver's server
# (it started in 34 s on a loaded 2-core machine; the proxy waits 30 s by default).
CHANNEL_TIMEOUT = ConnectionAbortedError(
    "Initialization failure from server:\n"
    "Traceback (most recent call last):\n"
    '  File ".../ray/util/client/server/proxier.py", line 780, in Datapath\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Proxy failed to Connect to backend! Check `ray_client_server.err` and "
    "`ray_client_server_23002.err` on the head node of the cluster for the relevant logs.\n"
)
# ... and when the server process was gone before the proxy looked at it.
SERVER_EXITED = ConnectionAbortedError(
    "Initialization failure from server:\n"
    "Traceback (most recent call last):\n"
    '  File ".../ray/util/client/server/proxier.py", line 396, in start_specific_server\n'
    "    cmd = psutil_proc.cmdline()\n"
    "psutil.ZombieProcess: PID still exists but it's a zombie (pid=16789)\n"
)
NO_HEAD = ConnectionError("ray client connection timeout")


class Head:
    """Answers each connect with the next outcome (an exception, or None: attached)."""

    def __init__(self, *outcomes: Exception | None) -> None:
        self.outcomes = list(outcomes)
        self.connects = self.disconnects = 0

    def connect(self) -> None:
        self.connects += 1
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome

    def disconnect(self) -> None:
        self.disconnects += 1


def test_the_heads_reason_is_the_last_line_of_its_traceback():
    assert head_start_failure(CHANNEL_TIMEOUT).startswith(
        "RuntimeError: Proxy failed to Connect to backend!")
    assert head_start_failure(SERVER_EXITED) == (
        "psutil.ZombieProcess: PID still exists but it's a zombie (pid=16789)")
    assert head_start_failure(NO_HEAD) is None


def test_a_head_that_failed_to_start_the_drivers_server_is_asked_again():
    head = Head(SERVER_EXITED, CHANNEL_TIMEOUT, None)
    attach(head.connect, head.disconnect, ADDRESS, attempts=3, pause_s=0)
    assert head.connects == 3 and head.disconnects == 2 and not head.outcomes


def test_a_head_that_keeps_failing_is_an_error_naming_the_setting_it_needs():
    head = Head(CHANNEL_TIMEOUT, CHANNEL_TIMEOUT, CHANNEL_TIMEOUT)
    with pytest.raises(ExecutorError) as err:
        attach(head.connect, head.disconnect, ADDRESS, attempts=3, pause_s=0)
    message = str(err.value)
    assert head.connects == 3
    assert ADDRESS in message and "failed 3 times" in message
    for setting, value in BUSY_HEAD_ENV.items():
        assert f"{setting}={value}" in message
    assert set(BUSY_HEAD_ENV) == {"RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S",
                                  "TIMEOUT_FOR_SPECIFIC_SERVER_S"}  # Ray's names for them
    assert "Proxy failed to Connect to backend" in message
    assert "Traceback" not in message  # the reason, not Ray's whole traceback


def test_no_head_at_the_address_is_an_error_at_once():
    head = Head(NO_HEAD, None)
    with pytest.raises(ExecutorError, match=f"cannot attach to the Ray cluster at {ADDRESS}: "
                                            "ray client connection timeout"):
        attach(head.connect, head.disconnect, ADDRESS, attempts=3, pause_s=0)
    assert head.connects == 1 and head.disconnects == 1


class StuckClient:
    """Ray Client 2.60's order when it drops a failed connection: `closed` is set, then it
    joins its log thread, whose stream ends only when the channel is closed, which Ray
    does after that join; so the connect blocks until someone else closes the channel."""

    def __init__(self) -> None:
        self.closed = False
        self.channel = self
        self.channel_closed = threading.Event()

    def close(self) -> None:  # the channel's close
        self.channel_closed.set()

    def connect(self) -> None:
        self.closed = True
        if not self.channel_closed.wait(timeout=30):
            raise AssertionError("nobody closed the channel")
        raise SERVER_EXITED


def test_a_connect_stuck_dropping_its_failed_client_gets_its_channel_closed_and_errs():
    client = StuckClient()
    with pytest.raises(ConnectionAbortedError):
        connect_unstuck(client.connect, client_worker=lambda: client, grace_s=0.2,
                        poll_s=0.05)
    assert client.channel_closed.is_set()


def test_a_slow_connect_that_is_not_closing_is_left_alone():
    client = StuckClient()
    connected = []

    def slow_connect() -> None:
        time.sleep(0.5)
        connected.append(True)

    connect_unstuck(slow_connect, client_worker=lambda: client, grace_s=0.1, poll_s=0.05)
    assert connected and not client.channel_closed.is_set()
