"""The optimization level of a clang command line: one reading for the driver and cc1."""

from __future__ import annotations

import pytest

from pymlgo.corpus import capture_wrapper
from pymlgo.toolchain.opt_level import LEVELS, last_level, level_of

CASES = [
    (["-c", "x.c"], None),
    (["-O2", "-c", "x.c", "-Oz"], "-Oz"),
    (["-Oz", "-O"], "-O1"),  # `-O` alone is clang's alias of -O1
    (["-Os", "-Ofast"], "-Ofast"),
    (["-Og", "-Ox", "-O=2", "-Omax"], "-Og"),  # not levels: left alone
    (["-cc1", "-O0", "-emit-obj"], "-O0"),
]


@pytest.mark.parametrize(("args", "level"), CASES)
def test_the_level_is_the_last_o_flag(args: list[str], level: str | None) -> None:
    assert last_level(args) == level


@pytest.mark.parametrize(("args", "level"), CASES)
def test_the_capture_wrapper_reads_the_same_level(args: list[str], level: str | None) -> None:
    # The wrapper runs under `python -S` and cannot import pymlgo: its copy must not drift.
    assert capture_wrapper._LEVELS == LEVELS
    assert capture_wrapper.last_opt_level(args) == level


def test_an_argument_that_is_not_a_level_has_none() -> None:
    assert level_of("-o") is None and level_of("-O3") == "-O3" and level_of("-O") == "-O1"
