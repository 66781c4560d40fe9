"""What a handler gets from `current_execution()`: its claim, and `add_write`, which refuses
a write DynamoDB would reject (or that would fail the completion) when it is enlisted, with a
message that says how to fix it."""

from __future__ import annotations

from typing import Any

import pytest

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    NoActiveExecutionError,
    current_execution,
    idempotent,
)
from lambda_idempotency._protocol.execution import MAX_ENLISTED_WRITES, Execution

PUT = {"Put": {"TableName": "ledger", "Item": {"id": {"S": "42"}}}}
LOW_LEVEL_HINT = 'must be in the low-level client\'s shape, e.g. {"id": {"S": "42"}}'


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (None, "add_write takes one TransactWriteItems item, e.g. {'Put': {...}}"),
        ({}, "add_write takes one TransactWriteItems item, e.g. {'Put': {...}}"),
        ({**PUT, "Delete": {}}, "add_write takes one TransactWriteItems item, e.g. {'Put': {...}}"),
        (
            {"Get": {"TableName": "ledger"}},
            "add_write: 'Get' is not one of ConditionCheck, Delete, Put, Update",
        ),
        ({"Put": "ledger"}, "add_write: Put needs a TableName"),
        ({"Put": {"Item": {"id": {"S": "42"}}}}, "add_write: Put needs a TableName"),
        (
            {"Put": {"TableName": "ledger", "Item": {"id": "42"}}},
            f"add_write: Put.Item {LOW_LEVEL_HINT}",
        ),
        (
            {"Put": {"TableName": "ledger", "Item": {"id": {"S": "4", "N": "4"}}}},
            f"add_write: Put.Item {LOW_LEVEL_HINT}",
        ),
        (
            {"Delete": {"TableName": "ledger", "Key": {"id": "4"}}},
            f"add_write: Delete.Key {LOW_LEVEL_HINT}",
        ),
    ],
)
def test_a_write_dynamodb_would_refuse_is_refused_when_enlisted(item: Any, message: str) -> None:
    execution = Execution("pk", "owner", None)
    with pytest.raises(ConfigurationError) as caught:
        execution.add_write(item)
    assert str(caught.value) == message
    assert execution.writes == []


def test_at_most_99_writes_are_enlisted_the_record_takes_the_100th_place() -> None:
    execution = Execution("pk", "owner", None)
    for _ in range(MAX_ENLISTED_WRITES):
        execution.add_write(PUT)
    with pytest.raises(ConfigurationError) as caught:
        execution.add_write(PUT)
    assert str(caught.value) == "at most 99 writes can be enlisted"
    assert len(execution.writes) == 99


def test_current_execution_outside_a_call_says_so() -> None:
    with pytest.raises(NoActiveExecutionError) as caught:
        current_execution()
    assert str(caught.value) == "current_execution() called outside an idempotent call"


def test_an_unprotected_call_has_no_claim(moto_store: DynamoDBStore) -> None:
    seen: list[Execution] = []

    @idempotent(store=moto_store, key="id", key_required=False)
    def handler(event: dict[str, Any], context: Any) -> str:
        seen.append(current_execution())
        return "ran"

    assert handler({}, None) == "ran"
    assert (seen[0].key_hash, seen[0].owner, seen[0].claimed_at_ms) == (None, None, None)
    assert (seen[0].lease_until_ms, seen[0].answer_by_ms) == (None, None)
