"""Attacks on long work that broke a promise: each is a strict xfail, left for a fix.

Each counts the effects; the reason says the promise and what happened instead."""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from lambda_idempotency import DeferredResultError, DynamoDBStore, idempotent
from lambda_idempotency._record import Status
from tests.integration.test_durable import (
    Handler,
    Ledger,
    checkout,
    error_type,
    finish,
    record_key,
    ship,
    start,
)

pytestmark = pytest.mark.dynamodb_local


@pytest.fixture
def runner_for() -> Iterator[Callable[[Handler], DurableFunctionTestRunner]]:
    """test_durable's runners (retried at once), closed after the test."""
    runners: list[DurableFunctionTestRunner] = []

    def make(handler: Handler) -> DurableFunctionTestRunner:
        runner = DurableFunctionTestRunner(handler=handler, poll_interval=0.05)
        runner._executor.RETRY_BACKOFF_SECONDS = 0  # type: ignore[misc]  # retried at once
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()
        runner._scheduler._loop.close()


def one_attempt(store: DynamoDBStore) -> DynamoDBStore:
    client = boto3.client(
        "dynamodb",
        endpoint_url=store.client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    return DynamoDBStore(store.table_name, client=client)


class Throttled:
    body = json.dumps(
        {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}
    ).encode()

    def stream(self, **_: Any) -> Any:
        yield self.body


@pytest.mark.xfail(
    strict=True,
    reason="a durable execution whose resumed invocation's claim DynamoDB throttles ends "
    "FAILED (StoreError is the handler's exception to the SDK) but its key stays IN_PROGRESS "
    "for the execution's lease (366 days): the next execution gets InProgressError",
)
def test_a_resumed_invocation_whose_claim_is_throttled_fails_and_frees_its_key(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """A charges and suspends on its shipping callback; when it resumes, DynamoDB throttles
    its claim (botocore's retries spent): StoreError out of the handler, which the SDK
    takes for the handler's own exception and ends A FAILED. The guide: what ends the
    execution as FAILED releases the key, so C, the next execution, runs (A's charge is the
    user's to refund, as after any failure). It gets InProgressError for 366 days instead."""
    store = one_attempt(store)
    ledger = Ledger()
    throttling = threading.Event()

    def hook(request: Any, **_: Any) -> Any:
        target = request.headers.get("X-Amz-Target", b"").decode()
        if throttling.is_set() and target.endswith("PutItem"):
            return AWSResponse(request.url, 400, {}, Throttled())
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)
    runner = runner_for(checkout(store, ledger))
    order = {"order_id": "b-1", "amount": 30}
    a = start(runner, "a", order)
    callback_id = runner.wait_for_callback(a, name="shipping", timeout=20)
    throttling.set()
    runner.send_callback_success(callback_id, result=b"shipped")
    failed = finish(runner, a)
    throttling.clear()
    assert failed.status is InvocationStatus.FAILED
    assert error_type(failed) == "StoreError"

    record = store.get(record_key(runner, "b-1"))
    assert record is not None and record.status is Status.RELEASED  # fails: IN_PROGRESS
    done = ship(runner, start(runner, "c", order))
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert ledger.charges == ["b-1", "b-1"]


class Receipt:
    """A plain class, as many results are (no dataclass, no pydantic)."""

    def __init__(self, order: str, charge: Any) -> None:
        self.order, self.charge = order, charge


HOLDERS: dict[str, Callable[[Any], Any]] = {
    "a plain object's attribute": lambda deferred: Receipt("o-1", deferred),
    "a SimpleNamespace": lambda deferred: types.SimpleNamespace(charge=deferred),
    "a deque": lambda deferred: {"charges": collections.deque([deferred])},
    "a UserDict": lambda deferred: collections.UserDict({"charge": deferred}),
}


@pytest.mark.xfail(
    strict=True,
    reason="a coroutine nested in a plain object, a SimpleNamespace, a deque or a UserDict "
    "is not found: the key completes with a 'not stored' marker for a charge that never "
    "happened, and the fixed retry gets ResultNotSerializableError instead of running",
)
@pytest.mark.parametrize("holder", list(HOLDERS))
def test_a_forgotten_await_inside_any_holder_releases_the_key(
    store: DynamoDBStore, holder: str
) -> None:
    """`return Receipt(order, charge(order))` with `charge` a coroutine function. The guide
    (reference/results.md): the key never holds a "not stored" marker for an effect that
    did not happen. Here it does: the charge never ran, and after the fix the retry is
    refused with ResultNotSerializableError for the TTL; the charge never happens."""
    charged: list[str] = []
    fixed = threading.Event()

    async def charge(order: str) -> str:
        charged.append(order)
        return "charged"

    @idempotent(store=store, key="id", cache_size=0)
    async def checkout(event: dict[str, Any], context: Any) -> Any:
        if fixed.is_set():
            return {"charge": await charge(event["id"])}
        return HOLDERS[holder](charge(event["id"]))

    async def scenario() -> Any:
        with pytest.raises(DeferredResultError):
            await checkout({"id": "o-1"}, None)
        fixed.set()
        return await checkout({"id": "o-1"}, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the coroutine never awaited
        assert asyncio.run(scenario()) == {"charge": "charged"}
    assert charged == ["o-1"]
