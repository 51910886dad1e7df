"""The interactive channel host, against a scripted fake compiler and against real clang."""

import contextlib
import io
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from pymlgo.protocol.channel import (
    ChannelError,
    ChannelSession,
    ChannelTimeout,
    fifo_paths,
    make_fifos,
    remove_fifos,
    serve_channel,
    serve_channel_sessions,
    session_to_log,
)
from pymlgo.protocol.log import Header, Observation, read_records
from pymlgo.protocol.tensor_spec import TensorSpec
from tests.channel_fakes import (
    INLINER_HEADER,
    OPEN,
    PRIORITY_HEADER,
    FakeCompiler,
    context,
    inliner_payload,
    observation,
)

pytest_plugins = ("tests.channel_fixtures",)  # fixtures: base, start_fake_compiler


def advise_default(context: str, obs: Observation, header: Header) -> np.ndarray:
    return obs.tensors[-1]


def test_make_fifos_creates_the_in_and_out_fifos(tmp_path: Path) -> None:
    base = make_fifos(tmp_path, "module")

    assert base == tmp_path / "module"
    assert fifo_paths(base) == (tmp_path / "module.in", tmp_path / "module.out")
    assert all(stat.S_ISFIFO(p.stat().st_mode) for p in fifo_paths(base))
    remove_fifos(base)
    assert not any(p.exists() for p in fifo_paths(base))


def test_inliner_session_answers_each_observation_with_one_int64(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    defaults = [1, 0, 1]
    steps: list[tuple[str, object]] = [*OPEN, ("send", INLINER_HEADER + context(""))]
    for index, default in enumerate(defaults):
        steps += [("send", observation(index, inliner_payload(default, index))), ("recv", 8)]
    compiler = start_fake_compiler(steps)
    seen: list[tuple[str, int, int]] = []

    def advise(context: str, obs: Observation, header: Header) -> np.ndarray:
        seen.append((context, obs.index, len(header.features)))
        return obs.tensors[-1]

    session = serve_channel(base, advise, timeout=10, compiler_alive=compiler.alive)

    code, advice_bytes = compiler.finish()
    assert code == 0
    assert advice_bytes == np.array(defaults, dtype=np.int64).tobytes()
    assert seen == [("", 0, 39), ("", 1, 39), ("", 2, 39)]
    assert session.header is not None
    assert session.header.advice == TensorSpec("inlining_decision", "int64_t", (1,))
    assert session.contexts == ("",)
    assert [(d.context, d.index, int(d.advice[0])) for d in session.decisions] == [
        ("", 0, 1),
        ("", 1, 0),
        ("", 2, 1),
    ]
    assert all(d.advice.dtype == np.int64 and d.advice.shape == (1,) for d in session.decisions)
    assert session.decisions[1].features[0][0] == 10


def test_float_advice_is_sent_as_float32_per_context(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    mask = np.ones((1, 33), np.int64).tobytes()
    weights = np.linspace(0, 1, 33, dtype=np.float32).reshape(1, 33).tobytes()
    steps: list[tuple[str, object]] = [*OPEN, ("send", PRIORITY_HEADER)]
    for name, count in (("f", 2), ("g", 1)):
        steps.append(("send", context(name)))
        for index in range(count):
            steps += [("send", observation(index, mask + weights)), ("recv", 4)]
    compiler = start_fake_compiler(steps)

    def advise(context: str, obs: Observation, header: Header) -> float:
        return 0.5 + obs.index if context == "f" else -2.0  # a plain Python float

    session = serve_channel(base, advise, timeout=10, compiler_alive=compiler.alive)

    code, advice_bytes = compiler.finish()
    assert code == 0
    assert advice_bytes == np.array([0.5, 1.5, -2.0], dtype=np.float32).tobytes()
    assert session.contexts == ("f", "g")
    assert [(d.context, d.index) for d in session.decisions] == [("f", 0), ("f", 1), ("g", 0)]
    assert all(d.advice.dtype == np.float32 for d in session.decisions)
    assert session.decisions[0].features[1].shape == (1, 33)


def test_header_and_context_then_eof_is_an_empty_session(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler([*OPEN, ("send", INLINER_HEADER + context(""))])

    session = serve_channel(base, advise_default, timeout=10, compiler_alive=compiler.alive)

    assert compiler.finish() == (0, b"")
    assert session.header is not None and len(session.header.features) == 39
    assert session.contexts == ("",)
    assert session.decisions == ()


def test_a_compiler_that_never_opens_the_channel_ends_the_wait_once_it_exits(
    base: Path,
) -> None:
    started = time.monotonic()

    with pytest.raises(ChannelError, match="exited without opening the channel") as error:
        serve_channel(base, advise_default, timeout=30, compiler_alive=lambda: False)

    assert not isinstance(error.value, ChannelTimeout)
    assert time.monotonic() - started < 1


def test_a_live_compiler_that_never_opens_the_channel_times_out(base: Path) -> None:
    started = time.monotonic()

    with pytest.raises(ChannelTimeout, match="no compiler opened"):
        serve_channel(base, advise_default, timeout=0.3)

    assert 0.3 <= time.monotonic() - started < 2


def test_a_compiler_dying_mid_observation_is_a_channel_error(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    half = observation(0, inliner_payload(1, 0))[:150]
    compiler = start_fake_compiler(
        [*OPEN, ("send", INLINER_HEADER + context("") + half), ("exit", 1)]
    )
    started = time.monotonic()

    with pytest.raises(ChannelError, match="observation 0: stream ended after"):
        serve_channel(base, advise_default, timeout=30, compiler_alive=compiler.alive)

    assert time.monotonic() - started < 5
    assert compiler.finish()[0] == 1


def test_a_compiler_dying_while_waiting_for_advice_is_a_channel_error(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    steps: list[tuple[str, object]] = [
        *OPEN,
        ("send", INLINER_HEADER + context("") + observation(0, inliner_payload(1, 0))),
        ("exit", 1),
    ]
    compiler = start_fake_compiler(steps)

    def slow_advise(context: str, obs: Observation, header: Header) -> int:
        compiler.process.wait(timeout=10)  # answer only once the reader is gone
        return 1

    with pytest.raises(ChannelError, match="closed the channel before reading advice 0"):
        serve_channel(base, slow_advise, timeout=30, compiler_alive=compiler.alive)


def test_a_compiler_dying_between_opening_in_and_out_is_a_channel_error(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler([("open_in", None), ("sleep", 0.2), ("exit", 1)])
    started = time.monotonic()

    with pytest.raises(ChannelError, match="exited without sending"):
        serve_channel(base, advise_default, timeout=30, compiler_alive=compiler.alive)

    assert time.monotonic() - started < 5


def test_a_silent_compiler_times_out_within_the_session_limit(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler([*OPEN, ("send", INLINER_HEADER), ("sleep", 30)])
    started = time.monotonic()

    with pytest.raises(ChannelTimeout, match="exceeded 0.5 s"):
        serve_channel(base, advise_default, timeout=0.5, compiler_alive=compiler.alive)

    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "stream",
    [
        b"garbage\n",
        context("") + observation(0, inliner_payload(1, 0)),  # observations but no header
        INLINER_HEADER + b'{"observation":0}\n' + bytes(100),  # too short, then EOF
    ],
    ids=["garbage", "no-header", "truncated"],
)
def test_a_malformed_stream_is_a_channel_error(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler], stream: bytes
) -> None:
    compiler = start_fake_compiler([*OPEN, ("send", stream)])

    with pytest.raises(ChannelError, match="bad stream from the compiler"):
        serve_channel(base, advise_default, timeout=10, compiler_alive=compiler.alive)


def test_an_empty_stream_without_header_is_a_channel_error(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler(OPEN)

    with pytest.raises(ChannelError, match="without sending a header"):
        serve_channel(base, advise_default, timeout=10, compiler_alive=compiler.alive)


def test_advice_of_the_wrong_size_is_refused(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler(
        [*OPEN, ("send", INLINER_HEADER + observation(0, inliner_payload(1, 0))), ("recv", 8)]
    )

    with pytest.raises(ValueError, match="'inlining_decision' needs 1 value"):
        serve_channel(base, lambda c, o, h: np.zeros(2), timeout=10, compiler_alive=compiler.alive)


# --- sessions that follow each other on one stream (lld's ThinLTO backends) -----------------


def one_session(defaults: list[int], pause: float = 0) -> list[tuple[str, object]]:
    """A session on open FIFOs: header, context, one observation per clang default."""
    steps: list[tuple[str, object]] = [("send", INLINER_HEADER + context("")), ("sleep", pause)]
    for index, default in enumerate(defaults):
        steps += [("send", observation(index, inliner_payload(default, index))), ("recv", 8)]
    return steps


# The next compiler opens `.in` afresh while the previous one's stream on `.out` goes on.
NEXT_BACKEND = [("close_in", None), ("open_in", None)]


def test_sessions_that_follow_on_one_stream_are_served_one_by_one(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler([*OPEN, *one_session([1, 0]), *NEXT_BACKEND,
                                    *one_session([]), *NEXT_BACKEND, *one_session([1])])
    sessions: list[ChannelSession] = []

    count = serve_channel_sessions(base, advise_default, sessions.append, timeout=10,
                                   compiler_alive=compiler.alive)

    assert compiler.finish() == (0, np.array([1, 0, 1], dtype=np.int64).tobytes())
    assert count == 3
    assert [s.contexts for s in sessions] == [("",), ("",), ("",)]
    assert [[(d.index, int(d.advice[0])) for d in s.decisions] for s in sessions] == [
        [(0, 1), (1, 0)], [], [(0, 1)]]
    assert all(s.header is not None and len(s.header.features) == 39 for s in sessions)


def test_each_session_on_one_stream_has_its_own_time_limit(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    # 2 s per session after the first: together longer than the 3 s each one may take
    compiler = start_fake_compiler([*OPEN, *one_session([1]), *NEXT_BACKEND,
                                    *one_session([1], 2), *NEXT_BACKEND,
                                    *one_session([1], 2)])

    count = serve_channel_sessions(base, advise_default, lambda s: None, timeout=3,
                                   compiler_alive=compiler.alive)

    assert count == 3 and compiler.finish()[0] == 0


def test_sessions_of_compilers_that_close_the_channel_in_between_are_served_alike(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    closed = [("close_in", None), ("close_out", None), ("sleep", 0.2)]
    compiler = start_fake_compiler([*OPEN, *one_session([1, 1]), *closed, *OPEN,
                                    *one_session([]), *closed, *OPEN, *one_session([0])])
    sessions: list[ChannelSession] = []

    count = serve_channel_sessions(base, advise_default, sessions.append, timeout=10,
                                   compiler_alive=compiler.alive)

    assert compiler.finish() == (0, np.array([1, 1, 0], dtype=np.int64).tobytes())
    assert count == 3 and [len(s.decisions) for s in sessions] == [2, 0, 1]


def test_a_later_session_cut_off_by_the_compiler_dying_is_a_channel_error(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    half = observation(0, inliner_payload(1, 0))[:150]
    compiler = start_fake_compiler([*OPEN, *one_session([1]), ("close_in", None),
                                    ("close_out", None), *OPEN,
                                    ("send", INLINER_HEADER + context("") + half), ("exit", 1)])
    sessions: list[ChannelSession] = []

    with pytest.raises(ChannelError, match="observation 0: stream ended after"):
        serve_channel_sessions(base, advise_default, sessions.append, timeout=10,
                               compiler_alive=compiler.alive)

    assert len(sessions) == 1


def test_one_compile_is_one_session_so_a_second_header_is_a_bad_stream(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    compiler = start_fake_compiler([*OPEN, *one_session([1]), *one_session([1])])

    with pytest.raises(ChannelError, match=r"bad stream .* unknown event \['advice', 'features'\]"):
        serve_channel(base, advise_default, timeout=10, compiler_alive=compiler.alive)


def test_a_session_becomes_a_training_log_with_the_decision_as_a_feature(
    base: Path, start_fake_compiler: Callable[..., FakeCompiler]
) -> None:
    steps: list[tuple[str, object]] = [*OPEN, ("send", INLINER_HEADER + context(""))]
    for index, default in enumerate([0, 1]):
        steps += [("send", observation(index, inliner_payload(default, index))), ("recv", 8)]
    compiler = start_fake_compiler(steps)
    session = serve_channel(base, advise_default, timeout=10, compiler_alive=compiler.alive)
    log = io.BytesIO()

    session_to_log(session, log, outcome=0.125)

    records = list(read_records(io.BytesIO(log.getvalue())))
    assert [(r.context, r.index) for r in records] == [("", 0), ("", 1)]
    assert list(records[0].features)[-2:] == ["inlining_default", "inlining_decision"]
    assert [int(r.features["inlining_decision"][0]) for r in records] == [0, 1]
    assert all(r.outcome is not None and r.outcome.tolist() == [0.125] for r in records)
    assert log.getvalue().startswith(INLINER_HEADER.split(b'],"advice"')[0])


def test_a_session_without_outcome_logs_no_score() -> None:
    header = Header(
        features=(TensorSpec("x", "int64_t", (1,)),),
        advice=TensorSpec("inlining_decision", "int64_t", (1,)),
    )
    log = io.BytesIO()

    session_to_log(ChannelSession(header, ("",), ()), log, outcome=None)

    assert b'"score"' not in log.getvalue()
    assert list(read_records(io.BytesIO(log.getvalue()))) == []


# --- the real compiler --------------------------------------------------------------------

SOURCE = """
static int sq(int x) { return x * x; }
static int add3(int a, int b, int c) { return sq(a) + sq(b) + sq(c); }
static int helper(int n) { int s = 0; for (int i = 0; i < n; i++) s += add3(i, n, s); return s; }
int entry(int n) { return helper(n) + add3(n, 1, 2) + sq(n); }
"""


def zig_binary() -> Path:
    ziglang = pytest.importorskip("ziglang")
    return Path(ziglang.__file__).parent / "zig"


@pytest.fixture
def module_bc(tmp_path: Path) -> Path:
    """Unoptimized bitcode of SOURCE, as a corpus module would hold it."""
    (tmp_path / "a.c").write_text(SOURCE)
    subprocess.run(
        [str(zig_binary()), "clang", "-cc1", "-triple", "x86_64-unknown-linux-gnu",
         "-target-cpu", "x86-64", "-Oz", "-emit-llvm-bc", "-disable-llvm-passes",
         "-x", "c", "a.c", "-o", "a.bc"],
        cwd=tmp_path, check=True, timeout=60,
    )  # fmt: skip
    return tmp_path / "a.bc"


@contextlib.contextmanager
def running_clang(module: Path, base: Path, opt_level: str) -> Iterator[subprocess.Popen[bytes]]:
    """clang compiling `module` with the ML inliner on the channel at `base`; killed and
    reaped on exit, whatever happened."""
    clang = subprocess.Popen(
        [str(zig_binary()), "clang", "-cc1", "-triple", "x86_64-unknown-linux-gnu",
         "-target-cpu", "x86-64", opt_level, "-emit-obj",
         "-mllvm", "-enable-ml-inliner=release",
         "-mllvm", f"-inliner-interactive-channel-base={base}",
         "-mllvm", "-inliner-interactive-include-default",
         "-x", "ir", str(module), "-o", str(module.with_suffix(".o"))],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        yield clang
    finally:
        clang.kill()
        clang.communicate()  # reaps it and closes the stderr pipe


def test_real_clang_inliner_session_with_the_default_decision(base: Path, module_bc: Path) -> None:
    with running_clang(module_bc, base, "-Oz") as clang:
        session = serve_channel(
            base, advise_default, timeout=60, compiler_alive=lambda: clang.poll() is None
        )
        _, stderr = clang.communicate(timeout=60)

    assert clang.returncode == 0, stderr.decode()
    assert module_bc.with_suffix(".o").stat().st_size > 0
    assert session.header is not None
    assert session.header.features[-1] == TensorSpec("inlining_default", "int64_t", (1,))
    assert session.header.advice == TensorSpec("inlining_decision", "int64_t", (1,))
    assert session.header.observation_size == 8 * len(session.header.features)
    assert session.contexts == ("",)
    assert len(session.decisions) >= 1
    for decision in session.decisions:
        assert decision.advice.dtype == np.int64
        np.testing.assert_array_equal(decision.advice, decision.features[-1])


def test_real_clang_at_O0_never_opens_the_channel(base: Path, module_bc: Path) -> None:
    started = time.monotonic()
    with running_clang(module_bc, base, "-O0") as clang:
        with pytest.raises(ChannelError, match="exited without opening the channel"):
            serve_channel(
                base, advise_default, timeout=60, compiler_alive=lambda: clang.poll() is None
            )
        assert clang.wait(timeout=60) == 0
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("spec, value", [
    (TensorSpec("inlining_decision", "int64_t", (1,)), 1),
    (TensorSpec("inlining_decision", "int64_t", (1,)), 0),
    (TensorSpec("inlining_decision", "int64_t", (1,)), -(2**63)),
    (TensorSpec("inlining_decision", "int64_t", (1,)), True),
    (TensorSpec("inlining_decision", "int64_t", (1,)), np.int64(3)),
    (TensorSpec("index_to_evict", "int64_t", (1,)), np.array([4])),
    (TensorSpec("priority", "float", (1,)), 2.5),
    (TensorSpec("priority", "float", (1,)), 7),
])
def test_advice_bytes_are_those_of_the_packed_tensor(spec: TensorSpec, value: object) -> None:
    from pymlgo.protocol.channel import advice_bytes, pack_advice

    assert advice_bytes(spec, value) == pack_advice(spec, value).tobytes()


def test_advice_that_does_not_fit_the_spec_is_refused_like_packing_it() -> None:
    from pymlgo.protocol.channel import advice_bytes

    spec = TensorSpec("inlining_decision", "int64_t", (1,))
    for too_big in (2**63, np.uint64(2**63), 2**64):  # would wrap to a negative decision
        with pytest.raises(ValueError, match="cannot hold|is integer"):
            advice_bytes(spec, too_big)
    with pytest.raises(ValueError, match="is integer"):
        advice_bytes(spec, 0.7)  # a probability is not a decision: no silent truncation to 0
    assert advice_bytes(spec, 1.0) == np.int64(1).tobytes()  # an integral float is exact
    with pytest.raises(ValueError, match="non-finite"):
        advice_bytes(spec, float("nan"))
    with pytest.raises(ValueError, match="needs 1 value"):
        advice_bytes(spec, [1, 0])


def test_an_advice_of_no_elements_packs_to_no_bytes() -> None:
    # A header may declare a zero-sized advice; range-checking nothing must not fail
    # (found by the channel fuzzer: numpy has no min() of an empty array).
    from pymlgo.protocol.channel import advice_bytes

    for type_name in ("int16_t", "int64_t", "float"):
        spec = TensorSpec("advice", type_name, (0,))
        assert advice_bytes(spec, np.zeros(0, dtype=spec.dtype)) == b""
