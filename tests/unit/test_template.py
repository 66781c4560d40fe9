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
from lambda_idempotency._dev.template import CACHE_TYPE, FUNCTION_TYPE, Template
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


ON_VALKEY = sorted(name for name, f in TEMPLATE.functions().items() if f.valkey_variables)
ON_DYNAMODB = sorted(set(TEMPLATE.of_type(FUNCTION_TYPE)) - set(ON_VALKEY))


@pytest.mark.parametrize("logical_id", ON_DYNAMODB)
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


def test_the_valkey_sample_reaches_its_cache_over_tls_and_nothing_else() -> None:
    """ElastiCache Serverless for Valkey in the function's VPC: the function's security group
    may open the cache's port only, the cache's admits only the function's; the URL is TLS;
    the function is granted nothing (SAM's VPC role aside): the cache takes no IAM auth."""
    assert ON_VALKEY == ["NotifyCustomerFunction"]
    (cache_id,) = TEMPLATE.of_type(CACHE_TYPE)
    resources = TEMPLATE.resources
    cache = resources[cache_id]["Properties"]
    function = resources["NotifyCustomerFunction"]["Properties"]
    assert cache["Engine"] == "valkey"
    assert "UserGroupId" not in cache  # no IAM authentication: nothing to grant
    assert "Policies" not in function and "Role" not in function
    assert function["Environment"]["Variables"]["IDEMPOTENCY_VALKEY_URL"] == {
        "Fn::Sub": f"rediss://${{{cache_id}.Endpoint.Address}}:${{{cache_id}.Endpoint.Port}}"
    }
    assert function["VpcConfig"]["SubnetIds"] == cache["SubnetIds"] == {"Ref": "ValkeySubnetIds"}

    (function_group,) = [ref["Ref"] for ref in function["VpcConfig"]["SecurityGroupIds"]]
    (cache_group,) = [ref["Ref"] for ref in cache["SecurityGroupIds"]]
    assert resources[function_group]["Properties"]["SecurityGroupEgress"] == [
        {
            "Description": "the Valkey cache (TLS)",
            "IpProtocol": "tcp",
            "FromPort": 6379,
            "ToPort": 6379,
            "DestinationSecurityGroupId": {"Ref": cache_group},
        }
    ]
    assert "SecurityGroupIngress" not in resources[cache_group]["Properties"]
    rules = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
        and r["Properties"]["GroupId"] == {"Ref": cache_group}
    ]
    assert [(r["FromPort"], r["ToPort"], r["SourceSecurityGroupId"]) for r in rules] == [
        (6379, 6379, {"Ref": function_group})
    ]


def test_the_valkey_sample_is_deployed_only_with_a_vpc() -> None:
    """Without the VPC parameters the stack is the DynamoDB samples alone: every resource of
    the Valkey sample carries the condition, and the parameters default to empty."""
    parameters = TEMPLATE.document["Parameters"]
    assert parameters["ValkeyVpcId"]["Default"] == parameters["ValkeySubnetIds"]["Default"] == ""
    resources = TEMPLATE.resources
    valkey = {
        name
        for name, resource in resources.items()
        if resource["Type"].startswith(("AWS::ElastiCache", "AWS::EC2"))
    } | set(ON_VALKEY)
    assert len(valkey) == 5
    assert {resources[name].get("Condition") for name in valkey} == {"WithValkeySample"}
    outputs = TEMPLATE.document["Outputs"]
    assert outputs["NotifyCustomerFunctionArn"]["Condition"] == "WithValkeySample"


def test_a_function_on_the_templates_cache_is_pointed_at_a_local_server() -> None:
    """Locally the cache's endpoint means nothing: the variable is named for the runner to set,
    and the other variables resolve as before."""
    function = TEMPLATE.function("NotifyCustomerFunction")
    assert function.valkey_variables == ("IDEMPOTENCY_VALKEY_URL",)
    assert function.environment["IDEMPOTENCY_TABLE"] == "IdempotencyTable"
    assert TEMPLATE.function("ChargeOrderFunction").valkey_variables == ()
