"""Answers lost on the wire and requests that cannot be sent, on DynamoDB Local: nothing runs
twice, nothing stays locked, nothing is undone that landed."""

from __future__ import annotations

import os
from typing import Any

import pytest

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    Status,
    StoreError,
    current_execution,
    idempotent,
)
from tests.conftest import FakeClock, FakeContext, RoundTrips, create_table


def server_error(operation: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": "InternalServerError", "Message": "try again"}}, operation
    )


class LostAnswers:
    """A client whose first call of one operation lands, but whose answer never arrives:
    `then="retry"` repeats the request, as botocore's retries do; `then="fail"` raises a
    server error, as when the retries run out."""

    def __init__(self, client: Any, operation: str, then: str) -> None:
        self._client = client
        self._operation = operation
        self._then = then
        self.lost = 0
        self.meta = client.meta

    def __getattr__(self, name: str) -> Any:
        operation = getattr(self._client, name)
        if name != self._operation:
            return operation

        def call(**request: Any) -> Any:
            if self.lost:
                return operation(**request)
            self.lost += 1
            operation(**request)  # it lands ...
            if self._then == "retry":
                return operation(**request)  # ... and the retry meets what it wrote
            raise server_error(name)

        return call


def test_claim_whose_answer_was_lost_still_runs(store: DynamoDBStore) -> None:
    client = LostAnswers(store.client, "put_item", then="retry")
    runs: list[int] = []

    @idempotent(store=DynamoDBStore(store.table_name, client=client), key="id")  # type: ignore[arg-type]
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "charged"

    assert handler({"id": "o-1"}, None) == "charged"
    assert runs == [1] and client.lost == 1
    record = store.get(next(iter(item["pk"]["S"] for item in scan(store))))
    assert record is not None and record.status is Status.COMPLETED


def scan(store: DynamoDBStore) -> list[dict[str, Any]]:
    return store.client.scan(TableName=store.table_name)["Items"]  # type: ignore[no-any-return]


def held(store: DynamoDBStore) -> list[dict[str, Any]]:
    """Records that hold a key: a release leaves only a tombstone, which holds nothing."""
    return [item for item in scan(store) if item["status"]["S"] != "RELEASED"]


def ledger_handler(store: DynamoDBStore, client: Any, ledger: str, runs: list[int]) -> Any:
    @idempotent(store=DynamoDBStore(store.table_name, client=client), key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        current_execution().add_write(
            {
                "Update": {
                    "TableName": ledger,
                    "Key": {"id": {"S": "balance"}},
                    "UpdateExpression": "ADD amount :debit",
                    "ExpressionAttributeValues": {":debit": {"N": "-30"}},
                }
            }
        )
        return "debited"

    return handler


def balance(store: DynamoDBStore, ledger: str) -> int:
    item = store.client.get_item(TableName=ledger, Key={"id": {"S": "balance"}})["Item"]
    return int(item["amount"]["N"])


def test_completion_that_landed_without_an_answer_is_not_undone(store: DynamoDBStore) -> None:
    """The transaction committed, the answer was lost: the record must stay, the debit must
    not run again, and the caller gets its result."""
    ledger = create_table(store.client, f"{store.table_name}-ledger", key="id")
    store.client.put_item(TableName=ledger, Item={"id": {"S": "balance"}, "amount": {"N": "100"}})
    client = LostAnswers(store.client, "transact_write_items", then="fail")
    runs: list[int] = []
    handler = ledger_handler(store, client, ledger, runs)

    assert handler({"id": "o-1"}, None) == "debited"
    assert handler({"id": "o-1"}, None) == "debited"  # the retry replays

    assert runs == [1]
    assert balance(store, ledger) == 70
    assert handler.idempotency.stats["completion_retry"] == 1  # sent again, applied once


class FailsBeforeSending:
    """A client whose transactions fail before anything is written."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.meta = client.meta
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        operation = getattr(self._client, name)
        if name != "transact_write_items" or self.failed:
            return operation

        def fail(**request: Any) -> Any:
            self.failed = True
            raise server_error(name)

        return fail


def test_completion_refused_once_is_sent_again_and_lands_once(store: DynamoDBStore) -> None:
    ledger = create_table(store.client, f"{store.table_name}-ledger", key="id")
    store.client.put_item(TableName=ledger, Item={"id": {"S": "balance"}, "amount": {"N": "100"}})
    runs: list[int] = []
    handler = ledger_handler(store, FailsBeforeSending(store.client), ledger, runs)

    assert handler({"id": "o-1"}, None) == "debited"
    assert handler({"id": "o-1"}, None) == "debited"
    assert runs == [1]
    assert balance(store, ledger) == 70
    assert handler.idempotency.stats["completion_retry"] == 1


class AlwaysFailsBeforeSending(FailsBeforeSending):
    def __getattr__(self, name: str) -> Any:
        self.failed = False
        return super().__getattr__(name)


def test_completion_that_never_lands_frees_the_key_before_the_invocation_ends(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """DynamoDB refuses every completion transaction until the invocation must answer:
    neither the debit nor the record landed, so the key is released and the error raised."""
    ledger = create_table(store.client, f"{store.table_name}-ledger", key="id")
    store.client.put_item(TableName=ledger, Item={"id": {"S": "balance"}, "amount": {"N": "100"}})
    runs: list[int] = []
    client = AlwaysFailsBeforeSending(store.client)

    @idempotent(
        store=DynamoDBStore(store.table_name, client=client),  # type: ignore[arg-type]
        key="id",
        cache_size=0,
        clock=clock,
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        current_execution().add_write(
            {
                "Update": {
                    "TableName": ledger,
                    "Key": {"id": {"S": "balance"}},
                    "UpdateExpression": "ADD amount :debit",
                    "ExpressionAttributeValues": {":debit": {"N": "-30"}},
                }
            }
        )
        return "debited"

    with pytest.raises(StoreError):
        handler({"id": "o-1"}, FakeContext(3000, clock=clock))
    assert held(store) == []  # released: neither the debit nor the record landed
    assert handler.idempotency.stats["completion_retry"] >= 3
    assert balance(store, ledger) == 100


LARGE_RESULTS = {
    # ~1 MB of order lines: packs far below the 400 KB item limit, in one item of its own.
    "repetitive": lambda: {"orders": [{"sku": f"sku-{n % 50}", "qty": 1} for n in range(40_000)]},
    # ~700 KB of random hex: packs to ~350 KB, what one item of its own holds.
    "at the item limit": lambda: {"blob": os.urandom(350_000).hex()},
    # ~5.8 MB of random hex, near Lambda's 6 MB response limit: packs to ~3 MB.
    "near 6 MB": lambda: {"blob": os.urandom(2_900_000).hex()},
}


@pytest.mark.parametrize("kind", LARGE_RESULTS)
def test_a_large_result_is_stored_for_real_and_replays_byte_equal(
    store: DynamoDBStore, kind: str
) -> None:
    """However the store splits a large result, a retry gets the same bytes back, the handler
    runs once, and the replay is the refused claim and one read of the result's own items."""
    import json

    first = LARGE_RESULTS[kind]()
    runs: list[int] = []

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return first

    trips = RoundTrips(store.client)
    assert handler({"id": 1}, None) == first
    first_run = trips.take()
    replay = handler({"id": 1}, None)
    replay_trips = trips.take()

    assert json.dumps(replay, sort_keys=True) == json.dumps(first, sort_keys=True)
    assert runs == [1]
    assert first_run[0] == "PutItem" and len(first_run) <= 12  # claim, chunks, completion
    assert replay_trips == ["PutItem", "BatchGetItem"]  # the refused claim, then the items


def test_malformed_enlisted_write_is_refused_when_enlisted(store: DynamoDBStore) -> None:
    @idempotent(store=store, key="id")
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write({"Put": {"TableName": "t", "Item": {"pk": "resource-style"}}})
        return "never"

    with pytest.raises(ConfigurationError, match="low-level"):
        handler({"id": 1}, None)
    assert held(store) == []


def test_write_botocore_cannot_serialize_is_a_store_error_and_releases(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    default = DynamoDBStore(store.table_name, endpoint_url=dynamodb_local_endpoint)

    @idempotent(store=default, key="id")
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {"Put": {"TableName": store.table_name, "Item": {"pk": {"S": object()}}}}
        )
        return "never"

    with pytest.raises(StoreError) as caught:
        handler({"id": 1}, None)
    assert caught.value.code == "InvalidRequest"
    assert held(store) == []
