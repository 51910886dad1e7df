"""LLVM's MLGO wire formats: tensor specs, training logs, the interactive channel."""

from pymlgo.protocol.channel import (
    Advise,
    ChannelError,
    ChannelSession,
    ChannelTimeout,
    Decision,
    make_fifos,
    remove_fifos,
    serve_channel,
    session_to_log,
)
from pymlgo.protocol.features import FeatureMismatchError, select_features
from pymlgo.protocol.log import (
    Context,
    Header,
    LogFormatError,
    LogReader,
    LogWriter,
    Observation,
    Outcome,
    Record,
    read_events,
    read_records,
)
from pymlgo.protocol.tensor_spec import TensorSpec

__all__ = [
    "Advise",
    "ChannelError",
    "ChannelSession",
    "ChannelTimeout",
    "Context",
    "Decision",
    "FeatureMismatchError",
    "Header",
    "LogFormatError",
    "LogReader",
    "LogWriter",
    "Observation",
    "Outcome",
    "Record",
    "TensorSpec",
    "make_fifos",
    "read_events",
    "read_records",
    "remove_fifos",
    "select_features",
    "serve_channel",
    "session_to_log",
]
