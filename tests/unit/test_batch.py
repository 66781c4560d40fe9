"""`process_batch` without DynamoDB Local: which source a batch is, and events that are no
batch at all (refused with a typed error before anything runs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    MisuseError,
    NotABatchEventError,
    idempotent_record,
    process_batch,
)
from lambda_idempotency._batch import detect_event_type, is_fifo
from tests.batch_events import (
    FIFO_QUEUE_ARN,
    batch,
    dynamodb_record,
    failed,
    kinesis_record,
    sqs_record,
)
from tests.conftest import FakeContext
from tests.http_events import http_event


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (sqs_record("m1", "hello"), "SQS"),
        (kinesis_record(1, {"step": 1}), "KinesisDataStreams"),
        (dynamodb_record(1, 1, "hello"), "DynamoDBStreams"),
    ],
)
def test_the_source_is_detected_from_the_records(record: dict[str, Any], expected: str) -> None:
    assert detect_event_type([record]) == expected


def test_a_fifo_queue_is_told_apart_from_a_standard_one() -> None:
    assert is_fifo([sqs_record("m1", "x", group="g1", queue_arn=FIFO_QUEUE_ARN)])
    assert not is_fifo([sqs_record("m1", "x")])


def test_records_without_an_event_source_need_event_type() -> None:
    record = sqs_record("m1", "hello")
    del record["eventSource"]
    assert detect_event_type([record], "SQS") == "SQS"
    with pytest.raises(NotABatchEventError, match="pass event_type"):
        detect_event_type([record])


def test_an_event_type_that_contradicts_the_records_is_refused() -> None:
    with pytest.raises(NotABatchEventError, match="DynamoDBStreams, SQS"):
        detect_event_type([sqs_record("m1", "hello")], "DynamoDBStreams")


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(NotABatchEventError, match="event_type must be one of"):
        detect_event_type([sqs_record("m1", "hello")], "Kafka")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "event",
    [
        None,
        "Records",
        {},
        {"Records": "not a list"},
        {"Records": ["not a record"]},
        {"detail-type": "OrderPlaced", "detail": {"order_id": "o1"}},  # EventBridge
        http_event("rest-api", headers={}, body="{}"),
        {"Records": [{"EventSource": "aws:sns", "Sns": {"Message": "hi"}}]},  # SNS
        {"Records": [{"eventSource": "aws:s3", "s3": {}}]},
        batch(sqs_record("m1", "a"), kinesis_record(1, {"step": 1})),  # two sources
        {"Records": [{"eventSource": "aws:sqs", "body": "no messageId"}]},
        {"Records": [{"eventSource": "aws:kinesis", "eventID": "x", "kinesis": {}}]},
    ],
)
def test_an_event_that_is_no_batch_gets_a_typed_error_and_nothing_runs(
    event: Any, moto_store: DynamoDBStore
) -> None:
    runs: list[Any] = []

    @idempotent_record(store=moto_store)
    def handler(record: Any) -> None:
        runs.append(record)

    with pytest.raises(NotABatchEventError) as raised:
        process_batch(event, FakeContext(), handler)

    assert isinstance(raised.value, MisuseError)
    assert runs == []
    assert "not a record" not in str(raised.value)  # names the shape, never the values


def test_an_empty_batch_reports_nothing(moto_store: DynamoDBStore) -> None:
    @idempotent_record(store=moto_store)
    def handler(record: Any) -> None:
        raise AssertionError("nothing to run")

    assert process_batch({"Records": []}, FakeContext(), handler) == {"batchItemFailures": []}


def test_a_batch_where_every_record_fails_is_reported_not_raised(
    moto_store: DynamoDBStore,
) -> None:
    @idempotent_record(store=moto_store)
    def handler(record: Any) -> None:
        raise RuntimeError("downstream unavailable")

    event = batch(sqs_record("m1", "a"), sqs_record("m2", "b"))

    assert failed(process_batch(event, FakeContext(), handler)) == ["m1", "m2"]


def test_the_handler_gets_powertools_record_and_the_context_if_it_asks(
    moto_store: DynamoDBStore,
) -> None:
    seen: list[Any] = []

    @idempotent_record(store=moto_store)
    def handler(record: Any, lambda_context: Any) -> None:
        seen.append((json.loads(record.body), lambda_context))

    context = FakeContext()
    process_batch(batch(sqs_record("m1", {"order_id": "o1"})), context, handler)

    assert seen == [({"order_id": "o1"}, context)]


def test_a_record_handler_called_directly_runs_under_the_protocol(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_record(store=moto_store)
    def handler(record: dict[str, Any]) -> str:
        runs.append(record["messageId"])
        return f"done {record['messageId']}"

    record = sqs_record("m1", "a")
    assert handler(record) == handler(record) == "done m1"
    assert runs == ["m1"]
