"""Keep a policy's advice inside what the allocator can execute safely.

Release-built LLVM trusts the advice: an eviction index pointing at a column with
`mask == 0` (a register that cannot be evicted, or the candidate itself when it must get a
register) is not checked and can miscompile; a priority is cast from float to `unsigned`,
which is undefined for NaN, negative or too large values. The host checks every answer
before it is sent and counts the corrections.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Advisor = Literal["evict", "priority"]
ADVISORS: tuple[Advisor, ...] = ("evict", "priority")

MASK_FEATURE = "mask"
EVICT_ADVICE = "index_to_evict"
PRIORITY_ADVICE = "priority"
# The largest float32 below 2**32: LLVM converts the priority to a 32-bit unsigned.
MAX_PRIORITY = float(np.nextafter(np.float32(2.0**32), np.float32(0.0)))


def valid_eviction(value: object, mask: np.ndarray) -> tuple[int, bool]:
    """(column to send, whether `value` had to be corrected).

    A valid answer is an integral column index with `mask == 1`. Anything else becomes
    the candidate column (the last: "evict nothing") or, when the candidate itself is
    masked out because it must get a register, the first evictable column.
    """
    flat = np.asarray(mask).reshape(-1)
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
        number = float(arr[0]) if arr.size == 1 else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if math.isfinite(number) and number.is_integer():
        index = int(number)
        if 0 <= index < flat.size and flat[index] == 1:
            return index, False
    return fallback_column(flat), True


def fallback_column(mask: np.ndarray) -> int:
    """The safe answer for `mask`: the candidate (last) column, else the first valid one."""
    flat = np.asarray(mask).reshape(-1)
    if flat.size and flat[-1] == 1:
        return flat.size - 1
    valid = np.flatnonzero(flat == 1)
    if valid.size == 0:
        # LLVM only asks when at least one column is evictable; this is not LLVM talking.
        raise ValueError("eviction observation with no valid column (mask is all zero)")
    return int(valid[0])


def valid_priority(value: object) -> tuple[float, bool]:
    """(priority to send, whether `value` had to be corrected): finite, in
    [0, MAX_PRIORITY]; NaN becomes 0 (the lowest priority), others are clamped."""
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
        number = float(arr[0]) if arr.size == 1 else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if math.isnan(number):
        return 0.0, True
    # Compare in float32, the type on the wire: a value that rounds up past the limit fails.
    sent = float(np.float32(number)) if abs(number) < 3.4e38 else number
    if 0.0 <= sent <= MAX_PRIORITY:
        return number, False
    return (0.0 if number < 0 else MAX_PRIORITY), True
