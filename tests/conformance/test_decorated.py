"""The protocol's promises through the public decorator, on each store: effects counted.

What a user sees: one run per key, a replay byte for byte, a mismatch refused, a duplicate
told when to come back, a zombie's completion fenced out, a released key run again, a lease
that never shortens, an expired key run again, a result that could not be stored refused
to its retries, tenants kept apart. The clock is a `FakeClock` the test moves; on a
SERVER_CLOCK store, where only the server's clock lapses a lease, `Pace` also waits for real."""

from __future__ import annotations

import base64
import math
import os
import time
from typing import Any

import pytest

from lambda_idempotency import (
    ConfigurationError,
    InProgressError,
    LeaseLostError,
    PayloadMismatchError,
    ResultNotSerializableError,
    Status,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores.contract import IdempotencyStore
from lambda_idempotency.testing import FakeClock
from tests.conformance.conftest import SCOPE, SERVER_CLOCK, StoreFactory

SKEW_SECONDS = 2


class Pace:
    """The durations a test lets pass, and how. On a store deciding by the caller's times the
    FakeClock moves and nothing waits: `lease` 30 s, `skew` 2 s, a key held `before` an edge
    is asked for 1 ms before it and again 1 ms past it (`past`). On a SERVER_CLOCK store the
    durations are short and `elapse` also sleeps as long, with a margin either side of the
    edge (a real wait cannot hit the millisecond)."""

    def __init__(self, store_factory: StoreFactory, clock: FakeClock) -> None:
        self.real = store_factory.has(SERVER_CLOCK)
        self.clock = clock
        self.lease, self.skew = (1.0, 0.5) if self.real else (30.0, float(SKEW_SECONDS))
        self.before, self.past = (0.4, 0.8) if self.real else (0.001, 0.001)

    def elapse(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if self.real:
            time.sleep(seconds)


def protect(store: IdempotencyStore, clock: FakeClock, **options: Any) -> Any:
    settings: dict[str, Any] = {
        "key": "id",
        "store": store,
        "clock": clock,
        "cache_size": 0,  # every replay from the store, not this process's memory
        "namespace": "conformance",
        "lease_seconds": 30,
        **options,
    }
    return idempotent(**settings)


def record_of(store: IdempotencyStore, handler: Any, key: str) -> Any:
    settings = handler.idempotency.settings
    return store.get(settings.layout.record_key(settings.namespace, None, key))


def test_a_key_runs_once_and_its_retries_replay_the_result(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[str] = []

    @protect(store, clock)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["id"])
        return {"charged": event["amount"], "zero": 0, "none": None, "empty": {}}

    first = charge({"id": "o-1", "amount": 10}, None)
    clock.advance(1)
    again = [charge({"id": "o-1", "amount": 10}, None) for _ in range(3)]

    assert again == [first] * 3
    assert first == {"charged": 10, "zero": 0, "none": None, "empty": {}}
    assert effects == ["o-1"]
    assert charge.idempotency.stats["replayed"] == 3


def test_the_same_key_with_another_payload_is_refused(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[int] = []

    @protect(store, clock)
    def charge(event: dict[str, Any], context: Any) -> int:
        effects.append(event["amount"])
        return int(event["amount"])

    charge({"id": "o-1", "amount": 10}, None)
    with pytest.raises(PayloadMismatchError):
        charge({"id": "o-1", "amount": 99}, None)

    assert effects == [10]


def test_a_duplicate_in_flight_is_told_when_the_key_frees_and_taken_over_only_then(
    store_factory: StoreFactory, store: IdempotencyStore, clock: FakeClock
) -> None:
    """Retry-After: the holder's lease (30 s) lapsed on every clock within the skew (2 s),
    the first whole second after. A claim a millisecond before is refused; at it, taken."""
    effects: list[str] = []
    refused: list[InProgressError] = []
    pace = Pace(store_factory, clock)

    @protect(store, clock, payload=None, lease_seconds=pace.lease, clock_skew_seconds=pace.skew)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append(event["who"])
        if event["who"] == "zombie":
            for who in ("early", "duplicate"):
                try:
                    export({"id": "e-1", "who": who}, None)
                except InProgressError as exc:
                    refused.append(exc)
            # lapsed on our clock, not on a late one
            pace.elapse(pace.lease + pace.skew - (pace.before - 0.001))
            try:
                export({"id": "e-1", "who": "at the edge"}, None)
            except InProgressError as exc:
                refused.append(exc)
            pace.elapse(pace.past)
            assert export({"id": "e-1", "who": "successor"}, None) == "successor"
        return str(event["who"])

    assert export({"id": "e-1", "who": "zombie"}, None) == "zombie"  # ran; not recorded
    retry_after = math.ceil(pace.lease + pace.skew + 0.001)
    assert [exc.retry_after for exc in refused] == [retry_after, retry_after, 1]
    assert effects == ["zombie", "successor"]
    assert export.idempotency.stats["lease_lost"] == 1  # the zombie's completion, fenced
    assert export({"id": "e-1", "who": "retry"}, None) == "successor"
    assert effects == ["zombie", "successor"]


def test_a_failed_run_releases_its_key_and_the_retry_runs(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[int] = []

    @protect(store, clock)
    def flaky(event: dict[str, Any], context: Any) -> str:
        effects.append(len(effects))
        if len(effects) == 1:
            raise RuntimeError("downstream failed")
        return "ok"

    with pytest.raises(RuntimeError):
        flaky({"id": "f-1"}, None)
    assert record_of(store, flaky, "f-1") is None or (
        record_of(store, flaky, "f-1").status is Status.RELEASED
    )
    assert flaky({"id": "f-1"}, None) == "ok"
    assert flaky({"id": "f-1"}, None) == "ok"

    assert effects == [0, 1]


def test_a_lease_is_extended_never_shortened_and_lost_to_a_successor(
    store_factory: StoreFactory, store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    leases: list[int | None] = []
    lost: list[LeaseLostError] = []
    pace = Pace(store_factory, clock)
    longer = 2 * pace.lease  # 60 s, or 2 s on a real wait

    @protect(store, clock, lease_seconds=pace.lease / 3, payload=None, clock_skew_seconds=pace.skew)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append(event["who"])
        if event["who"] != "holder":
            return str(event["who"])
        leases.append(current_execution().extend_lease(longer))
        leases.append(current_execution().extend_lease(pace.lease / 30))  # earlier: kept
        leases.append(record_of(store, export, "e-1").lease_until)
        pace.elapse(longer + pace.skew + pace.past)
        export({"id": "e-1", "who": "successor"}, None)
        try:
            current_execution().extend_lease(longer)
        except LeaseLostError as exc:
            lost.append(exc)
        return "holder"

    start = clock.now_ms()
    export({"id": "e-1", "who": "holder"}, None)

    expected = start + int(longer * 1000)
    assert leases[:2] == [expected] * 2
    if pace.real:  # the stored lease counts from the server's now: later by the call's time
        assert expected - 1 <= (leases[2] or 0) <= expected + 2_000
    else:
        assert leases[2] == expected
    assert len(lost) == 1
    assert effects == ["holder", "successor"]
    assert export({"id": "e-1", "who": "retry"}, None) == "successor"


def test_an_expired_key_runs_again_only_past_the_skew(
    store_factory: StoreFactory, store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    pace = Pace(store_factory, clock)
    ttl = 1 if pace.real else 60

    @protect(store, clock, ttl_seconds=ttl, clock_skew_seconds=pace.skew)
    def charge(event: dict[str, Any], context: Any) -> int:
        effects.append(event["id"])
        return len(effects)

    clock.ms -= clock.ms % 1000  # a whole second: the record expires at one
    assert charge({"id": "o-1"}, None) == 1
    pace.elapse(ttl + 1 + pace.skew - pace.before)  # expired, but not on a clock `skew` behind
    assert charge({"id": "o-1"}, None) == 1
    pace.elapse(pace.past)
    assert charge({"id": "o-1"}, None) == 2
    assert effects == ["o-1", "o-1"]


def random_text(size: int) -> str:
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()


def test_a_result_larger_than_a_record_replays_byte_for_byte(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    rows = random_text(700_000)

    @protect(store, clock)
    def report(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["id"])
        return {"rows": rows, "unicode": "\u00e9\u4e2d\U0001f600"}

    first = report({"id": "r-1"}, None)
    replayed = report({"id": "r-1"}, None)

    assert replayed == first
    assert replayed["rows"].encode() == rows.encode()
    assert effects == ["r-1"]


def test_a_result_that_cannot_be_stored_completes_the_key_and_refuses_its_retries(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    unstorable = object()

    @protect(store, clock)
    def charge(event: dict[str, Any], context: Any) -> Any:
        effects.append(event["id"])
        return unstorable

    assert charge({"id": "o-1"}, None) is unstorable
    with pytest.raises(ResultNotSerializableError):
        charge({"id": "o-1"}, None)
    assert record_of(store, charge, "o-1").status is Status.COMPLETED
    assert effects == ["o-1"]


def test_tenants_never_share_a_key_or_scope_is_refused(
    store_factory: StoreFactory, store: IdempotencyStore, clock: FakeClock
) -> None:
    effects: list[str] = []

    def handler(event: dict[str, Any], context: Any) -> str:
        effects.append(event["tenant"])
        return str(event["tenant"])

    if not store_factory.has(SCOPE):
        with pytest.raises(ConfigurationError):
            protect(store, clock, scope="tenant")(handler)
        return
    protected = protect(store, clock, scope="tenant", payload="id")(handler)

    answers = [protected({"id": "o-1", "tenant": t}, None) for t in ("a", "b", "a", "b")]

    assert answers == ["a", "b", "a", "b"]
    assert effects == ["a", "b"]
