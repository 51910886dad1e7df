"""TensorSpec: C element types, sizes, and JSON byte-identical to what LLVM writes."""

import json
from collections.abc import Callable

import numpy as np
import pytest

from pymlgo.problems.base import CompileJob, CompileSettings
from pymlgo.problems.inlining.compile import compile_with_policy
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.protocol import channel
from pymlgo.protocol.log import ByteSource, Header
from pymlgo.protocol.tensor_spec import C_TYPES, TensorSpec, dumps_compact
from pymlgo.toolchain.compiler import Compiler

# The header line LLVM 22 (zig 0.17.1's clang) sent on the inliner channel with
# -inliner-interactive-include-default, verbatim.
LLVM22_INLINER_HEADER = (
    '{"features":['
    '{"name":"sroa_savings","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"sroa_losses","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"load_elimination","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"call_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"call_argument_setup","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"load_relative_intrinsic","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"lowered_call_arg_setup","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"indirect_call_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"jump_table_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"case_cluster_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"switch_default_dest_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"switch_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"unsimplified_common_instructions","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"num_loops","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"dead_blocks","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"simplified_instructions","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"constant_args","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"constant_offset_ptr_args","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"callsite_cost","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"cold_cc_penalty","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"last_call_to_static_bonus","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"is_multiple_blocks","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"nested_inlines","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"nested_inline_cost_estimate","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"threshold","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"callee_basic_block_count","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"callsite_height","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"node_count","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"nr_ctant_params","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"cost_estimate","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"edge_count","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"caller_users","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"caller_conditionally_executed_blocks","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"caller_basic_block_count","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"callee_conditionally_executed_blocks","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"callee_users","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"is_callee_avail_external","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"is_caller_avail_external","type":"int64_t","port":0,"shape":[1]},'
    '{"name":"inlining_default","type":"int64_t","port":0,"shape":[1]}'
    '],"advice":{"name":"inlining_decision","type":"int64_t","port":0,"shape":[1]}}'
)


def test_llvm_header_round_trips_byte_exact() -> None:
    header = Header.from_json(json.loads(LLVM22_INLINER_HEADER))

    assert len(header.features) == 39
    assert header.features[-1] == TensorSpec("inlining_default", "int64_t", (1,))
    assert header.advice == TensorSpec("inlining_decision", "int64_t", (1,))
    assert header.score is None
    assert dumps_compact(header.to_json()) == LLVM22_INLINER_HEADER


def test_the_recorded_header_is_what_the_bundled_clang_sends(
        compiler: Compiler, minic_jobs: list[CompileJob],
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not compiler.bundled:
        pytest.skip("the recorded header is the bundled clang 22's")
    received = bytearray()

    class RecordingSource(ByteSource):
        """Keeps every byte the compiler sends, before any parsing."""

        def __init__(self, read: Callable[[int], bytes], chunk_size: int = 1 << 16) -> None:
            def tee(n: int) -> bytes:
                data = read(n)
                received.extend(data)
                return data

            super().__init__(tee, chunk_size)

    monkeypatch.setattr(channel, "ByteSource", RecordingSource)

    res = compile_with_policy(compiler, minic_jobs[0], builtin_policy("default"),
                              CompileSettings(record=True))

    assert res.ok, res.error
    assert res.decisions > 0  # a real session: the compiler asked about call sites
    first_line = bytes(received).split(b"\n", 1)[0]
    assert first_line == LLVM22_INLINER_HEADER.encode()


def test_each_spec_serializes_as_llvm_does() -> None:
    spec = TensorSpec("sroa_savings", "int64_t", (1,))

    assert spec.to_json_line() == '{"name":"sroa_savings","type":"int64_t","port":0,"shape":[1]}'
    assert list(spec.to_json()) == ["name", "type", "port", "shape"]
    assert TensorSpec.from_json(spec.to_json()) == spec


def test_score_comes_before_advice_in_a_header_like_llvms_logger_writes() -> None:
    header = Header(
        features=(TensorSpec("x", "float", (2, 3)),),
        advice=TensorSpec("priority", "float", (1,)),
        score=TensorSpec("reward", "float", (1,)),
    )

    assert dumps_compact(header.to_json()) == (
        '{"features":[{"name":"x","type":"float","port":0,"shape":[2,3]}],'
        '"score":{"name":"reward","type":"float","port":0,"shape":[1]},'
        '"advice":{"name":"priority","type":"float","port":0,"shape":[1]}}'
    )
    assert Header.from_json(header.to_json()) == header


@pytest.mark.parametrize(
    ("c_type", "dtype"),
    [
        ("float", np.float32),
        ("double", np.float64),
        ("int8_t", np.int8),
        ("uint8_t", np.uint8),
        ("int16_t", np.int16),
        ("uint16_t", np.uint16),
        ("int32_t", np.int32),
        ("uint32_t", np.uint32),
        ("int64_t", np.int64),
        ("uint64_t", np.uint64),
    ],
)
def test_every_c_type_maps_to_a_native_numpy_dtype(c_type: str, dtype: type) -> None:
    spec = TensorSpec("t", c_type, (1, 33))

    assert spec.dtype == np.dtype(dtype)
    assert spec.dtype.isnative
    assert spec.element_count == 33
    assert spec.byte_size == 33 * np.dtype(dtype).itemsize
    assert TensorSpec.from_json(json.loads(spec.to_json_line())) == spec


def test_the_type_table_is_exactly_llvms_ten_c_types() -> None:
    assert len(C_TYPES) == 10


def test_sizes_of_scalars_and_multidimensional_shapes() -> None:
    assert TensorSpec("s", "int32_t", ()).element_count == 1
    assert TensorSpec("m", "double", (2, 3, 4)).byte_size == 2 * 3 * 4 * 8
    assert TensorSpec("empty", "float", (0,)).byte_size == 0


def test_shape_given_as_a_list_is_stored_as_a_hashable_tuple() -> None:
    spec = TensorSpec("x", "float", [1, 33])  # type: ignore[arg-type]

    assert spec.shape == (1, 33)
    assert hash(spec) == hash(TensorSpec("x", "float", (1, 33)))


def test_port_defaults_to_zero_when_absent_from_json() -> None:
    spec = TensorSpec.from_json({"name": "x", "type": "float", "shape": [1]})

    assert spec.port == 0


@pytest.mark.parametrize("bad_type", ["int", "int64", "float32", "bool", ""])
def test_unknown_type_is_rejected_with_the_known_types_listed(bad_type: str) -> None:
    with pytest.raises(ValueError, match=r"tensor 'x': unknown element type .* \(known: float,"):
        TensorSpec("x", bad_type, (1,))


@pytest.mark.parametrize(
    "bad_json",
    [
        {"type": "float", "shape": [1]},
        {"name": "x", "shape": [1]},
        {"name": "x", "type": "float"},
        {"name": "x", "type": "float", "shape": 1},
        {"name": "x", "type": "float", "shape": [True]},
        {"name": "x", "type": "float", "shape": [-1]},
        {"name": "x", "type": "half", "shape": [1]},
        ["x", "float", [1]],
    ],
)
def test_malformed_spec_json_is_a_value_error(bad_json: object) -> None:
    with pytest.raises(ValueError):
        TensorSpec.from_json(bad_json)  # type: ignore[arg-type]
