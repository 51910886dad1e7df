"""LLVM's MLGO training-log format: reader and writer.

The same format travels on the interactive channel (compiler -> host) and is written to
training logs. A stream is a sequence of items, each ending in a newline:

1. Header, exactly once and first: one JSON line
   `{"features":[SPEC,...],"score":SPEC,"advice":SPEC}` where each SPEC is a `TensorSpec`
   object `{"name":..,"type":..,"port":..,"shape":[..]}`. `"features"` is required;
   `"score"` is present in training logs that carry rewards, `"advice"` on the interactive
   channel (LLVM writes them in this order: features, score, advice).
2. `{"context":NAME}` - starts a context (the inliner sends one per module with NAME `""`,
   regalloc one per machine function). Observation numbers restart at 0 in each context.
3. `{"observation":N}` followed by the raw native-endian bytes of every feature tensor, in
   header order, each `element_count * element size` bytes with no separators, then `\\n`.
   The tensor bytes are binary and may themselves contain `\\n`, so they must be read by
   size, never by line.
4. Training logs only: `{"outcome":N}` (N = the observation it belongs to) followed by the
   bytes of the score tensor, then `\\n`.

JSON is compact (`{"context":"f"}`, no spaces). The advice is not part of an observation on
the channel; the host replies with the raw bytes of one advice tensor per observation. Our
own trace files store the decision as an extra feature named after the advice spec.

A clean end of stream between items ends the stream; anything else that is incomplete or
malformed raises `LogFormatError`, saying what was wrong and at which byte offset.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from pymlgo.protocol.tensor_spec import TensorSpec, dumps_compact

# Far above any real header (the regalloc header is a few KB); bounds memory on garbage input.
MAX_LINE_BYTES = 1 << 20


class LogFormatError(ValueError):
    """The byte stream is not a well-formed training log / channel stream."""


@dataclass(frozen=True)
class Header:
    features: tuple[TensorSpec, ...]
    advice: TensorSpec | None = None
    score: TensorSpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))

    @property
    def observation_size(self) -> int:
        """Bytes of tensor data following an `{"observation":N}` line (without the `\\n`)."""
        return sum(spec.byte_size for spec in self.features)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"features": [spec.to_json() for spec in self.features]}
        if self.score is not None:
            out["score"] = self.score.to_json()
        if self.advice is not None:
            out["advice"] = self.advice.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Header:
        features = d.get("features")
        if not isinstance(features, list):
            raise ValueError("header 'features' must be a list of tensor specs")
        advice, score = d.get("advice"), d.get("score")
        return cls(
            features=tuple(TensorSpec.from_json(f) for f in features),
            advice=None if advice is None else TensorSpec.from_json(advice),
            score=None if score is None else TensorSpec.from_json(score),
        )


@dataclass(frozen=True)
class Context:
    name: str


# eq=False: dataclass equality on ndarray fields would raise ("truth value is ambiguous").
@dataclass(frozen=True, eq=False)
class Observation:
    index: int
    tensors: tuple[np.ndarray, ...]  # one per header feature, shaped as its spec; read-only


@dataclass(frozen=True, eq=False)
class Outcome:
    index: int
    tensor: np.ndarray  # shaped as the header's score spec


Event = Header | Context | Observation | Outcome


class ByteSource:
    """Buffered reads on top of a `read(n)` callable that may return fewer bytes than asked.

    `read(n)` returns b"" only at end of stream. Pipes, FIFOs and the poll-bounded channel
    reader all deliver data in arbitrary chunks, so the buffer loops until it has enough.
    """

    def __init__(self, read: Callable[[int], bytes], chunk_size: int = 1 << 16) -> None:
        self._read = read
        self._chunk_size = chunk_size
        self._buf = bytearray()
        self._eof = False
        self.offset = 0  # bytes consumed so far, for error messages

    @classmethod
    def from_stream(cls, stream: BinaryIO) -> ByteSource:
        # `read1` returns what is available; a buffered `read(n)` would wait for all n bytes.
        read1 = getattr(stream, "read1", None)
        return cls(read1 if callable(read1) else stream.read)

    def _fill(self) -> bool:
        if self._eof:
            return False
        data = self._read(self._chunk_size)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        self.offset += len(out)
        return out

    def read_exactly(self, n: int) -> bytes:
        """`n` bytes, or fewer only if the stream ended."""
        while len(self._buf) < n and self._fill():
            pass
        return self._take(n)

    def readline(self, limit: int = MAX_LINE_BYTES) -> bytes:
        """Bytes up to and including the next `\\n`; without it only at end of stream."""
        scanned = 0
        while True:
            end = self._buf.find(b"\n", scanned)
            if end >= 0:
                return self._take(end + 1)
            if len(self._buf) > limit:
                raise LogFormatError(f"line at byte {self.offset} exceeds {limit} bytes")
            scanned = len(self._buf)
            if not self._fill():
                return self._take(len(self._buf))


class LogReader:
    """Parses events from a `ByteSource`; `header` is set once the header has been read.

    Reads lazily: the next event is only requested from the source when the consumer asks
    for it, so a channel host can reply to an observation before reading further.

    With `successive_sessions`, a header where the next item would start (after the newline
    that ends a header, a context or an observation's tensor bytes) ends one session and
    starts the next: `header` becomes the new one, and contexts and observation numbers start
    afresh. That is how a channel stream carries sessions of compilers that opened it one
    after another before the host read the end of the previous one's stream. Anywhere else a
    header is malformed as before: inside a line it is bad JSON, inside tensor bytes it is
    read as tensor bytes and the newline after them is missing, so a session cut off in the
    middle of an item is still reported (unless what follows happens to fill the tensor
    bytes up to one of its newlines: framing by size alone cannot tell, with or without
    successive sessions).
    """

    def __init__(self, source: ByteSource, *, successive_sessions: bool = False) -> None:
        self._src = source
        self._successive_sessions = successive_sessions
        self.header: Header | None = None

    def events(self) -> Iterator[Event]:
        context = ""
        awaiting_outcome: int | None = None  # last observation in this context w/o outcome
        header = self.header
        layout = None if header is None else _layout(header.features)
        while True:
            start = self._src.offset
            line = self._src.readline()
            if not line:
                return  # clean end between events
            if header is not None and (index := _observation_index(line)) is not None:
                # The channel's hot path: the compiler waits while this line is parsed.
                assert layout is not None  # set with the header
                data = self._read_payload(layout.size, f"observation {index}")
                awaiting_outcome = index
                yield Observation(index, _split_tensors(layout, data))
                continue
            obj = _parse_line(line, start)
            if header is None or (self._successive_sessions and "features" in obj):
                header = self.header = _parse_header(obj, start)
                layout = _layout(header.features)
                context, awaiting_outcome = "", None
                yield header
                continue
            key, value = _single_event(obj, start)
            if key == "context":
                if not isinstance(value, str):
                    raise LogFormatError(f"context name must be a string at byte {start}")
                context, awaiting_outcome = value, None
                yield Context(value)
            elif key == "observation":
                index = _event_index(value, key, start)
                assert layout is not None  # set with the header
                data = self._read_payload(layout.size, f"observation {index}")
                awaiting_outcome = index
                yield Observation(index, _split_tensors(layout, data))
            else:
                index = _event_index(value, key, start)
                score = header.score
                if score is None:
                    raise LogFormatError(f"outcome at byte {start} but the header has no score")
                if index != awaiting_outcome:
                    raise LogFormatError(
                        f"outcome {index} at byte {start} in context {context!r} must directly"
                        f" follow observation {index}; observation awaiting an outcome:"
                        f" {awaiting_outcome}"
                    )
                data = self._read_payload(score.byte_size, f"outcome {index}")
                awaiting_outcome = None
                yield Outcome(index, _split_tensors(_layout((score,)), data)[0])

    def _read_payload(self, size: int, what: str) -> bytes:
        start = self._src.offset
        data = self._src.read_exactly(size)
        _check_payload(len(data), size, None, start, what)
        _check_payload(size, size, self._src.read_exactly(1), start, what)
        return data


def _check_payload(got: int, size: int, end: bytes | None, start: int, what: str) -> None:
    """LogFormatError unless all `size` tensor bytes starting at byte `start` arrived (`got`
    of them) and, once `end` (the byte after them, b"" at end of stream) is known, it is the
    newline that closes them."""
    if got < size:
        raise LogFormatError(f"{what}: stream ended after {got} of {size} tensor bytes"
                             f" (tensor data starts at byte {start})")
    if end is not None and end != b"\n":
        got_end = "end of stream" if not end else repr(end)
        raise LogFormatError(
            f"{what}: expected newline after tensor data at byte {start + size}, got {got_end}")


_OBSERVATION_PREFIX, _LINE_END = b'{"observation":', b"}\n"


def _observation_index(line: bytes) -> int | None:
    """N of a line that is exactly LLVM's compact `{"observation":N}`, else None (the line
    then goes through the JSON parser, which accepts or refuses it as before)."""
    if not (line.startswith(_OBSERVATION_PREFIX) and line.endswith(_LINE_END)):
        return None
    digits = line[len(_OBSERVATION_PREFIX) : -len(_LINE_END)]
    # ASCII digits without a leading zero: exactly the JSON non-negative integers
    if not digits.isdigit() or (digits[0] == 0x30 and len(digits) > 1):
        return None
    return int(digits)


def _parse_line(line: bytes, start: int) -> dict[str, Any]:
    if not line.endswith(b"\n"):
        raise LogFormatError(f"stream ended inside a JSON line at byte {start}: {line[:80]!r}")
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # deep nesting recurses
        raise LogFormatError(f"malformed JSON at byte {start}: {line[:80]!r} ({e})") from e
    if not isinstance(obj, dict):
        raise LogFormatError(f"expected a JSON object at byte {start}, got {line[:80]!r}")
    return obj


def _parse_header(obj: dict[str, Any], start: int) -> Header:
    if "features" not in obj:
        raise LogFormatError(
            f"expected the header (with 'features') at byte {start}, got {str(obj)[:80]}"
        )
    try:
        return Header.from_json(obj)
    except ValueError as e:
        raise LogFormatError(f"bad header at byte {start}: {e}") from e


def _single_event(obj: dict[str, Any], start: int) -> tuple[str, Any]:
    if len(obj) != 1 or next(iter(obj)) not in ("context", "observation", "outcome"):
        raise LogFormatError(f"unknown event {sorted(obj)} at byte {start}")
    return next(iter(obj.items()))


def _event_index(value: Any, key: str, start: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LogFormatError(f"{key} number must be a non-negative integer at byte {start}")
    return value


@dataclass(frozen=True)
class _Layout:
    """Where each tensor sits in an observation's bytes: computed once per header, since the
    channel splits thousands of observations per module; `size` is the byte count."""

    slots: tuple[tuple[np.dtype[Any], int, tuple[int, ...], int], ...]  # dtype, count, shape, at
    uniform: np.dtype[Any] | None  # the one dtype of all tensors, if they share one
    size: int  # bytes of all tensors
    stacked: tuple[int, ...] | None  # (count, *shape) if all tensors share dtype and shape


def _layout(specs: Sequence[TensorSpec]) -> _Layout:
    slots, offset = [], 0
    for spec in specs:
        slots.append((spec.dtype, spec.element_count, spec.shape, offset))
        offset += spec.byte_size
    dtypes = {spec.dtype for spec in specs}
    uniform = dtypes.pop() if len(dtypes) == 1 else None
    shapes = {spec.shape for spec in specs}
    stacked = (len(specs), *shapes.pop()) if uniform is not None and len(shapes) == 1 else None
    return _Layout(tuple(slots), uniform, offset, stacked)


def _split_tensors(layout: _Layout, data: bytes) -> tuple[np.ndarray, ...]:
    if layout.stacked is not None:
        # The inliner's case (all int64 [1]): iterating one reshaped view makes the
        # per-tensor views in C, about twice as fast as slicing each in Python.
        return tuple(np.frombuffer(data, dtype=layout.uniform).reshape(layout.stacked))
    if layout.uniform is not None:
        # One buffer view sliced per tensor: several times faster than a view per tensor.
        flat = np.frombuffer(data, dtype=layout.uniform)
        size = layout.uniform.itemsize
        return tuple(
            flat[at // size : at // size + count]
            if len(shape) == 1
            else flat[at // size : at // size + count].reshape(shape)
            for _, count, shape, at in layout.slots
        )
    return tuple(
        np.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(shape)
        for dtype, count, shape, at in layout.slots
    )


def read_events(stream: BinaryIO) -> Iterator[Event]:
    """Events of a log stream: the `Header` first, then `Context`/`Observation`/`Outcome`."""
    return LogReader(ByteSource.from_stream(stream)).events()


def tensor_bytes(spec: TensorSpec, value: Any) -> bytes:
    """Raw bytes of `value` as tensor `spec`, after checking element count and dtype.

    numpy arrays and scalars must already have the spec's dtype (no silent casts); plain
    Python numbers and lists are converted to it.
    """
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype != spec.dtype:
            raise ValueError(f"tensor {spec.name!r}: dtype {arr.dtype}, expected {spec.dtype}")
    else:
        arr = np.asarray(value, dtype=spec.dtype)
    if arr.size != spec.element_count:
        raise ValueError(
            f"tensor {spec.name!r}: {arr.size} elements, expected {spec.element_count}"
            f" (shape {list(spec.shape)})"
        )
    return arr.tobytes()


class LogWriter:
    """Writes a log stream; each event is validated against the header written first."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.header: Header | None = None

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._stream.write(view)
            # Raw (unbuffered) streams may accept only part of the data.
            view = view[len(view) if n is None else n :]

    def _line(self, obj: object) -> bytes:
        return dumps_compact(obj).encode() + b"\n"

    def _require_header(self) -> Header:
        if self.header is None:
            raise ValueError("write_header must come first")
        return self.header

    def write_header(self, header: Header) -> None:
        if self.header is not None:
            raise ValueError("the header was already written")
        self.header = header
        self._write(self._line(header.to_json()))

    def write_context(self, name: str) -> None:
        self._require_header()
        self._write(self._line({"context": name}))

    def write_observation(self, index: int, tensors: Sequence[Any]) -> None:
        features = self._require_header().features
        if len(tensors) != len(features):
            raise ValueError(
                f"observation {index}: {len(tensors)} tensors for {len(features)} header features"
            )
        payload = b"".join(tensor_bytes(s, t) for s, t in zip(features, tensors, strict=True))
        self._write(self._line({"observation": index}) + payload + b"\n")

    def write_outcome(self, index: int, tensor: Any) -> None:
        score = self._require_header().score
        if score is None:
            raise ValueError("the header has no score spec, so outcomes cannot be written")
        self._write(self._line({"outcome": index}) + tensor_bytes(score, tensor) + b"\n")

    def flush(self) -> None:
        self._stream.flush()


@dataclass(frozen=True, eq=False)
class Record:
    """One observation with its features by name and, in scored logs, its outcome."""

    context: str
    index: int
    features: dict[str, np.ndarray]
    outcome: np.ndarray | None


def read_records(stream: BinaryIO) -> Iterator[Record]:
    """Observations of a log paired with their outcomes (`None` when the log has no score)."""
    header: Header | None = None
    context = ""
    pending: tuple[str, Observation] | None = None  # observation waiting for its outcome

    def record(ctx: str, obs: Observation, outcome: np.ndarray | None) -> Record:
        assert header is not None
        names = (spec.name for spec in header.features)
        return Record(ctx, obs.index, dict(zip(names, obs.tensors, strict=True)), outcome)

    for event in read_events(stream):
        if isinstance(event, Outcome):
            assert pending is not None  # the reader checked the outcome follows an observation
            yield record(*pending, event.tensor)
            pending = None
            continue
        if pending is not None:
            yield record(*pending, None)
            pending = None
        if isinstance(event, Header):
            header = event
        elif isinstance(event, Context):
            context = event.name
        elif header is not None and header.score is not None:
            pending = (context, event)
        else:
            yield record(context, event, None)
    if pending is not None:
        yield record(*pending, None)


@dataclass(frozen=True, eq=False)
class LogColumns:
    """A whole log read at once, column-wise: what `read_events` yields, gathered.

    `columns[name]` has shape `(n, *spec.shape)` for the n observations, in file order;
    `contexts[i]` is observation i's context name; `scores[i]` its outcome's score tensor
    flattened to its first element (NaN where it has none; None if the header has no score).
    """

    header: Header
    contexts: tuple[str, ...]
    columns: Mapping[str, np.ndarray]
    scores: np.ndarray | None


def read_log_columns(data: bytes) -> LogColumns | None:
    """Parse a complete log held in memory (None if it is empty), checking exactly what
    `read_events` checks, with the same errors.

    Why a second reader: training reads traces of millions of decisions, and building one
    array per tensor per observation (as the event reader must, to answer the compiler
    between observations) costs minutes there. This one records where each observation's
    bytes are and cuts every feature's column out of them at once."""
    view = memoryview(data)
    total = len(data)
    if not total:
        return None
    end = data.find(b"\n")
    line = bytes(view[: end + 1]) if end >= 0 else bytes(view)
    header = _parse_header(_parse_line(line, 0), 0)
    size = header.observation_size
    score = header.score
    score_size = score.byte_size if score is not None else 0
    offsets: list[int] = []
    contexts: list[str] = []
    scores: list[float] = []
    context, awaiting = "", None
    pos = end + 1 if end >= 0 else total

    def payload(at: int, n: int, what: str) -> int:
        _check_payload(min(n, total - at), n, data[at + n: at + n + 1], at, what)
        return at + n + 1

    while pos < total:
        end = data.find(b"\n", pos)
        if end < 0:
            _parse_line(bytes(view[pos:]), pos)  # raises: the stream ends inside a line
        if end - pos > MAX_LINE_BYTES:
            raise LogFormatError(f"line at byte {pos} exceeds {MAX_LINE_BYTES} bytes")
        line = bytes(view[pos: end + 1])
        index = _observation_index(line)
        key = "observation"
        if index is None:
            key, value = _single_event(_parse_line(line, pos), pos)
            if key == "context":
                if not isinstance(value, str):
                    raise LogFormatError(f"context name must be a string at byte {pos}")
                context, awaiting = value, None
                pos = end + 1
                continue
            index = _event_index(value, key, pos)
        if key == "observation":
            offsets.append(end + 1)
            contexts.append(context)
            scores.append(float("nan"))
            awaiting = index
            pos = payload(end + 1, size, f"observation {index}")
            continue
        if score is None:
            raise LogFormatError(f"outcome at byte {pos} but the header has no score")
        if index != awaiting:
            raise LogFormatError(
                f"outcome {index} at byte {pos} in context {context!r} must directly"
                f" follow observation {index}; observation awaiting an outcome: {awaiting}")
        pos = payload(end + 1, score_size, f"outcome {index}")
        scores[-1] = float(np.frombuffer(data, dtype=score.dtype, count=1, offset=end + 1)[0])
        awaiting = None
    n = len(offsets)
    raw = np.frombuffer(b"".join(view[o: o + size] for o in offsets), dtype=np.uint8)
    rows = raw.reshape(n, size)
    columns: dict[str, np.ndarray] = {}
    for spec, (dtype, _, shape, at) in zip(header.features, _layout(header.features).slots,
                                           strict=True):
        block = np.ascontiguousarray(rows[:, at: at + spec.byte_size])
        columns[spec.name] = block.view(dtype).reshape(n, *shape)
    return LogColumns(header, tuple(contexts), columns,
                      np.asarray(scores, dtype=np.float64) if score is not None else None)
