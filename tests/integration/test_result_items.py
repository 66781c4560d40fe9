"""Where a result lives, on DynamoDB Local: a replay is a refused claim, billed like a write of
the record it finds, so the record stays within 1 KB whatever the result, and a result that
would not fit lives in immutable items of its own, read once the claim is refused."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from benchmarks.storage import item_size
from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency.testing import FakeLambdaContext
from tests.store_calls import Requests

TEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,-"


def random_text(size: int, seed: int) -> str:
    """Text that compresses little, so its stored form is about as big as it is."""
    rng = random.Random(seed)
    return "".join(rng.choice(TEXT) for _ in range(size))


def records(store: DynamoDBStore) -> list[dict[str, Any]]:
    client: Any = store.client
    items = client.scan(TableName=store.table_name, ConsistentRead=True)["Items"]
    return [entry for entry in items if "#chunk#" not in entry["pk"]["S"]]


def charge(store: DynamoDBStore, result: Any) -> tuple[Any, list[int]]:
    runs: list[int] = []

    @idempotent(store=store, key="order_id", cache_size=0)  # every replay from the store
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    return handler, runs


@pytest.mark.parametrize("size", [2_000, 300_000, 1_200_000])
def test_a_replay_finds_a_record_under_1_kb_whatever_the_result_size(
    store: DynamoDBStore, size: int
) -> None:
    result = {"text": random_text(size, seed=size)}
    handler, runs = charge(store, result)
    event = {"order_id": f"o-{size}"}
    assert handler(event, FakeLambdaContext()) == result

    requests = Requests(store.client)
    replayed = handler(event, FakeLambdaContext())
    sent = [name for name, _ in requests.sent]
    (read,) = requests.of("BatchGetItem")

    assert replayed == result and runs == [1]
    (record,) = records(store)
    assert item_size(record) <= 1024  # the refused claim is billed 1 WCU
    assert sent == ["PutItem", "BatchGetItem"]
    (spec,) = read["RequestItems"].values()
    assert spec["ConsistentRead"] is False  # immutable items: a cheap read, whole or missing


def test_a_small_result_stays_in_the_record_and_replays_in_one_round_trip(
    store: DynamoDBStore,
) -> None:
    result = {"charged": 5, "currency": "EUR", "receipt": random_text(300, seed=1)}
    handler, runs = charge(store, result)
    requests = Requests(store.client)

    handler({"order_id": "o-1"}, FakeLambdaContext())
    first = [name for name, _ in requests.sent]
    requests.sent.clear()
    replayed = handler({"order_id": "o-1"}, FakeLambdaContext())
    again = [name for name, _ in requests.sent]

    assert replayed == result and runs == [1]
    assert first == ["PutItem", "PutItem"] and again == ["PutItem"]
    (record,) = records(store)
    assert item_size(record) <= 1024
    assert json.dumps(result, separators=(",", ":")).encode() in record["result"]["B"]


@pytest.mark.parametrize("key_length", [1, 200, 600])
def test_the_record_holds_as_much_result_as_fits_in_1_kb_and_no_more(
    store: DynamoDBStore, key_length: int
) -> None:
    """The limit follows the key's length: a long key leaves less room for the result."""
    pk = "fn#" + "k" * key_length
    owner, payload_hash = "0" * 32, "f" * 64
    limit = store.inline_limit(pk, owner=owner, payload_hash=payload_hash)
    store.claim(
        pk, owner=owner, payload_hash=payload_hash, now_ms=1, lease_until_ms=2, expiration_s=3
    )

    store.complete(
        pk,
        owner=owner,
        payload_hash=payload_hash,
        result=b"j" + b"x" * (limit - 1),
        expiration_s=1_800_000_000,
        claimed_at_ms=1_800_000_000_000,
        completed_at_ms=1_800_000_000_123,
    )

    (record,) = records(store)
    assert 1024 - 24 < item_size(record) <= 1024  # no room wasted but the numbers' slack
