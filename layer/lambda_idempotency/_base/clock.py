"""The clock, injectable so tests can move time instead of sleeping. What a clock must offer
is `_options.Clock`, a Protocol only a type checker or a reader needs (building one costs a
cold start ~0.05 ms).

Two readings. `now_ms`, wall-clock epoch milliseconds, is what records hold (DynamoDB's TTL
and our leases are epochs). `monotonic_ms` times what the caller judges for itself, from one
moment of its own to a later one (a heartbeat block's lease, a waiter's deadline, a cached
result's life): an NTP step moves the wall clock, not that, so a step mid-call neither
stretches nor cuts them. A clock without it (a test's fake clock, a user's own) is read
through `monotonic_ms()` below, which falls back to its `now_ms`: such a time moves only
when its owner moves it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._options import Clock


class SystemClock:
    """Real time: the wall clock for records, the monotonic one for durations."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


def monotonic_ms(clock: Clock) -> int:
    """`clock`'s monotonic reading in milliseconds, or its `now_ms` when it has none."""
    read = getattr(clock, "monotonic_ms", None)
    return int(clock.now_ms() if read is None else read())
