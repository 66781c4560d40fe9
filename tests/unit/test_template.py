"""template.yaml agrees with the library: key schema, TTL attribute, and least privilege."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import (
    AttributeNames,
    DynamoDBStore,
    InProgressError,
    current_execution,
    idempotent,
)
from lambda_idempotency._dev.template import FUNCTION_TYPE, Template
from lambda_idempotency._stores.dynamodb.calls import RUNTIME_IAM_ACTIONS
from tests.conftest import RoundTrips

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Template(ROOT / "template.yaml")
DEFAULTS = AttributeNames()


def test_idempotency_table_matches_the_library_defaults() -> None:
    table = TEMPLATE.idempotency_table()
    assert table.key_schema == [{"AttributeName": DEFAULTS.pk, "KeyType": "HASH"}]
    assert table.attribute_definitions == [{"AttributeName": DEFAULTS.pk, "AttributeType": "S"}]
    assert table.ttl_attribute == DEFAULTS.expiration
    properties = TEMPLATE.resources[table.logical_id]["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    assert properties["DeletionProtectionEnabled"] is True  # what `doctor` checks


def statements(logical_id: str) -> list[dict[str, Any]]:
    """The function's own policy statements, or its explicit role's (then nothing else)."""
    properties = TEMPLATE.resources[logical_id]["Properties"]
    if "Role" not in properties:
        return [statement for policy in properties["Policies"] for statement in policy["Statement"]]
    role = TEMPLATE.resources[properties["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert "ManagedPolicyArns" not in role  # no managed policy with "*" resources
    return [
        statement
        for policy in role["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("logical_id", sorted(TEMPLATE.of_type(FUNCTION_TYPE)))
def test_each_function_has_the_layer_the_table_and_least_privilege(logical_id: str) -> None:
    function = TEMPLATE.function(logical_id)
    table = TEMPLATE.idempotency_table()
    assert function.environment["IDEMPOTENCY_TABLE"] == table.name
    assert [path.name for path in function.layer_dirs] == ["layer"]

    on_table: set[str] = set()
    for statement in statements(logical_id):
        actions, resources = as_list(statement["Action"]), as_list(statement["Resource"])
        assert all("*" not in action for action in actions), statement
        assert all(isinstance(resource, dict) for resource in resources), statement  # no "*"
        if {"Fn::GetAtt": [table.logical_id, "Arn"]} in resources:
            on_table |= set(actions)
    assert on_table == RUNTIME_IAM_ACTIONS


def test_the_layer_calls_only_what_the_policy_grants(moto_store: DynamoDBStore) -> None:
    """Every runtime path (first run, replay, in flight, wait, error, transactional and
    chunked completion, chunked replay) against the list the template is checked with."""
    trips = RoundTrips(moto_store.client)

    @idempotent(
        store=moto_store, key="id", on_in_progress="wait", max_wait_seconds=0.2, cache_size=0
    )
    def handler(event: dict[str, Any], context: Any) -> Any:
        if event.get("fail"):
            raise RuntimeError("fail")
        if event.get("nested"):
            with contextlib.suppress(InProgressError):  # waits, then gives up
                handler({"id": event["id"], "nested": True}, None)
        if event.get("write"):
            current_execution().add_write(
                {"Put": {"TableName": moto_store.table_name, "Item": {"pk": {"S": "business"}}}}
            )
        return {"blob": os.urandom(400_000).hex()} if event.get("big") else "ok"

    for event in (
        {"id": 1, "nested": True},
        {"id": 1, "nested": True},
        {"id": 2, "fail": True},
        {"id": 3, "write": True},
        {"id": 4, "big": True},
        {"id": 4, "big": True},
    ):
        with contextlib.suppress(RuntimeError):
            handler(event, None)

    observed = {f"dynamodb:{operation}" for operation in trips.take()}
    observed.discard("dynamodb:TransactWriteItems")  # authorised per item: PutItem
    assert observed == RUNTIME_IAM_ACTIONS
