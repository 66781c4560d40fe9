"""The record's format version, on moto: every record this version writes carries `fmt`, and a
record of a newer format is refused with NewerFormatError before anything else of it is read
(the previous release beside this one on DynamoDB Local: tests/compat)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    NewerFormatError,
    StoreError,
    idempotent,
    idempotent_http,
)
from lambda_idempotency._base.errors import NEWER_RECORD_FORMAT, STORED_RECORD_UNREADABLE
from lambda_idempotency._stores.dynamodb.layout import Layout
from lambda_idempotency._stores.record import FORMAT_VERSION, AttributeNames, Record, Status
from tests.conftest import create_table
from tests.http_events import http_event
from tests.store_calls import HOUR_S, NOW, claim, item

CURRENT = {"N": str(FORMAT_VERSION)}
NAMES = AttributeNames()
FUTURE_S = str(NOW // 1000 + 3600)


def read(record: dict[str, Any]) -> Record:
    return Layout().record(record, NAMES, "pk", "claim")


def stored(status: str = "COMPLETED", **extra: Any) -> dict[str, Any]:
    """A stored item as DynamoDB returns it."""
    return {
        "pk": {"S": "ns#k"},
        "status": {"S": status},
        "expiration": {"N": FUTURE_S},
        "owner": {"S": "o" * 24},
        "result": {"B": b'j{"ok":1}'},
        **extra,
    }


# -- what is written ------------------------------------------------------------------------


def test_every_record_this_version_writes_carries_its_format(moto_store: DynamoDBStore) -> None:
    """Claim, lease extension, completion (in the record and as a chunk pointer), release
    and an operator's release: each record carries `fmt`; chunk items do not (their record's
    format covers them)."""
    claim(moto_store, "A")
    assert item(moto_store)["fmt"] == CURRENT
    moto_store.extend_lease(
        "k",
        owner="A",
        payload_hash=None,
        claimed_at_ms=NOW,
        lease_until_ms=NOW + 60_000,
        expiration_s=HOUR_S,
    )
    assert item(moto_store)["fmt"] == CURRENT
    assert moto_store.release("k", owner="A", now_ms=NOW) is True
    assert item(moto_store)["status"] == {"S": "RELEASED"}
    assert item(moto_store)["fmt"] == CURRENT

    claim(moto_store, "B", now_ms=NOW + 1)
    large = bytes(range(256)) * 40  # 10 KB that does not compress: a chunked result
    form = moto_store.stored_form(
        "k", owner="B", payload_hash=None, result=b"j" + large, expiration_s=HOUR_S
    )
    assert form.chunks is not None
    moto_store.put_chunks("k", owner="B", result=form.chunks, expiration_s=HOUR_S)
    assert moto_store.write_completion(form) is True
    assert item(moto_store)["fmt"] == CURRENT
    chunks = moto_store.client.scan(TableName=moto_store.table_name)["Items"]
    assert [chunk for chunk in chunks if "#chunk#" in chunk["pk"]["S"]]
    assert all("fmt" not in chunk for chunk in chunks if "#chunk#" in chunk["pk"]["S"])

    shown = moto_store.get("k")
    assert shown is not None
    assert moto_store.release_version(shown, now_ms=NOW + 2) == (True, None)
    assert item(moto_store)["fmt"] == CURRENT


def test_the_powertools_layout_writes_the_format_beside_powertools_attributes(
    moto_store: DynamoDBStore,
) -> None:
    """Powertools reads its own attributes and ignores ours (`owner`, `claimed_at`, `fmt`);
    a record Powertools itself writes has none and reads as format 1."""
    client = moto_store.client
    create_table(client, "pt", "id")
    store = DynamoDBStore("pt", client=client, layout="powertools")
    store.claim(
        "p#1",
        owner="A",
        payload_hash=None,
        now_ms=NOW,
        lease_until_ms=NOW + 1_000,
        expiration_s=HOUR_S,
    )
    stored_item = client.get_item(TableName="pt", Key={"id": {"S": "p#1"}})["Item"]
    assert stored_item["fmt"] == CURRENT and stored_item["status"] == {"S": "INPROGRESS"}
    del stored_item["fmt"]
    client.put_item(TableName="pt", Item=stored_item)
    assert store.get("p#1") is not None


def test_the_format_attribute_costs_five_bytes_of_item() -> None:
    from lambda_idempotency._stores.dynamodb.limits import item_size

    assert item_size({"fmt": CURRENT}) == 5


# -- what is read -----------------------------------------------------------------------------


def test_a_record_without_a_format_or_of_this_format_reads_as_before() -> None:
    assert read(stored()) == read(stored(fmt=CURRENT))
    assert read(stored()).status is Status.COMPLETED


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.integers(min_value=FORMAT_VERSION + 1, max_value=10**37),
    status=st.sampled_from(["COMPLETED", "IN_PROGRESS", "RELEASED", "DONE_V9", ""]),
    result=st.binary(max_size=40),
    drop=st.sets(st.sampled_from(["expiration", "owner", "result", "status"])),
)
def test_a_newer_format_is_the_first_thing_a_reader_checks(
    version: int, status: str, result: bytes, drop: set[str]
) -> None:
    """Whatever else a newer record holds (a status, a result, attributes missing), the
    answer is NewerFormatError naming the versions: never another StoreError."""
    record = stored(status, fmt={"N": str(version)}, result={"B": result})
    for name in drop:
        del record[name]

    with pytest.raises(NewerFormatError) as raised:
        read(record)

    error = raised.value
    assert isinstance(error, StoreError) and error.code == NEWER_RECORD_FORMAT
    assert (error.format_version, error.known) == (version, FORMAT_VERSION)
    assert error.retryable and not error.maybe_applied and error.retry_after > 0
    assert error.key_hash == "ns#k" and error.step == "claim"
    assert "written by a newer version of lambda-idempotency" in str(error)


@pytest.mark.parametrize(
    "fmt", [{"S": "2"}, {"N": "1.5"}, {"N": "0"}, {"N": "-3"}, {"N": "x"}, {"B": b"2"}, "2"]
)
def test_a_format_that_is_no_version_is_an_unreadable_record(fmt: Any) -> None:
    with pytest.raises(StoreError) as raised:
        read(stored(fmt=fmt))
    assert raised.value.code == STORED_RECORD_UNREADABLE
    assert "'fmt'" in str(raised.value)
    assert not isinstance(raised.value, NewerFormatError)


# -- through the decorators -----------------------------------------------------------------


def completed_then_newer(
    moto_store: DynamoDBStore, handler: Any, event: Any, **changes: Any
) -> str:
    """Complete the key, then make its record one of the next format (and `changes`)."""
    handler(event, None)
    (record,) = moto_store.client.scan(TableName=moto_store.table_name)["Items"]
    record.update(fmt={"N": str(FORMAT_VERSION + 1)}, **changes)
    moto_store.client.put_item(TableName=moto_store.table_name, Item=record)
    return str(record["pk"]["S"])


def test_a_newer_record_is_refused_without_running_and_logged_as_a_warning(
    moto_store: DynamoDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", namespace="orders", cache_size=0)
    def handler(event: Any, context: Any) -> Any:
        runs.append(1)
        return {"ok": True}

    pk = completed_then_newer(moto_store, handler, {"id": "o-1"})
    before = item(moto_store, pk)
    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")
    caplog.clear()

    with pytest.raises(NewerFormatError):
        handler({"id": "o-1"}, None)

    assert runs == [1] and item(moto_store, pk) == before
    lines = [(r.levelno, json.loads(r.getMessage())) for r in caplog.records]
    assert lines == [
        (
            logging.WARNING,
            {
                "idempotency": "newer_format",
                "key_hash": pk,
                "namespace": "orders",
                "step": "claim",
                "format_version": FORMAT_VERSION + 1,
            },
        )
    ]
    assert handler.idempotency.stats["newer_format"] == 1  # type: ignore[attr-defined]


def test_an_unknown_tag_in_a_newer_record_is_a_newer_format_in_ours_unreadable(
    moto_store: DynamoDBStore,
) -> None:
    """A typed-JSON tag this version does not know: in a newer record the format says why
    (retry later); in a record of this format it is a result that cannot be read."""

    @idempotent(store=moto_store, key="id", namespace="orders", cache_size=0)
    def handler(event: Any, context: Any) -> Any:
        return (1, 2)

    unknown = {"B": b'tj{"\\u0000":"frozenset","v":"AQI="}'}
    pk = completed_then_newer(moto_store, handler, {"id": "o-1"}, result=unknown)
    with pytest.raises(NewerFormatError):
        handler({"id": "o-1"}, None)

    record = item(moto_store, pk)
    record["fmt"] = CURRENT
    moto_store.client.put_item(TableName=moto_store.table_name, Item=record)
    with pytest.raises(StoreError) as raised:
        handler({"id": "o-1"}, None)
    assert raised.value.code == "StoredResultUnreadable"


def test_http_answers_a_newer_record_with_503_and_retry_after(moto_store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent_http(store=moto_store, cache_size=0)
    def handler(event: Any, context: Any) -> Any:
        runs.append(1)
        return {"statusCode": 201, "body": "created"}

    event = http_event("http-api", headers={"Idempotency-Key": "k-1"}, body="{}")
    completed_then_newer(moto_store, handler, event)

    response = handler(event, None)

    assert runs == [1]
    assert response["statusCode"] == 503
    assert response["headers"]["Retry-After"] == "30"
    assert response["headers"]["Content-Type"] == "application/problem+json"
    body = json.loads(response["body"])
    assert body["type"] == "urn:lambda-idempotency:problem:newer-version"
    assert "newer version" in body["detail"]


def test_an_operators_scan_reports_a_newer_record_as_unreadable(
    moto_store: DynamoDBStore,
) -> None:
    """`stuck` lists what it can read and names the keys it cannot: a newer record is one."""
    claim(moto_store, "A", now_ms=NOW)
    record = item(moto_store)
    record["fmt"] = {"N": str(FORMAT_VERSION + 1)}
    moto_store.client.put_item(TableName=moto_store.table_name, Item=record)

    (page,) = moto_store.scan_stuck(claimed_before_ms=NOW + 1, now_ms=NOW)

    assert page.records == [] and page.unreadable == ["k"]
