"""What the long-work tests share (leases, heartbeats, durable executions): a record read
back, a store whose client sends each request once, a DynamoDB refusal to answer with from
botocore's `before-send`, and the Durable SDK's local runners, closed after the test."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from lambda_idempotency import DynamoDBStore

HEARTBEAT = "lambda-idempotency-heartbeat"
"""The heartbeat's thread name."""


def record_of(store: DynamoDBStore, handler: Any, key: str) -> Any:
    """The record `handler` keeps for `key` (no scope), as the store reads it."""
    settings = handler.idempotency.settings
    return store.get(settings.layout.record_key(settings.namespace, None, key))


def one_attempt(store: DynamoDBStore) -> DynamoDBStore:
    """The same table through a client that sends each request once: a fault planted for
    one request is what the library sees, not hidden by botocore's retries."""
    client = boto3.client(
        "dynamodb",
        endpoint_url=store.client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    return DynamoDBStore(store.table_name, client=client)


class Refusal:
    """A DynamoDB error's body, streamed as botocore reads an HTTP answer."""

    def __init__(self, code: str, status: int = 400) -> None:
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}"})
        self.body, self.status = body.encode(), status

    def stream(self, **_: Any) -> Any:
        yield self.body


def refused(request: Any, code: str, status: int = 400) -> AWSResponse:
    """DynamoDB's answer refusing `request` with `code`, for a `before-send` hook."""
    error = Refusal(code, status)
    return AWSResponse(request.url, error.status, {}, error)


@pytest.fixture
def runner_for() -> Iterator[Callable[[Any], Any]]:
    """The Durable SDK's local runners (a failed invocation retried at once), closed after
    the test."""
    from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

    runners: list[DurableFunctionTestRunner] = []

    def make(handler: Any) -> DurableFunctionTestRunner:
        runner = DurableFunctionTestRunner(handler=handler, poll_interval=0.05)
        runner._executor.RETRY_BACKOFF_SECONDS = 0  # type: ignore[misc]  # retried at once
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()
        runner._scheduler._loop.close()  # the runner stops its event loop but leaves it open
