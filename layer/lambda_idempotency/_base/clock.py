"""The clock, injectable so tests can move time instead of sleeping. What a clock must offer
is `_options.Clock`, a Protocol only a type checker or a reader needs (building one costs a
cold start ~0.05 ms)."""

from __future__ import annotations

import time


class SystemClock:
    """Real time. DynamoDB's TTL and our leases are wall-clock epochs, so no monotonic clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
