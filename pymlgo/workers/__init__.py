"""Where compile jobs run: a local process pool (default), Ray, or a shared named pool.

Everything here is torch-free: compile workers must stay light.
"""

from pymlgo.workers.factory import CLUSTER_HELP, make_executor
from pymlgo.workers.protocol import (
    CUT_ERROR,
    LOST_ERROR,
    Executor,
    ExecutorError,
    WorkSpec,
)

__all__ = [
    "CLUSTER_HELP",
    "CUT_ERROR",
    "LOST_ERROR",
    "Executor",
    "ExecutorError",
    "WorkSpec",
    "make_executor",
]
