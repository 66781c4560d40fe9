"""Shared fixtures. DynamoDB Local and the moto store come from the library's own pytest
plugin (lambda_idempotency.testing), so the project tests what its users get."""

from __future__ import annotations

import os
from typing import Any

import boto3
import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.pop("IDEMPOTENCY_DISABLED", None)

from lambda_idempotency import DynamoDBStore
from lambda_idempotency.testing import (
    FakeClock,
    FakeLambdaContext,
    RoundTrips,
)

FakeContext = FakeLambdaContext
__all__ = ["FakeClock", "FakeContext", "RoundTrips", "create_table"]


def create_table(client: Any, name: str, key: str = "pk") -> str:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


@pytest.fixture
def ddb(idempotency_store_local: DynamoDBStore) -> Any:
    return idempotency_store_local.client


@pytest.fixture
def store(idempotency_store_local: DynamoDBStore) -> DynamoDBStore:
    return idempotency_store_local


@pytest.fixture
def table(store: DynamoDBStore) -> str:
    return store.table_name


@pytest.fixture
def moto_store(idempotency_store_moto: DynamoDBStore) -> DynamoDBStore:
    return idempotency_store_moto


@pytest.fixture
def moto_client(moto_store: DynamoDBStore) -> Any:
    return moto_store.client


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def local_client(endpoint_url: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
