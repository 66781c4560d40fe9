"""Shared fixtures. DynamoDB Local and the moto store come from the library's own pytest
plugin (lambda_idempotency.testing), so the project tests what its users get."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.pop("IDEMPOTENCY_DISABLED", None)

import tests.hypothesis_profiles  # noqa: F401  (loads the hypothesis profile)
from lambda_idempotency import AttributeNames, DynamoDBStore, InProgressError
from lambda_idempotency._dev.local_tables import local_client
from lambda_idempotency.testing import (
    FakeClock,
    FakeLambdaContext,
    RoundTrips,
    create_idempotency_table,
)

# the suite's time limits: per-test signal, limits scaled from --timeout, a backstop; real
# Valkey servers (valkey_node, valkey_pair, valkey_cluster), started only when a test asks
pytest_plugins = ["tests.timeouts", "tests.valkey_servers"]

FakeContext = FakeLambdaContext
__all__ = ["FakeClock", "FakeContext", "RoundTrips", "create_table", "drop_tables", "local_client"]


def call_until_the_key_frees(call: Any, event: dict[str, Any], *, within_s: float = 5) -> Any:
    """`call(event, None)` every 0.2 s while it answers InProgressError (the key is held):
    its answer once the key frees, or a failed test if the key stays locked `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return call(event, None)
        except InProgressError:
            assert time.monotonic() < deadline, "the key stayed locked past its lease"
            time.sleep(0.2)


def create_table(client: Any, name: str, key: str = "pk") -> str:
    """A table with a string hash key named `key`, on demand."""
    return create_idempotency_table(client, name, AttributeNames(pk=key))


def drop_tables(client: Any, *names: str) -> None:
    """Delete these tables where they exist, deletion protection turned off first (the
    template's IdempotencyTable has it, and `local` and `create-table` create it so)."""
    existing = set(client.list_tables()["TableNames"])
    for name in names:
        if name in existing:
            client.update_table(TableName=name, DeletionProtectionEnabled=False)
            client.delete_table(TableName=name)


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
