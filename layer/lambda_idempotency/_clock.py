"""The clock, injectable so tests can move time instead of sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the protocol needs of time: wall-clock milliseconds, and a way to wait.

    A coroutine function's waits (`_async`) await the clock's `async_sleep(seconds)` if it
    has one; else its `sleep` runs in a worker thread, never on the event loop."""

    def now_ms(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Real time. DynamoDB's TTL and our leases are wall-clock epochs, so no monotonic clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
