"""The protocol, top to bottom:

    claim → (replay | mismatch | in progress | run) → complete | release

`Idempotency` is one decorator's engine: its settings, its cache and its counters. Nothing
per call lives on it; each call builds its own `Execution`.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import random
import warnings
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, TypeVar

from . import _encoding, _execution, _keys
from ._cache import CachedResult, ResultCache
from ._clock import Clock
from ._errors import (
    CompletionConflictError,
    InProgressError,
    KeyMissingError,
    LeaseLostError,
    PayloadMismatchError,
    ScopeMissingError,
    StoreError,
)
from ._execution import Execution
from ._log import emit
from ._record import Record, Status
from ._store import DynamoDBStore

T = TypeVar("T")

DEFAULT_LEASE_SECONDS = 900.0
"""Without a Lambda context or `lease_seconds`: Lambda's longest timeout, so no invocation
can outlive its lease."""
WAIT_FIRST_POLL_SECONDS = 0.05
WAIT_POLL_GROWTH = 1.5
WAIT_MAX_POLL_SECONDS = 0.5
"""Gentle backoff: a waiter answers soon after the holder completes (a doubling backoff made
waiters answer after about twice the handler's time), at a few more consistent reads."""


class Settings(NamedTuple):
    """One decorator's configuration. Never shared, never mutated after decoration."""

    key: Callable[[Any], Any]
    payload: Callable[[Any], Any] | None
    scope: Callable[[Any], Any] | None
    store: Callable[[], DynamoDBStore]
    namespace: str
    ttl_seconds: int
    lease_seconds: float | None
    on_in_progress: Literal["raise", "wait"]
    max_wait_seconds: float | None
    key_required: bool
    should_store: Callable[[Any], bool]
    clock: Clock
    on_replay: Callable[[Any], Any] | None = None
    """Applied to every replayed result (from the cache or the store), so a front end can
    tell a replay from a first run without per-call state on the engine."""


class Idempotency:
    """Runs calls of one decorated function under the protocol."""

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
        self._return_type = return_type
        self._warned_disabled = False

    def __repr__(self) -> str:
        return f"Idempotency(namespace={self.settings.namespace!r})"

    def run(self, data: Any, context: Any, call: Callable[[], T]) -> T:
        """`data` is what the selectors see (the event, or the bound arguments)."""
        if os.environ.get("IDEMPOTENCY_DISABLED", "").lower() in ("1", "true", "yes"):
            self._warn_disabled()
            return self._run_unprotected(call)
        identity = self._identify(data)
        if identity is None:
            return self._run_unprotected(call)
        pk, payload_hash = identity
        clock = self.settings.clock
        now = clock.now_ms()

        cached = None if self.cache is None else self.cache.get(pk, now)
        if cached is not None:
            self._check_payload(pk, cached.payload_hash, payload_hash)
            self._count("replayed", logging.INFO, pk, source="cache")
            return self._replayed(self._decode(cached.document))  # type: ignore[no-any-return]

        store = self.settings.store()
        execution = Execution(pk, os.urandom(12).hex(), None)
        deadline: int | None = None  # set when waiting starts: most calls never wait
        while True:
            execution.lease_until_ms = now + self._lease_ms(context)
            won, held = self._claim(store, execution, payload_hash, now)
            if won:
                break
            if held is None:  # refused, then gone before we could read it: try again
                now = clock.now_ms()
                continue
            self._check_payload(pk, held.payload_hash, payload_hash)
            if held.status is Status.COMPLETED:
                return self._replay(store, held)  # type: ignore[no-any-return]
            if self.settings.on_in_progress == "raise":
                raise self._in_progress(held, now, "another invocation is running with this key")
            if deadline is None:
                deadline = now + self._wait_budget_ms(context)
            completed = self._wait(store, held, payload_hash, deadline)
            if completed is not None:
                return self._replay(store, completed)  # type: ignore[no-any-return]
            now = clock.now_ms()  # the holder is gone or its lease lapsed: claim again

        token = _execution.activate(execution)
        try:
            result = call()
        except BaseException as exc:
            self._release(store, execution, reason=type(exc).__name__)
            raise
        finally:
            _execution.deactivate(token)

        if not self.settings.should_store(result):
            self._release(store, execution, reason="result not stored by policy")
            return result
        try:
            document = _encoding.dumps(result)
        except Exception:
            self._release(store, execution, reason="result not serializable")
            raise
        self._complete(store, execution, payload_hash, document)
        return result

    # -- steps --------------------------------------------------------------------------

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
        pk = _keys.key_hash(settings.namespace, scope, key)
        if settings.payload is None:
            return pk, None
        return pk, _keys.payload_hash(settings.payload(data))

    def _claim(
        self, store: DynamoDBStore, execution: Execution, payload_hash: str | None, now: int
    ) -> tuple[bool, Record | None]:
        pk, lease_until = execution.key_hash or "", execution.lease_until_ms or now
        try:
            won, other = store.claim(
                pk,
                owner=execution.owner or "",
                payload_hash=payload_hash,
                now_ms=now,
                lease_until_ms=lease_until,
                expiration_s=self._expiration(now, lease_until),
            )
        except StoreError as exc:  # fail closed: the handler does not run unprotected
            self._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)
            raise
        if not won and other is not None and other.owner == execution.owner:
            # botocore retried a claim whose first attempt landed but whose answer was lost:
            # the record that "holds" the key is our own.
            won, other = True, None
        if won:
            execution.claimed_at_ms = now
            self._log_claim(pk, other, now)
        return won, other

    def _in_progress(self, held: Record, now: int, message: str) -> InProgressError:
        """Retry-After is when the holder's lease lapses: by then the key is sure to answer."""
        retry_after = max(1, math.ceil(((held.lease_until or now) - now) / 1000))
        self._count("in_progress", logging.INFO, held.pk, retry_after=retry_after)
        return InProgressError(message, key_hash=held.pk, retry_after=retry_after)

    def _complete(
        self, store: DynamoDBStore, execution: Execution, payload_hash: str | None, document: bytes
    ) -> None:
        pk, owner = execution.key_hash or "", execution.owner or ""
        expiration = self._expiration(self.settings.clock.now_ms(), None)
        try:
            completed = store.complete(
                pk,
                owner=owner,
                payload_hash=payload_hash,
                result=_encoding.pack(document),
                expiration_s=expiration,
                claimed_at_ms=execution.claimed_at_ms,
                writes=execution.writes,
            )
        except CompletionConflictError:
            self._count("completion_conflict", logging.WARNING, pk)
            self._release(store, execution, reason="enlisted write condition failed")
            raise
        except StoreError as exc:
            self._count("completion_failed", logging.ERROR, pk, code=exc.code)
            if not execution.writes:
                # The effect happened; failing now would make the client retry it. The record
                # stays IN_PROGRESS until its lease lapses, then the key may run again.
                return
            if not self._landed_after_all(store, execution):
                raise  # neither the enlisted writes nor the result landed; the key is free
            completed = True
        except Exception as exc:  # e.g. ResultTooLargeError: never leave the key locked
            self._release(store, execution, reason=type(exc).__name__)
            raise
        if not completed:
            self._count("lease_lost", logging.WARNING, pk)
            if execution.writes:
                raise LeaseLostError(
                    "the lease lapsed and another invocation took the key over; "
                    "the enlisted writes were not committed",
                    key_hash=pk,
                )
            return
        if self.cache is not None:
            self.cache.put(pk, CachedResult(expiration, payload_hash, document))
        self._count("executed", logging.INFO, pk)

    def _landed_after_all(self, store: DynamoDBStore, execution: Execution) -> bool:
        """A completion transaction that failed on our side may still have committed (a lost
        answer, a timeout). Release only touches a record still IN_PROGRESS, so a commit that
        landed is never undone and re-run: if the release is refused, read what is there."""
        if self._release(store, execution, reason="completion failed"):
            return False
        record = store.get(execution.key_hash or "")
        landed = (
            record is not None
            and record.owner == execution.owner
            and record.status is Status.COMPLETED
        )
        if landed:
            self._count("completion_confirmed", logging.WARNING, record.pk if record else None)
        return landed

    def _release(self, store: DynamoDBStore, execution: Execution, *, reason: str) -> bool:
        """Delete our IN_PROGRESS record so a retry runs again. False if it was not ours to
        delete any more (taken over, or completed after all) or the delete failed."""
        pk, owner = execution.key_hash or "", execution.owner or ""
        try:
            released = store.release(pk, owner=owner)
        except StoreError as exc:
            # The record stays IN_PROGRESS until its lease lapses; the original outcome wins.
            self._count("release_failed", logging.ERROR, pk, reason=reason, code=exc.code)
            return False
        self._count("released" if released else "not_released", logging.INFO, pk, reason=reason)
        return released

    def _replay(self, store: DynamoDBStore, record: Record) -> Any:
        blob = store.load_result(record)
        document = b"null" if blob is None else _encoding.unpack(blob)
        if self.cache is not None:
            self.cache.put(
                record.pk, CachedResult(record.expiration, record.payload_hash, document)
            )
        self._count("replayed", logging.INFO, record.pk, source="store")
        return self._replayed(self._decode(document))

    def _wait(
        self, store: DynamoDBStore, held: Record, payload_hash: str | None, deadline_ms: int
    ) -> Record | None:
        """Poll until the holder completes (its record), leaves or lapses (None), or our
        own time runs short (InProgressError)."""
        clock = self.settings.clock
        delay = WAIT_FIRST_POLL_SECONDS
        self._count("waiting", logging.INFO, held.pk)
        while True:
            now = clock.now_ms()
            if now >= deadline_ms:
                raise self._in_progress(held, now, "gave up waiting for the holder of this key")
            clock.sleep(min(delay * random.uniform(0.5, 1.0), (deadline_ms - now) / 1000))
            delay = min(delay * WAIT_POLL_GROWTH, WAIT_MAX_POLL_SECONDS)
            now = clock.now_ms()
            try:
                record = store.get(held.pk)
            except StoreError as exc:
                self._count("store_error", logging.ERROR, held.pk, step="wait", code=exc.code)
                raise
            if record is None or record.is_expired(now):
                return None
            self._check_payload(held.pk, record.payload_hash, payload_hash)
            if record.status is Status.COMPLETED:
                return record
            if record.lease_lapsed(now):
                return None
            held = record

    def _log_claim(self, pk: str, replaced: Record | None, now_ms: int) -> None:
        """A claim that replaced a live IN_PROGRESS record took over a lapsed lease: the old
        owner crashed or timed out, which operators want to see."""
        if (
            replaced is not None
            and replaced.status is Status.IN_PROGRESS
            and not replaced.is_expired(now_ms)
        ):
            lapsed_ms = now_ms - (replaced.lease_until or now_ms)
            self._count("taken_over", logging.WARNING, pk, lapsed_ms=lapsed_ms)
        else:
            self._count("claimed", logging.INFO, pk)

    def _run_unprotected(self, call: Callable[[], T]) -> T:
        execution = Execution(None, None, None)
        token = _execution.activate(execution)
        try:
            result = call()
        finally:
            _execution.deactivate(token)
        if execution.writes:
            self.settings.store().commit_writes(execution.writes)
        return result

    # -- small pieces -------------------------------------------------------------------

    def _check_payload(self, pk: str, stored: str | None, incoming: str | None) -> None:
        if incoming is not None and stored is not None and stored != incoming:
            self._count("payload_mismatch", logging.WARNING, pk)
            raise PayloadMismatchError("this key was used with a different payload", key_hash=pk)

    def _lease_ms(self, context: Any) -> int:
        if self.settings.lease_seconds is not None:
            return int(self.settings.lease_seconds * 1000)
        remaining = _remaining_ms(context)
        return remaining if remaining is not None else int(DEFAULT_LEASE_SECONDS * 1000)

    def _wait_budget_ms(self, context: Any) -> int:
        """How long `on_in_progress="wait"` may wait: the invocation's remaining time less a
        margin to answer in, capped by `max_wait_seconds`."""
        budget = _remaining_ms(context)
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

    def _decode(self, document: bytes) -> Any:
        return _encoding.rehydrate(json.loads(document), self._return_type())

    def _replayed(self, result: Any) -> Any:
        on_replay = self.settings.on_replay
        return result if on_replay is None else on_replay(result)

    def _count(self, outcome: str, level: int, pk: str | None, **fields: Any) -> None:
        self.stats[outcome] += 1
        emit(level, outcome, pk, namespace=self.settings.namespace, **fields)

    def _warn_disabled(self) -> None:
        if not self._warned_disabled:
            self._warned_disabled = True
            warnings.warn(
                f"IDEMPOTENCY_DISABLED is set: {self.settings.namespace} runs without protection",
                RuntimeWarning,
                stacklevel=4,
            )


def _remaining_ms(context: Any) -> int | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return None if remaining is None else int(remaining())
