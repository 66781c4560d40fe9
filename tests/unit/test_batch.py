"""`process_batch` without DynamoDB Local: which source a batch is, and events that are no
batch at all (refused with a typed error before anything runs)."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    MisuseError,
    NotABatchEventError,
    PayloadMismatchError,
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
        {"Records": [{"eventSource": "aws:dynamodb", "eventID": "x", "dynamodb": {}}]},
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


# -- the default payload: what a redelivery repeats, never what changes per receive -------

_runs = itertools.count()


def recorder(store: DynamoDBStore, **options: Any) -> tuple[Any, list[Any]]:
    """A record handler that records the raw records it ran."""
    runs: list[Any] = []

    @idempotent_record(store=store, **options)
    def handler(record: Any) -> None:
        runs.append(record.raw_event)

    return handler, runs


def delivered_twice(
    store: DynamoDBStore, first: dict[str, Any], second: dict[str, Any], **options: Any
) -> tuple[list[str], int]:
    """The second delivery's reported records, and how many times the handler ran."""
    handler, runs = recorder(store, **options)
    assert failed(process_batch(batch(first), FakeContext(), handler)) == []
    reported = failed(process_batch(batch(second), FakeContext(), handler))
    return reported, len(runs)


def kinesis_data(record: dict[str, Any], data: bytes) -> dict[str, Any]:
    return {**record, "kinesis": {**record["kinesis"], "data": base64.b64encode(data).decode()}}


ONE_TABLE_FOR_ALL_EXAMPLES = settings(
    suppress_health_check=[*settings().suppress_health_check, HealthCheck.function_scoped_fixture]
)
"""The examples share the test's table (their records' ids differ). The profile's own
suppressions are kept: a list given here replaces them, and `too_slow` would then fail the
test on a loaded machine, where drawing the first examples can take over a second."""

KINESIS_RECEIVE = {  # what a retry may carry differently, in the record's `kinesis`
    "approximateArrivalTimestamp": st.integers(1_400_000_000, 1_900_000_000),
    "kinesisSchemaVersion": st.just("1.1"),
}
KINESIS_RECORD = {  # and around it
    "invokeIdentityArn": st.just("arn:aws:iam::123456789012:role/other-role"),
    "eventVersion": st.just("2.0"),
    "awsRegion": st.just("eu-west-1"),
}


@ONE_TABLE_FOR_ALL_EXAMPLES
@given(
    st.binary(max_size=16),
    st.none() | st.binary(max_size=16),
    st.fixed_dictionaries({}, optional=KINESIS_RECEIVE),
    st.fixed_dictionaries({}, optional=KINESIS_RECORD),
)
def test_a_kinesis_retry_runs_once_unless_its_data_differs(
    moto_store: DynamoDBStore,
    data: bytes,
    other_data: bytes | None,
    receive: dict[str, Any],
    metadata: dict[str, Any],
) -> None:
    """The payload is the record's data: a retry with a new arrival time (or any other
    metadata) replays; the same eventID with other data is a reused key, reported."""
    first = kinesis_data(kinesis_record(next(_runs), {}), data)
    retry = kinesis_data(first, data if other_data is None else other_data)
    retry = {**retry, **metadata, "kinesis": {**retry["kinesis"], **receive}}

    reported, runs = delivered_twice(moto_store, first, retry)

    assert runs == 1
    if other_data is None or other_data == data:
        assert reported == []
    else:
        assert reported == [retry["kinesis"]["sequenceNumber"]]


def test_a_kinesis_record_put_twice_runs_once_under_a_key_from_its_data(
    moto_store: DynamoDBStore,
) -> None:
    """A producer's retry is a new record (new sequence number, new arrival time) with the
    same data: under a key from the data it replays, its payload matches."""
    first = kinesis_record(1, {"order_id": "o1"})
    put_again = kinesis_record(2, {"order_id": "o1"})
    put_again["kinesis"]["approximateArrivalTimestamp"] += 3

    reported, runs = delivered_twice(
        moto_store,
        first,
        put_again,
        key="powertools_json(powertools_base64(kinesis.data)).order_id",
    )

    assert (reported, runs) == ([], 1)


def test_two_kinesis_records_with_different_data_both_run(moto_store: DynamoDBStore) -> None:
    handler, runs = recorder(moto_store)
    event = batch(kinesis_record(1, {"step": 1}), kinesis_record(2, {"step": 2}))

    assert failed(process_batch(event, FakeContext(), handler)) == []
    assert runs == event["Records"]


CHANGES: dict[str, Any] = {
    "eventName": "MODIFY",
    "Keys": {"Id": {"N": "2"}},
    "NewImage": {"Message": {"S": "other"}, "Id": {"N": "1"}},
    "OldImage": {"Message": {"S": "before"}, "Id": {"N": "1"}},
}
STREAM_METADATA: dict[str, Any] = {
    "ApproximateCreationDateTime": 1428537700,
    "SizeBytes": 59,
    "StreamViewType": "NEW_IMAGE",
}
RECORD_METADATA: dict[str, Any] = {"eventVersion": "1.0", "awsRegion": "eu-west-1"}


def changed(record: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """The record with the given fields (of the change, or of its metadata) replaced."""
    altered = {**record, "dynamodb": dict(record["dynamodb"])}
    for name in fields:
        if name == "eventName" or name in RECORD_METADATA:
            altered[name] = CHANGES.get(name, RECORD_METADATA.get(name))
        else:
            altered["dynamodb"][name] = CHANGES.get(name, STREAM_METADATA.get(name))
    return altered


@ONE_TABLE_FOR_ALL_EXAMPLES
@given(
    st.lists(st.sampled_from(sorted(CHANGES)), unique=True),
    st.lists(st.sampled_from(sorted(STREAM_METADATA | RECORD_METADATA)), unique=True),
)
def test_a_dynamodb_stream_retry_runs_once_unless_its_change_differs(
    moto_store: DynamoDBStore, change: list[str], metadata: list[str]
) -> None:
    """The payload is the change (eventName, Keys, NewImage, OldImage): a retry with other
    stream metadata replays; the same eventID with any part of the change different is a
    reused key, reported."""
    first = dynamodb_record(next(_runs), 1, "hello")
    retry = changed(first, change + metadata)

    reported, runs = delivered_twice(moto_store, first, retry)

    assert runs == 1
    assert reported == ([retry["dynamodb"]["SequenceNumber"]] if change else [])


@pytest.mark.parametrize("change", [None, "not a mapping", ["a", "list"]])
def test_a_dynamodb_record_without_a_change_mapping_still_runs_once(
    moto_store: DynamoDBStore, change: Any
) -> None:
    """Called directly with such a record (process_batch refuses it: no sequence number)."""
    runs: list[Any] = []

    @idempotent_record(store=moto_store)
    def handler(record: dict[str, Any]) -> str:
        runs.append(record)
        return "done"

    record = {"eventSource": "aws:dynamodb", "eventID": "e1", "eventName": "INSERT"}
    if change is not None:
        record["dynamodb"] = change

    assert handler(record) == handler(record) == "done"
    assert runs == [record]
    with pytest.raises(PayloadMismatchError):
        handler({**record, "eventName": "REMOVE"})


def test_a_record_of_another_source_is_keyed_on_its_whole_content(
    moto_store: DynamoDBStore,
) -> None:
    """Called directly with a record of no source process_batch knows: all of it is the
    payload."""

    @idempotent_record(store=moto_store)
    def handler(record: dict[str, Any]) -> str:
        return "done"

    record = {"eventSource": "aws:s3", "eventID": "e1", "s3": {"object": {"key": "a"}}}
    assert handler(record) == handler(dict(record)) == "done"
    with pytest.raises(PayloadMismatchError):
        handler({**record, "s3": {"object": {"key": "b"}}})


def without_source(record: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in record.items() if name != "eventSource"}


def sqs_received_again(record: dict[str, Any]) -> dict[str, Any]:
    message_id, body = record["messageId"], record["body"]
    return sqs_record(message_id, body, receive_count=2)


def kinesis_received_again(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "kinesis": {**record["kinesis"], "approximateArrivalTimestamp": 1428537999}}


@pytest.mark.parametrize(
    ("event_type", "record", "again"),
    [
        ("SQS", sqs_record("m1", "hello"), sqs_received_again),
        ("KinesisDataStreams", kinesis_record(1, {"step": 1}), kinesis_received_again),
        ("DynamoDBStreams", dynamodb_record(1, 1, "hello"), lambda r: changed(r, ["SizeBytes"])),
    ],
    ids=["sqs", "kinesis", "dynamodb"],
)
def test_records_without_an_event_source_run_once_under_their_event_type(
    moto_store: DynamoDBStore, event_type: Any, record: dict[str, Any], again: Any
) -> None:
    """`event_type` names the source of records that carry none; their payload is still the
    source's (an SQS body, not the receipt handle and receive count of this receive)."""
    first, redelivered = without_source(record), without_source(again(record))

    handler, runs = recorder(moto_store)
    run = process_batch(batch(first), FakeContext(), handler, event_type=event_type)
    rerun = process_batch(batch(redelivered), FakeContext(), handler, event_type=event_type)

    assert failed(run) == failed(rerun) == []
    assert runs == [first]
