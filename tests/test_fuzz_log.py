"""Property tests: the training-log / channel reader on valid, truncated, mutated and random
streams. Whatever the bytes, reading ends either in events that match the header exactly or
in `LogFormatError` (`ChannelError` on the channel) — never another exception, a hang or a
tensor of the wrong shape."""

from __future__ import annotations

import contextlib
import io
import os
import threading
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pymlgo.protocol.channel import ChannelError, make_fifos, serve_channel
from pymlgo.protocol.log import (
    ByteSource,
    Context,
    Event,
    Header,
    LogFormatError,
    LogReader,
    LogWriter,
    Observation,
    Outcome,
    read_records,
)
from pymlgo.protocol.tensor_spec import C_TYPES, TensorSpec
from tests.fuzz_watchdog import hang_guard

FAST = settings(max_examples=400, deadline=2000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
GUARD_S = 10.0  # per example (hang_guard): readers take milliseconds; a hang fails here

names = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=12)
specs = st.builds(
    TensorSpec,
    name=names,
    type=st.sampled_from(sorted(C_TYPES)),
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    port=st.integers(0, 3),
)
headers = st.builds(
    Header,
    features=st.lists(specs, min_size=1, max_size=4).map(tuple),
    advice=st.none() | specs,
    score=st.none() | specs,
)


def tensor_for(draw: st.DrawFn, spec: TensorSpec) -> np.ndarray:
    raw = draw(st.binary(min_size=spec.byte_size, max_size=spec.byte_size))
    return np.frombuffer(raw, dtype=spec.dtype).reshape(spec.shape)


@st.composite
def logs(draw: st.DrawFn) -> tuple[bytes, list[Event]]:
    """A valid log (bytes) and the events it holds, written by LogWriter."""
    header = draw(headers)
    buf = io.BytesIO()
    writer = LogWriter(buf)
    writer.write_header(header)
    events: list[Event] = [header]
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            name = draw(names)
            writer.write_context(name)
            events.append(Context(name))
            continue
        index = draw(st.integers(0, 2**40))
        tensors = tuple(tensor_for(draw, s) for s in header.features)
        writer.write_observation(index, tensors)
        events.append(Observation(index, tensors))
        if header.score is not None and draw(st.booleans()):
            score = tensor_for(draw, header.score)
            writer.write_outcome(index, score)
            events.append(Outcome(index, score))
    return buf.getvalue(), events


def same(a: Event, b: Event) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, Observation):
        assert isinstance(b, Observation)
        return a.index == b.index and len(a.tensors) == len(b.tensors) and all(
            x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
            for x, y in zip(a.tensors, b.tensors, strict=True)
        )
    if isinstance(a, Outcome):
        assert isinstance(b, Outcome)
        return a.index == b.index and a.tensor.tobytes() == b.tensor.tobytes() and (
            a.tensor.shape == b.tensor.shape
        )
    return a == b


def chunked(data: bytes, sizes: list[int]) -> ByteSource:
    """A source that hands out `data` in the given chunk sizes (as a FIFO might)."""
    pos = 0
    turn = 0

    def read(n: int) -> bytes:
        nonlocal pos, turn
        size = min(n, sizes[turn % len(sizes)]) if sizes else n
        turn += 1
        out = data[pos:pos + size]
        pos += len(out)
        return out

    return ByteSource(read)


def parse(data: bytes, sizes: list[int] | None = None) -> list[Event]:
    return list(LogReader(chunked(data, sizes or [])).events())


def check_consistent(events: list[Event]) -> None:
    """What a successful parse guarantees, whatever the input bytes were."""
    assert events and isinstance(events[0], Header)
    header = events[0]
    assert not any(isinstance(e, Header) for e in events[1:])
    for e in events[1:]:
        if isinstance(e, Observation):
            assert e.index >= 0
            assert len(e.tensors) == len(header.features)
            for t, s in zip(e.tensors, header.features, strict=True):
                assert t.dtype == s.dtype and t.shape == s.shape
        elif isinstance(e, Outcome):
            assert header.score is not None
            assert e.tensor.dtype == header.score.dtype
            assert e.tensor.shape == header.score.shape
        else:
            assert isinstance(e, Context) and isinstance(e.name, str)


def parse_or_error(data: bytes, sizes: list[int] | None = None) -> list[Event] | None:
    """The events, or None when the reader refused the bytes with LogFormatError."""
    try:
        events = parse(data, sizes)
    except LogFormatError:
        return None
    if events:
        check_consistent(events)
    return events


@FAST
@given(logs(), st.lists(st.integers(1, 7), max_size=5))
@hang_guard(GUARD_S)
def test_a_valid_log_reads_back_exactly_in_any_chunking(
    log: tuple[bytes, list[Event]], sizes: list[int]
) -> None:
    data, events = log
    got = parse(data, sizes)
    assert len(got) == len(events)
    assert all(same(a, b) for a, b in zip(got, events, strict=True))


@FAST
@given(logs(), st.data())
@hang_guard(GUARD_S)
def test_a_truncated_log_is_refused_unless_cut_between_events(
    log: tuple[bytes, list[Event]], data: st.DataObject
) -> None:
    raw, events = log
    cut = data.draw(st.integers(0, len(raw) - 1))
    prefix = raw[:cut]
    got = parse_or_error(prefix)
    if got is None:
        return
    # Accepted only when the cut fell between events: then it holds exactly the first ones.
    assert len(got) < len(events)
    assert all(same(a, b) for a, b in zip(got, events, strict=False))
    whole = io.BytesIO()
    writer = LogWriter(whole)
    for e in got:
        if isinstance(e, Header):
            writer.write_header(e)
        elif isinstance(e, Context):
            writer.write_context(e.name)
        elif isinstance(e, Observation):
            writer.write_observation(e.index, e.tensors)
        else:
            writer.write_outcome(e.index, e.tensor)
    assert whole.getvalue() == prefix  # nothing of the cut-off event was silently kept


mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 16)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("dup"), st.integers(0, 10**6), st.integers(1, 64)),
)


def mutate(raw: bytes, ops: list[tuple]) -> bytes:
    buf = bytearray(raw)
    for kind, at, arg in ops:
        at = at % (len(buf) + 1)
        if kind == "flip" and at < len(buf):
            buf[at] ^= arg
        elif kind == "delete":
            del buf[at:at + arg]
        elif kind == "insert":
            buf[at:at] = arg
        elif kind == "dup":
            buf[at:at] = buf[at:at + arg]
    return bytes(buf)


@FAST
@given(logs(), st.lists(mutations, min_size=1, max_size=4), st.lists(st.integers(1, 9),
                                                                    max_size=3))
@hang_guard(GUARD_S)
def test_a_mutated_log_is_refused_or_reads_consistently(
    log: tuple[bytes, list[Event]], ops: list[tuple], sizes: list[int]
) -> None:
    data = mutate(log[0], ops)
    got = parse_or_error(data, sizes)
    event("refused" if got is None else "read")
    # Chunking never changes the verdict or the events.
    again = parse_or_error(data)
    assert (got is None) == (again is None)
    if got is not None and again is not None:
        assert all(same(a, b) for a, b in zip(got, again, strict=True))


@FAST
@given(st.binary(max_size=300))
@hang_guard(GUARD_S)
def test_random_bytes_are_refused_or_read_consistently(data: bytes) -> None:
    event("refused" if parse_or_error(data) is None else "read")
    with contextlib.suppress(LogFormatError):
        list(read_records(io.BytesIO(data)))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | names,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
    max_leaves=12,
)
json_events = st.dictionaries(
    st.sampled_from(["features", "advice", "score", "context", "observation", "outcome",
                     "name", "type", "shape", "port"]) | names,
    json_values, max_size=4,
)


@settings(FAST, max_examples=250)
@given(st.lists(json_events | json_values, min_size=1, max_size=4))
@hang_guard(GUARD_S)
def test_arbitrary_json_lines_are_refused_or_read_consistently(lines: list[object]) -> None:
    import json

    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    event("refused" if parse_or_error(data) is None else "read")


@hang_guard(GUARD_S)
def test_pathological_lines_end_in_a_format_error() -> None:
    """Deep nesting (json recursion), a line past the size cap, huge claimed tensors."""
    for data in (
        b"[" * 200_000 + b"\n",
        b'{"features":' + b"[" * 200_000 + b"\n",
        b"x" * (2 << 20),
        b'{"features":[{"name":"a","type":"float","shape":[1000000000000]}]}\n'
        b'{"observation":0}\n' + b"\0" * 100,
        b'{"features":[{"name":"a","type":"float","shape":[1e400]}]}\n',
        b'{"features":[{"name":"a","type":"float","shape":[-1]}]}\n',
        b'{"features":[],"score":{"name":"r","type":"half","shape":[1]}}\n',
    ):
        assert parse_or_error(data) is None


# --- the channel: a peer writes fuzzed bytes into the FIFO the host reads ---------------

CHANNEL = settings(max_examples=150, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CHANNEL_GUARD_S = 20.0  # a session's reads time out at 0.25 s; the peer thread joins in 10


def run_peer(base: Path, payload: bytes, hold_open: bool, done: threading.Event) -> None:
    """The compiler's side of the protocol: open .in, then .out, write, drain advice."""
    in_fd = os.open(f"{base}.in", os.O_RDONLY)
    out_fd = os.open(f"{base}.out", os.O_WRONLY)
    try:
        view = memoryview(payload)
        while view:
            try:
                view = view[os.write(out_fd, view[:4096]):]
            except BrokenPipeError:
                break
        if hold_open:  # a compiler that stops talking but stays alive
            done.wait(10)
    finally:
        os.close(out_fd)
        os.close(in_fd)


def answer(context: str, obs: Observation, header: Header) -> np.ndarray:
    assert header.advice is not None
    if header.advice.element_count > 64:
        raise ChannelError("advice tensor too large for this test policy")
    return np.zeros(header.advice.shape, dtype=header.advice.dtype)


channel_logs = logs().filter(lambda log: isinstance(log[1][0], Header))


@CHANNEL
@given(channel_logs, st.lists(mutations, max_size=3), st.booleans())
@hang_guard(CHANNEL_GUARD_S)
def test_the_channel_host_ends_in_a_session_or_a_channel_error_never_a_hang(
    log: tuple[bytes, list[Event]], ops: list[tuple], hold_open: bool
) -> None:
    payload = mutate(log[0], ops) if ops else log[0]
    with TemporaryDirectory(prefix="mlgo-fuzz-") as tmp:
        base = make_fifos(Path(tmp))
        done = threading.Event()
        peer = threading.Thread(target=run_peer, args=(base, payload, hold_open, done),
                                daemon=True)
        peer.start()
        try:
            session = serve_channel(base, answer, timeout=0.25)
        except ChannelError as exc:
            event(f"ChannelError: {type(exc).__name__}")
            session = None
        else:
            event("session")
        finally:
            done.set()
            peer.join(10)
        assert not peer.is_alive()
        if session is not None:
            assert session.header is not None
            for d in session.decisions:
                for t, s in zip(d.features, session.header.features, strict=True):
                    assert t.shape == s.shape and t.dtype == s.dtype
