"""Stored bytes as an attacker, a bug or a partial restore may leave them, read through the
decorator on DynamoDB Local: each malformed record or chunk gives a StoreError with a stable
code and the step, one log line with the key hash only, and the handler never runs. And a
result JSON would change replays as the first caller got it, through the table.

What a malformed record means for the claim: DynamoDB's condition decides, on the record's
own attributes, whether the key is free (absent, expired, a lapsed lease, a tombstone). A
record it finds free is replaced and the handler runs, whatever else the record holds; a
record it keeps (a live one, or one whose `expiration` is no number, which DynamoDB never
counts as expired) is read, and one we cannot read is a StoreError, never "absent". The
key answers that error until the record expires or an operator removes it.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    PayloadMismatchError,
    ResultNotSerializableError,
    StoreError,
    idempotent,
)
from lambda_idempotency._base.errors import UNREADABLE_CODES
from lambda_idempotency._stores.dynamodb.result_placement import chunk_pk as _chunk_pk
from lambda_idempotency._stores.encoding import encode
from tests.conftest import FakeClock, create_table

pytestmark = pytest.mark.dynamodb_local

EVENT = {"order_id": "o-1", "amount": 5}
FUTURE_S = str(int(time.time()) + 3600)
"""A live record's expiration."""


def handler_for(store: DynamoDBStore, result: Any = None, **options: Any) -> tuple[Any, list[int]]:
    runs: list[int] = []
    options.setdefault("cache_size", 0)

    @idempotent(store=store, key="order_id", namespace="orders", **options)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return {"charged": event["amount"]} if result is None else result

    return handler, runs


def lines(caplog: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(record.levelno, json.loads(record.getMessage())) for record in caplog.records]


def native_record(pk: str, payload_hash: str | None, /, **attributes: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": pk},
        "status": {"S": "COMPLETED"},
        "expiration": {"N": FUTURE_S},
        "owner": {"S": "first-owner"},
        "result": {"B": encode({"charged": 5}).blob},
    }
    if payload_hash is not None:
        item["payload_hash"] = {"S": payload_hash}
    item.update(attributes)
    return {name: value for name, value in item.items() if value is not None}


def chunk_pointer(owner: str, result: bytes, **fields: Any) -> bytes:
    pointer = {
        "owner": owner,
        "count": 1,
        "bytes": len(result),
        "sha256": hashlib.sha256(result).hexdigest(),
        **fields,
    }
    return b"c" + json.dumps({k: v for k, v in pointer.items() if v is not None}).encode()


GOOD = encode({"charged": 5}).blob
NATIVE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any] | None, str, str]] = {
    # name: (record attributes, a chunk item's attributes, code, step)
    "result-invalid-json": ({"result": {"B": b"j{"}}, None, "StoredResultUnreadable", "replay"),
    "result-unknown-format": ({"result": {"B": b"q1"}}, None, "StoredResultUnreadable", "replay"),
    "result-bad-zlib": (
        {"result": {"B": b"z\x78\x9c\x00"}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "typed-unknown-tag": (
        {"result": {"B": b'tj{"\\u0000":"set","v":[]}'}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "typed-bad-payload": (
        {"result": {"B": b'tj{"\\u0000":"int","v":"zz"}'}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "typed-too-deep": (
        {"result": {"B": b"tj" + b"[" * 50_000 + b"]" * 50_000}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "not-stored-marker-malformed": (
        {"result": {"B": b"x[1, 2]"}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "no-result": ({"result": None}, None, "StoredResultUnreadable", "replay"),
    "chunk-pointer-not-json": (
        {"result": {"B": b"c{owner"}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "chunk-pointer-no-count": (
        {"result": {"B": chunk_pointer("first-owner", GOOD, count=None)}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "chunk-missing": (
        {"result": {"B": chunk_pointer("first-owner", GOOD)}},
        None,
        "StoredResultUnreadable",
        "replay",
    ),
    "chunk-wrong-checksum": (
        {"result": {"B": chunk_pointer("first-owner", GOOD)}},
        {"result": {"B": GOOD[:-1] + b"!"}},
        "StoredResultUnreadable",
        "replay",
    ),
    "chunk-wrong-type": (
        {"result": {"B": chunk_pointer("first-owner", GOOD)}},
        {"result": {"S": GOOD.decode()}},
        "StoredResultUnreadable",
        "replay",
    ),
    "no-expiration": ({"expiration": None}, None, "StoredRecordUnreadable", "claim"),
    "expiration-a-string": (
        {"expiration": {"S": FUTURE_S}},
        None,
        "StoredRecordUnreadable",
        "claim",
    ),
    "expiration-not-an-integer": (
        {"expiration": {"N": FUTURE_S + ".5"}},
        None,
        "StoredRecordUnreadable",
        "claim",
    ),
    "lease-a-string": (
        {"status": {"S": "IN_PROGRESS"}, "lease_until": {"S": "1"}},
        None,
        "StoredRecordUnreadable",
        "claim",
    ),
    "result-a-string": ({"result": {"S": "j1"}}, None, "StoredRecordUnreadable", "claim"),
    "owner-a-number": ({"owner": {"N": "1"}}, None, "StoredRecordUnreadable", "claim"),
    "completed-at-a-string": (
        {"completed_at": {"S": "x"}},
        None,
        "StoredRecordUnreadable",
        "claim",
    ),
    "unknown-status": ({"status": {"S": "DONE"}}, None, "UnknownRecordStatus", "claim"),
    "status-a-number": ({"status": {"N": "1"}}, None, "UnknownRecordStatus", "claim"),
}


@pytest.mark.parametrize("case", NATIVE_CASES.keys())
def test_a_malformed_native_record_is_a_typed_error_and_nothing_runs(
    store: DynamoDBStore, caplog: Any, case: str
) -> None:
    attributes, chunk, code, step = NATIVE_CASES[case]
    handler, runs = handler_for(store, payload="amount")
    pk, payload_hash = handler.idempotency._identify(EVENT)
    store.client.put_item(
        TableName=store.table_name, Item=native_record(pk, payload_hash, **attributes)
    )
    if chunk is not None:
        chunk_pk = _chunk_pk(pk, "first-owner", 0)
        store.client.put_item(
            TableName=store.table_name,
            Item={"pk": {"S": chunk_pk}, "expiration": {"N": FUTURE_S}, **chunk},
        )

    for _ in range(2):  # the same answer every time: the record is what it is
        caplog.clear()
        with (
            caplog.at_level(logging.INFO, logger="lambda_idempotency"),
            pytest.raises(StoreError) as raised,
        ):
            handler(dict(EVENT), None)
        error = raised.value
        assert (error.code, error.step, error.key_hash, error.retryable) == (code, step, pk, False)
        assert lines(caplog) == [
            (
                logging.ERROR,
                {
                    "idempotency": "store_error",
                    "key_hash": pk,
                    "namespace": "orders",
                    "step": step,
                    "code": code,
                },
            )
        ]
    assert runs == []


def test_a_record_that_turns_malformed_while_waited_on_is_a_typed_error(
    store: DynamoDBStore, caplog: Any
) -> None:
    """A waiter's poll (`on_in_progress="wait"`) reads the record again: a malformed one is
    a StoreError at the step `wait`, and the waiter never runs the handler."""
    clock = FakeClock()
    handler, runs = handler_for(store, on_in_progress="wait", max_wait_seconds=30, clock=clock)
    pk, _ = handler.idempotency._identify(EVENT)
    live = {
        "status": {"S": "IN_PROGRESS"},
        "lease_until": {"N": str(clock.now_ms() + 60_000)},
        "result": None,
    }
    store.client.put_item(TableName=store.table_name, Item=native_record(pk, None, **live))
    sleep = clock.sleep

    def sleep_then_corrupt(seconds: float) -> None:
        store.client.put_item(
            TableName=store.table_name,
            Item=native_record(pk, None, **{**live, "lease_until": {"B": b"1"}}),
        )
        sleep(seconds)

    clock.sleep = sleep_then_corrupt  # type: ignore[method-assign]
    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(StoreError) as raised,
    ):
        handler(dict(EVENT), None)
    assert (raised.value.code, raised.value.key_hash) == ("StoredRecordUnreadable", pk)
    assert lines(caplog)[-1] == (
        logging.ERROR,
        {
            "idempotency": "store_error",
            "key_hash": pk,
            "namespace": "orders",
            "step": "wait",
            "code": "StoredRecordUnreadable",
        },
    )
    assert runs == []


def test_an_expired_malformed_record_frees_its_key_as_any_expired_record_does(
    store: DynamoDBStore,
) -> None:
    """DynamoDB's condition finds the record expired by its own `expiration`: the key is
    free, whatever the record's result holds, and the handler runs once."""
    handler, runs = handler_for(store)
    pk, _ = handler.idempotency._identify(EVENT)
    expired = native_record(pk, None, expiration={"N": "1000"}, result={"B": b"j{"})
    expired["lease_until"] = {"S": "garbage"}
    store.client.put_item(TableName=store.table_name, Item=expired)

    assert handler(dict(EVENT), None) == {"charged": 5}
    assert handler(dict(EVENT), None) == {"charged": 5}
    assert runs == [1]


# -- Powertools' layout ---------------------------------------------------------------------------


@pytest.fixture
def powertools_store(store: DynamoDBStore) -> DynamoDBStore:
    name = create_table(store.client, f"{store.table_name}-pt", key="id")
    return DynamoDBStore(name, client=store.client, layout="powertools")


POWERTOOLS_CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "data-invalid-json": ({"data": {"S": "{"}}, "StoredResultUnreadable", "replay"),
    "data-a-number": ({"data": {"N": "1"}}, "StoredRecordUnreadable", "claim"),
    "result-blob-invalid": ({"result": {"B": b"tj["}}, "StoredResultUnreadable", "replay"),
    "unknown-status": ({"status": {"S": "EXPIRED"}}, "UnknownRecordStatus", "claim"),
    "no-expiration": ({"expiration": None}, "StoredRecordUnreadable", "claim"),
    "expiration-a-string": ({"expiration": {"S": FUTURE_S}}, "StoredRecordUnreadable", "claim"),
    "in-progress-expiration-a-string": (
        {"status": {"S": "INPROGRESS"}, "in_progress_expiration": {"S": "1"}},
        "StoredRecordUnreadable",
        "claim",
    ),
    "validation-a-number": ({"validation": {"N": "1"}}, "StoredRecordUnreadable", "claim"),
}


@pytest.mark.parametrize("case", POWERTOOLS_CASES.keys())
def test_a_malformed_powertools_record_is_a_typed_error_and_nothing_runs(
    powertools_store: DynamoDBStore, case: str
) -> None:
    attributes, code, step = POWERTOOLS_CASES[case]
    handler, runs = handler_for(powertools_store)
    pk, _ = handler.idempotency._identify(EVENT)
    item = {
        "id": {"S": pk},
        "status": {"S": "COMPLETED"},
        "expiration": {"N": FUTURE_S},
        "data": {"S": '{"charged": 5}'},
        **attributes,
    }
    powertools_store.client.put_item(
        TableName=powertools_store.table_name,
        Item={name: value for name, value in item.items() if value is not None},
    )
    with pytest.raises(StoreError) as raised:
        handler(dict(EVENT), None)
    assert (raised.value.code, raised.value.key_hash, raised.value.step) == (code, pk, step)
    assert runs == []


def test_a_powertools_record_without_data_replays_none_as_powertools_does(
    powertools_store: DynamoDBStore,
) -> None:
    handler, runs = handler_for(powertools_store)
    pk, _ = handler.idempotency._identify(EVENT)
    powertools_store.client.put_item(
        TableName=powertools_store.table_name,
        Item={"id": {"S": pk}, "status": {"S": "COMPLETED"}, "expiration": {"N": FUTURE_S}},
    )
    assert handler(dict(EVENT), None) is None
    assert runs == []


# -- mutations of a valid record, through the decorator -------------------------------------------

KEEPS_THE_KEY = {
    # attribute: values DynamoDB accepts that leave the record live and not claimable
    "status": [{"S": "DONE"}, {"S": ""}, {"N": "7"}, {"B": b"COMPLETED"}, {"BOOL": True}],
    "expiration": [None, {"S": FUTURE_S}, {"N": FUTURE_S + ".25"}, {"NULL": True}],
    "lease_until": [{"S": "1"}, {"N": "1.5"}, {"L": []}, {"N": "12"}],
    "owner": [None, {"N": "1"}, {"S": "someone"}, {"SS": ["a"]}],
    "payload_hash": [None, {"S": "other"}, {"N": "1"}],
    "claimed_at": [None, {"N": "5"}, {"S": "5"}, {"N": "-1"}],
    "completed_at": [None, {"N": "5"}, {"B": b"5"}],
    "result": [
        None,
        {"S": "j1"},
        {"B": b"j"},
        {"B": b"j{"},
        {"B": b"tj{}"},
        {"B": b"x"},
        {"B": b"c{}"},
        {"B": b"zzz"},
        {"B": encode({"charged": 5}).blob},
        {"B": encode({"charged": 6}).blob},
    ],
}
mutations = st.dictionaries(
    st.sampled_from(sorted(KEEPS_THE_KEY)),
    st.integers(min_value=0, max_value=9),
    min_size=1,
    max_size=3,
)


@given(mutations)
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_completed_record_mutated_any_way_never_runs_the_handler(
    store: DynamoDBStore, picks: dict[str, int]
) -> None:
    """Property: whatever a live completed record is mutated into, the call replays the
    first result (a mutation that does not matter), replays the result the record now holds,
    is refused as another payload, or is a typed StoreError. The handler never runs."""
    handler, runs = handler_for(store, payload="amount")
    pk, payload_hash = handler.idempotency._identify(EVENT)
    attributes = {
        name: KEEPS_THE_KEY[name][pick % len(KEEPS_THE_KEY[name])] for name, pick in picks.items()
    }
    store.client.put_item(
        TableName=store.table_name, Item=native_record(pk, payload_hash, **attributes)
    )
    try:
        replayed = handler(dict(EVENT), None)
    except StoreError as exc:
        assert exc.code in UNREADABLE_CODES and exc.key_hash == pk
    except PayloadMismatchError:
        assert attributes.get("payload_hash") == {"S": "other"}
    else:
        assert replayed in ({"charged": 5}, {"charged": 6})
    assert runs == []


# -- a replay is what the first caller got, through the table --------------------------------------


@pytest.mark.parametrize("layout", ["native", "powertools"])
def test_keys_json_would_merge_replay_as_the_first_caller_got_them(
    store: DynamoDBStore, powertools_store: DynamoDBStore, layout: str
) -> None:
    chosen = store if layout == "native" else powertools_store
    result = {1: "int", "1": "str", (2, "b"): b"raw", None: (1, [2])}
    handler, runs = handler_for(chosen, result=result)

    first = handler(dict(EVENT), None)
    replayed = handler(dict(EVENT), None)
    assert first is result
    assert replayed == result and list(replayed) == list(result)
    assert [type(key) for key in replayed] == [int, str, tuple, type(None)]
    assert type(replayed[None]) is tuple
    assert runs == [1]


def test_a_result_whose_type_json_would_lose_completes_not_stored(store: DynamoDBStore) -> None:
    result = collections.OrderedDict(b=1, a=2)
    handler, runs = handler_for(store, result=result)

    assert handler(dict(EVENT), None) is result
    with pytest.raises(ResultNotSerializableError, match="OrderedDict"):
        handler(dict(EVENT), None)
    assert runs == [1]


def test_a_result_that_cannot_be_read_is_never_cached(store: DynamoDBStore) -> None:
    """The warm cache takes a replayed result only once it has been read: a record fixed by
    an operator replays at once, not the unreadable document again from the cache."""
    handler, runs = handler_for(store, cache_size=16)
    pk, _ = handler.idempotency._identify(EVENT)
    store.client.put_item(
        TableName=store.table_name, Item=native_record(pk, None, result={"B": b"j{"})
    )
    with pytest.raises(StoreError):
        handler(dict(EVENT), None)
    store.client.put_item(TableName=store.table_name, Item=native_record(pk, None))
    assert handler(dict(EVENT), None) == {"charged": 5}
    assert runs == []


@dataclasses.dataclass
class Charge:
    charged: int
    currency: str


def test_a_stored_result_its_return_annotation_refuses_is_a_typed_error(
    store: DynamoDBStore, caplog: Any
) -> None:
    """A record written when the function returned something else (its annotation changed
    since): the type's constructor refuses the data, and that is a StoreError too."""
    runs: list[int] = []

    @idempotent(store=store, key="order_id", namespace="orders", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Charge:
        runs.append(1)
        return Charge(event["amount"], "EUR")

    pk, _ = handler.idempotency._identify(EVENT)
    store.client.put_item(TableName=store.table_name, Item=native_record(pk, None))
    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(StoreError) as raised,
    ):
        handler(dict(EVENT), None)
    assert (raised.value.code, raised.value.step) == ("StoredResultUnreadable", "replay")
    assert "return annotation" in str(raised.value)
    assert [line["idempotency"] for _, line in lines(caplog)] == ["store_error"]
    assert runs == []
