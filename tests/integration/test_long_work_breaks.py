"""Attacks on long work that broke a promise, each fixed since (they were strict xfails).

Each counts the effects; its docstring says the promise and what happened before the fix."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
import time
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from botocore.awsrequest import AWSResponse

from lambda_idempotency import (
    DeferredResultError,
    DynamoDBStore,
    LeaseLostError,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores.record import Status
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
from tests.long_work import HEARTBEAT, one_attempt

pytestmark = pytest.mark.dynamodb_local


class Throttled:
    body = json.dumps(
        {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}
    ).encode()

    def stream(self, **_: Any) -> Any:
        yield self.body


def test_a_resumed_invocation_whose_claim_is_throttled_fails_and_frees_its_key(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """A charges and suspends on its shipping callback; when it resumes, DynamoDB throttles
    its claim (botocore's retries spent; the release after it is not): StoreError out of
    the handler, which the SDK
    takes for the handler's own exception and ends A FAILED. The guide: what ends the
    execution as FAILED releases the key, so C, the next execution, runs (A's charge is the
    user's to refund, as after any failure). It gets InProgressError for 366 days instead."""
    store = one_attempt(store)
    ledger = Ledger()
    throttling = threading.Event()

    def hook(request: Any, **_: Any) -> Any:
        target = request.headers.get("X-Amz-Target", b"").decode()
        if throttling.is_set() and target.endswith("PutItem"):
            throttling.clear()  # the claim: one request (botocore's retries are off)
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


def release_cli(store: DynamoDBStore, endpoint: str, pk: str, flag: str) -> int:
    from lambda_idempotency._dev import cli

    where = ("--table", store.table_name, "--endpoint", endpoint, "--pk", pk)
    return cli.main(["release", *where, "--yes", flag])


CHANGED = 3
"""release's exit status when the record changed after it read it (a beat landed)."""


def force_release(store: DynamoDBStore, endpoint: str, pk: str, flag: str) -> None:
    """Release as an operator does, running it again when a beat changed the record in
    between (the CLI says so, exit 3): the beats race the release's read and write."""
    for _ in range(50):
        status = release_cli(store, endpoint, pk, flag)
        if status != CHANGED:
            assert status == 0
            return
    raise AssertionError("the release never landed between two beats")


def test_a_running_holder_with_a_heartbeat_completes_over_a_forced_release(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """operations.md (release): the tombstone "lets a holder that was still running
    (`--force`) complete over it: then its result stands and retries replay it, rather than
    its completion being refused and its effect run again". True without a heartbeat; with
    one (or an extend_lease after the release) the beat is refused, the call raises
    LeaseLostError, and the retry, started after the holder ended, exports a second time."""
    exports: list[str] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        exports.append("exported")
        with current_execution().heartbeat(every=0.05, extend_by=30):
            if len(exports) == 1:
                pk = current_execution().key_hash or ""
                force_release(store, dynamodb_local_endpoint, pk, "--force")
                threading.Event().wait(0.3)  # the next beats meet the tombstone
        return "exported"

    with contextlib.suppress(LeaseLostError):
        export({"id": "f-1"}, None)  # raises LeaseLostError: the result is not stored
    assert export({"id": "f-1"}, None) == "exported"  # the retry, after the holder ended
    assert exports == ["exported"]


def test_a_running_durable_execution_with_a_heartbeat_completes_over_a_forced_release(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    dynamodb_local_endpoint: str,
) -> None:
    """operations.md: after `--force-durable`, an execution that has not ended "resumes as
    the holder ... and completes over it; its result stands and retries replay it. Only a new
    execution with the key that starts after the release and before the held one resumes
    runs the handler again". Here no execution starts meanwhile: A charges, holds its key
    with a heartbeat while the operator releases it, and fails; C, after A ended, charges
    again."""
    ledger = Ledger()

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        with current_execution().heartbeat(every=0.05, extend_by=60):
            if len(ledger.charges) == 1:
                pk = current_execution().key_hash or ""
                force_release(store, dynamodb_local_endpoint, pk, "--force-durable")
                threading.Event().wait(0.3)
        return charge_id

    runner = runner_for(handler)
    a = finish(runner, start(runner, "a", {"order_id": "f-2"}))
    c = finish(runner, start(runner, "c", {"order_id": "f-2"}))
    assert a.status is InvocationStatus.SUCCEEDED, a.error
    assert c.result == a.result
    assert ledger.charges == ["f-2"]


def test_a_coroutines_heartbeat_never_blocks_the_loop_on_a_beat_in_flight(
    store: DynamoDBStore,
) -> None:
    """reference/async.md: the event loop is never blocked by DynamoDB; from a coroutine,
    use heartbeat, "which beats from a thread of its own". A beat that takes 1 s (a slow
    answer, or botocore backing off a throttle) is in flight when the block ends: the
    block's exit waits for it on the loop, and a task ticking every 5 ms sees a 1 s gap."""
    beat_started = threading.Event()

    def slow_beat(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT:
            beat_started.set()
            threading.Event().wait(1.0)

    store.client.meta.events.register("before-send.dynamodb", slow_beat)

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        with current_execution().heartbeat(every=0.05, extend_by=30):
            while not beat_started.is_set():
                await asyncio.sleep(0.01)
        return "done"

    async def scenario() -> float:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def tick() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        assert await export({"id": "l-1"}, None) == "done"
        stop.set()
        await ticker
        return max(gaps)

    assert asyncio.run(scenario()) < 0.5
