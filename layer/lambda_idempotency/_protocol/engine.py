"""One decorator's engine as its steps see it: settings, result cache, counters, recent runs.

The steps of the protocol (`_protocol.claiming`, `_protocol.completing`, `_protocol.replaying`) are
functions of an `Engine` and of one call's `Execution`; `_protocol.run.Idempotency` is the engine
that runs them in order. What every step needs lives here: which key a call has, how long its lease
is, when its record expires, and how an outcome is counted (stats, log line, metrics, trace).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .._base import keys as _keys
from .._base.errors import KeyMissingError, PayloadMismatchError, ScopeMissingError
from .._base.observe import emit
from .._base.value import Value
from .._stores.dynamodb.layout import NATIVE_KEYS
from .._stores.record import OnReplay

if TYPE_CHECKING:
    from .._options import Clock
    from .._stores.contract import IdempotencyStore

DEFAULT_LEASE_SECONDS = 900.0
"""Without a Lambda context or `lease_seconds`: Lambda's longest timeout, so no invocation
can outlive its lease."""
DEFAULT_CLOCK_SKEW_SECONDS = 2.0
"""How far two callers' clocks may differ. Lambda hosts keep time with the Amazon Time Sync
Service (well under a millisecond apart), so 2 s is generous; it costs a crashed holder's
key 2 s more before it frees."""
RUNS_REMEMBERED = 16
"""Recent runs' durations kept per decorated function, for waiters (`_protocol.waiting`)."""


class Settings(Value):
    """One decorator's configuration. Never shared, never mutated after decoration."""

    key: Callable[[Any], Any]
    payload: Callable[[Any], Any] | None
    scope: Callable[[Any], Any] | None
    store: Callable[[], IdempotencyStore]
    namespace: str
    ttl_seconds: int
    lease_seconds: float | None
    on_in_progress: Literal["raise", "wait"]
    max_wait_seconds: float | None
    key_required: bool
    should_store: Callable[[Any], bool]
    clock: Clock
    skew_ms: int = int(DEFAULT_CLOCK_SKEW_SECONDS * 1000)
    """Clock skew allowed between callers: leases lapse and records expire that much later."""
    on_replay: OnReplay | None = None
    """Applied to every replayed result (from the cache or the store), so a front end can
    tell a replay from a first run without per-call state on the engine."""
    layout: _keys.KeyLayout = NATIVE_KEYS
    """The store's way of turning a key and a payload into a record's key and hash."""
    observe: Callable[[str, str | None, dict[str, Any]], None] | None = None
    """Sees every outcome after its log line (trace annotations, metrics: `_base.observe`)."""


class Engine:
    """What one decorated function keeps across its calls. Nothing per call lives here."""

    def __init__(
        self,
        settings: Settings,
        *,
        return_type: Callable[[], Any],
        cache: ResultCache | None,
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.stats: collections.Counter[str] = collections.Counter()
        """Outcomes counted per warm container: executed, replayed, ..., completion_failed."""
        self.recent_runs_ms: collections.deque[int] = collections.deque(maxlen=RUNS_REMEMBERED)
        """How long this function's latest runs took, claim to completion, as this container
        saw them (its own, and the records it replayed): when a waiter expects its holder."""
        self._return_type = return_type

    def _identify(self, data: Any) -> tuple[str, str | None] | None:
        """The record's pk and the payload hash; None to run unprotected (no key, allowed)."""
        settings = self.settings
        key = settings.key(data)
        if _keys.is_missing(key):
            if settings.key_required:
                self._count("key_missing", logging.WARNING, None)
                raise KeyMissingError("the idempotency key expression selected nothing")
            self._count("unprotected", logging.WARNING, None, reason="no key")
            return None
        scope = None
        if settings.scope is not None:
            scope = settings.scope(data)
            if _keys.is_missing(scope):
                # Running unscoped would let one tenant replay another's result.
                self._count("scope_missing", logging.ERROR, None)
                raise ScopeMissingError(
                    "the scope expression selected nothing; refusing to run unscoped"
                )
        pk = settings.layout.record_key(settings.namespace, scope, key)
        if settings.payload is None:
            return pk, None
        return pk, settings.layout.payload_hash(settings.payload(data))

    def _check_payload(self, pk: str, stored: str | None, incoming: str | None) -> None:
        if incoming is not None and stored is not None and stored != incoming:
            self._count("payload_mismatch", logging.WARNING, pk)
            raise PayloadMismatchError("this key was used with a different payload", key_hash=pk)

    def _note_run(self, claimed_at_ms: int | None, completed_at_ms: int | None) -> None:
        """Remember a run's duration, if both ends are known and it is one a Lambda
        invocation can take (clocks that jumped, or a record written by hand, are not)."""
        if claimed_at_ms is not None and completed_at_ms is not None:
            run_ms = completed_at_ms - claimed_at_ms
            if 0 <= run_ms <= DEFAULT_LEASE_SECONDS * 1000:
                self.recent_runs_ms.append(run_ms)

    def _lease_ms(self, context: Any) -> int:
        if self.settings.lease_seconds is not None:
            return int(self.settings.lease_seconds * 1000)
        remaining = remaining_ms(context)
        return remaining if remaining is not None else int(DEFAULT_LEASE_SECONDS * 1000)

    def _wait_budget_ms(self, context: Any) -> int:
        """How long `on_in_progress="wait"` may wait: the invocation's remaining time less a
        margin to answer in, capped by `max_wait_seconds`."""
        budget = remaining_ms(context)
        if budget is not None:
            budget -= max(500, budget // 10)
        if self.settings.max_wait_seconds is not None:
            cap = int(self.settings.max_wait_seconds * 1000)
            budget = cap if budget is None else min(budget, cap)
        return max(0, budget) if budget is not None else int(DEFAULT_LEASE_SECONDS * 1000)

    def _expiration(self, now_ms: int, lease_until_ms: int | None) -> int:
        """TTL in epoch seconds; an IN_PROGRESS record never expires before its lease ends,
        or a short TTL would let a second claim in while the first still runs."""
        expiration = now_ms // 1000 + self.settings.ttl_seconds
        if lease_until_ms is not None:
            expiration = max(expiration, -(-lease_until_ms // 1000) + 1)
        return expiration

    def _count(self, outcome: str, level: int, pk: str | None, **fields: Any) -> None:
        self.stats[outcome] += 1
        emit(level, outcome, pk, namespace=self.settings.namespace, **fields)
        observe = self.settings.observe
        if observe is not None:
            observe(outcome, pk, fields)


def remaining_ms(context: Any) -> int | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return None if remaining is None else int(remaining())


# -- The warm cache: completed results, per decorator, for replays with no round trip.


class CachedResult(Value):
    expiration: int
    """Epoch seconds, as stored: the cache never outlives the record."""
    payload_hash: str | None
    document: bytes
    """The result's JSON, decoded afresh on every replay so callers cannot mutate the cache."""
    typed: bool = False
    """The document is typed JSON (see _encoding)."""
    completed_at: int | None = None
    """Epoch milliseconds of the completion, when the record says (for `on_replay`)."""
    until_ms: int | None = None
    """When it stops replaying, on the clock's monotonic reading (`cache_until_ms`), so a
    step of the wall clock (NTP) never keeps it past the record's life. None: `expiration`
    is judged against the reading `get` is given."""


def cache_until_ms(expiration_s: int, judged_ms: int, ticks_ms: int) -> int:
    """When a result whose record expires at `expiration_s` leaves the cache, on a monotonic
    reading `ticks_ms` taken at `judged_ms` (that moment on the clock the record's times are
    written in: the store's at a read, where it keeps one): as long after as the record had
    left then. It counts within its last second, as in the store."""
    return ticks_ms + (expiration_s + 1) * 1000 - judged_ms


class ResultCache:
    """Least-recently-used, bounded by entries and by bytes held. Locked: a decorated
    function may be called from several threads of one container (a thread pool)."""

    def __init__(self, max_items: int = 256, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, CachedResult] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, pk: str, now_ms: int) -> CachedResult | None:
        """The live entry of `pk`; `now_ms` is the monotonic reading its `until_ms` is on."""
        with self._lock:
            entry = self._entries.get(pk)
            if entry is None:
                return None
            until = entry.until_ms
            if (now_ms >= until) if until is not None else entry.expiration < now_ms // 1000:
                self._remove(pk)
                return None
            self._entries.move_to_end(pk)
            return entry

    def put(self, pk: str, entry: CachedResult) -> None:
        if len(entry.document) > self.max_bytes or self.max_items <= 0:
            return
        with self._lock:
            self._remove(pk)
            self._entries[pk] = entry
            self._bytes += len(entry.document)
            while len(self._entries) > self.max_items or self._bytes > self.max_bytes:
                self._remove(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    def _remove(self, pk: str) -> None:
        entry = self._entries.pop(pk, None)
        if entry is not None:
            self._bytes -= len(entry.document)
