"""The store contract, method by method (`IdempotencyStore`, `OperatorStore`): what each
call answers on a free key, on a held one, on a refused condition, past the skew allowance
and past expiry. Times are passed in, as the protocol passes them: no clock is read here."""

from __future__ import annotations

import base64
import os
import secrets
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from lambda_idempotency import IdempotencyError, Status
from lambda_idempotency._stores.contract import IdempotencyStore, OperatorStore
from lambda_idempotency._stores.encoding import encode
from tests.conformance.conftest import (
    CHUNKS,
    ENLISTED_WRITES,
    OPERATORS,
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
    assert store.get(pk) == held


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
    store: IdempotencyStore,
) -> None:
    pk, zombie, b = key(store), owner(), owner()
    claim(store, pk, zombie, T)
    lapsed = T + LEASE + SKEW  # lapsed on our clock, not yet on one SKEW behind it

    won, held = claim(store, pk, b, lapsed)
    assert not won
    assert held is not None
    assert held.owner == zombie

    won, replaced = claim(store, pk, b, lapsed + 1)
    assert won
    assert replaced is None or replaced.owner == zombie  # for the log, when the store says

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
    store: IdempotencyStore,
) -> None:
    pk, a = key(store), owner()
    expires_s = T // 1000 + 5
    claim(store, pk, a, T, lease_until_ms=T + 3_600_000, expiration_s=expires_s)
    not_yet = (expires_s + 1) * 1000 + SKEW - 1  # expired on our clock, not on a late one

    won, held = claim(store, pk, owner(), not_yet)
    assert not won
    assert held is not None
    assert not held.is_expired(not_yet, SKEW)

    expired = not_yet + 1
    record = store.get(pk)  # the store may still hold it: the reader decides
    assert record is None or record.is_expired(expired, SKEW)
    won, _ = claim(store, pk, owner(), expired)
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
    store: IdempotencyStore, lease_ms: int, ttl_s: int, skew_ms: int
) -> None:
    """`Record.frees_at_ms` (what Retry-After and waiters go by) is the store's own answer:
    a claim a millisecond before it is refused, one at it is granted, whichever of the
    lease and the expiration ends first, whatever the skew allowance."""
    pk = key(store, secrets.token_hex(8))
    now = T + 123  # not on a whole second
    claim(store, pk, owner(), now, lease_until_ms=now + lease_ms, expiration_s=now // 1000 + ttl_s)
    record = store.get(pk)
    assert record is not None
    frees = record.frees_at_ms(skew_ms)

    early, held = claim(store, pk, owner(), frees - 1, skew_ms=skew_ms)
    on_time, _ = claim(store, pk, owner(), frees, skew_ms=skew_ms)

    assert (early, on_time) == (False, True)
    assert held == record


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


def test_extending_a_lease_holds_the_key_and_is_fenced(store: IdempotencyStore) -> None:
    pk, a, b = key(store), owner(), owner()
    claim(store, pk, a, T)
    extend = {"payload_hash": "p" * 64, "claimed_at_ms": T, "expiration_s": T // 1000 + TTL}

    assert store.extend_lease(pk, owner=a, lease_until_ms=T + 60_000, **extend) == (True, None)
    record = store.get(pk)
    assert record is not None
    assert (record.lease_until, record.claimed_at, record.owner) == (T + 60_000, T, a)
    won, _ = claim(store, pk, b, T + LEASE + SKEW + 1)  # the first lease lapsed: not the key
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
