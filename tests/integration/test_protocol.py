"""The claim / complete / release protocol against DynamoDB Local over HTTP."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lambda_idempotency import (
    CompletionConflictError,
    DynamoDBStore,
    InProgressError,
    LeaseLostError,
    PayloadMismatchError,
    Status,
    StoreError,
    current_execution,
    idempotent,
)
from lambda_idempotency._base import keys as _keys
from tests.conftest import FakeClock, FakeContext, RoundTrips, create_table


def counting_handler(store: DynamoDBStore, **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []

    @idempotent(store=store, key="order_id", **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"charged": event["amount"], "run": len(runs)}

    return handler, runs


def test_first_call_runs_and_retry_replays_without_running(store: DynamoDBStore) -> None:
    handler, runs = counting_handler(store, cache_size=0)
    event = {"order_id": "o-1", "amount": 10}

    first = handler(event, FakeContext())
    retry = handler(dict(event), FakeContext())

    assert first == retry == {"charged": 10, "run": 1}
    assert len(runs) == 1
    record = store.get(next(iter(store_keys(store))))
    assert record is not None and record.status is Status.COMPLETED


def store_keys(store: DynamoDBStore) -> list[str]:
    """Keys a record holds: a release leaves only a tombstone, which holds nothing."""
    items = store.client.scan(TableName=store.table_name)["Items"]
    return [item["pk"]["S"] for item in items if item["status"]["S"] != "RELEASED"]


def test_raw_key_is_never_stored(store: DynamoDBStore) -> None:
    handler, _ = counting_handler(store)
    handler({"order_id": "customer-secret-42", "amount": 1}, None)

    items = store.client.scan(TableName=store.table_name)["Items"]
    assert len(items) == 1
    assert "customer-secret-42" not in repr(items)


def test_different_payload_after_completion_is_rejected(store: DynamoDBStore) -> None:
    handler, runs = counting_handler(store, cache_size=0)
    handler({"order_id": "o-1", "amount": 10}, None)

    with pytest.raises(PayloadMismatchError) as caught:
        handler({"order_id": "o-1", "amount": 99}, None)

    assert len(runs) == 1
    assert caught.value.key_hash is not None and "o-1" not in caught.value.key_hash


def test_different_payload_while_in_flight_is_rejected(store: DynamoDBStore) -> None:
    outcomes: list[BaseException] = []

    @idempotent(store=store, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> str:
        if event["amount"] == 10:  # the first run: a duplicate arrives while it holds the key
            try:
                handler({"order_id": "o-1", "amount": 99}, None)
            except PayloadMismatchError as exc:
                outcomes.append(exc)
        return "done"

    assert handler({"order_id": "o-1", "amount": 10}, None) == "done"
    assert len(outcomes) == 1


def test_handler_error_releases_the_key_and_the_retry_runs(store: DynamoDBStore) -> None:
    attempts: list[int] = []

    @idempotent(store=store, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("card network down")
        return "charged"

    with pytest.raises(ConnectionError, match="card network down"):
        handler({"order_id": "o-1"}, None)
    assert store_keys(store) == []

    assert handler({"order_id": "o-1"}, None) == "charged"
    assert len(attempts) == 2


def test_expired_completed_record_still_in_table_is_claimed_afresh(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    handler, runs = counting_handler(store, ttl_seconds=60, clock=clock, cache_size=0)
    handler({"order_id": "o-1", "amount": 1}, None)

    clock.advance(63)  # past TTL + skew allowance; DynamoDB Local keeps the item, as DynamoDB does
    assert len(store_keys(store)) == 1
    result = handler({"order_id": "o-1", "amount": 1}, None)

    assert result == {"charged": 1, "run": 2}
    assert len(runs) == 2


def test_lapsed_lease_is_taken_over_and_old_owner_cannot_overwrite(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """A claims and stalls past its lease; B takes over and completes; A's late completion
    is fenced off and B's record stays."""
    runs: list[str] = []

    @idempotent(
        store=store, key="order_id", payload=None, lease_seconds=5, clock=clock, cache_size=0
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["who"])
        if event["who"] == "A":
            clock.advance(8)  # A stalls past its lease and the 2 s skew allowance ...
            assert handler({"order_id": "o-1", "who": "B"}, None) == "result-B"  # ... B runs
        return f"result-{event['who']}"

    assert handler({"order_id": "o-1", "who": "A"}, None) == "result-A"

    assert runs == ["A", "B"]
    assert handler.idempotency.stats["taken_over"] == 1
    assert handler.idempotency.stats["lease_lost"] == 1
    assert handler({"order_id": "o-1", "who": "C"}, None) == "result-B"  # B's record stands


def test_lapsed_owner_enlisted_writes_never_land(
    store: DynamoDBStore, clock: FakeClock, ddb: Any
) -> None:
    ledger = create_table(ddb, f"{store.table_name}-ledger", key="id")

    @idempotent(
        store=store, key="order_id", payload=None, lease_seconds=5, clock=clock, cache_size=0
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {"Put": {"TableName": ledger, "Item": {"id": {"S": f"entry-{event['who']}"}}}}
        )
        if event["who"] == "A":
            clock.advance(8)
            handler({"order_id": "o-1", "who": "B"}, None)
        return event["who"]

    with pytest.raises(LeaseLostError):
        handler({"order_id": "o-1", "who": "A"}, None)

    ids = sorted(item["id"]["S"] for item in ddb.scan(TableName=ledger)["Items"])
    assert ids == ["entry-B"]


def test_enlisted_write_commits_with_the_result(store: DynamoDBStore, ddb: Any) -> None:
    ledger = create_table(ddb, f"{store.table_name}-ledger", key="id")

    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {
                "Put": {
                    "TableName": ledger,
                    "Item": {"id": {"S": event["order_id"]}},
                    "ConditionExpression": "attribute_not_exists(id)",
                }
            }
        )
        return "charged"

    trips = RoundTrips(ddb)
    assert handler({"order_id": "o-1"}, None) == "charged"
    assert trips.take() == ["PutItem", "TransactWriteItems"]  # the business write costs +0
    assert handler({"order_id": "o-1"}, None) == "charged"
    assert len(ddb.scan(TableName=ledger)["Items"]) == 1


def test_failed_enlisted_condition_writes_nothing_and_releases(
    store: DynamoDBStore, ddb: Any
) -> None:
    ledger = create_table(ddb, f"{store.table_name}-ledger", key="id")
    ddb.put_item(TableName=ledger, Item={"id": {"S": "taken"}})

    @idempotent(store=store, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {
                "Put": {
                    "TableName": ledger,
                    "Item": {"id": {"S": "taken"}, "by": {"S": event["order_id"]}},
                    "ConditionExpression": "attribute_not_exists(id)",
                }
            }
        )
        return "charged"

    with pytest.raises(CompletionConflictError) as caught:
        handler({"order_id": "o-1"}, None)

    assert [reason["Code"] for reason in caught.value.reasons] == ["None", "ConditionalCheckFailed"]
    assert store_keys(store) == []  # released: the retry may run again
    assert "by" not in ddb.get_item(TableName=ledger, Key={"id": {"S": "taken"}})["Item"]


class TestRoundTrips:
    """DESIGN.md: first run 2, replay 1, warm-cache replay 0, in-flight duplicate 1, error 2."""

    def test_first_run_replay_and_warm_cache(self, store: DynamoDBStore, ddb: Any) -> None:
        handler, _ = counting_handler(store)
        cold, _ = counting_handler(
            store, cache_size=0, namespace=handler.idempotency.settings.namespace
        )
        trips = RoundTrips(ddb)

        handler({"order_id": "o-1", "amount": 1}, None)
        assert trips.take() == ["PutItem", "PutItem"]
        cold({"order_id": "o-1", "amount": 1}, None)  # another container: replay from the table
        assert trips.take() == ["PutItem"]
        handler({"order_id": "o-1", "amount": 1}, None)  # this warm container: from memory
        assert trips.take() == []

    def test_in_flight_duplicate_costs_one(self, store: DynamoDBStore, ddb: Any) -> None:
        trips = RoundTrips(ddb)
        seen: list[list[str]] = []

        @idempotent(store=store, key="order_id")
        def handler(event: dict[str, Any], context: Any) -> str:
            if event.get("outer"):
                trips.take()
                with pytest.raises(InProgressError):
                    handler({"order_id": "o-1", "outer": True}, None)
                seen.append(trips.take())
            return "ok"

        handler({"order_id": "o-1", "outer": True}, None)
        assert seen == [["PutItem"]]

    def test_handler_error_costs_two(self, store: DynamoDBStore, ddb: Any) -> None:
        @idempotent(store=store, key="order_id")
        def handler(event: dict[str, Any], context: Any) -> str:
            raise ValueError("boom")

        trips = RoundTrips(ddb)
        with pytest.raises(ValueError):
            handler({"order_id": "o-1"}, None)
        assert trips.take() == ["PutItem", "PutItem"]  # claim, release (a tombstone)


def test_in_progress_reports_retry_after_from_the_lease(store: DynamoDBStore) -> None:
    errors: list[InProgressError] = []

    @idempotent(store=store, key="order_id", lease_seconds=42)
    def handler(event: dict[str, Any], context: Any) -> str:
        if event.get("outer"):
            with pytest.raises(InProgressError) as caught:
                handler({"order_id": "o-1", "outer": True}, None)
            errors.append(caught.value)
        return "ok"

    handler({"order_id": "o-1", "outer": True}, None)
    # The lease left, plus the 2 s skew allowance, to the first millisecond past them (45 if
    # the duplicate's claim came within the holder's claim's millisecond).
    assert 42 <= errors[0].retry_after <= 45


def test_lease_follows_the_invocation_remaining_time(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    held: list[Any] = []

    @idempotent(store=store, key="order_id", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> str:
        held.append(store.get(current_execution().key_hash or ""))
        return "ok"

    handler({"order_id": "o-1"}, FakeContext(remaining_ms=12_345))
    assert held[0].lease_until == clock.now_ms() + 12_345
    assert held[0].status is Status.IN_PROGRESS


class HolderFinishesWhileWaiting(FakeClock):
    """The waiter's first sleep lets the holder finish, and returns once it has: the waiter
    surely met the key in progress, and nothing depends on real time."""

    def __init__(self, release: threading.Event, finished: threading.Event) -> None:
        super().__init__()
        self.release, self.finished = release, finished

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.release.set()
        assert self.finished.wait(10), "the holder did not finish"


def test_wait_replays_the_holder_result(store: DynamoDBStore) -> None:
    holding, release, finished = threading.Event(), threading.Event(), threading.Event()
    clock = HolderFinishesWhileWaiting(release, finished)
    runs: list[int] = []

    @idempotent(store=store, key="order_id", on_in_progress="wait", clock=clock, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
        runs.append(1)
        holding.set()
        assert release.wait(10), "the waiter never waited"
        return {"answer": 42}

    results: dict[str, Any] = {}

    def holder() -> None:
        results["holder"] = handler({"order_id": "o-1"}, None)
        finished.set()

    holder_thread = threading.Thread(target=holder)
    holder_thread.start()
    assert holding.wait(10)
    results["waiter"] = handler({"order_id": "o-1"}, FakeContext(remaining_ms=20_000, clock=clock))
    holder_thread.join(10)

    assert results == {"holder": {"answer": 42}, "waiter": {"answer": 42}}
    assert len(runs) == 1
    assert handler.idempotency.stats["waiting"] == 1
    assert len(clock.slept) == 1  # one wait, then the holder's completed record


def test_wait_takes_over_when_the_holder_lease_lapses(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """A holder that crashed leaves IN_PROGRESS behind; a waiter claims once its lease lapses."""
    runs: list[int] = []

    @idempotent(store=store, key="order_id", payload=None, on_in_progress="wait", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "recovered"

    crashed_pk = _keys.key_hash(handler.idempotency.settings.namespace, None, "o-1")
    now = clock.now_ms()
    won, _ = store.claim(
        crashed_pk,
        owner="crashed-owner",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 3_000,
        expiration_s=now // 1000 + 3600,
    )
    assert won

    assert (
        handler({"order_id": "o-1"}, FakeContext(remaining_ms=60_000, clock=clock)) == "recovered"
    )
    assert runs == [1]
    assert 3.0 <= sum(clock.slept) < 6.0
    assert handler.idempotency.stats["taken_over"] == 1


def test_wait_gives_up_before_the_invocation_runs_out(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    @idempotent(store=store, key="order_id", on_in_progress="wait", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> str:
        if event.get("outer"):
            with pytest.raises(InProgressError):
                handler(
                    {"order_id": "o-1", "outer": True}, FakeContext(remaining_ms=5_000, clock=clock)
                )
        return "ok"

    handler({"order_id": "o-1", "outer": True}, FakeContext(remaining_ms=600_000, clock=clock))
    assert 4.0 < sum(clock.slept) < 4.6  # 5 s left, less a 0.5 s margin to answer in


def test_large_result_over_400kb_replays(store: DynamoDBStore, ddb: Any) -> None:
    import os

    big = {"blob": os.urandom(450_000).hex()}  # ~900 KB of incompressible JSON

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        return big

    assert handler({"id": 1}, None) == big
    trips = RoundTrips(ddb)
    assert handler({"id": 1}, None) == big
    assert trips.take() == ["PutItem", "BatchGetItem"]


def test_enlisted_write_dynamodb_refuses_is_a_store_error_and_releases(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """With the store's own client (no client-side validation), DynamoDB's validation refuses
    an invalid enlisted write: nothing lands, the key is released, the error says why."""
    default = DynamoDBStore(store.table_name, endpoint_url=dynamodb_local_endpoint)

    @idempotent(store=default, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {"Put": {"TableName": store.table_name, "Item": {"pk": {"S": ""}}}}
        )
        return "charged"

    with pytest.raises(StoreError) as caught:
        handler({"order_id": "o-1"}, None)
    assert caught.value.code == "ValidationException"
    assert store_keys(store) == []
