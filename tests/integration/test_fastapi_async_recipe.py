"""The async half of the FastAPI-on-Lambda recipe of docs/fastapi.md
(tests/recipes/fastapi_payments.py): an `async def` route awaiting an idempotent coroutine,
under Mangum, invoked with API Gateway and Function URL events, the store on DynamoDB Local.
Effects are counted as calls to the recipe's stand-in payment provider.

Needs `idempotent_function` on `async def` (issue 27, item 1): before it, decorating the
recipe's coroutine is refused at import."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest

from lambda_idempotency.testing import FakeLambdaContext, IdempotencyTable
from tests.http_events import header_field, http_event

pytestmark = pytest.mark.dynamodb_local

SHAPES = ("rest-api", "http-api", "function-url")
REMAINING_MS = 30_000


class Provider(list[dict[str, Any]]):
    """The recipe's `charges`, with a hand on each charge: counts them, and can hold one in
    flight or fail it as a provider outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.entered = threading.Event()
        self.hold: threading.Event | None = None
        self.failures = 0

    def append(self, charge: dict[str, Any]) -> None:
        self.calls += 1
        self.entered.set()
        if self.hold is not None:  # blocks this container's loop, as a slow provider would
            assert self.hold.wait(10), "the test never let the held charge go"
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the payment provider is unavailable")
        super().append(charge)


@pytest.fixture
def recipe(idempotency_table_local: IdempotencyTable) -> Iterator[ModuleType]:
    """The recipe imported afresh (a cold start), on the container's event loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        module = idempotency_table_local.import_handler("tests.recipes.fastapi_payments")
        module.charges = Provider()
        yield module
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def pay(
    key: str, order: str = "o-1", amount: int = 2500, shape: str = "http-api"
) -> dict[str, Any]:
    return http_event(
        shape,
        path=f"/orders/{order}/payment",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
        body=json.dumps({"amount_cents": amount}),
    )


def invoke(handler: Callable[..., Any], event: dict[str, Any]) -> dict[str, Any]:
    return handler(event, FakeLambdaContext(remaining_ms=REMAINING_MS))  # type: ignore[no-any-return]


def in_another_container(handler: Callable[..., Any], event: dict[str, Any]) -> dict[str, Any]:
    """An invocation in a second execution environment: its own thread and event loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return invoke(handler, event)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.mark.parametrize("shape", SHAPES)
def test_the_charge_runs_once_for_an_order_whatever_key_the_request_carries(
    recipe: ModuleType, shape: str
) -> None:
    first = invoke(recipe.handler, pay("k-1", shape=shape))
    other_key = invoke(recipe.handler, pay("k-2", shape=shape))
    retry = invoke(recipe.handler, pay("k-1", shape=shape))

    assert recipe.charges.calls == 1
    assert first["statusCode"] == other_key["statusCode"] == 201
    charged = json.loads(first["body"])
    assert charged == {"charge_id": charged["charge_id"], "amount_cents": 2500}
    assert other_key["body"] == first["body"]  # the route ran again; the charge replayed
    assert "idempotent-replayed" not in header_field(other_key)
    assert retry["body"] == first["body"]  # the request itself replayed
    assert header_field(retry)["idempotent-replayed"] == "true"


def test_orders_of_one_container_and_of_another_each_charge_once(recipe: ModuleType) -> None:
    """Mangum runs every request of a container on one loop; another container has its own.
    The coroutine's protection holds on each, request after request."""
    one = invoke(recipe.handler, pay("k-1", order="o-1"))
    two = invoke(recipe.handler, pay("k-2", order="o-2"))
    with ThreadPoolExecutor(1) as pool:
        elsewhere = pool.submit(in_another_container, recipe.handler, pay("k-3", order="o-1"))
        again = elsewhere.result(timeout=10)

    assert recipe.charges.calls == 2
    assert one["body"] != two["body"]
    assert again["body"] == one["body"]


def test_a_concurrent_request_for_the_same_order_waits_for_the_charge(recipe: ModuleType) -> None:
    recipe.charges.hold = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(in_another_container, recipe.handler, pay("k-1"))
        assert recipe.charges.entered.wait(10)
        second = pool.submit(in_another_container, recipe.handler, pay("k-2"))
        deadline = time.monotonic() + 10
        while recipe.charge.idempotency.stats["waiting"] == 0:
            assert time.monotonic() < deadline, "the second charge never started waiting"
            time.sleep(0.01)
        recipe.charges.hold.set()
        charged, waited = first.result(timeout=10), second.result(timeout=10)

    assert recipe.charges.calls == 1
    assert charged["statusCode"] == waited["statusCode"] == 201
    assert waited["body"] == charged["body"]


def test_the_charge_is_leased_for_the_invocations_remaining_time(
    recipe: ModuleType, idempotency_table_local: IdempotencyTable
) -> None:
    """The Lambda context reaches the coroutine through Mangum's task: the charge holds its
    key for the invocation's remaining time, not the 900 s a call without one gets."""
    recipe.charges.hold = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        started_ms = int(time.time() * 1000)
        first = pool.submit(in_another_container, recipe.handler, pay("k-1"))
        assert recipe.charges.entered.wait(10)
        items = idempotency_table_local.client.scan(TableName=idempotency_table_local.name)
        recipe.charges.hold.set()
        assert first.result(timeout=10)["statusCode"] == 201

    leases = {
        item["pk"]["S"].split("#")[0].rsplit(".", 1)[-1]: int(item["lease_until"]["N"])
        for item in items["Items"]
    }
    assert set(leases) == {"handler", "charge"}
    assert started_ms + REMAINING_MS <= leases["charge"] <= leases["handler"] + 1_000


def test_a_failed_charge_answers_500_unstored_and_the_retry_charges(recipe: ModuleType) -> None:
    recipe.charges.failures = 1

    failed = invoke(recipe.handler, pay("k-1"))
    retried = invoke(recipe.handler, pay("k-1"))
    other_key = invoke(recipe.handler, pay("k-2"))

    assert failed["statusCode"] == 500
    assert recipe.charges.calls == 2
    assert len(recipe.charges) == 1
    assert retried["statusCode"] == 201
    assert other_key["body"] == retried["body"]


def test_another_amount_for_a_charged_order_answers_500_and_charges_nothing(
    recipe: ModuleType,
) -> None:
    charged = invoke(recipe.handler, pay("k-1", amount=2500))

    refused = invoke(recipe.handler, pay("k-2", amount=9900))
    again = invoke(recipe.handler, pay("k-2", amount=9900))

    assert charged["statusCode"] == 201
    assert refused["statusCode"] == again["statusCode"] == 500  # PayloadMismatchError, unmapped
    assert recipe.charges.calls == 1


def test_a_body_fastapi_refuses_is_not_stored_here_either(recipe: ModuleType) -> None:
    invalid = invoke(recipe.handler, {**pay("k-1"), "body": '{"amount": 2500}'})
    corrected = invoke(recipe.handler, pay("k-1"))

    assert invalid["statusCode"] == 422
    assert corrected["statusCode"] == 201
    assert recipe.charges.calls == 1
