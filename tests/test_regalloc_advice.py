"""Checking a policy's answer before it reaches a release compiler (which trusts it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pymlgo.problems.regalloc.advice import (
    MAX_PRIORITY,
    fallback_column,
    valid_eviction,
    valid_priority,
)

MASK = np.array([[0, 1, 0, 1, 1]])  # columns 1 and 3 evictable, the candidate (4) allowed
MUST_EVICT = np.array([[0, 1, 0, 1, 0]])  # the candidate must get a register


@pytest.mark.parametrize("answer", [1, 3, 4, np.int64(3), 3.0, np.array([1])])
def test_a_column_with_mask_1_is_sent_unchanged(answer):
    assert valid_eviction(answer, MASK) == (int(np.asarray(answer).reshape(-1)[0]), False)


@pytest.mark.parametrize("answer", [0, 2, 5, -1, 99, 2.5, math.nan, math.inf, "x", [1, 3]])
def test_an_invalid_column_becomes_the_candidate_and_is_counted(answer):
    assert valid_eviction(answer, MASK) == (4, True)


def test_when_the_candidate_must_get_a_register_the_first_valid_column_is_used():
    assert valid_eviction(4, MUST_EVICT) == (1, True)
    assert fallback_column(MUST_EVICT) == 1
    with pytest.raises(ValueError, match="no valid column"):
        fallback_column(np.zeros((1, 5)))


def test_priorities_must_be_finite_and_fit_an_unsigned_32_bit_value():
    assert valid_priority(12.5) == (12.5, False)
    assert valid_priority(np.float32(0.0)) == (0.0, False)
    assert valid_priority(MAX_PRIORITY) == (MAX_PRIORITY, False)
    assert valid_priority(-3.0) == (0.0, True)
    assert valid_priority(2.0**40) == (MAX_PRIORITY, True)
    assert valid_priority(math.inf) == (MAX_PRIORITY, True)
    assert valid_priority(math.nan) == (0.0, True)
    assert valid_priority(2.0**32 - 1) == (MAX_PRIORITY, True)  # rounds up to 2**32 in float32
    assert MAX_PRIORITY < 2.0**32 and float(np.float32(MAX_PRIORITY)) == MAX_PRIORITY
