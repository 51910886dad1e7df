"""Training-log format: what the writer produces, the reader recovers, from any byte stream."""

import io
import os
import random
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from pymlgo.protocol.log import (
    ByteSource,
    Context,
    Event,
    Header,
    LogColumns,
    LogFormatError,
    LogReader,
    LogWriter,
    Observation,
    Outcome,
    read_events,
    read_log_columns,
    read_records,
)
from pymlgo.protocol.tensor_spec import TensorSpec

FEATURES = (
    TensorSpec("mask", "int64_t", (1, 33)),
    TensorSpec("weights", "float", (1, 33)),
    TensorSpec("small", "int8_t", (3,)),
    TensorSpec("wide", "double", (2,)),
    TensorSpec("flag", "uint16_t", (1,)),
)
SCORED = Header(features=FEATURES, score=TensorSpec("reward", "float", (1,)))

# Values whose raw bytes are 0x0a (`\n`): the reader must go by size, not by line.
NEWLINE_INT64 = np.int64(10)
NEWLINE_FLOAT = np.frombuffer(b"\n\n\n\n", dtype=np.float32)[0]


def observation_tensors(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(-(2**40), 2**40, size=(1, 33), dtype=np.int64),
        rng.standard_normal((1, 33)).astype(np.float32),
        rng.integers(-128, 127, size=3, dtype=np.int8),
        rng.standard_normal(2),
        np.array([seed], dtype=np.uint16),
    )


def newline_tensors() -> tuple[np.ndarray, ...]:
    return (
        np.full((1, 33), NEWLINE_INT64),
        np.full((1, 33), NEWLINE_FLOAT),
        np.full(3, 10, dtype=np.int8),
        np.frombuffer(b"\n" * 16, dtype=np.float64).copy(),
        np.array([0x0A0A], dtype=np.uint16),
    )


def write_sample_log() -> tuple[bytes, list[int], list[Event]]:
    """A scored log with two contexts; returns its bytes, event end offsets and events."""
    out = io.BytesIO()
    writer = LogWriter(out)
    boundaries, events = [0], []

    def record(event: Event) -> None:
        boundaries.append(out.tell())
        events.append(event)

    writer.write_header(SCORED)
    record(SCORED)
    for context, tensor_sets in (
        ("f", [observation_tensors(1), newline_tensors()]),
        ("g", [observation_tensors(2)]),
    ):
        writer.write_context(context)
        record(Context(context))
        for index, tensors in enumerate(tensor_sets):
            writer.write_observation(index, tensors)
            record(Observation(index, tensors))
            reward = np.array([0.5 + index], dtype=np.float32)
            writer.write_outcome(index, reward)
            record(Outcome(index, reward))
    return out.getvalue(), boundaries, events


def assert_same_events(got: list[Event], expected: list[Event]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert type(a) is type(b)
        if isinstance(a, Observation) and isinstance(b, Observation):
            assert a.index == b.index
            assert len(a.tensors) == len(b.tensors)
            for x, y in zip(a.tensors, b.tensors, strict=True):
                assert x.dtype == y.dtype and x.shape == y.shape
                assert x.tobytes() == y.tobytes()
        elif isinstance(a, Outcome) and isinstance(b, Outcome):
            assert a.index == b.index
            assert a.tensor.dtype == b.tensor.dtype and a.tensor.tobytes() == b.tensor.tobytes()
        else:
            assert a == b


class TrickleStream(io.RawIOBase):
    """Delivers at most `step` bytes per read, like a pipe fed by a slow writer."""

    def __init__(self, data: bytes, step: int = 1) -> None:
        self._data, self._pos, self._step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(self._step, len(buffer), len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def events_of(data: bytes) -> list[Event]:
    return list(read_events(io.BytesIO(data)))


# --- the format on the wire ---------------------------------------------------------------


def test_writer_emits_llvms_compact_lines_then_raw_tensor_bytes() -> None:
    header = Header(features=(TensorSpec("a", "int64_t", (1,)), TensorSpec("b", "float", (2,))))
    out = io.BytesIO()
    writer = LogWriter(out)
    writer.write_header(header)
    writer.write_context("main")
    writer.write_observation(0, (np.array([10], np.int64), np.array([1.0, 2.0], np.float32)))

    assert out.getvalue() == (
        b'{"features":[{"name":"a","type":"int64_t","port":0,"shape":[1]},'
        b'{"name":"b","type":"float","port":0,"shape":[2]}]}\n'
        b'{"context":"main"}\n'
        b'{"observation":0}\n'
        + np.int64(10).tobytes()
        + np.array([1.0, 2.0], np.float32).tobytes()
        + b"\n"
    )


def test_round_trip_of_shaped_int_and_float_tensors_contexts_and_outcomes() -> None:
    data, _, expected = write_sample_log()

    assert_same_events(events_of(data), expected)


def test_tensor_bytes_that_are_newlines_are_read_by_size() -> None:
    data, _, _ = write_sample_log()
    observations = [e for e in events_of(data) if isinstance(e, Observation)]

    newline_obs = observations[1]
    assert newline_obs.tensors[0].tobytes()[:8] == b"\n" + bytes(7)
    assert (newline_obs.tensors[0] == 10).all()
    assert newline_obs.tensors[1].tobytes() == b"\n" * 4 * 33
    assert all(t.shape == s.shape for t, s in zip(newline_obs.tensors, FEATURES, strict=True))


@pytest.mark.parametrize("step", [1, 7, 313])
def test_reading_a_stream_that_trickles_bytes(step: int) -> None:
    data, _, expected = write_sample_log()

    assert_same_events(list(read_events(TrickleStream(data, step))), expected)


def test_reading_a_buffered_stream_over_a_trickling_raw_stream() -> None:
    data, _, expected = write_sample_log()

    stream = io.BufferedReader(TrickleStream(data, 3))
    assert_same_events(list(read_events(stream)), expected)


def test_reading_from_an_os_pipe_written_in_random_chunks() -> None:
    data, _, expected = write_sample_log()
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        rng = random.Random(0)
        with os.fdopen(write_fd, "wb", buffering=0) as w:
            pos = 0
            while pos < len(data):
                n = rng.randint(1, 50)
                w.write(data[pos : pos + n])
                pos += n

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read_fd, "rb") as stream:
        got = list(read_events(stream))
    writer.join()
    assert_same_events(got, expected)


def test_the_reader_is_lazy_so_a_peer_can_answer_before_more_bytes_exist() -> None:
    data, boundaries, _ = write_sample_log()
    served = 0

    def read(n: int) -> bytes:
        nonlocal served
        chunk = data[served : served + min(n, 5)]
        served += len(chunk)
        return chunk

    events: Iterator[Event] = LogReader(ByteSource(read)).events()
    for _ in range(3):  # header, context, first observation
        next(events)
    # The trailing newline of the observation is consumed, nothing of the next event.
    assert served - boundaries[3] < 5


# --- truncation and malformed input -------------------------------------------------------


def test_every_truncation_is_a_clean_prefix_or_a_format_error() -> None:
    data, boundaries, expected = write_sample_log()

    for cut in range(len(data) + 1):
        if cut in boundaries:
            assert_same_events(events_of(data[:cut]), expected[: boundaries.index(cut)])
        else:
            with pytest.raises(LogFormatError):
                events_of(data[:cut])


# --- successive sessions on one stream (the channel, see `LogReader`) ---------------------


def sessions_of(data: bytes) -> list[Event]:
    return list(LogReader(ByteSource(io.BytesIO(data).read), successive_sessions=True).events())


def test_successive_sessions_each_start_afresh_with_their_header() -> None:
    data, _, expected = write_sample_log()
    unscored = Header(features=FEATURES[:1])
    second = io.BytesIO()
    writer = LogWriter(second)
    writer.write_header(unscored)
    writer.write_observation(0, observation_tensors(3)[:1])  # no context: it starts at ""
    reader = LogReader(ByteSource(io.BytesIO(data + second.getvalue() + data).read),
                       successive_sessions=True)

    got = list(reader.events())

    again = [unscored, Observation(0, observation_tensors(3)[:1])]
    assert_same_events(got, [*expected, *again, *expected])
    assert reader.header == SCORED


def test_a_session_may_end_right_after_its_header() -> None:
    data, _, expected = write_sample_log()
    header_line = data[: data.index(b"\n") + 1]

    assert_same_events(sessions_of(header_line + data), [SCORED, *expected])


def test_without_successive_sessions_a_second_header_is_a_format_error() -> None:
    data, _, _ = write_sample_log()

    with pytest.raises(LogFormatError, match=r"unknown event \['features', 'score'\] at byte"):
        events_of(data + data)


def test_a_session_cut_inside_an_item_is_an_error_though_the_next_session_follows() -> None:
    # Only where an item may start does a header start a session: cut anywhere else, the
    # next session's header lands inside a line or inside tensor bytes. Tensor bytes are
    # framed by size alone, so bytes that happen to fill them up to a newline pass for them
    # (here: the header and the context line after it, or the header without its newline):
    # exactly what the reader without successive sessions accepts too.
    data, boundaries, expected = write_sample_log()
    undetectable = []

    for cut in range(1, len(data)):
        if cut in boundaries:
            assert_same_events(sessions_of(data[:cut] + data),
                               [*expected[: boundaries.index(cut)], *expected])
            continue
        try:
            got = sessions_of(data[:cut] + data)
        except LogFormatError:
            continue
        assert_same_events(events_of(data[:cut] + data), got)
        undetectable.append(cut)

    payload_ends = [boundaries[i + 1] - 1 for i, e in enumerate(expected)
                    if isinstance(e, Observation)]
    header_line, context_line = boundaries[1], boundaries[2] - boundaries[1]
    assert undetectable == sorted(end - n for end in payload_ends
                                  for n in (header_line + context_line - 1, header_line - 1))


def test_truncated_tensor_bytes_name_the_observation_and_offset() -> None:
    data, boundaries, _ = write_sample_log()
    inside_first_observation = boundaries[3] - 10

    with pytest.raises(LogFormatError, match=r"observation 0: stream ended after \d+ of 417"):
        events_of(data[:inside_first_observation])


def test_missing_newline_after_tensors_is_reported_with_its_offset() -> None:
    data, boundaries, _ = write_sample_log()
    end = boundaries[3] - 1
    broken = data[:end] + b"x" + data[end + 1 :]

    with pytest.raises(LogFormatError, match=rf"newline after tensor data at byte {end}, got b'x'"):
        events_of(broken)


@pytest.mark.parametrize(
    ("after_header", "message"),
    [
        (b'{"context":"f"\n', "malformed JSON at byte"),
        (b"[1,2]\n", "expected a JSON object"),
        (b'{"decision":0}\n', r"unknown event \['decision'\]"),
        (b'{"context":"f","observation":0}\n', "unknown event"),
        (b'{"features":[]}\n', r"unknown event \['features'\]"),
        (b'{"observation":-1}\n', "non-negative integer"),
        (b'{"observation":true}\n', "non-negative integer"),
        (b'{"context":3}\n', "context name must be a string"),
        (
            b'{"outcome":0}\n',
            r"outcome 0 at byte \d+ .* follow observation 0; .* awaiting an outcome: None",
        ),
    ],
)
def test_malformed_events_are_format_errors(after_header: bytes, message: str) -> None:
    header = io.BytesIO()
    LogWriter(header).write_header(SCORED)

    with pytest.raises(LogFormatError, match=message):
        events_of(header.getvalue() + after_header)


def test_an_outcome_must_belong_to_the_latest_observation() -> None:
    out = io.BytesIO()
    writer = LogWriter(out)
    writer.write_header(SCORED)
    writer.write_context("f")
    writer.write_observation(0, observation_tensors(0))
    writer.write_outcome(1, np.array([1.0], np.float32))

    with pytest.raises(
        LogFormatError,
        match="outcome 1 .* follow observation 1; observation awaiting an outcome: 0",
    ):
        events_of(out.getvalue())


def test_an_outcome_in_a_log_without_score_is_a_format_error() -> None:
    header = Header(features=(TensorSpec("a", "int64_t", (1,)),))
    out = io.BytesIO()
    writer = LogWriter(out)
    writer.write_header(header)
    writer.write_observation(0, (np.array([1], np.int64),))

    with pytest.raises(LogFormatError, match="the header has no score"):
        events_of(out.getvalue() + b'{"outcome":0}\n' + bytes(4) + b"\n")


@pytest.mark.parametrize(
    "first_line",
    [b'{"observation":0}\n', b'{"context":""}\n', b"hello\n", b'{"features":[{"name":1}]}\n'],
)
def test_a_stream_must_start_with_a_valid_header(first_line: bytes) -> None:
    with pytest.raises(LogFormatError, match="header|malformed JSON at byte 0"):
        events_of(first_line)


def test_an_endless_line_of_garbage_is_refused_without_reading_it_all() -> None:
    with pytest.raises(LogFormatError, match="exceeds"):
        events_of(b"x" * (2 << 20))


def test_an_empty_stream_has_no_events() -> None:
    assert events_of(b"") == []


# --- writer validation --------------------------------------------------------------------


def test_writer_refuses_tensors_that_do_not_match_the_header() -> None:
    writer = LogWriter(io.BytesIO())
    with pytest.raises(ValueError, match="write_header must come first"):
        writer.write_context("f")
    writer.write_header(SCORED)
    good = observation_tensors(0)

    with pytest.raises(ValueError, match="4 tensors for 5 header features"):
        writer.write_observation(0, good[:4])
    with pytest.raises(ValueError, match="'weights': dtype float64, expected float32"):
        writer.write_observation(0, (good[0], good[1].astype(np.float64), *good[2:]))
    with pytest.raises(ValueError, match="'mask': 32 elements, expected 33"):
        writer.write_observation(0, (good[0][:, :32], *good[1:]))
    with pytest.raises(ValueError, match="already written"):
        writer.write_header(SCORED)


def test_writer_converts_plain_python_numbers_to_the_spec_dtype() -> None:
    out = io.BytesIO()
    writer = LogWriter(out)
    writer.write_header(SCORED)
    writer.write_observation(0, observation_tensors(0))
    writer.write_outcome(0, [0.25])

    outcome = events_of(out.getvalue())[-1]
    assert isinstance(outcome, Outcome)
    assert outcome.tensor.dtype == np.float32 and outcome.tensor[0] == 0.25


def test_writer_refuses_outcomes_without_a_score_spec() -> None:
    writer = LogWriter(io.BytesIO())
    writer.write_header(Header(features=FEATURES))

    with pytest.raises(ValueError, match="no score spec"):
        writer.write_outcome(0, np.array([1.0], np.float32))


# --- records ------------------------------------------------------------------------------


def test_records_pair_each_observation_with_its_outcome_and_name_the_features() -> None:
    data, _, _ = write_sample_log()

    records = list(read_records(io.BytesIO(data)))

    assert [(r.context, r.index) for r in records] == [("f", 0), ("f", 1), ("g", 0)]
    assert [float(r.outcome[0]) for r in records if r.outcome is not None] == [0.5, 1.5, 0.5]
    assert list(records[0].features) == [spec.name for spec in FEATURES]
    np.testing.assert_array_equal(records[2].features["mask"], observation_tensors(2)[0])


def test_records_of_an_unscored_log_have_no_outcome() -> None:
    out = io.BytesIO()
    writer = LogWriter(out)
    writer.write_header(Header(features=FEATURES, advice=TensorSpec("d", "int64_t", (1,))))
    writer.write_context("")
    for index in range(3):
        writer.write_observation(index, observation_tensors(index))

    records = list(read_records(io.BytesIO(out.getvalue())))

    assert [(r.context, r.index, r.outcome) for r in records] == [("", i, None) for i in range(3)]


def test_a_scored_observation_without_outcome_still_becomes_a_record() -> None:
    out = io.BytesIO()
    writer = LogWriter(out)
    writer.write_header(SCORED)
    writer.write_context("f")
    writer.write_observation(0, observation_tensors(0))
    writer.write_context("g")
    writer.write_observation(0, observation_tensors(1))
    writer.write_outcome(0, np.array([2.0], np.float32))
    writer.write_observation(1, observation_tensors(2))

    records = list(read_records(io.BytesIO(out.getvalue())))

    assert [(r.context, r.index, r.outcome is None) for r in records] == [
        ("f", 0, True),
        ("g", 0, False),
        ("g", 1, True),
    ]


@pytest.mark.parametrize("line, index", [
    (b'{"observation":7}\n', 7),        # LLVM's compact form
    (b'{"observation": 7}\n', 7),       # other valid JSON spellings read the same
    (b'{ "observation":12 }\n', 12),
])
def test_observation_lines_read_the_same_in_any_valid_json_spelling(line: bytes,
                                                                   index: int) -> None:
    header = Header(features=(TensorSpec("a", "int64_t", (1,)),))
    buf = io.BytesIO()
    LogWriter(buf).write_header(header)
    buf.write(line + np.int64(5).tobytes() + b"\n")
    events = list(read_events(io.BytesIO(buf.getvalue())))
    assert isinstance(events[1], Observation)
    assert events[1].index == index and int(events[1].tensors[0][0]) == 5


@pytest.mark.parametrize("line", [
    b'{"observation":07}\n',   # not JSON: no leading zeros
    b'{"observation":-1}\n',   # observation numbers are non-negative
    b'{"observation":1_0}\n',  # Python's int() would take it; JSON does not
    b'{"observation":\xd9\xa3}\n',  # a non-ASCII digit
])
def test_observation_lines_that_are_not_json_non_negative_integers_are_refused(
    line: bytes,
) -> None:
    header = Header(features=(TensorSpec("a", "int64_t", (1,)),))
    buf = io.BytesIO()
    LogWriter(buf).write_header(header)
    buf.write(line + np.int64(5).tobytes() + b"\n")
    with pytest.raises(LogFormatError):
        list(read_events(io.BytesIO(buf.getvalue())))


# --- the whole-log columnar reader -----------------------------------------------------------


def test_the_columnar_reader_gathers_exactly_the_events_of_the_stream_reader() -> None:
    data, _, expected = write_sample_log()
    got = read_log_columns(data)
    assert isinstance(got, LogColumns)
    header = expected[0]
    assert isinstance(header, Header) and got.header == header
    observations = [e for e in expected if isinstance(e, Observation)]
    assert len(got.contexts) == len(observations)
    for i, spec in enumerate(header.features):
        column = got.columns[spec.name]
        assert column.dtype == spec.dtype and column.shape == (len(observations), *spec.shape)
        for row, obs in zip(column, observations, strict=True):
            assert np.array_equal(row, obs.tensors[i])
    # each observation's context and outcome, as the event stream pairs them
    context, want_contexts, want_scores = "", [], []
    for e in expected[1:]:
        if isinstance(e, Context):
            context = e.name
        elif isinstance(e, Observation):
            want_contexts.append(context)
            want_scores.append(np.nan)
        elif isinstance(e, Outcome):
            want_scores[-1] = float(e.tensor.reshape(-1)[0])
    assert list(got.contexts) == want_contexts
    assert got.scores is not None
    assert np.array_equal(got.scores, np.asarray(want_scores), equal_nan=True)


def test_the_columnar_reader_refuses_what_the_stream_reader_refuses() -> None:
    data, boundaries, _ = write_sample_log()
    assert read_log_columns(b"") is None
    for cut in range(1, len(data) + 1):
        if cut in boundaries:
            assert read_log_columns(data[:cut]) is not None
        else:
            with pytest.raises(LogFormatError) as caught:
                read_log_columns(data[:cut])
            with pytest.raises(LogFormatError) as streamed:
                events_of(data[:cut])
            assert str(caught.value) == str(streamed.value)
