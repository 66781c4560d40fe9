"""DynamoDB's limits on DynamoDB Local (issue 24, item 2): a retried completion writes
exactly what its first attempt meant to, every item fits 400 KB with every attribute
counted, and a namespace is refused at decoration exactly where DynamoDB would refuse its
keys later.

Throttles are injected in botocore's `before-send` on a client that does not retry
(`total_max_attempts=1`), so the library's own completion retry is what answers them.
"""

from __future__ import annotations

import decimal
import itertools
import json
import random
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
)
from aws_lambda_powertools.utilities.idempotency import idempotent as pt_idempotent
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.storage import item_size
from lambda_idempotency import (
    AttributeNames,
    ConfigurationError,
    DynamoDBStore,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores import encoding as _encoding
from lambda_idempotency.testing import FakeClock, FakeLambdaContext, create_idempotency_table
from tests.reliability.faults import Fault, FaultInjector

ITEM_BYTES = 400 * 1024
"""DynamoDB's largest item (DynamoDB Local refuses past it too)."""
OWNER = "0" * 24
NATIVE_ROOM = 2048 - len("#" + "0" * 64 + "#chunk#" + OWNER + "#23")
POWERTOOLS_ROOM = 2048 - len("#" + "0" * 32 + "#chunk#" + OWNER + "#23")
_ids = itertools.count()


def client_without_retries(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )


@pytest.fixture
def ddb(dynamodb_local_endpoint: str) -> Any:
    return client_without_retries(dynamodb_local_endpoint)


@pytest.fixture
def faults(ddb: Any) -> Iterator[FaultInjector]:
    """Registered after any `Sent` the test made: a request answered here is still seen."""
    injector = FaultInjector(ddb)
    yield injector
    injector.close()


@pytest.fixture
def sent(ddb: Any) -> Sent:
    return Sent(ddb)


def native(ddb: Any) -> DynamoDBStore:
    return DynamoDBStore(
        create_idempotency_table(ddb, f"limits-{uuid.uuid4().hex[:12]}"), client=ddb
    )


def powertools(ddb: Any) -> DynamoDBStore:
    name = f"limits-pt-{uuid.uuid4().hex[:12]}"
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return DynamoDBStore(name, client=ddb, layout="powertools")


def items(store: DynamoDBStore) -> list[dict[str, Any]]:
    """Every item of the table (a scan answers 1 MB a page: chunk items fill pages)."""
    client: Any = store.client
    pages = client.get_paginator("scan").paginate(TableName=store.table_name, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def records(store: DynamoDBStore) -> list[dict[str, Any]]:
    key = store.names.pk
    return [item for item in items(store) if "#chunk#" not in item[key]["S"]]


class Sent:
    """The JSON bodies of the requests a client sends, by protocol step (retries count)."""

    def __init__(self, client: Any) -> None:
        from tests.reliability.faults import classify

        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self._classify = classify
        client.meta.events.register("before-send.dynamodb", self._note, unique_id="sent")

    def _note(self, request: Any, **_: Any) -> None:
        body = json.loads(request.body or b"{}")
        target = request.headers["X-Amz-Target"]
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        self.bodies.append((self._classify(operation, body), body))

    def of(self, call: str) -> list[dict[str, Any]]:
        return [body for step, body in self.bodies if step == call]


# -- a retried completion sends what the first attempt meant to send ------------------------


@pytest.mark.parametrize("enlisted", [False, True], ids=["PutItem", "TransactWriteItems"])
@pytest.mark.parametrize("throttled", ["complete", "chunks"])
def test_a_throttled_completion_under_a_long_namespace_replays_what_it_stored(
    ddb: Any, sent: Sent, faults: FaultInjector, enlisted: bool, throttled: str
) -> None:
    """A 700-character namespace leaves the 1 KB record less room than a chunk pointer. The
    first completion attempt is throttled; the retry sends the same chunks (once written,
    never again) and the same record, and every later call replays the result."""
    store = native(ddb)
    ledger = create_idempotency_table(ddb, f"{store.table_name}-ledger")
    runs: list[int] = []
    result = {"ok": "x" * 200}

    @idempotent(store=store, key="id", namespace="n" * 700, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        if enlisted:
            current_execution().add_write(
                {"Put": {"TableName": ledger, "Item": {"pk": {"S": str(event["id"])}}}}
            )
        return result

    faults.add(Fault(throttled, "throttled"))
    assert handler({"id": 1}, FakeLambdaContext()) == result
    assert faults.injected == 1

    assert [handler({"id": 1}, FakeLambdaContext()) for _ in range(2)] == [result, result]
    assert runs == [1]
    chunk_writes = sent.of("chunks")
    completions = sent.of("complete")
    assert len(chunk_writes) == (2 if throttled == "chunks" else 1)
    assert all(body == chunk_writes[0] for body in chunk_writes)
    assert len(completions) == (2 if throttled == "complete" else 1)
    assert all(body == completions[0] for body in completions)  # the same record, byte for byte
    (record,) = records(store)
    assert record["result"]["B"].startswith(_encoding.CHUNKED)


def decimals(count: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "prices": [
            decimal.Decimal(f"{rng.randrange(10**12)}.{rng.randrange(10**6):06d}")
            for _ in range(count)
        ]
    }


@pytest.mark.parametrize("throttled", [False, True], ids=["first-try", "throttled-once"])
def test_a_345_kb_decimal_result_under_the_powertools_layout_stores_and_replays(
    ddb: Any, faults: FaultInjector, throttled: bool
) -> None:
    """Powertools' `data` (the Decimals as text, ~343 KB) and our exact typed blob (~170 KB)
    together pass 400 KB: `data` stays in the record, our blob goes to a chunk item. The
    first call stores, the retry replays the same Decimals, the handler ran once; and a
    rolled-back Powertools replays from `data` what it would have stored itself."""
    store = powertools(ddb)
    result = decimals(15_000)
    runs: list[int] = []

    @idempotent(store=store, key="id", namespace="charges", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    if throttled:
        faults.add(Fault("complete", "throttled"))
    assert handler({"id": 1}, FakeLambdaContext()) == result
    replayed = handler({"id": 1}, FakeLambdaContext())

    assert replayed == result and runs == [1]
    assert all(type(price) is decimal.Decimal for price in replayed["prices"])
    (record,) = records(store)
    assert item_size(record) <= ITEM_BYTES
    assert record["result"]["B"].startswith(_encoding.CHUNKED)
    assert 340_000 < len(record["data"]["S"]) <= 350_000

    layer = DynamoDBPersistenceLayer(table_name=store.table_name, boto3_client=ddb)
    config = IdempotencyConfig(event_key_jmespath="id")

    def never(event: Any, context: Any) -> Any:
        raise AssertionError("Powertools ran the handler again")

    rolled_back = pt_idempotent(persistence_store=layer, config=config, key_prefix="charges")
    assert rolled_back(never)({"id": 1}, FakeLambdaContext()) == json.loads(
        json.dumps({"prices": [str(price) for price in result["prices"]]})
    )


def test_long_attribute_names_leave_chunks_less_room_and_a_large_result_still_stores(
    ddb: Any,
) -> None:
    """Names count too: with 30 KB names for the result and the expiration, a chunk item
    holds what they leave of 400 KB (not 350 KB), so DynamoDB takes every chunk."""
    long = AttributeNames(expiration="e" * 30_000, result="r" * 30_000)
    store = DynamoDBStore(
        create_idempotency_table(ddb, f"limits-{uuid.uuid4().hex[:12]}", long),
        client=ddb,
        attribute_names=long,
    )
    result = random.Random(3).randbytes(900_000)
    runs: list[int] = []

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    assert handler({"id": 1}, FakeLambdaContext()) == result
    assert handler({"id": 1}, FakeLambdaContext()) == result and runs == [1]
    assert all(item_size(item) <= ITEM_BYTES for item in items(store))


# -- decoration refuses exactly what DynamoDB refuses ---------------------------------------


@pytest.mark.parametrize(
    ("layout", "room"), [("native", NATIVE_ROOM), ("powertools", POWERTOOLS_ROOM)]
)
def test_the_longest_namespace_accepted_stores_a_6_mb_result_and_one_more_byte_is_refused(
    ddb: Any, layout: str, room: int
) -> None:
    """At the longest namespace the decorator takes, a result of the most chunks (past 6 MB,
    incompressible) stores and replays on DynamoDB Local; with one byte more the decorator
    is refused, and DynamoDB Local indeed refuses that namespace's last chunk key."""
    store = native(ddb) if layout == "native" else powertools(ddb)
    result = random.Random(7).randbytes(6 * 1024 * 1024)
    runs: list[int] = []

    @idempotent(store=store, key="id", namespace="n" * room, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    assert handler({"id": 1}, FakeLambdaContext()) == result
    assert handler({"id": 1}, FakeLambdaContext()) == result and runs == [1]
    longest = max(len(item[store.names.pk]["S"].encode()) for item in items(store))
    assert longest == 2048  # the chunk keys use every byte DynamoDB allows

    with pytest.raises(ConfigurationError, match=f"at most {room:,} bytes"):
        idempotent(store=store, key="id", namespace="n" * (room + 1))(handler)
    with pytest.raises(ClientError, match="ValidationException"):
        ddb.put_item(TableName=store.table_name, Item={store.names.pk: {"S": "n" * 2049}})


# -- the property ------------------------------------------------------------------------


ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,-"


def stored_as(size: int, seed: int, typed: bool) -> Any:
    """A result whose packed form is `size` bytes, or the least over it (compression jumps)."""
    rng = random.Random(seed)
    text = "".join(rng.choices(ALPHABET, k=size + 16))

    def make(length: int) -> Any:
        return [decimal.Decimal("1.5"), text[:length]] if typed else text[:length]

    low, high = 0, len(text)
    while low < high:
        middle = (low + high) // 2
        if len(_encoding.encode(make(middle)).blob) < size:
            low = middle + 1
        else:
            high = middle
    return make(low)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    layout = draw(st.sampled_from(["native", "powertools"]))
    room = NATIVE_ROOM if layout == "native" else POWERTOOLS_ROOM
    namespace = draw(
        st.one_of(
            st.integers(min_value=1, max_value=room + 8),
            st.sampled_from([1, 300, 700, 960, room - 1, room, room + 1]),
        )
    )
    where = draw(st.sampled_from(["record budget", "item", "anywhere"]))
    return {
        "layout": layout,
        "namespace": namespace,
        "where": where,
        "delta": draw(st.integers(min_value=-2, max_value=2)),
        "size": draw(st.integers(min_value=1, max_value=900_000)),
        "typed": draw(st.booleans()),
        "throttled": draw(st.sampled_from([None, "complete", "chunks"])),
    }


@pytest.mark.timeout_scale(4)  # 25 examples take about 12 s; more under the nightly profile
@given(case=cases())
def test_any_namespace_and_result_completes_once_and_replays_equal(
    dynamodb_local_endpoint: str, case: dict[str, Any]
) -> None:
    """For namespaces of 1 byte to past the longest allowed and results of any size (right
    at the record's budget and at the item's 400 KB too), with the first completion attempt
    throttled or not: the decorator is refused when applied, or the first call stores and
    every retry replays an equal value without running the handler again."""
    ddb = client_without_retries(dynamodb_local_endpoint)
    store = native(ddb) if case["layout"] == "native" else powertools(ddb)
    namespace = "n" * case["namespace"]
    runs: list[int] = []
    results: list[Any] = []

    def run(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return results[0]

    clock = FakeClock()
    try:
        handler = idempotent(store=store, key="id", namespace=namespace, cache_size=0, clock=clock)(
            run
        )
    except ConfigurationError:
        room = NATIVE_ROOM if case["layout"] == "native" else POWERTOOLS_ROOM
        assert case["namespace"] > room
        return
    pk = store.layout.record_key(namespace, None, "k")
    budget = store.inline_limit(pk, owner=OWNER, payload_hash=store.layout.payload_hash("p"))
    size = {
        "record budget": budget + case["delta"],
        "item": ITEM_BYTES - len(pk) - 200 + case["delta"],
        "anywhere": case["size"],
    }[case["where"]]
    results.append(stored_as(max(1, size), seed=case["namespace"], typed=case["typed"]))
    faults = FaultInjector(ddb)
    if case["throttled"] is not None:
        faults.add(Fault(case["throttled"], "throttled"))
    try:
        first = handler({"id": "k"}, FakeLambdaContext(clock=clock))
        replays = [handler({"id": "k"}, FakeLambdaContext(clock=clock)) for _ in range(2)]
    finally:
        faults.close()

    assert first == results[0] and replays == [results[0]] * 2
    assert runs == [1]
    assert all(item_size(item) <= ITEM_BYTES for item in items(store))
