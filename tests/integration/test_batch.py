"""`process_batch` end to end on DynamoDB Local: SQS standard and FIFO, Kinesis and DynamoDB
Streams. What a consumer's owner notices: which records ran, which replayed, which Lambda is
told to redeliver."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    current_execution,
    idempotent_record,
    process_batch,
)
from lambda_idempotency._base.keys import key_hash
from tests.batch_events import (
    FIFO_QUEUE_ARN,
    batch,
    dynamodb_record,
    failed,
    kinesis_record,
    sqs_record,
)
from tests.conftest import FakeClock, FakeContext


def orders(store: DynamoDBStore, **options: Any) -> tuple[Any, list[str]]:
    """An SQS record handler that records the bodies it ran and rejects orders marked bad."""
    runs: list[str] = []

    @idempotent_record(store=store, **options)
    def ship(record: Any) -> dict[str, Any]:
        order = json.loads(record.body)
        runs.append(order["order_id"])
        if order.get("bad"):
            raise ValueError("cannot ship")
        return {"shipped": order["order_id"]}

    return ship, runs


# -- SQS standard -----------------------------------------------------------------------


def test_each_record_runs_once_and_a_redelivery_replays(store: DynamoDBStore) -> None:
    ship, runs = orders(store)
    event = batch(*(sqs_record(f"m{n}", {"order_id": f"o{n}"}) for n in range(3)))

    first = process_batch(event, FakeContext(), ship)
    redelivered = batch(
        *(sqs_record(f"m{n}", {"order_id": f"o{n}"}, receive_count=2) for n in range(3))
    )
    second = process_batch(redelivered, FakeContext(), ship)

    assert first == second == {"batchItemFailures": []}
    assert runs == ["o0", "o1", "o2"]


def test_a_failing_record_is_reported_the_others_complete_and_its_retry_runs(
    store: DynamoDBStore,
) -> None:
    ship, runs = orders(store)
    event = batch(
        sqs_record("m1", {"order_id": "o1"}),
        sqs_record("m2", {"order_id": "o2", "bad": True}),
        sqs_record("m3", {"order_id": "o3"}),
    )

    response = process_batch(event, FakeContext(), ship)
    assert failed(response) == ["m2"]
    assert runs == ["o1", "o2", "o3"]

    # SQS redelivers only m2; the failure released its key, so it runs again.
    retry = batch(sqs_record("m2", {"order_id": "o2", "bad": True}, receive_count=2))
    assert failed(process_batch(retry, FakeContext(), ship)) == ["m2"]
    assert runs == ["o1", "o2", "o3", "o2"]
    # The completed ones replay if SQS happens to deliver them again.
    again = batch(sqs_record("m1", {"order_id": "o1"}), sqs_record("m3", {"order_id": "o3"}))
    assert failed(process_batch(again, FakeContext(), ship)) == []
    assert runs == ["o1", "o2", "o3", "o2"]


def test_a_record_in_flight_elsewhere_is_reported_not_dropped(store: DynamoDBStore) -> None:
    clock = FakeClock()
    ship, runs = orders(store, clock=clock)
    namespace = ship.idempotency.settings.namespace
    won, _ = store.claim(  # another consumer holds m2 right now
        key_hash(namespace, None, "m2"),
        owner="another-invocation",
        payload_hash=None,
        now_ms=clock.now_ms(),
        lease_until_ms=clock.now_ms() + 30_000,
        expiration_s=clock.now_ms() // 1000 + 3600,
    )
    assert won
    event = batch(sqs_record("m1", {"order_id": "o1"}), sqs_record("m2", {"order_id": "o2"}))

    response = process_batch(event, FakeContext(clock=clock), ship)

    assert failed(response) == ["m2"]
    assert runs == ["o1"]


def test_a_record_whose_store_call_fails_is_reported(store: DynamoDBStore) -> None:
    missing_table = DynamoDBStore("no-such-table", client=store.client)
    ship, runs = orders(missing_table)
    event = batch(sqs_record("m1", {"order_id": "o1"}), sqs_record("m2", {"order_id": "o2"}))

    response = process_batch(event, FakeContext(), ship)

    assert failed(response) == ["m1", "m2"]  # reported, not raised: Lambda redelivers both
    assert runs == []  # fail closed: nothing ran unprotected


def test_a_key_over_the_body_runs_one_order_once_across_messages(store: DynamoDBStore) -> None:
    ship, runs = orders(store, key="powertools_json(body).order_id")
    order = {"order_id": "o-77", "sku": "BOOK-42"}
    event = batch(sqs_record("m1", order), sqs_record("m2", order))

    response = process_batch(event, FakeContext(), ship)
    later = process_batch(batch(sqs_record("m3", order)), FakeContext(), ship)

    assert failed(response) == failed(later) == []
    assert runs == ["o-77"]


def test_a_reused_key_with_another_payload_is_reported_and_does_not_run(
    store: DynamoDBStore,
) -> None:
    ship, runs = orders(store, key="powertools_json(body).order_id")
    process_batch(batch(sqs_record("m1", {"order_id": "o1", "qty": 1})), FakeContext(), ship)

    changed = batch(sqs_record("m2", {"order_id": "o1", "qty": 5}))
    response = process_batch(changed, FakeContext(), ship)

    assert failed(response) == ["m2"]  # redelivered until the DLQ, never acknowledged
    assert runs == ["o1"]


def test_each_record_is_leased_for_the_invocations_remaining_time(store: DynamoDBStore) -> None:
    clock = FakeClock()
    leases: list[int | None] = []

    @idempotent_record(store=store, clock=clock)
    def handler(record: Any) -> None:
        leases.append(current_execution().lease_until_ms)

    context = FakeContext(remaining_ms=7_000, clock=clock)
    process_batch(batch(sqs_record("m1", "a"), sqs_record("m2", "b")), context, handler)

    assert leases == [clock.now_ms() + 7_000] * 2


def test_a_plain_record_handler_is_keyed_by_message_id(
    store: DynamoDBStore, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", store.table_name)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_local_endpoint)
    runs: list[str] = []

    def handler(record: Any) -> None:
        runs.append(record.message_id)

    event = batch(sqs_record("m1", "same body"), sqs_record("m2", "same body"))
    process_batch(event, FakeContext(), handler)
    process_batch(event, FakeContext(), handler)

    assert runs == ["m1", "m2"]


# -- SQS FIFO ---------------------------------------------------------------------------


def fifo(message_id: str, order: dict[str, Any], group: str = "g1") -> dict[str, Any]:
    return sqs_record(message_id, order, group=group, queue_arn=FIFO_QUEUE_ARN)


def test_fifo_after_a_failure_the_rest_of_the_batch_is_reported_and_does_not_run(
    store: DynamoDBStore,
) -> None:
    ship, runs = orders(store)
    event = batch(
        fifo("m1", {"order_id": "o1"}),
        fifo("m2", {"order_id": "o2", "bad": True}),
        fifo("m3", {"order_id": "o3"}, group="g2"),
        fifo("m4", {"order_id": "o4"}),
    )

    response = process_batch(event, FakeContext(), ship)

    assert failed(response) == ["m2", "m3", "m4"]
    assert runs == ["o1", "o2"]


def test_fifo_can_fail_only_the_message_group_that_failed(store: DynamoDBStore) -> None:
    ship, runs = orders(store)
    event = batch(
        fifo("m1", {"order_id": "o1", "bad": True}, group="g1"),
        fifo("m2", {"order_id": "o2"}, group="g2"),
        fifo("m3", {"order_id": "o3"}, group="g1"),
        fifo("m4", {"order_id": "o4"}, group="g2"),
    )

    response = process_batch(event, FakeContext(), ship, skip_group_on_error=True)

    assert failed(response) == ["m1", "m3"]
    assert runs == ["o1", "o2", "o4"]


# -- streams ----------------------------------------------------------------------------


def test_kinesis_records_are_keyed_by_event_id_and_stop_at_the_first_failure(
    store: DynamoDBStore,
) -> None:
    runs: list[int] = []
    failing = {2}

    @idempotent_record(store=store)
    def handler(record: Any) -> None:
        step = json.loads(base64.b64decode(record.kinesis.data))["step"]
        runs.append(step)
        if step in failing:
            raise RuntimeError("downstream unavailable")

    records = [kinesis_record(n, {"step": n}) for n in (1, 2, 3)]

    response = process_batch(batch(*records), FakeContext(), handler)

    sequence = [record["kinesis"]["sequenceNumber"] for record in records]
    assert failed(response) == sequence[1:]  # Lambda resumes at the lowest: step 2
    assert runs == [1, 2]  # step 3 never ran before step 2

    failing.clear()  # Lambda retries from step 2, possibly with step 1 again
    assert failed(process_batch(batch(*records), FakeContext(), handler)) == []
    assert runs == [1, 2, 2, 3]  # step 1 replayed; 2 and 3 ran in order


def test_dynamodb_stream_failures_are_reported_by_sequence_number_in_order(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []
    failing = {"second"}

    @idempotent_record(store=store)
    def handler(record: Any) -> None:
        message = record.dynamodb.new_image["Message"]
        runs.append(message)
        if message in failing:
            raise RuntimeError("downstream unavailable")

    records = [
        dynamodb_record(n, n, message) for n, message in enumerate(["first", "second", "third"])
    ]

    response = process_batch(batch(*records), FakeContext(), handler)

    sequence = [record["dynamodb"]["SequenceNumber"] for record in records]
    assert failed(response) == sequence[1:]
    assert runs == ["first", "second"]

    failing.clear()
    assert failed(process_batch(batch(*records), FakeContext(), handler)) == []
    assert runs == ["first", "second", "second", "third"]


def test_a_stream_record_in_flight_elsewhere_holds_back_the_rest_of_the_shard(
    store: DynamoDBStore,
) -> None:
    clock = FakeClock()
    runs: list[str] = []

    @idempotent_record(store=store, clock=clock)
    def handler(record: Any) -> None:
        runs.append(record.event_id)

    records = [kinesis_record(n, {"step": n}) for n in (1, 2, 3)]
    store.claim(
        key_hash(handler.idempotency.settings.namespace, None, records[1]["eventID"]),
        owner="another-invocation",
        payload_hash=None,
        now_ms=clock.now_ms(),
        lease_until_ms=clock.now_ms() + 30_000,
        expiration_s=clock.now_ms() // 1000 + 3600,
    )

    response = process_batch(batch(*records), FakeContext(clock=clock), handler)

    assert failed(response) == [r["kinesis"]["sequenceNumber"] for r in records[1:]]
    assert runs == [records[0]["eventID"]]
