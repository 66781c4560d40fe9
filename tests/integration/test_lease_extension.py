"""`current_execution().extend_lease(seconds)` on DynamoDB Local: long work holds its key by a
write fenced on its claim; a zombie whose key was taken over learns it lost it; waiters and
Retry-After follow the extended lease. Effects are counted in every test."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    LeaseLostError,
    current_execution,
    idempotent,
)
from lambda_idempotency._record import Status
from tests.conftest import FakeClock, FakeContext

pytestmark = pytest.mark.dynamodb_local


def record_of(store: DynamoDBStore, handler: Any, key: str) -> Any:
    settings = handler.idempotency.settings
    return store.get(settings.layout.record_key(settings.namespace, None, key))


def test_a_live_holder_extends_its_lease_and_later_callers_see_it(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    seen: list[InProgressError] = []

    @idempotent(store=store, key="id", payload="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        clock.advance(8)
        until = current_execution().extend_lease(60)
        assert until == clock.now_ms() + 60_000
        clock.advance(30)  # past the first lease (10 s + 2 s of skew), within the new one
        try:
            export({"id": "e-1", "duplicate": True}, None)
        except InProgressError as exc:
            seen.append(exc)
        effects.append("exported")
        return "done"

    assert export({"id": "e-1"}, None) == "done"
    assert effects == ["exported"]
    (refused,) = seen
    assert refused.retry_after == 60 - 30 + 2  # when the extended lease lapses, skew included
    assert record_of(store, export, "e-1").status is Status.COMPLETED


def test_a_waiter_keeps_waiting_while_the_holder_extends(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    outcome: list[BaseException] = []

    @idempotent(
        store=store,
        key="id",
        payload="id",
        lease_seconds=10,
        clock=clock,
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=40,
    )
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        current_execution().extend_lease(120)
        try:  # polls for 40 s of the fake clock: the old lease lapsed long before
            export({"id": "e-2", "duplicate": True}, None)
        except InProgressError as exc:
            outcome.append(exc)
        effects.append("exported")
        return "done"

    export({"id": "e-2"}, None)
    assert effects == ["exported"]
    assert isinstance(outcome[0], InProgressError)
    assert 120 - 40 <= outcome[0].retry_after <= 120 + 2


def test_a_zombie_whose_key_was_taken_over_cannot_extend(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """A's lease lapses and B takes the key over: A's extension is refused while B still
    runs (B's lease stands) and after B completed, and A stops before its effect."""
    effects: list[str] = []
    lost: list[LeaseLostError] = []
    zombie: list[Any] = []

    def try_to_extend() -> None:
        try:
            zombie[0].extend_lease(600)
        except LeaseLostError as exc:
            lost.append(exc)

    @idempotent(store=store, key="id", payload="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("takeover"):
            try_to_extend()  # while B holds the key, IN_PROGRESS
            held = record_of(store, export, "e-3")
            assert held.owner == current_execution().owner
            assert held.lease_until == current_execution().lease_until_ms
            effects.append("export by the new holder")
            return "theirs"
        zombie.append(current_execution())
        clock.advance(15)  # our lease lapsed: another caller takes the key over
        other = threading.Thread(target=export, args=({"id": "e-3", "takeover": True}, None))
        other.start()
        other.join()
        try_to_extend()  # after B completed
        if lost:
            return "stopped"
        effects.append("export by the zombie")
        return "ours"

    assert export({"id": "e-3"}, None) == "stopped"
    assert len(lost) == 2 and lost[0].key_hash is not None
    assert effects == ["export by the new holder"]
    record = record_of(store, export, "e-3")
    assert record.status is Status.COMPLETED  # the new holder's result, untouched
    assert export({"id": "e-3"}, None) == "theirs"


def test_a_heartbeat_holds_the_key_through_long_work(store: DynamoDBStore) -> None:
    effects: list[str] = []
    seen: list[InProgressError] = []
    clock = FakeClock()
    real_sleep = threading.Event()

    @idempotent(store=store, key="id", payload="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        execution = current_execution()
        first_lease = execution.lease_until_ms
        with execution.heartbeat(every=0.05, extend_by=30):
            for _ in range(400):  # real time, for a beat to land (each beat is a write)
                if execution.lease_until_ms != first_lease:
                    break
                real_sleep.wait(0.05)
            clock.advance(25)  # past the first lease; the beats moved it to now + 30 s
            lease_until = execution.lease_until_ms
            try:
                export({"id": "e-4", "duplicate": True}, FakeContext())
            except InProgressError as exc:
                seen.append(exc)
        assert lease_until is not None and lease_until > clock.now_ms()
        effects.append("exported")
        return "done"

    assert export({"id": "e-4"}, None) == "done"
    assert effects == ["exported"]
    assert len(seen) == 1


def test_extend_lease_without_a_key_does_nothing(store: DynamoDBStore) -> None:
    @idempotent(store=store, key="id", key_required=False, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> int | None:
        return current_execution().extend_lease(30)

    assert handler({}, None) is None
