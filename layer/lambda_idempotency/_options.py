"""The keyword options of the public calls, as types for the type checker and the reader.

Real `TypedDict`s, imported only when named (`from lambda_idempotency import Options`) or
type-checked: defining one costs about 0.15 ms, which no cold start needs to pay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from ._stores.dynamodb.powertools_layout import PowertoolsOptions  # noqa: F401 (its former home; still importable)

if TYPE_CHECKING:
    from ._base.keys import Selector
    from ._base.metrics import MetricsOption
    from ._stores.contract import IdempotencyStore
    from ._stores.record import InProgressPolicy, OnReplay


class Clock(Protocol):
    """What the protocol needs of time: wall-clock milliseconds, and a way to wait.

    A coroutine function's waits (`_protocol.coroutines`) await the clock's `async_sleep(seconds)`
    if it has one; else its `sleep` runs in a worker thread, never on the event loop. What the
    caller times itself (a heartbeat block's lease, a waiter's deadline, the warm cache) goes
    by the clock's `monotonic_ms()` if it has one (`SystemClock`: an NTP step does not move
    it), else by `now_ms` (`_base.clock.monotonic_ms`)."""

    def now_ms(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


class Options(TypedDict, total=False):
    """The settings every front end shares (`idempotent`, `idempotent_function`, ...).

    payload: what must match on a retry under the same key (default: all of it; None: off).
    store: where records live: a DynamoDBStore, or any store keeping the store contract
        (default: a DynamoDBStore on IDEMPOTENCY_TABLE, created on first use).
    ttl_seconds: how long a completed result replays (default 3600).
    lease_seconds: how long a claim holds the key (default: the invocation's remaining time).
    on_in_progress: "raise" InProgressError (default) or "wait" for the holder's result.
    namespace: prefix of the stored key (default: Lambda function name, module, qualname).
    scope: the tenant; part of the key hash, so tenants never replay each other's results.
    key_required: raise KeyMissingError when the key is missing (default True).
    max_wait_seconds: cap on how long "wait" polls.
    store_result: result -> bool; results it refuses release the key so the retry runs again.
    cache_size: completed results kept in memory per warm container (0: none).
    clock: the time source (a test seam).
    clock_skew_seconds: how far callers' clocks may differ (default 2): a lapsed lease is
        taken over, and an expired record counts as absent, only that much later.
    on_replay: (result, ReplayInfo) -> what the caller gets, for every replayed result (not
        for first runs): mark, wrap or log replays (Powertools' `response_hook`).
    metrics: a CloudWatch metric per outcome (docs/operations.md): True for EMF lines of our
        own in the namespace "LambdaIdempotency", a string for another namespace, or your
        Powertools `Metrics` to add the counts to it. Off by default (nothing imported).
    """

    payload: Selector | None
    store: IdempotencyStore | None
    ttl_seconds: int
    lease_seconds: float | None
    on_in_progress: InProgressPolicy
    namespace: str | None
    scope: Selector | None
    key_required: bool
    max_wait_seconds: float | None
    store_result: Callable[[Any], bool] | None
    cache_size: int
    clock: Clock
    clock_skew_seconds: float
    on_replay: OnReplay | None
    metrics: MetricsOption
