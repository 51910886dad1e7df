"""A scripted fake compiler for the channel host's tests, and protocol bytes as LLVM 22 sends
them (its fixtures: tests/channel_fixtures.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

# The compiler side of the protocol, driven by a JSON script of steps. Like LLVM it opens
# `.in` for reading, then `.out` for writing (each blocks until the host opens its end).
# It writes in 5-byte pieces so the host has to reassemble every item.
FAKE_COMPILER = r"""
import json, os, sys, time
base, script, received = sys.argv[1:4]
fds = {}
got = bytearray()
for kind, arg in json.load(open(script)):
    if kind == "open_in":
        fds["in"] = os.open(base + ".in", os.O_RDONLY)
    elif kind == "open_out":
        fds["out"] = os.open(base + ".out", os.O_WRONLY)
    elif kind in ("close_in", "close_out"):
        os.close(fds.pop(kind[6:]))
    elif kind == "send":
        data = bytes.fromhex(arg)
        for i in range(0, len(data), 5):
            os.write(fds["out"], data[i : i + 5])
    elif kind == "recv":
        want = len(got) + arg
        while len(got) < want:
            chunk = os.read(fds["in"], want - len(got))
            if not chunk:
                sys.exit(3)
            got += chunk
    elif kind == "sleep":
        time.sleep(arg)
    elif kind == "exit":  # abrupt death: whatever is open closes with the process
        open(received, "wb").write(got)
        os._exit(arg)
open(received, "wb").write(got)
"""

INLINER_FEATURES = [
    "sroa_savings", "sroa_losses", "load_elimination", "call_penalty", "call_argument_setup",
    "load_relative_intrinsic", "lowered_call_arg_setup", "indirect_call_penalty",
    "jump_table_penalty", "case_cluster_penalty", "switch_default_dest_penalty",
    "switch_penalty", "unsimplified_common_instructions", "num_loops", "dead_blocks",
    "simplified_instructions", "constant_args", "constant_offset_ptr_args", "callsite_cost",
    "cold_cc_penalty", "last_call_to_static_bonus", "is_multiple_blocks", "nested_inlines",
    "nested_inline_cost_estimate", "threshold", "callee_basic_block_count", "callsite_height",
    "node_count", "nr_ctant_params", "cost_estimate", "edge_count", "caller_users",
    "caller_conditionally_executed_blocks", "caller_basic_block_count",
    "callee_conditionally_executed_blocks", "callee_users", "is_callee_avail_external",
    "is_caller_avail_external", "inlining_default",
]  # fmt: skip


def spec_json(name: str, c_type: str, shape: list[int]) -> str:
    shape_json = json.dumps(shape, separators=(",", ":"))
    return f'{{"name":"{name}","type":"{c_type}","port":0,"shape":{shape_json}}}'


# Bytes as LLVM 22 sends them on the inliner channel (39 int64 features, int64 advice).
INLINER_HEADER = (
    '{"features":['
    + ",".join(spec_json(name, "int64_t", [1]) for name in INLINER_FEATURES)
    + '],"advice":'
    + spec_json("inlining_decision", "int64_t", [1])
    + "}\n"
).encode()
# A regalloc-priority-like channel: [1, 33] tensors of two types, float32 advice.
PRIORITY_HEADER = (
    '{"features":['
    + spec_json("mask", "int64_t", [1, 33])
    + ","
    + spec_json("weights", "float", [1, 33])
    + '],"advice":'
    + spec_json("priority", "float", [1])
    + "}\n"
).encode()


def context(name: str) -> bytes:
    return json.dumps({"context": name}, separators=(",", ":")).encode() + b"\n"


def observation(index: int, payload: bytes) -> bytes:
    return b'{"observation":%d}\n' % index + payload + b"\n"


def inliner_payload(default: int, seed: int) -> bytes:
    values = np.arange(seed, seed + 39, dtype=np.int64)
    values[-1] = default
    values[0] = 10  # a `\n` byte inside the tensor data
    return values.tobytes()


class FakeCompiler:
    def __init__(self, process: subprocess.Popen[bytes], received: Path) -> None:
        self.process, self._received = process, received

    def alive(self) -> bool:
        return self.process.poll() is None

    def finish(self) -> tuple[int, bytes]:
        """Exit code and the advice bytes the fake compiler read."""
        code = self.process.wait(timeout=10)
        return code, self._received.read_bytes()


OPEN = [("open_in", None), ("open_out", None)]
