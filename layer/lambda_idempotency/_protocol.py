"""The protocol, top to bottom:

    claim → (replay | mismatch | in progress | run) → complete | release

`Idempotency` is one decorator's engine: its settings, its cache and its counters. Nothing
per call lives on it; each call builds its own `Execution`.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import random
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from . import _encoding, _execution, _keys
from ._cache import CachedResult, ResultCache
from ._clock import Clock
from ._errors import (
    STORED_RESULT_UNREADABLE,
    CompletionConflictError,
    InProgressError,
    KeyMissingError,
    LeaseLostError,
    PayloadMismatchError,
    ScopeMissingError,
    StoreError,
    unreadable,
)
from ._execution import Execution
from ._log import emit
from ._record import OnReplay, Record, ReplayInfo, Status
from ._store import OWNER_CHARS, DynamoDBStore, StoredForm
from ._value import Value

if TYPE_CHECKING:
    from ._durable import DurableRun

T = TypeVar("T")

DEFAULT_LEASE_SECONDS = 900.0
"""Without a Lambda context or `lease_seconds`: Lambda's longest timeout, so no invocation
can outlive its lease."""
DEFAULT_CLOCK_SKEW_SECONDS = 2.0
"""How far two callers' clocks may differ. Lambda hosts keep time with the Amazon Time Sync
Service (well under a millisecond apart), so 2 s is generous; it costs a crashed holder's
key 2 s more before it frees."""
RUNS_REMEMBERED = 16
"""Recent runs' durations kept per decorated function, for waiters (`_waiting`)."""
COMPLETION_FIRST_BACKOFF_SECONDS = 0.05
COMPLETION_MAX_BACKOFF_SECONDS = 1.0
ANSWER_MARGIN_MIN_MS = 250
ANSWER_MARGIN_MAX_MS = 2000
"""Completion stops retrying this long (a tenth of the time left, within these bounds)
before the invocation must answer, so it can still answer."""
NO_CONTEXT_RETRY_SECONDS = 10.0
MAX_REFUSALS_UNSEEN = 3
"""Claims refused by a record that then cannot be read (an endpoint that ignores
ReturnValuesOnConditionCheckFailure, a record deleted in between again and again)."""
UNSEEN = "ClaimRefusedRecordUnseen"
_CLAIMED: Any = object()
"""What `_acquire` returns when the key is ours to run."""


class Settings(Value):
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
    skew_ms: int = int(DEFAULT_CLOCK_SKEW_SECONDS * 1000)
    """Clock skew allowed between callers: leases lapse and records expire that much later."""
    on_replay: OnReplay | None = None
    """Applied to every replayed result (from the cache or the store), so a front end can
    tell a replay from a first run without per-call state on the engine."""
    layout: _keys.KeyLayout = _keys.NATIVE_KEYS
    """The store's way of turning a key and a payload into a record's key and hash."""
    observe: Callable[[str, str | None, dict[str, Any]], None] | None = None
    """Sees every outcome after its log line (trace annotations, metrics: `_observe`)."""


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
        self.recent_runs_ms: collections.deque[int] = collections.deque(maxlen=RUNS_REMEMBERED)
        """How long this function's latest runs took, claim to completion, as this container
        saw them (its own, and the records it replayed): when a waiter expects its holder."""
        self._return_type = return_type
        self._warned_disabled = False

    def __repr__(self) -> str:
        return f"Idempotency(namespace={self.settings.namespace!r})"

    def run(
        self, data: Any, context: Any, call: Callable[[], T], durable: DurableRun | None = None
    ) -> T:
        """`data` is what the selectors see (the event, or the bound arguments). `durable`:
        the durable execution the call is an invocation of (`_durable`): it owns the key
        across its invocations, and `context` is then the invocation's Lambda context."""
        if _disabled():
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
            self._count("replayed", logging.DEBUG, pk, source="cache")
            info = ReplayInfo(pk, cached.completed_at, "cache")
            return self._replayed(self._decode(cached.document, cached.typed, pk), info)  # type: ignore[no-any-return]

        store = self.settings.store()
        owner = os.urandom(OWNER_CHARS // 2).hex() if durable is None else durable.owner
        execution = Execution(pk, owner, None)
        replay = self._acquire(store, execution, payload_hash, context, now, durable)
        if replay is not _CLAIMED:
            return replay  # type: ignore[no-any-return]

        execution._extender = lambda seconds: self._extend_lease(
            store, execution, payload_hash, seconds
        )
        token = _execution.activate(execution)
        try:
            result = call()
        except BaseException as exc:
            if durable is not None and not durable.ends_execution(exc):
                # A suspension (wait, callback) or an invocation Lambda runs again: the
                # execution goes on, and keeps its key.
                self._count("suspended", logging.DEBUG, pk, reason=type(exc).__name__)
                raise
            self._release(store, execution, reason=type(exc).__name__)
            raise
        finally:
            execution._extender = None
            _execution.deactivate(token)

        if not self.settings.should_store(result):
            self._release(store, execution, reason="result not stored by policy")
            return result
        encoded = _encoding.encode(result)
        if encoded.problem is not None:
            # The effect has happened: the key completes all the same, and its retries get
            # a typed error instead of running the handler again.
            self._count("result_not_storable", logging.WARNING, pk, problem=encoded.problem)
        self._complete(store, execution, payload_hash, encoded)
        return result

    # -- steps --------------------------------------------------------------------------

    def _acquire(
        self,
        store: DynamoDBStore,
        execution: Execution,
        payload_hash: str | None,
        context: Any,
        now: int,
        durable: DurableRun | None = None,
    ) -> Any:
        """Claim the key: `_CLAIMED` when the handler may run, else the replayed result (or
        InProgressError / PayloadMismatchError / StoreError)."""
        clock, pk = self.settings.clock, execution.key_hash or ""
        deadline: int | None = None  # set when waiting starts: most calls never wait
        unseen = 0
        while True:
            lease_ms = self._lease_ms(context)
            execution.lease_until_ms = now + lease_ms
            if durable is not None:
                execution.lease_until_ms = durable.lease_until_ms(now, self.settings.lease_seconds)
            execution.answer_by_ms = now + _answer_budget_ms(context, lease_ms)
            won, held = self._claim(store, execution, payload_hash, now)
            if won:
                return _CLAIMED
            if held is None:  # refused, then gone before we could read it: try again
                unseen += 1
                if unseen >= MAX_REFUSALS_UNSEEN:
                    self._count("store_error", logging.ERROR, pk, step="claim", code=UNSEEN)
                    raise StoreError(
                        "DynamoDB refused the claim but the record holding the key could not "
                        f"be read, {unseen} times",
                        key_hash=pk,
                        code=UNSEEN,
                        retryable=True,
                    )
                now = clock.now_ms()
                continue
            self._check_payload(pk, held.payload_hash, payload_hash)
            if held.status is Status.COMPLETED:
                return self._replay(store, held)
            # IN_PROGRESS, or a tombstone newer than our clock: its release is not yet past
            if self.settings.on_in_progress == "raise":
                raise self._in_progress(held, now, "another invocation is running with this key")
            if deadline is None:
                deadline = now + self._wait_budget_ms(context)
            completed = self._wait(store, held, payload_hash, deadline)
            if completed is not None:
                return self._replay(store, completed)
            now = clock.now_ms()  # the holder is gone or its lease lapsed: claim again

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
                skew_ms=self.settings.skew_ms,
            )
        except StoreError as exc:  # fail closed: the handler does not run unprotected
            self._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)
            if exc.maybe_applied:
                # The claim may have landed with its answer lost: free the key on the way
                # out (fenced on our token) rather than lock it for the whole lease.
                self._release(store, execution, reason="claim failed")
            raise
        if (
            not won
            and other is not None
            and other.owner == execution.owner
            and other.status is Status.IN_PROGRESS
        ):
            # botocore retried a claim whose first attempt landed but whose answer was
            # lost, or a later invocation of the durable execution that claimed it: the
            # record that "holds" the key is our own, with its claim time and lease.
            if other.claimed_at is not None and other.claimed_at < now:
                execution.claimed_at_ms = other.claimed_at
                execution.lease_until_ms = other.lease_until
                self._count("resumed", logging.DEBUG, pk)
                return True, None
            won, other = True, None
        if won:
            execution.claimed_at_ms = now
            self._log_claim(pk, other, now)
        return won, other

    def _extend_lease(
        self,
        store: DynamoDBStore,
        execution: Execution,
        payload_hash: str | None,
        seconds: float,
    ) -> int:
        """`current_execution().extend_lease`: a fenced write of our claim with a later lease
        (never an earlier one). LeaseLostError when another claim holds the key now."""
        pk, owner = execution.key_hash or "", execution.owner or ""
        now = self.settings.clock.now_ms()
        lease_until = max(now + int(seconds * 1000), execution.lease_until_ms or now)
        try:
            extended, held = store.extend_lease(
                pk,
                owner=owner,
                payload_hash=payload_hash,
                claimed_at_ms=execution.claimed_at_ms,
                lease_until_ms=lease_until,
                expiration_s=self._expiration(now, lease_until),
            )
        except StoreError as exc:
            self._count("store_error", logging.ERROR, pk, step="extend_lease", code=exc.code)
            raise
        if not extended:
            self._count("lease_lost", logging.WARNING, pk, step="extend_lease")
            status = "no record" if held is None else held.status.value
            raise LeaseLostError(
                f"the key is no longer ours to extend ({status}): our lease lapsed and another "
                "caller took it over, or it was completed or released",
                key_hash=pk,
            )
        execution.lease_until_ms = lease_until
        self._count("lease_extended", logging.DEBUG, pk, lease_until=lease_until)
        return lease_until

    def _in_progress(self, held: Record, now: int, message: str) -> InProgressError:
        """Retry-After is the first whole second at which a claim of the key is granted:
        the holder's lease lapsed (or, without one, its record expired) on every clock within
        the skew allowance, or, for a tombstone ahead of our clock, its release time. By
        then the key is sure to answer; at least a second."""
        frees = held.frees_at_ms(self.settings.skew_ms)
        retry_after = max(1, math.ceil((frees - now) / 1000))
        self._count("in_progress", logging.INFO, held.pk, retry_after=retry_after)
        return InProgressError(message, key_hash=held.pk, retry_after=retry_after)

    def _complete(
        self,
        store: DynamoDBStore,
        execution: Execution,
        payload_hash: str | None,
        encoded: _encoding.Encoded,
    ) -> None:
        """Store the result, retrying throttles, 5xx and lost answers with a backoff of our
        own (botocore's retry quota is shared by the whole client and may be spent) until
        the invocation must answer. The effect has happened: giving up leaves the key
        IN_PROGRESS until its lease lapses, and then a retry runs it again."""
        pk, owner = execution.key_hash or "", execution.owner or ""
        clock = self.settings.clock
        completed_at = clock.now_ms()
        expiration = self._expiration(completed_at, None)
        form: StoredForm | None = None  # placed once: every attempt sends the same writes
        chunks_written = False
        delay = COMPLETION_FIRST_BACKOFF_SECONDS
        maybe_landed = False
        while True:
            step = "complete"
            try:
                if form is None:
                    form = store.stored_form(
                        pk,
                        owner=owner,
                        payload_hash=payload_hash,
                        result=encoded.blob,
                        expiration_s=expiration,
                        claimed_at_ms=execution.claimed_at_ms,
                        completed_at_ms=completed_at,
                    )
                    chunks_written = form.chunks is None
                if not chunks_written:
                    step = "chunks"
                    store.put_chunks(
                        pk, owner=owner, result=form.chunks or b"", expiration_s=expiration
                    )
                    chunks_written = True
                    step = "complete"
                completed = store.write_completion(form, writes=execution.writes)
                break
            except CompletionConflictError:
                if maybe_landed and self._completed_by(store, execution):
                    completed = True  # our own earlier attempt landed; this repeat was refused
                    break
                self._count("completion_conflict", logging.WARNING, pk)
                self._release(store, execution, reason="enlisted write condition failed")
                raise
            except StoreError as exc:
                maybe_landed = maybe_landed or exc.maybe_applied
                now = clock.now_ms()
                answer_by = execution.answer_by_ms or now
                if exc.retryable and now + delay * 1000 < answer_by:
                    self._count("completion_retry", logging.WARNING, pk, step=step, code=exc.code)
                    clock.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, COMPLETION_MAX_BACKOFF_SECONDS)
                    continue
                self._count("completion_failed", logging.ERROR, pk, step=step, code=exc.code)
                refused_result = not exc.retryable and (step == "chunks" or not execution.writes)
                if refused_result and not encoded.blob.startswith(_encoding.NOT_STORED):
                    # DynamoDB refuses this result (its size, a missing permission): complete
                    # with a marker instead, so the effect never runs twice.
                    encoded, form = self._refused(pk, exc), None  # placed anew: a new result
                    continue
                if not execution.writes:
                    return  # the record stays IN_PROGRESS until its lease lapses
                if not self._landed_after_all(store, execution):
                    raise  # neither the enlisted writes nor the result landed; the key is free
                completed = True
                break
        self._settle(execution, completed, encoded, expiration, payload_hash, completed_at)

    def _settle(
        self,
        execution: Execution,
        completed: bool,
        encoded: _encoding.Encoded,
        expiration: int,
        payload_hash: str | None,
        completed_at: int | None = None,
    ) -> None:
        """After the completion: count it, and keep the result warm, or report a lost lease."""
        pk = execution.key_hash or ""
        if not completed:
            self._count("lease_lost", logging.WARNING, pk)
            if execution.writes:
                raise LeaseLostError(
                    "the lease lapsed and another invocation took the key over; "
                    "the enlisted writes were not committed",
                    key_hash=pk,
                )
            return
        self._note_run(execution.claimed_at_ms, completed_at)
        if self.cache is not None and encoded.document is not None:
            entry = CachedResult(
                expiration, payload_hash, encoded.document, encoded.typed, completed_at
            )
            self.cache.put(pk, entry)
        self._count("executed", logging.DEBUG, pk)

    def _refused(self, pk: str, exc: StoreError) -> _encoding.Encoded:
        marker = _encoding.not_stored_marker("store_refused", exc.code or "error")
        problem = f"store_refused: {exc.code}"
        self._count("result_not_storable", logging.WARNING, pk, problem=problem)
        return _encoding.Encoded(marker, None, False, problem)

    def _completed_by(self, store: DynamoDBStore, execution: Execution) -> bool:
        try:
            record = store.get(execution.key_hash or "")
        except StoreError:
            return False
        return (
            record is not None
            and record.owner == execution.owner
            and record.status is Status.COMPLETED
        )

    def _landed_after_all(self, store: DynamoDBStore, execution: Execution) -> bool:
        """A completion transaction that failed on our side may still have committed (a lost
        answer, a timeout). Release only touches a record still IN_PROGRESS, so a commit that
        landed is never undone and re-run: if the release is refused, read what is there."""
        if self._release(store, execution, reason="completion failed"):
            return False
        landed = self._completed_by(store, execution)
        if landed:
            self._count("completion_confirmed", logging.WARNING, execution.key_hash)
        return landed

    def _release(self, store: DynamoDBStore, execution: Execution, *, reason: str) -> bool:
        """Delete our IN_PROGRESS record so a retry runs again. False if it was not ours to
        delete any more (taken over, or completed after all) or the delete failed."""
        pk, owner = execution.key_hash or "", execution.owner or ""
        try:
            released = store.release(pk, owner=owner, now_ms=self.settings.clock.now_ms())
        except StoreError as exc:
            # The record stays IN_PROGRESS until its lease lapses; the original outcome wins.
            self._count("release_failed", logging.ERROR, pk, reason=reason, code=exc.code)
            return False
        self._count("released" if released else "not_released", logging.INFO, pk, reason=reason)
        return released

    def _replay(self, store: DynamoDBStore, record: Record) -> Any:
        """The completed record's result, decoded before it is cached; a result that cannot
        be read (`StoredResultUnreadable`, logged with the key hash) never runs the handler."""
        try:
            blob = store.load_result(record)
            if blob is not None and blob.startswith(_encoding.NOT_STORED):
                not_stored = _encoding.not_stored_error(blob, record.pk)
                if not isinstance(not_stored, StoreError):  # else a marker that does not parse
                    self._count("replayed_not_stored", logging.WARNING, record.pk)
                raise not_stored
            document, typed = _encoding.unpack(blob, key_hash=record.pk)
        except StoreError as exc:
            self._count("store_error", logging.ERROR, record.pk, step="replay", code=exc.code)
            raise
        result = self._decode(document, typed, record.pk)
        if self.cache is not None:
            self.cache.put(
                record.pk,
                CachedResult(
                    record.expiration, record.payload_hash, document, typed, record.completed_at
                ),
            )
        self._note_run(record.claimed_at, record.completed_at)
        self._count("replayed", logging.DEBUG, record.pk, source="store")
        info = ReplayInfo(record.pk, record.completed_at, "store")
        return self._replayed(result, info)

    def _wait(
        self, store: DynamoDBStore, held: Record, payload_hash: str | None, deadline_ms: int
    ) -> Record | None:
        """Poll until the holder completes (its record), leaves or lapses (None), or our
        own time runs short (InProgressError). When to poll: `_waiting`, imported here: only
        a duplicate told to wait needs it, and no cold start pays for it."""
        from . import _waiting

        clock = self.settings.clock
        self._count("waiting", logging.DEBUG, held.pk)
        skew = self.settings.skew_ms
        started = clock.now_ms()
        throttled = 0
        while True:
            now = clock.now_ms()
            if now >= deadline_ms:
                raise self._in_progress(held, now, "gave up waiting for the holder of this key")
            delay = _waiting.next_poll_ms(
                held,
                now_ms=now,
                started_ms=started,
                skew_ms=skew,
                throttled=throttled,
                runs_ms=self.recent_runs_ms,
            )
            clock.sleep(min(delay, deadline_ms - now) / 1000)
            now = clock.now_ms()
            try:
                record = store.get(held.pk)
            except StoreError as exc:
                if exc.code in _waiting.THROTTLING_CODES:
                    # The key's partition is hot: skip this poll, poll less often.
                    throttled += 1
                    self._count("wait_throttled", logging.WARNING, held.pk, code=exc.code)
                    continue
                self._count("store_error", logging.ERROR, held.pk, step="wait", code=exc.code)
                raise
            throttled = 0
            if record is None or record.is_expired(now, skew):
                return None
            if record.status is Status.RELEASED:
                if (record.lease_until or 0) <= now:
                    return None
                held = record  # released ahead of our clock: a claim is refused until then
                continue
            self._check_payload(held.pk, record.payload_hash, payload_hash)
            if record.status is Status.COMPLETED:
                return record
            if record.lease_lapsed(now, skew):
                return None
            held = record

    def _log_claim(self, pk: str, replaced: Record | None, now_ms: int) -> None:
        """A claim that replaced a live IN_PROGRESS record took over a lapsed lease: the old
        owner crashed or timed out, which operators want to see."""
        if (
            replaced is not None
            and replaced.status is Status.IN_PROGRESS
            and not replaced.is_expired(now_ms, self.settings.skew_ms)
        ):
            lapsed_ms = now_ms - (replaced.lease_until or now_ms)
            self._count("taken_over", logging.WARNING, pk, lapsed_ms=lapsed_ms)
        else:
            self._count("claimed", logging.DEBUG, pk)

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

    def _note_run(self, claimed_at_ms: int | None, completed_at_ms: int | None) -> None:
        """Remember a run's duration, if both ends are known and it is one a Lambda
        invocation can take (clocks that jumped, or a record written by hand, are not)."""
        if claimed_at_ms is not None and completed_at_ms is not None:
            run_ms = completed_at_ms - claimed_at_ms
            if 0 <= run_ms <= DEFAULT_LEASE_SECONDS * 1000:
                self.recent_runs_ms.append(run_ms)

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

    def _decode(self, document: bytes, typed: bool, pk: str) -> Any:
        """The result a stored (or cached) document holds, as the return annotation says;
        StoreError `StoredResultUnreadable`, logged, for one that cannot be read."""
        try:
            value = _encoding.loads(document, typed, key_hash=pk)
            try:
                return _encoding.rehydrate(value, self._return_type())
            except Exception:  # data the annotation's types refuse (one changed since?)
                raise unreadable(
                    STORED_RESULT_UNREADABLE,
                    "it does not fit the function's return annotation",
                    key_hash=pk,
                    step="replay",
                ) from None
        except StoreError as exc:
            self._count("store_error", logging.ERROR, pk, step="replay", code=exc.code)
            raise

    def _replayed(self, result: Any, info: ReplayInfo) -> Any:
        on_replay = self.settings.on_replay
        return result if on_replay is None else on_replay(result, info)

    def _count(self, outcome: str, level: int, pk: str | None, **fields: Any) -> None:
        self.stats[outcome] += 1
        emit(level, outcome, pk, namespace=self.settings.namespace, **fields)
        observe = self.settings.observe
        if observe is not None:
            observe(outcome, pk, fields)

    def _warn_disabled(self) -> None:
        if not self._warned_disabled:
            self._warned_disabled = True
            warnings.warn(
                f"IDEMPOTENCY_DISABLED (or POWERTOOLS_IDEMPOTENCY_DISABLED) is set: "
                f"{self.settings.namespace} runs without protection",
                RuntimeWarning,
                stacklevel=4,
            )


TRUTHY = ("1", "y", "yes", "t", "true", "on")
"""What Powertools' strtobool reads as true, so its users' test settings keep working."""


def _disabled() -> bool:
    return (
        os.environ.get("IDEMPOTENCY_DISABLED", "").lower() in ("1", "true", "yes")
        or os.environ.get("POWERTOOLS_IDEMPOTENCY_DISABLED", "").lower() in TRUTHY
    )


def _answer_budget_ms(context: Any, lease_ms: int) -> int:
    """How long from now completion may keep trying: the invocation's remaining time less a
    margin to answer in. Outside Lambda (no context) nothing says when the caller gives up:
    try for NO_CONTEXT_RETRY_SECONDS at most, within the lease."""
    remaining = _remaining_ms(context)
    budget = (
        remaining if remaining is not None else min(lease_ms, int(NO_CONTEXT_RETRY_SECONDS * 1000))
    )
    return budget - min(ANSWER_MARGIN_MAX_MS, max(ANSWER_MARGIN_MIN_MS, budget // 10))


def _remaining_ms(context: Any) -> int | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return None if remaining is None else int(remaining())
