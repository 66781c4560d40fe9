"""Claim the key, or learn who holds it: replay, mismatch, in progress, or wait.

One conditional PutItem claims the key; a refused claim returns the record that holds it. A
completed record is replayed (`_protocol.replaying`); a live one is an `InProgressError`, or, with
`on_in_progress="wait"`, polled until it completes, leaves or lapses (`_protocol.waiting` says
when). A held key's lease is extended here too, fenced on the claim.

`acquire` and `wait` are generators that yield the seconds to sleep between polls (`_protocol.run`
sleeps with the clock, `_protocol.coroutines` with the event loop); the store calls run inline,
wherever the generator is stepped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from .._base.clock import monotonic_ms
from .._base.errors import InProgressError, LeaseLostError, NewerFormatError, StoreError
from .._stores.record import Record, Status
from . import completing as _completing
from . import replaying as _replaying
from .engine import Engine, remaining_ms
from .execution import Execution

if TYPE_CHECKING:
    from .._stores.contract import IdempotencyStore
    from .durable import DurableRun

MAX_REFUSALS_UNSEEN = 3
"""Claims refused by a record that then cannot be read (an endpoint that ignores
ReturnValuesOnConditionCheckFailure, a record deleted in between again and again)."""
UNSEEN = "ClaimRefusedRecordUnseen"
CLAIMED: Any = object()
"""What `acquire` returns when the key is ours to run."""


def acquire(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    context: Any,
    durable: DurableRun | None = None,
) -> Generator[float, None, Any]:
    """Claim the key: CLAIMED when the handler may run, else the replayed result (or
    InProgressError / PayloadMismatchError / StoreError)."""
    pk = execution.key_hash or ""
    deadline: int | None = None  # set when waiting starts: most calls never wait
    unseen = 0
    contested = 0  # refusals in a row over a record we judge free
    while True:
        won, held, now = claim(engine, store, execution, payload_hash, context, durable)
        if not won and durable is not None and held is not None and _own_tombstone(held, execution):
            won, held = retake(engine, store, execution, payload_hash, now, held)
        if won:
            # A store that cannot commit enlisted writes (ValkeyStore) says why: add_write
            # refuses in the handler, before any result is stored without them.
            execution._refusal = getattr(store, "enlisted_writes_refusal", None)
            return CLAIMED
        if held is None:  # refused, then gone before we could read it: try again
            unseen += 1
            if unseen >= MAX_REFUSALS_UNSEEN:
                engine._count("store_error", logging.ERROR, pk, step="claim", code=UNSEEN)
                raise StoreError(
                    "DynamoDB refused the claim but the record holding the key could not "
                    f"be read, {unseen} times",
                    key_hash=pk,
                    code=UNSEEN,
                    retryable=True,
                )
            continue
        engine._check_payload(pk, held.payload_hash, payload_hash)
        if held.status is Status.COMPLETED:
            return _replaying.replay(engine, store, held)
        # IN_PROGRESS, or a tombstone newer than our clock: its release is not yet past
        if engine.settings.on_in_progress == "raise":
            message = "another invocation is running with this key"
            raise in_progress(engine, held, held.judged_at(now), message)
        if deadline is None:  # on the monotonic reading: a step of our clock moves it not
            deadline = monotonic_ms(engine.settings.clock) + engine._wait_budget_ms(context)
        skew = engine.settings.skew_ms
        contested = contested + 1 if _judged_free(held, held.judged_at(now), skew) else 0
        completed = yield from wait(engine, store, held, payload_hash, deadline, contested)
        if completed is not None:
            return _replaying.replay(engine, store, completed)
        # the holder is gone or its lease lapsed: claim again


def claim(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    context: Any,
    durable: DurableRun | None = None,
) -> tuple[bool, Record | None, int]:
    """One claim: (won, the record that holds the key when refused, the claim's `now`).

    Every deadline of the claim (`claimed_at`, `lease_until`, the answer-by time, the TTL)
    comes from one clock read and one read of the invocation's remaining time, taken
    together when the request is built to be sent: after the client exists (building it
    is a wait on a cold start) and in the thread that sends it (an async claim may queue
    for a worker for any time). A lease read before such a wait would end early by as
    long as it lasted, and a second caller could take the key over from a live holder."""
    pk = execution.key_hash or ""
    try:
        store.ready("put_item", pk, step="claim")  # built before the clock is read
    except StoreError as exc:  # nothing was sent: nothing to release
        engine._count("store_error", logging.ERROR, pk, step="claim", code=exc.code)
        raise
    clock = engine.settings.clock
    now, ticks = clock.now_ms(), monotonic_ms(clock)
    lease_ms = engine._lease_ms(context)
    lease_until = now + lease_ms
    if durable is not None:
        lease_until = durable.lease_until_ms(now, engine.settings.lease_seconds)
    execution.lease_until_ms = lease_until
    execution._lease_end_ms = ticks + lease_until - now
    execution.answer_by_ms = answer_by_ms(context, now)
    execution._answer_end_ms = answer_by_ms(context, ticks)
    try:
        won, other = store.claim(
            pk,
            owner=execution.owner or "",
            payload_hash=payload_hash,
            now_ms=now,
            lease_until_ms=lease_until,
            expiration_s=engine._expiration(now, lease_until),
            skew_ms=engine.settings.skew_ms,
        )
    except StoreError as exc:  # fail closed: the handler does not run unprotected
        store_failed(engine, pk, "claim", exc)
        if exc.maybe_applied:
            # The claim may have landed with its answer lost: free the key on the way
            # out (fenced on our token) rather than lock it for the whole lease.
            _completing.release(engine, store, execution, reason="claim failed")
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
            if other.lease_until is not None:
                execution._lease_end_ms = ticks + other.lease_until - other.judged_at(now)
            engine._count("resumed", logging.DEBUG, pk)
            return True, None, now
        won, other = True, None
    if won:
        execution.claimed_at_ms = now
        _log_claim(engine, pk, other, now)
    return won, other, now


def _own_tombstone(held: Record, execution: Execution) -> bool:
    return held.status is Status.RELEASED and held.owner == execution.owner


def retake(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    now: int,
    tombstone: Record,
) -> tuple[bool, Record | None]:
    """A durable execution that finds its own tombstone is still running (an operator forced
    a release while it was suspended, or the SDK replayed an execution we took for failed):
    it claims the key back, if nobody else claimed it since, and completes over it, so its
    effect is recorded rather than run again by the next execution."""
    pk = execution.key_hash or ""
    try:
        won, held = store.retake(
            pk,
            owner=execution.owner or "",
            released_at_ms=tombstone.lease_until or 0,
            payload_hash=payload_hash,
            now_ms=now,
            lease_until_ms=execution.lease_until_ms or now,
            expiration_s=engine._expiration(now, execution.lease_until_ms or now),
        )
    except StoreError as exc:
        engine._count("store_error", logging.ERROR, pk, step="retake", code=exc.code)
        if exc.maybe_applied:
            _completing.release(engine, store, execution, reason="retake failed")
        raise
    if won:
        execution.claimed_at_ms = now
        engine._count("retaken", logging.WARNING, pk)
    return won, held


def wait(
    engine: Engine,
    store: IdempotencyStore,
    held: Record,
    payload_hash: str | None,
    deadline_ms: int,
    contested: int = 0,
) -> Generator[float, None, Record | None]:
    """Poll until the holder completes (its record), leaves or lapses (None), or our
    own time runs short (InProgressError). When to poll: `_protocol.waiting`, imported here: only
    a duplicate told to wait needs it, and no cold start pays for it. A store that wakes its
    waiters (`WakingStore`) is blocked on between polls instead of slept through: the same
    schedule bounds each block, so a lost wake-up costs one interval at most.

    `contested`: how many claims in a row the store refused over a record we judged free
    (a record whose fields disagree, a store judging otherwise). The first is polled at once
    (a refusal that came back late: the ordinary takeover); from the second on, the first
    poll backs off as a throttled one does, so a waiter never loops claim-refused-claim
    without a pause, whatever the store.

    Our own clock keeps our deadline, on its monotonic reading (`deadline_ms`, as `ticks`),
    so a step of its wall clock neither stretches the wait nor cuts it; `held` is judged by
    `Record.judged_at` (the store's clock at the read, where it keeps one, moved on by the
    time we measured since: `read`, a monotonic reading too)."""
    from . import waiting as _waiting

    clock = engine.settings.clock
    engine._count("waiting", logging.DEBUG, held.pk)
    skew = engine.settings.skew_ms
    started = read = monotonic_ms(clock)
    throttled = max(0, contested - 1)
    wakes = _waiting.wake_ups(store, clock)
    while True:
        now, ticks = clock.now_ms(), monotonic_ms(clock)
        judged = held.judged_at(now, now - (ticks - read))
        if ticks >= deadline_ms:
            raise in_progress(engine, held, judged, "gave up waiting for the holder of this key")
        delay = _waiting.next_poll_ms(
            held,
            now_ms=judged,
            started_ms=judged - (ticks - started),
            skew_ms=skew,
            throttled=throttled,
            runs_ms=() if wakes is not None else engine.recent_runs_ms,
        )
        pause = min(delay, deadline_ms - ticks) / 1000
        if wakes is None:
            yield pause
        else:  # blocked on the store until the holder's write wakes us, at most as long
            block = _waiting.Block(wakes, held, pause)
            yield block  # the async driver blocks off its executor; the sync one, here
            if not block.done:
                block()
        now = clock.now_ms()
        try:
            record = store.get(held.pk)
        except StoreError as exc:
            if exc.code in _waiting.THROTTLING_CODES:
                # The key's partition is hot: skip this poll, poll less often.
                throttled += 1
                engine._count("wait_throttled", logging.WARNING, held.pk, code=exc.code)
                continue
            store_failed(engine, held.pk, "wait", exc)
            raise
        throttled, read = 0, monotonic_ms(clock)
        if record is None:
            return None
        judged = record.judged_at(now)
        if record.is_expired(judged, skew):
            return None
        if record.status is Status.RELEASED:
            if (record.lease_until or 0) <= judged:
                return None
            held = record  # released ahead of our clock: a claim is refused until then
            continue
        engine._check_payload(held.pk, record.payload_hash, payload_hash)
        if record.status is Status.COMPLETED:
            return record
        if record.lease_lapsed(judged, skew):
            return None
        held = record


def _judged_free(record: Record, judged: int, skew: int) -> bool:
    """Whether a claim over `record` should win, as `wait` judges it: expired, released
    before `judged`, or a lease lapsed."""
    if record.is_expired(judged, skew):
        return True
    if record.status is Status.RELEASED:
        return (record.lease_until or 0) <= judged
    return record.status is Status.IN_PROGRESS and record.lease_lapsed(judged, skew)


def extend_lease(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    seconds: float,
) -> int:
    """`current_execution().extend_lease`: a fenced write of our claim with a later lease
    (never an earlier one). LeaseLostError when another claim holds the key now."""
    pk, owner = execution.key_hash or "", execution.owner or ""
    clock = engine.settings.clock
    now, ticks = clock.now_ms(), monotonic_ms(clock)
    lease_until = max(now + int(seconds * 1000), execution.lease_until_ms or now)
    lease_end = max(ticks + int(seconds * 1000), execution._lease_end_ms or ticks)
    try:
        extended, held = store.extend_lease(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            claimed_at_ms=execution.claimed_at_ms,
            lease_until_ms=lease_until,
            expiration_s=engine._expiration(now, lease_until),
            now_ms=now,
            lease_ms=int(seconds * 1000),
        )
    except StoreError as exc:
        engine._count("store_error", logging.ERROR, pk, step="extend_lease", code=exc.code)
        raise
    if not extended and held is not None and _own_tombstone(held, execution):
        # An operator released the key while we run (`release --force`, `--force-durable`):
        # the key is free for anyone meanwhile, as they meant, and we go on without a lease.
        # Our completion lands over our own tombstone (fenced on our owner) unless someone
        # claimed since; a later extension then finds their claim: LeaseLostError.
        execution._released = True
        engine._count("lease_released", logging.WARNING, pk, step="extend_lease")
        return execution.lease_until_ms or now
    if not extended:
        engine._count("lease_lost", logging.WARNING, pk, step="extend_lease")
        status = "no record" if held is None else held.status.value
        raise LeaseLostError(
            f"the key is no longer ours to extend ({status}): our lease lapsed and another "
            "caller took it over, or it was completed or released",
            key_hash=pk,
        )
    execution.lease_until_ms = lease_until
    execution._lease_end_ms = lease_end
    engine._count("lease_extended", logging.DEBUG, pk, lease_until=lease_until)
    return lease_until


def store_failed(engine: Engine, pk: str, step: str, exc: StoreError) -> None:
    """Count a failed store call: `store_error`, or `newer_format` (a WARNING: expected for
    minutes while a rolling deploy runs two versions on one table)."""
    if isinstance(exc, NewerFormatError):
        engine._count(
            "newer_format", logging.WARNING, pk, step=step, format_version=exc.format_version
        )
    else:
        engine._count("store_error", logging.ERROR, pk, step=step, code=exc.code)


def in_progress(engine: Engine, held: Record, now: int, message: str) -> InProgressError:
    """Retry-After is the first whole second at which a claim of the key is granted:
    the holder's lease lapsed (or, without one, its record expired) on every clock within
    the skew allowance, or, for a tombstone ahead of our clock, its release time. By
    then the key is sure to answer; at least a second. `now` is `held.judged_at(...)`:
    the store's clock where it keeps one, so the duration is the server's."""
    frees = held.frees_at_ms(engine.settings.skew_ms)
    retry_after = max(1, math.ceil((frees - now) / 1000))
    engine._count("in_progress", logging.INFO, held.pk, retry_after=retry_after)
    return InProgressError(message, key_hash=held.pk, retry_after=retry_after)


def _log_claim(engine: Engine, pk: str, replaced: Record | None, now_ms: int) -> None:
    """A claim that replaced a live IN_PROGRESS record took over a lapsed lease: the old
    owner crashed or timed out, which operators want to see."""
    judged = now_ms if replaced is None else replaced.judged_at(now_ms)
    if (
        replaced is not None
        and replaced.status is Status.IN_PROGRESS
        and not replaced.is_expired(judged, engine.settings.skew_ms)
    ):
        lapsed_ms = judged - (replaced.lease_until or judged)
        engine._count("taken_over", logging.WARNING, pk, lapsed_ms=lapsed_ms)
    else:
        engine._count("claimed", logging.DEBUG, pk)


def answer_by_ms(context: Any, now_ms: int) -> int | None:
    """When completion stops retrying, for an invocation with a Lambda context: its
    deadline (`now_ms`, on the wall or the monotonic clock, and the remaining time read
    together) less a margin to answer in.
    None without a context: the completion's window then runs from the end of the work
    (`_protocol.completing.complete`), whatever the lease and its extensions did."""
    remaining = remaining_ms(context)
    if remaining is None:
        return None
    return now_ms + remaining - _completing.answer_margin_ms(remaining)
