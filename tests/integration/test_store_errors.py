"""What a user sees when the store cannot reach its table: the failed call, the table, the
endpoint and the fix in one line, the step that failed, and no `release_failed` line for a
claim that never left (issue 32). Each cause as a user meets it: a table that is not there
and nothing listening, on real HTTP; no region and no credentials, by the environment."""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
import pytest

from lambda_idempotency import DynamoDBStore, StoreError, idempotent
from lambda_idempotency._dev.dynamodb_local import free_port

pytestmark = pytest.mark.dynamodb_local

KEY_VALUE = "order-secret-17"
"""The raw key: it must appear in no message and no log line."""


def call(store: DynamoDBStore, caplog: Any) -> tuple[StoreError, list[dict[str, Any]], int]:
    """One decorated call that fails at its claim: the error, our log lines, handler runs."""
    runs: list[int] = []

    @idempotent(store=store, key="order_id", namespace="orders", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "charged"

    with (
        caplog.at_level(logging.DEBUG, logger="lambda_idempotency"),
        pytest.raises(StoreError) as caught,
    ):
        handler({"order_id": KEY_VALUE}, None)
    logged = [json.loads(record.getMessage()) for record in caplog.records]
    return caught.value, logged, len(runs)


def assert_one_clean_line(error: StoreError, logged: list[dict[str, Any]]) -> None:
    message = str(error)
    assert "\n" not in message and KEY_VALUE not in message
    assert all(KEY_VALUE not in json.dumps(line) for line in logged)
    assert error.step == "claim"
    outcomes = [line["idempotency"] for line in logged]
    assert outcomes == ["store_error"], outcomes  # no release_failed: no claim landed
    assert logged[0]["step"] == "claim"


def test_a_missing_table_names_table_endpoint_and_the_fix(
    dynamodb_local_endpoint: str, caplog: Any
) -> None:
    store = DynamoDBStore("orders-idem-missing", endpoint_url=dynamodb_local_endpoint)

    error, logged, runs = call(store, caplog)

    assert runs == 0
    assert error.code == "ResourceNotFoundException"
    assert str(error) == (
        "DynamoDB put_item failed: ResourceNotFoundException (table orders-idem-missing at "
        f"{dynamodb_local_endpoint}): no table orders-idem-missing there: create it (for "
        "DynamoDB Local, `lambda-idempotency create-table --table orders-idem-missing`), or "
        "point IDEMPOTENCY_TABLE, AWS_REGION or the endpoint at the one that exists"
    )
    assert_one_clean_line(error, logged)


def test_nothing_listening_names_the_endpoint_and_how_to_start_one(caplog: Any) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    store = DynamoDBStore("orders-idem", endpoint_url=endpoint)

    error, _, runs = call(store, caplog)

    assert runs == 0
    assert str(error).startswith(
        f"DynamoDB put_item failed: EndpointConnectionError (table orders-idem at {endpoint}): "
        "nothing answers there: start DynamoDB Local (`lambda-idempotency local`)"
    )
    assert error.step == "claim" and "\n" not in str(error) and KEY_VALUE not in str(error)
    # A connection refused on the last attempt says nothing of the earlier ones (botocore
    # retried): one may have landed with its answer lost, so the key is still freed.
    assert error.maybe_applied


@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> pytest.MonkeyPatch:
    """An environment with no AWS configuration at all (no files, no instance metadata)."""
    for name in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    return monkeypatch


def test_no_region_says_to_set_aws_region_and_frees_nothing(
    bare_environment: pytest.MonkeyPatch, dynamodb_local_endpoint: str, caplog: Any
) -> None:
    bare_environment.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_local_endpoint)
    store = DynamoDBStore("orders-idem")

    error, logged, runs = call(store, caplog)

    assert runs == 0
    assert str(error) == (
        f"DynamoDB put_item failed: NoRegionError (table orders-idem at {dynamodb_local_endpoint})"
        ": no AWS region: set AWS_REGION (Lambda sets it), or pass region_name=; for DynamoDB "
        "Local, `lambda-idempotency local` prints the variables to export"
    )
    assert not error.maybe_applied and not error.retryable
    assert_one_clean_line(error, logged)


def test_no_credentials_says_where_they_come_from_and_frees_nothing(
    bare_environment: pytest.MonkeyPatch, dynamodb_local_endpoint: str, caplog: Any
) -> None:
    bare_environment.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = DynamoDBStore("orders-idem", endpoint_url=dynamodb_local_endpoint)

    error, logged, runs = call(store, caplog)

    assert runs == 0
    assert str(error).startswith(
        f"DynamoDB put_item failed: NoCredentialsError (table orders-idem at "
        f"{dynamodb_local_endpoint}): no AWS credentials: configure them"
    )
    assert "`lambda-idempotency local` prints the variables to export" in str(error)
    assert not error.maybe_applied
    assert_one_clean_line(error, logged)


def test_aws_region_as_lambda_sets_it_is_read_when_nothing_else_names_one(
    bare_environment: pytest.MonkeyPatch,
) -> None:
    bare_environment.setenv("AWS_REGION", "eu-west-3")
    assert DynamoDBStore("t").client.meta.region_name == "eu-west-3"

    # boto3's own setting still wins where it is given.
    bare_environment.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    bare_environment.setattr(boto3, "DEFAULT_SESSION", None)
    assert DynamoDBStore("t").client.meta.region_name == "ap-south-1"
    assert DynamoDBStore("t", region_name="us-west-2").client.meta.region_name == "us-west-2"


def test_a_failed_request_names_its_step(dynamodb_local_endpoint: str) -> None:
    store = DynamoDBStore("orders-idem-missing", endpoint_url=dynamodb_local_endpoint)

    with pytest.raises(StoreError) as read:
        store.get("orders#k")
    with pytest.raises(StoreError) as released:
        store.release("orders#k", owner="A", now_ms=0)

    assert (read.value.step, released.value.step) == ("get", "release")
