"""Logging as a Lambda function has it: the Python runtime's handler and format on the root logger.

The runtime (awslambdaric's bootstrap) puts one handler on the root logger: a filter stamps
each record with the invocation's request id, a text formatter renders
`[LEVEL]\\t<UTC time>.<ms>Z\\t<request id>\\t<message>\\n`, and the line goes to a log sink
that writes one length-prefixed frame per line to the telemetry file descriptor, unbuffered.
AWS's logging guide then has the function set the root logger to INFO. This module rebuilds
that chain (the frame written to the null device instead of the telemetry pipe) so the CPU
section can time both libraries with it installed.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

RUNTIME_FORMAT = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s\n"
RUNTIME_DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"
_FRAME_TYPE = bytes.fromhex("a55a0003")
"""The runtime's frame type for a text log line."""


class FramedSink:
    """The runtime's telemetry log sink: type, length, timestamp and message, one write each."""

    def __init__(self) -> None:
        self.lines = 0
        self._file = open(os.devnull, "wb", 0)  # noqa: SIM115 - closed by close()

    def log(self, message: str) -> None:
        encoded = message.encode("utf8")
        timestamp = time.time_ns() // 1000
        self._file.write(
            _FRAME_TYPE + len(encoded).to_bytes(4, "big") + timestamp.to_bytes(8, "big") + encoded
        )
        self.lines += 1

    def close(self) -> None:
        self._file.close()


class RuntimeHandler(logging.Handler):
    """The runtime's `LambdaLoggerHandler`: format the record, hand it to the sink."""

    def __init__(self, sink: FramedSink) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.log(self.format(record))


class RequestIdFilter(logging.Filter):
    """The runtime's `LambdaLoggerFilter`: every record carries the current request id."""

    request_id = "00000000-0000-0000-0000-000000000000"

    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = self.request_id
        return True


@dataclass
class LambdaLogging:
    """The runtime's handler on the root logger, and a switch for the root logger's level.

    `unconfigured` is what a function that never touches logging runs with (root at WARNING,
    Python's default, handler installed by the runtime); `info` is what AWS's guide sets.
    """

    sink: FramedSink = field(default_factory=FramedSink)
    _saved: tuple[int, list[logging.Handler]] | None = None

    def install(self) -> None:
        root = logging.getLogger()
        self._saved = (root.level, list(root.handlers))
        for handler in list(root.handlers):
            root.removeHandler(handler)
        handler = RuntimeHandler(self.sink)
        formatter = logging.Formatter(RUNTIME_FORMAT, RUNTIME_DATE_FORMAT)
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
        handler.addFilter(RequestIdFilter())
        root.addHandler(handler)
        root.setLevel(logging.WARNING)

    def level(self, level: int) -> None:
        logging.getLogger().setLevel(level)

    def uninstall(self) -> None:
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        if self._saved is not None:
            level, handlers = self._saved
            root.setLevel(level)
            for handler in handlers:
                root.addHandler(handler)
        self.sink.close()
