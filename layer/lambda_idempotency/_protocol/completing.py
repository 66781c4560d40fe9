"""After the run: store the result (with the enlisted writes), or release the key.

Completion is fenced on the claim's owner token and retried with a backoff of our own until
the invocation must answer; release writes a fenced tombstone so a retry runs again. The
effect has happened by the time `finish` runs: nothing here ever runs it again, and a commit
that may have landed is read back before the key is given up.

`finish` and `complete` are generators that yield the seconds to sleep between attempts
(`_protocol.run` sleeps with the clock, `_protocol.coroutines` with the event loop); the store calls
run inline, wherever the generator is stepped.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from .._base.clock import monotonic_ms
from .._base.errors import CompletionConflictError, DeferredResultError, LeaseLostError, StoreError
from .._stores import encoding as _encoding
from .._stores.record import Status
from . import callables as _callables
from .engine import CachedResult, Engine, cache_until_ms
from .execution import Execution

if TYPE_CHECKING:
    from .._stores.contract import IdempotencyStore
    from .._stores.record import StoredForm

COMPLETION_FIRST_BACKOFF_SECONDS = 0.05
COMPLETION_MAX_BACKOFF_SECONDS = 1.0
ANSWER_MARGIN_MIN_MS = 250
ANSWER_MARGIN_MAX_MS = 2000
"""Completion stops retrying this long (a tenth of the time left, within these bounds)
before the invocation must answer, so it can still answer."""
NO_CONTEXT_RETRY_SECONDS = 10.0
"""Outside Lambda (no context) nothing says when the caller gives up: completion tries for
this long at most from the end of the work (within the lease's length), less the margin."""

Sleeps = Generator[float, None, None]
"""Steps that yield the seconds to sleep before they go on."""


def finish(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    result: Any,
) -> Sleeps:
    """The run returned `result`: store it (as the policy says), or release the key."""
    try:
        encoded = encode(engine, execution, result)
    except DeferredResultError:
        release(engine, store, execution, reason="DeferredResultError")
        raise
    yield from finish_encoded(engine, store, execution, payload_hash, encoded)


def encode(engine: Engine, execution: Execution, result: Any) -> _encoding.Encoded | None:
    """The result as it will be stored, or None when the `store_result` policy refuses it.
    Where the run returned (a coroutine's loop, not a worker thread): the result is read as
    it was returned, before other tasks on the loop can change it. DeferredResultError when
    the result holds a result still to come (`return {"charge": charge(order)}`, a forgotten
    `await`): each is closed or cancelled here, and the caller releases the key, fenced, so
    no key holds a "not stored" marker for an effect that did not happen."""
    if not engine.settings.should_store(result):
        return None
    encoded = _encoding.encode(result)
    if encoded.deferred:
        raise _callables.nested_deferred(encoded.deferred, execution.key_hash)
    if encoded.problem is not None:
        # The effect has happened: the key completes all the same, and its retries get
        # a typed error instead of running the handler again.
        pk = execution.key_hash or ""
        engine._count("result_not_storable", logging.WARNING, pk, problem=encoded.problem)
    return encoded


def finish_encoded(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    encoded: _encoding.Encoded | None,
) -> Sleeps:
    """`finish` with the result already encoded (None: refused by the policy)."""
    if encoded is None:
        release(engine, store, execution, reason="result not stored by policy", routine=True)
        return
    yield from complete(engine, store, execution, payload_hash, encoded)


def complete(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    payload_hash: str | None,
    encoded: _encoding.Encoded,
) -> Sleeps:
    """Store the result, retrying throttles, 5xx and lost answers with a backoff of our
    own (botocore's retry quota is shared by the whole client and may be spent) until
    the invocation must answer. The effect has happened: giving up leaves the key
    IN_PROGRESS until its lease lapses, and then a retry runs it again."""
    pk, owner = execution.key_hash or "", execution.owner or ""
    clock = engine.settings.clock
    completed_at, ticks = clock.now_ms(), monotonic_ms(clock)
    expiration = engine._expiration(completed_at, None)
    answer_by = retry_until_ms(engine, execution, ticks)  # monotonic: NTP may step the wall
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
            if maybe_landed and completed_by(store, execution):
                completed = True  # our own earlier attempt landed; this repeat was refused
                break
            engine._count("completion_conflict", logging.WARNING, pk)
            release(engine, store, execution, reason="enlisted write condition failed")
            raise
        except StoreError as exc:
            maybe_landed = maybe_landed or exc.maybe_applied
            if exc.retryable and monotonic_ms(clock) + delay * 1000 < answer_by:
                engine._count("completion_retry", logging.WARNING, pk, step=step, code=exc.code)
                yield delay * random.uniform(0.5, 1.0)
                delay = min(delay * 2, COMPLETION_MAX_BACKOFF_SECONDS)
                continue
            engine._count("completion_failed", logging.ERROR, pk, step=step, code=exc.code)
            refused_result = not exc.retryable and (step == "chunks" or not execution.writes)
            # a write that may have landed is never overwritten by the marker: it may be
            # the result itself (a script failing after its write, which is not undone)
            if (
                refused_result
                and not maybe_landed
                and not encoded.blob.startswith(_encoding.NOT_STORED)
            ):
                # DynamoDB refuses this result (its size, a missing permission): complete
                # with a marker instead, so the effect never runs twice.
                encoded, form = refused(engine, pk, exc), None  # placed anew: a new result
                continue
            if not execution.writes:
                return  # the record stays IN_PROGRESS until its lease lapses
            if not landed_after_all(engine, store, execution):
                raise  # neither the enlisted writes nor the result landed; the key is free
            completed = True
            break
    settle(engine, execution, completed, encoded, expiration, payload_hash, completed_at, ticks)


def retry_until_ms(engine: Engine, execution: Execution, completed_at: int) -> int:
    """When completion stops retrying, on the monotonic clock (`completed_at` is its reading
    at the end of the work): the invocation's answer-by time (its Lambda context's deadline
    less a margin); without a context, NO_CONTEXT_RETRY_SECONDS (or the lease's length, if
    shorter) from the end of the work, whatever time the work took and however often it
    extended its lease."""
    if execution._answer_end_ms is not None:
        return execution._answer_end_ms
    window = min(engine._lease_ms(None), int(NO_CONTEXT_RETRY_SECONDS * 1000))
    return completed_at + window - answer_margin_ms(window)


def answer_margin_ms(budget_ms: int) -> int:
    """A tenth of the time left, within ANSWER_MARGIN_MIN_MS and ANSWER_MARGIN_MAX_MS."""
    return min(ANSWER_MARGIN_MAX_MS, max(ANSWER_MARGIN_MIN_MS, budget_ms // 10))


def settle(
    engine: Engine,
    execution: Execution,
    completed: bool,
    encoded: _encoding.Encoded,
    expiration: int,
    payload_hash: str | None,
    completed_at: int | None = None,
    ticks: int | None = None,
) -> None:
    """After the completion: count it, and keep the result warm, or report a lost lease.
    `ticks`: the clock's monotonic reading taken with `completed_at`, from which the cache
    times the result's life (`cache_until_ms`)."""
    pk = execution.key_hash or ""
    if not completed:
        engine._count("lease_lost", logging.WARNING, pk)
        if execution.writes:
            raise LeaseLostError(
                "the lease lapsed and another invocation took the key over; "
                "the enlisted writes were not committed",
                key_hash=pk,
            )
        return
    engine._note_run(execution.claimed_at_ms, completed_at)
    if engine.cache is not None and encoded.document is not None:
        until = None
        if completed_at is not None and ticks is not None:
            until = cache_until_ms(expiration, completed_at, ticks)
        entry = CachedResult(
            expiration, payload_hash, encoded.document, encoded.typed, completed_at, until
        )
        engine.cache.put(pk, entry)
    engine._count("executed", logging.DEBUG, pk)


def refused(engine: Engine, pk: str, exc: StoreError) -> _encoding.Encoded:
    marker = _encoding.not_stored_marker("store_refused", exc.code or "error")
    problem = f"store_refused: {exc.code}"
    engine._count("result_not_storable", logging.WARNING, pk, problem=problem)
    return _encoding.Encoded(marker, None, False, problem)


def completed_by(store: IdempotencyStore, execution: Execution) -> bool:
    try:
        record = store.get(execution.key_hash or "")
    except StoreError:
        return False
    return (
        record is not None and record.owner == execution.owner and record.status is Status.COMPLETED
    )


def landed_after_all(engine: Engine, store: IdempotencyStore, execution: Execution) -> bool:
    """A completion transaction that failed on our side may still have committed (a lost
    answer, a timeout). Release only touches a record still IN_PROGRESS, so a commit that
    landed is never undone and re-run: if the release is refused, read what is there."""
    if release(engine, store, execution, reason="completion failed"):
        return False
    landed = completed_by(store, execution)
    if landed:
        engine._count("completion_confirmed", logging.WARNING, execution.key_hash)
    return landed


def release(
    engine: Engine,
    store: IdempotencyStore,
    execution: Execution,
    *,
    reason: str,
    routine: bool = False,
) -> bool:
    """Delete our IN_PROGRESS record so a retry runs again. False if it was not ours to
    delete any more (taken over, or completed after all) or the delete failed. `routine`:
    the answer to the handler's own outcome (it raised, or its result is not to be stored),
    which the function's own error or response already tells: logged at DEBUG, as a claim
    or a completion is; a release after anything else is a line at INFO."""
    pk, owner = execution.key_hash or "", execution.owner or ""
    try:
        released = store.release(pk, owner=owner, now_ms=engine.settings.clock.now_ms())
    except StoreError as exc:
        # The record stays IN_PROGRESS until its lease lapses; the original outcome wins.
        engine._count("release_failed", logging.ERROR, pk, reason=reason, code=exc.code)
        return False
    if released:
        engine._count("released", logging.DEBUG if routine else logging.INFO, pk, reason=reason)
    else:
        engine._count("not_released", logging.INFO, pk, reason=reason)
    return released
