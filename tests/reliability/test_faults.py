"""The fault injector does what it says, on DynamoDB Local: a suite whose faults silently
missed would prove nothing."""

from __future__ import annotations

import uuid
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from lambda_idempotency.testing import create_idempotency_table
from tests.reliability.faults import (
    Fault,
    FaultInjector,
    classify,
    drain_retry_quota,
    fast_retries,
    retry_capacity,
)

pytestmark = pytest.mark.dynamodb_local


def client(endpoint: str, attempts: int = 1) -> Any:
    config = Config(retries={"mode": "standard", "total_max_attempts": attempts})
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=config)


@pytest.fixture
def setup(dynamodb_local_endpoint: str) -> tuple[Any, str]:
    ddb = client(dynamodb_local_endpoint)
    return ddb, create_idempotency_table(ddb, f"faults-{uuid.uuid4().hex[:12]}")


def claim(ddb: Any, table: str) -> None:
    ddb.put_item(TableName=table, Item={"pk": {"S": "k"}, "status": {"S": "IN_PROGRESS"}})


def exists(ddb: Any, table: str) -> bool:
    return "Item" in ddb.get_item(TableName=table, Key={"pk": {"S": "k"}}, ConsistentRead=True)


def test_unsent_requests_never_land(setup: tuple[Any, str]) -> None:
    ddb, table = setup
    FaultInjector(ddb).add(Fault("claim", "unsent"))
    with pytest.raises(EndpointConnectionError):
        claim(ddb, table)
    assert not exists(ddb, table)


def test_lost_answers_land(setup: tuple[Any, str]) -> None:
    ddb, table = setup
    FaultInjector(ddb).add(Fault("claim", "lost"))
    with pytest.raises(ReadTimeoutError):
        claim(ddb, table)
    assert exists(ddb, table)


@pytest.mark.parametrize(
    ("kind", "codes", "status"),
    [
        ("throttled", {"ThrottlingException", "ProvisionedThroughputExceededException"}, 400),
        ("5xx", {"InternalServerError"}, 500),
    ],
)
def test_synthetic_errors_are_what_botocore_parses(
    setup: tuple[Any, str], kind: str, codes: set[str], status: int
) -> None:
    ddb, table = setup
    FaultInjector(ddb).add(Fault("claim", kind))
    with pytest.raises(ClientError) as caught:
        claim(ddb, table)
    assert caught.value.response["Error"]["Code"] in codes
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert not exists(ddb, table)


def test_a_captured_request_lands_again_when_delivered(setup: tuple[Any, str]) -> None:
    ddb, table = setup
    faults = FaultInjector(ddb)
    faults.add(Fault("claim", "capture"))
    claim(ddb, table)
    ddb.delete_item(TableName=table, Key={"pk": {"S": "k"}})
    status, _ = faults.deliver(faults.captured[0])
    assert status == 200 and exists(ddb, table)


def test_strip_item_hides_the_record(setup: tuple[Any, str]) -> None:
    ddb, table = setup
    claim(ddb, table)
    FaultInjector(ddb).add(Fault("get", "strip_item"))
    assert not exists(ddb, table)
    assert exists(ddb, table)  # only the first occurrence


def test_faults_hit_only_their_occurrences(setup: tuple[Any, str]) -> None:
    ddb, table = setup
    faults = FaultInjector(ddb)
    fault = faults.add(Fault("get", "5xx", first=2, count=2))
    outcomes = []
    for _ in range(4):
        try:
            exists(ddb, table)
            outcomes.append("ok")
        except ClientError:
            outcomes.append("fault")
    assert outcomes == ["ok", "fault", "fault", "ok"] and fault.injected == 2


def test_a_throttling_burst_spends_the_retry_quota(dynamodb_local_endpoint: str) -> None:
    ddb = client(dynamodb_local_endpoint, attempts=3)
    table = create_idempotency_table(ddb, f"faults-{uuid.uuid4().hex[:12]}")
    fast_retries(ddb)
    faults = FaultInjector(ddb)
    assert retry_capacity(ddb) == 500
    drain_retry_quota(ddb, faults, table)
    assert retry_capacity(ddb) == 0
    faults.add(Fault("claim", "throttled", count=3))
    with pytest.raises(ClientError):
        claim(ddb, table)
    assert faults.seen["claim"] == 1  # botocore no longer retries


RELEASING = {":r": {"S": "RELEASED"}, ":p": {"S": "IN_PROGRESS"}}
DONE = {"status": {"S": "COMPLETED"}}


@pytest.mark.parametrize(
    ("operation", "body", "call"),
    [
        ("PutItem", {"Item": {"status": {"S": "IN_PROGRESS"}}}, "claim"),
        ("PutItem", {"Item": {"status": {"S": "COMPLETED"}}}, "complete"),
        ("PutItem", {"Item": {"status": {"S": "RELEASED"}}}, "release"),
        ("PutItem", {"Item": {"pk": {"S": "ns#h#chunk#o#0"}}}, "chunks"),
        (
            "UpdateItem",
            {
                "UpdateExpression": "SET #s = :r",
                "ExpressionAttributeValues": {":r": {"S": "RELEASED"}, ":p": {"S": "IN_PROGRESS"}},
            },
            "release",
        ),
        ("DeleteItem", {"ConditionExpression": "#owner = :owner"}, "release"),
        (
            "TransactWriteItems",
            {"TransactItems": [{"Put": {"Item": {"status": {"S": "COMPLETED"}}}}]},
            "complete",
        ),
        ("BatchWriteItem", {}, "chunks"),
        ("GetItem", {}, "get"),
        ("BatchGetItem", {}, "batch_get"),
    ],
)
def test_calls_are_classified_by_what_they_do(operation: str, body: Any, call: str) -> None:
    assert classify(operation, body) == call
