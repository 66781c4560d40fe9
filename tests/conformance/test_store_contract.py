"""The store contract, method by method (`IdempotencyStore`, `OperatorStore`): what each
call answers on a free key, on a held one, on a refused condition, past the skew allowance
and past expiry. Times are passed in, as the protocol passes them: no clock is read here,
but on a SERVER_CLOCK store, where only the server's clock lapses a lease (`Times`)."""

from __future__ import annotations

import base64
import math
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from lambda_idempotency import IdempotencyError, Status
from lambda_idempotency._stores.contract import IdempotencyStore, OperatorStore
from lambda_idempotency._stores.encoding import encode
from lambda_idempotency._stores.record import Record
from tests.conformance.conftest import (
    CHUNKS,
    ENLISTED_WRITES,
    OPERATORS,
    SERVER_CLOCK,
    TOMBSTONE,
    StoreFactory,
)

T = 1_800_000_000_000
"""The test's `now`, epoch milliseconds (a whole second)."""
SKEW = 2_000
LEASE = 10_000
TTL = 3_600


def owner() -> str:
    return secrets.token_hex(12)  # 24 characters, as the protocol's tokens


def key(store: IdempotencyStore, name: str = "k-1") -> str:
    return store.layout.record_key("conformance", None, name)


def claim(store: IdempotencyStore, pk: str, who: str, now: int, **given: Any) -> Any:
    arguments: dict[str, Any] = {
        "payload_hash": "p" * 64,
        "now_ms": now,
        "lease_until_ms": now + LEASE,
        "expiration_s": now // 1000 + TTL,
        "skew_ms": SKEW,
        **given,
    }
    return store.claim(pk, owner=who, **arguments)


def complete(store: IdempotencyStore, pk: str, who: str, blob: bytes, **given: Any) -> bool:
    form = store.stored_form(
        pk,
        owner=who,
        payload_hash="p" * 64,
        result=blob,
        expiration_s=T // 1000 + TTL,
        completed_at_ms=T,
    )
    if form.chunks is not None:
        store.put_chunks(pk, owner=who, result=form.chunks, expiration_s=T // 1000 + TTL)
    return store.write_completion(form, **given)


SMALL = encode({"order": "o-1", "total": 42}).blob


def as_written(record: Record | None) -> Record | None:
    """The record without `read_at_ms`, the moment it was read: two reads of one record
    differ in that alone."""
    return None if record is None else record._replace(read_at_ms=None)


class Times:
    """How a test lets a lease lapse or a record expire. On a store that decides by the times
    it is given, by passing a later `now_ms`: `before(edge)` is the last millisecond the key is
    still held (T + edge - 1), `after(edge)` the first it is free (T + edge), `edge` counted
    from the claim at T. On a SERVER_CLOCK store only the server's clock frees a key: the
    durations are short and each call first waits for real, until `margin` ms before the
    edge (from before the claim was sent) or `margin` ms past it (from its answer)."""

    def __init__(self, store_factory: StoreFactory) -> None:
        self.real = store_factory.has(SERVER_CLOCK)
        self.lease, self.skew, self.margin = (1000, 500, 400) if self.real else (LEASE, SKEW, 0)
        self.sent = self.answered = time.monotonic()

    @contextmanager
    def claiming(self) -> Iterator[None]:
        """Around the claim the edges count from."""
        self.sent = time.monotonic()
        yield
        self.answered = time.monotonic()

    def before(self, edge: int) -> int:
        self._wait_until(self.sent, edge - self.margin)
        return T + edge - 1

    def after(self, edge: int) -> int:
        self._wait_until(self.answered, edge + self.margin)
        return T + edge

    def _wait_until(self, start: float, ms: int) -> None:
        if self.real:
            time.sleep(max(0.0, start + ms / 1000 - time.monotonic()))


def test_the_store_keeps_the_contract(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert isinstance(store, IdempotencyStore)
    assert isinstance(store, OperatorStore) is store_factory.has(OPERATORS)


def test_a_free_key_is_claimed_and_a_second_claim_gets_the_holder(
    store: IdempotencyStore,
) -> None:
    pk, a, b = key(store), owner(), owner()
    assert claim(store, pk, a, T) == (True, None)

    won, held = claim(store, pk, b, T + 1)

    assert not won
    assert held is not None
    assert (held.pk, held.status, held.owner) == (pk, Status.IN_PROGRESS, a)
    assert held.payload_hash == "p" * 64
    assert held.lease_until == T + LEASE
    assert held.claimed_at == T
    assert as_written(store.get(pk)) == as_written(held)


def test_a_completed_key_refuses_a_claim_with_its_record_and_result(
    store: IdempotencyStore,
) -> None:
    pk, a = key(store), owner()
    claim(store, pk, a, T)
    assert complete(store, pk, a, SMALL)

    won, held = claim(store, pk, owner(), T + 1)

    assert not won
    assert held is not None
    assert (held.status, held.owner, held.completed_at) == (Status.COMPLETED, a, T)
    assert store.load_result(held) == SMALL


def test_a_lapsed_lease_is_taken_over_only_past_the_skew_and_the_zombie_is_fenced(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, zombie, b = key(store), owner(), owner()
    times = Times(store_factory)
    lease, skew = times.lease, times.skew
    with times.claiming():
        claim(store, pk, zombie, T, lease_until_ms=T + lease, skew_ms=skew)
    edge = lease + skew + 1  # lapsed on our clock, and on one `skew` behind it

    won, held = claim(store, pk, b, times.before(edge), skew_ms=skew)
    assert not won
    assert held is not None
    assert held.owner == zombie

    won, replaced = claim(store, pk, b, times.after(edge), skew_ms=skew)
    assert won
    assert replaced is None or replaced.owner == zombie  # for the log, when the store says
    lapsed = T + edge

    assert not complete(store, pk, zombie, SMALL)  # fenced: nothing written
    assert not store.release(pk, owner=zombie, now_ms=lapsed + 2)
    extended, now_held = store.extend_lease(
        pk,
        owner=zombie,
        payload_hash="p" * 64,
        claimed_at_ms=T,
        lease_until_ms=lapsed + 60_000,
        expiration_s=T // 1000 + TTL,
    )
    assert not extended
    assert now_held is not None
    assert now_held.owner == b
    record = store.get(pk)
    assert record is not None
    assert (record.status, record.owner) == (Status.IN_PROGRESS, b)

    assert complete(store, pk, b, SMALL)
    record = store.get(pk)
    assert record is not None
    assert (record.status, record.owner) == (Status.COMPLETED, b)


def test_an_expired_record_is_absent_to_a_claim_past_the_skew_and_read_as_stored(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, a = key(store), owner()
    times = Times(store_factory)
    skew = times.skew
    expires_s = T // 1000 + (0 if times.real else 5)
    with times.claiming():
        claim(store, pk, a, T, lease_until_ms=T + 3_600_000, expiration_s=expires_s, skew_ms=skew)
    edge = (expires_s + 1) * 1000 + skew - T  # expired on a clock `skew` behind ours

    not_yet = times.before(edge)
    won, held = claim(store, pk, owner(), not_yet, skew_ms=skew)
    assert not won
    assert held is not None
    assert not held.is_expired(not_yet, skew)

    expired = times.after(edge)
    record = store.get(pk)  # the store may still hold it: the reader decides
    assert record is None or record.is_expired(expired, skew)
    won, _ = claim(store, pk, owner(), expired, skew_ms=skew)
    assert won


@settings(
    # No shrinking: every example is four store calls, and a shrink of hundreds would
    # outlast the test's timeout; the example drawn is reported as it is.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@example(lease_ms=1_000, ttl_s=120, skew_ms=2_000)  # the lease ends first
@example(lease_ms=120_000, ttl_s=0, skew_ms=0)  # the expiration ends first
@given(
    lease_ms=st.integers(1, 120_000),
    ttl_s=st.integers(0, 120),
    skew_ms=st.integers(0, 5_000),
)
def test_a_held_key_frees_exactly_when_its_record_says(
    store_factory: StoreFactory, store: IdempotencyStore, lease_ms: int, ttl_s: int, skew_ms: int
) -> None:
    """`Record.frees_at_ms` (what Retry-After and waiters go by) is the store's own answer:
    a claim a millisecond before it is refused, one at it is granted, whichever of the
    lease and the expiration ends first, whatever the skew allowance.

    On a SERVER_CLOCK store no caller's clock frees a key, however far ahead it runs: a
    claim at `frees_at_ms` and one an hour past it are refused until the time has passed on
    the server (the durations are lengthened by 5 s so that none passes during the example;
    `test_a_held_key_frees_when_its_record_says_on_a_real_wait` waits for it)."""
    real = store_factory.has(SERVER_CLOCK)
    if real:
        lease_ms, ttl_s = lease_ms + 5_000, ttl_s + 5
    pk = key(store, secrets.token_hex(8))
    now = T + 123  # not on a whole second
    claim(store, pk, owner(), now, lease_until_ms=now + lease_ms, expiration_s=now // 1000 + ttl_s)
    record = store.get(pk)
    assert record is not None
    frees = record.frees_at_ms(skew_ms)

    early, held = claim(store, pk, owner(), frees - 1, skew_ms=skew_ms)
    on_time, _ = claim(store, pk, owner(), frees + (3_600_000 if real else 0), skew_ms=skew_ms)

    assert (early, on_time) == (False, not real)
    assert as_written(held) == as_written(record)


def test_a_held_key_frees_when_its_record_says_on_a_real_wait(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    """The same, whichever of the lease and the expiration ends first, as `Times` lets time
    pass: at once on a store deciding by the times it is given, for real on the server's."""
    for name, lease_ms, ttl_s in (("lease", 300, 60), ("ttl", 60_000, 0)):
        pk, times = key(store, name), Times(store_factory)
        skew = times.skew
        with times.claiming():
            claim(
                store,
                pk,
                owner(),
                T,
                lease_until_ms=T + lease_ms,
                expiration_s=T // 1000 + ttl_s,
                skew_ms=skew,
            )
        record = store.get(pk)
        assert record is not None
        edge = record.frees_at_ms(skew) - T

        early, held = claim(store, pk, owner(), times.before(edge), skew_ms=skew)
        on_time, _ = claim(store, pk, owner(), times.after(edge), skew_ms=skew)

        assert (early, on_time) == (False, True), name
        assert as_written(held) == as_written(record)


def test_a_release_frees_the_key_and_a_stale_release_is_refused(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, a, b = key(store), owner(), owner()
    claim(store, pk, a, T)
    assert not store.release(pk, owner=b, now_ms=T + 1)  # not b's to release

    assert store.release(pk, owner=a, now_ms=T + 2)

    record = store.get(pk)
    if store_factory.has(TOMBSTONE):
        assert record is not None
        assert (record.status, record.owner, record.lease_until) == (Status.RELEASED, a, T + 2)
        won, held = claim(store, pk, a, T + 3)  # a delayed copy of the released claim
        assert not won
        assert held is not None
        assert held.status is Status.RELEASED
    else:
        assert record is None
    assert not store.release(pk, owner=a, now_ms=T + 3)  # stale: released already

    won, _ = claim(store, pk, b, T + 4)  # the tombstone counts as absent
    assert won
    assert not store.release(pk, owner=a, now_ms=T + 5)  # stale: b holds the key
    record = store.get(pk)
    assert record is not None
    assert (record.status, record.owner) == (Status.IN_PROGRESS, b)


def test_a_release_never_undoes_a_completion(store: IdempotencyStore) -> None:
    pk, a = key(store), owner()
    claim(store, pk, a, T)
    assert complete(store, pk, a, SMALL)

    assert not store.release(pk, owner=a, now_ms=T + 1)

    record = store.get(pk)
    assert record is not None
    assert record.status is Status.COMPLETED


def test_extending_a_lease_holds_the_key_and_is_fenced(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, a, b = key(store), owner(), owner()
    times = Times(store_factory)
    with times.claiming():
        claim(store, pk, a, T, lease_until_ms=T + times.lease, skew_ms=times.skew)
    extend = {"payload_hash": "p" * 64, "claimed_at_ms": T, "expiration_s": T // 1000 + TTL}

    assert store.extend_lease(pk, owner=a, lease_until_ms=T + 60_000, **extend) == (True, None)
    record = store.get(pk)
    assert record is not None
    assert (record.lease_until, record.claimed_at, record.owner) == (T + 60_000, T, a)
    first_lapsed = times.after(times.lease + times.skew + 1)
    won, _ = claim(store, pk, b, first_lapsed, skew_ms=times.skew)  # not the key
    assert not won

    extended, held = store.extend_lease(pk, owner=b, lease_until_ms=T + 90_000, **extend)
    assert not extended
    assert held is not None
    assert held.owner == a
    assert complete(store, pk, a, SMALL)
    extended, held = store.extend_lease(pk, owner=a, lease_until_ms=T + 90_000, **extend)
    assert not extended  # completed: nothing left to extend
    assert held is not None
    assert held.status is Status.COMPLETED


def test_a_durable_execution_retakes_only_its_own_tombstone(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, a, b = key(store), owner(), owner()
    claim(store, pk, a, T)
    store.release(pk, owner=a, now_ms=T + 1)
    retake = {
        "payload_hash": "p" * 64,
        "now_ms": T + 2,
        "lease_until_ms": T + 2 + LEASE,
        "expiration_s": T // 1000 + TTL,
    }

    assert store.retake(pk, owner=b, released_at_ms=T + 1, **retake)[0] is False
    won, _ = store.retake(pk, owner=a, released_at_ms=T + 1, **retake)

    record = store.get(pk)
    if store_factory.has(TOMBSTONE):
        assert won
        assert record is not None
        assert (record.status, record.owner) == (Status.IN_PROGRESS, a)
        assert store.retake(pk, owner=a, released_at_ms=T + 1, **retake)[0] is False
    else:  # no tombstone to retake: the key is free for a claim instead
        assert not won
        assert record is None


def random_text(size: int) -> str:
    """Text that compresses by a quarter at most: it stays larger than a record holds."""
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()


def test_a_result_too_large_for_a_record_reads_back_byte_for_byte(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, a = key(store), owner()
    blob = encode({"rows": random_text(900_000)}).blob
    claim(store, pk, a, T)
    form = store.stored_form(
        pk, owner=a, payload_hash="p" * 64, result=blob, expiration_s=T // 1000 + TTL
    )
    if store_factory.has(CHUNKS):
        assert form.chunks is not None
        small = store.stored_form(
            pk, owner=a, payload_hash=None, result=SMALL, expiration_s=T // 1000 + TTL
        )
        assert small.chunks is None
    if form.chunks is not None:
        store.put_chunks(pk, owner=a, result=form.chunks, expiration_s=T // 1000 + TTL)
    assert store.write_completion(form)

    won, held = claim(store, pk, owner(), T + 1)

    assert not won
    assert held is not None
    assert store.load_result(held) == blob


def test_the_one_call_completion_is_fenced_too(store: IdempotencyStore) -> None:
    pk, a = key(store), owner()
    claim(store, pk, a, T)
    done = {"payload_hash": "p" * 64, "result": SMALL, "expiration_s": T // 1000 + TTL}

    assert not store.complete(pk, owner=owner(), **done)
    assert store.complete(pk, owner=a, **done)

    record = store.get(pk)
    assert record is not None
    assert record.status is Status.COMPLETED
    assert store.load_result(record) == SMALL


def test_enlisted_writes_land_with_the_completion_or_not_at_all(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    pk, zombie, b = key(store), owner(), owner()
    claim(store, pk, zombie, T)
    if not store_factory.has(ENLISTED_WRITES):
        # A store that cannot commit them refuses them: never a completion without them.
        with pytest.raises(IdempotencyError):
            complete(store, pk, zombie, SMALL, writes=[{"Put": {}}])
        record = store.get(pk)
        assert record is not None
        assert record.status is Status.IN_PROGRESS
        return
    claim(store, pk, b, T + LEASE + SKEW + 1)

    fenced = complete(
        store, pk, zombie, SMALL, writes=[store_factory.enlisted_write(store, "zombie")]
    )
    landed = complete(store, pk, b, SMALL, writes=[store_factory.enlisted_write(store, "b")])

    assert (fenced, landed) == (False, True)
    assert not store_factory.written(store, "zombie")
    assert store_factory.written(store, "b")


def test_the_operator_scan_finds_a_live_claim_and_releases_the_version_it_showed(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    if not store_factory.has(OPERATORS):
        assert not isinstance(store, OperatorStore)
        return
    assert isinstance(store, OperatorStore)
    stuck, done, gone = key(store, "stuck"), key(store, "done"), key(store, "gone")
    a = owner()
    claim(store, stuck, a, T)
    claim(store, done, a, T)
    complete(store, done, a, SMALL)
    claim(store, gone, a, T, expiration_s=T // 1000 - 1)  # expired: not stuck, absent

    found = [
        record.pk
        for page in store.scan_stuck(claimed_before_ms=T + 1, now_ms=T + 1)
        for record in page.records
    ]
    assert found == [stuck]

    shown = store.get(stuck)
    assert shown is not None
    store.extend_lease(
        stuck,
        owner=a,
        payload_hash="p" * 64,
        claimed_at_ms=T,
        lease_until_ms=T + 60_000,
        expiration_s=T // 1000 + TTL,
    )
    released, current = store.release_version(shown, now_ms=T + 2)  # changed since shown
    assert not released
    assert current is not None
    assert current.lease_until == T + 60_000

    assert current is not None
    assert store.release_version(current, now_ms=T + 3) == (True, None)
    record = store.get(stuck)
    if store_factory.has(TOMBSTONE):
        assert record is not None
        assert (record.status, record.owner) == (Status.RELEASED, a)
    else:
        assert record is None
    won, _ = claim(store, stuck, owner(), T + 4)
    assert won


def test_a_record_read_says_when_on_the_clock_it_was_written_in(
    store_factory: StoreFactory, store: IdempotencyStore
) -> None:
    """`Record.read_at_ms`, what the protocol judges a record by (`Record.judged_at`): a
    SERVER_CLOCK store sets it on every record it hands back (a refused claim, retake,
    extension or operator's release, a read) to the server's clock at the read, in the
    clock the record was written in: never before the write, never later than the read's
    answer. Every other store leaves it None: the caller's own clock judges the record."""
    server = store_factory.has(SERVER_CLOCK)
    pk, a, b = key(store), owner(), owner()

    def check(record: Record | None, since: float, written_ms: int) -> None:
        assert record is not None
        if not server:
            assert record.read_at_ms is None
            assert record.judged_at(T + 7, T) == T + 7  # the caller's clock, as it is
            return
        assert record.read_at_ms is not None
        elapsed = math.ceil((time.monotonic() - since) * 1000) + 1  # whole server ms
        assert written_ms <= record.read_at_ms <= written_ms + elapsed
        assert record.judged_at(T + 7, T) == record.read_at_ms + 7  # moved on by ours

    since = time.monotonic()
    claim(store, pk, a, T)
    check(claim(store, pk, b, T + 1)[1], since, T)
    check(store.get(pk), since, T)
    extend = {"payload_hash": None, "claimed_at_ms": T, "expiration_s": T // 1000 + TTL}
    check(store.extend_lease(pk, owner=b, lease_until_ms=T + LEASE, **extend)[1], since, T)
    retake = {"payload_hash": None, "now_ms": T + 2, "lease_until_ms": T + 2 + LEASE}
    held = store.retake(pk, owner=b, released_at_ms=T, expiration_s=T // 1000 + TTL, **retake)
    check(held[1], since, T)
    if isinstance(store, OperatorStore):
        shown = store.get(pk)
        assert shown is not None
        stale = shown._replace(lease_until=T + 1)
        check(store.release_version(stale, now_ms=T + 3)[1], since, T)

    since = time.monotonic()
    assert store.release(pk, owner=a, now_ms=T + 5)
    if store_factory.has(TOMBSTONE):
        tombstone = store.get(pk)
        check(tombstone, since, T + 5)  # a release stamps the releaser's clock
        assert tombstone is not None
        judged = tombstone.judged_at(T + 5)
        assert (tombstone.lease_until or 0) <= judged  # released: not "ahead of our clock"
