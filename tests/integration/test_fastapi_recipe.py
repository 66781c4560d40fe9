"""The FastAPI-on-Lambda recipe of docs/fastapi.md (tests/recipes/fastapi_app.py), invoked as
Lambda invokes it: API Gateway REST and HTTP API proxy events, Function URL and ALB events,
a Lambda context, the store on DynamoDB Local. Effects are counted as writes to the recipe's
stand-in database (each one is a run of the route's body)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest
from fastapi import FastAPI, Response
from mangum import Mangum

from lambda_idempotency import current_execution, idempotent_function, idempotent_http
from lambda_idempotency.testing import FakeLambdaContext, IdempotencyTable, RoundTrips
from tests.http_events import header_field, http_event, jwt

pytestmark = pytest.mark.dynamodb_local

SHAPES = ("rest-api", "http-api", "function-url", "alb", "alb-multi-value")
KEY = "0d6f7b1e-7c1a-4a53-9c55-3b1f0e2d9a41"
ORDER = '{"sku": "tea-250g", "quantity": 2}'
JSON = {"Content-Type": "application/json"}


def headers_of(response: dict[str, Any]) -> dict[str, Any]:
    """A response's headers by lower-case name, a multi-value header's one value as a str:
    an ALB target group with multi-value headers on reads only `multiValueHeaders`."""
    return {
        name: value[0] if isinstance(value, list) and len(value) == 1 else value
        for name, value in header_field(response).items()
    }


class Database(dict[str, Any]):
    """The recipe's `orders`, with a hand on each write: counts the route's runs, and can
    hold a run in flight or fail it as a database outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.entered = threading.Event()
        self.hold: threading.Event | None = None
        self.failures = 0

    def __setitem__(self, key: str, value: dict[str, Any]) -> None:
        self.writes += 1
        self.entered.set()
        if self.hold is not None:
            assert self.hold.wait(10), "the test never let the held run go"
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the database is unavailable")
        super().__setitem__(key, value)


@pytest.fixture
def recipe(idempotency_table_local: IdempotencyTable) -> Iterator[ModuleType]:
    """The recipe imported afresh, as a cold start does, its module-level store on DynamoDB
    Local. The event loop is the container's: Mangum finds it at import and runs every
    request on it; closed here, as the container's end would."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        module = idempotency_table_local.import_handler("tests.recipes.fastapi_app")
        module.orders = Database()
        yield module
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def post(
    shape: str,
    key: str | None = KEY,
    body: str = ORDER,
    path: str = "/orders",
    **request: Any,
) -> dict[str, Any]:
    headers = dict(JSON)
    if key is not None:
        headers["Idempotency-Key"] = key
    return http_event(shape, path=path, headers=headers, body=body, **request)


def invoke(handler: Callable[..., Any], event: dict[str, Any]) -> dict[str, Any]:
    return handler(event, FakeLambdaContext(remaining_ms=30_000))  # type: ignore[no-any-return]


def in_another_container(handler: Callable[..., Any], event: dict[str, Any]) -> dict[str, Any]:
    """An invocation in a second execution environment: its own thread and event loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return invoke(handler, event)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def problem_of(response: dict[str, Any], status: int, type_: str) -> dict[str, Any]:
    assert response["statusCode"] == status
    assert headers_of(response)["content-type"] == "application/problem+json"
    problem = json.loads(response["body"])
    assert problem["type"] == f"urn:lambda-idempotency:problem:{type_}"
    assert problem["status"] == status
    return problem  # type: ignore[no-any-return]


def records(table: IdempotencyTable) -> list[str]:
    """Statuses of the records that hold a key (a released key leaves only a tombstone)."""
    items = table.client.scan(TableName=table.name)["Items"]
    return sorted(item["status"]["S"] for item in items if item["status"]["S"] != "RELEASED")


# -- the first request and its retry -----------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_the_first_post_creates_and_the_retry_replays_it_byte_for_byte(
    recipe: ModuleType, shape: str
) -> None:
    first = invoke(recipe.handler, post(shape))
    retry = invoke(recipe.handler, post(shape))

    assert recipe.orders.writes == 1
    assert first["statusCode"] == 201
    created = json.loads(first["body"])
    assert created == {"id": created["id"], "sku": "tea-250g", "quantity": 2}
    assert headers_of(first)["location"] == f"/orders/{created['id']}"
    assert "idempotent-replayed" not in headers_of(first)
    assert retry["statusCode"] == 201
    assert retry["body"] == first["body"]
    assert retry["isBase64Encoded"] is first["isBase64Encoded"] is False
    assert headers_of(retry) == {**headers_of(first), "idempotent-replayed": "true"}
    fields = ("headers", "multiValueHeaders")
    assert {k: v for k, v in retry.items() if k not in fields} == {
        k: v for k, v in first.items() if k not in fields
    }  # nothing else differs


def test_the_same_json_spelled_otherwise_is_the_same_request(recipe: ModuleType) -> None:
    first = invoke(recipe.handler, post("http-api"))
    retry = invoke(recipe.handler, post("http-api", body='{"quantity":2.0,"sku":"tea-250g"}'))

    assert recipe.orders.writes == 1
    assert retry["body"] == first["body"]


def test_reads_pass_through_without_a_key_or_a_dynamodb_request(
    recipe: ModuleType, idempotency_table_local: IdempotencyTable
) -> None:
    created = json.loads(invoke(recipe.handler, post("http-api"))["body"])
    client = recipe.store.client
    round_trips = RoundTrips(client)

    path = f"/orders/{created['id']}"
    read = invoke(recipe.handler, http_event("http-api", method="GET", path=path))
    missing = invoke(recipe.handler, http_event("http-api", method="GET", path="/orders/none"))

    assert round_trips.take() == []
    assert json.loads(read["body"]) == created
    assert missing["statusCode"] == 404


def set_cookies(response: dict[str, Any]) -> list[str]:
    """The cookies a response sets, wherever its shape carries them (for ALB without
    multi-value headers Mangum spells each Set-Cookie in another letter case)."""
    found = list(response.get("cookies") or [])
    for field in ("headers", "multiValueHeaders"):
        for name, value in (response.get(field) or {}).items():
            if name.lower() == "set-cookie":
                found += value if isinstance(value, list) else [value]
    return sorted(cookie.split(";")[0] for cookie in found)


@pytest.mark.parametrize("shape", SHAPES)
def test_cookies_replay_in_the_fields_mangum_answered_them_in(
    recipe: ModuleType, shape: str
) -> None:
    """Two Set-Cookie headers: `cookies` for HTTP APIs and Function URLs, multi-value
    headers for REST APIs and ALB, one name in two letter cases for ALB otherwise. The
    retry gets them as the first answer had them, only the replay mark added."""

    @recipe.app.post("/session", status_code=201)
    def open_session(response: Response) -> dict[str, str]:
        recipe.orders["session"] = {}
        response.set_cookie("session", "s-1")
        response.set_cookie("theme", "dark")
        return {}

    first = invoke(recipe.handler, post(shape, path="/session", body="{}"))
    retry = invoke(recipe.handler, post(shape, path="/session", body="{}"))

    assert recipe.orders.writes == 1
    assert set_cookies(first) == set_cookies(retry) == ["session=s-1", "theme=dark"]
    for field in ("cookies", "headers", "multiValueHeaders"):
        replayed = retry.get(field)
        if isinstance(replayed, dict):
            replayed = {k: v for k, v in replayed.items() if k != "Idempotent-Replayed"}
        assert replayed == first.get(field)


def test_the_recipes_keys_are_namespaced_by_its_handler_not_by_mangum(recipe: ModuleType) -> None:
    """Why the recipe decorates a function around the Mangum instance (docs/fastapi.md)."""
    around_the_instance = idempotent_http(store=recipe.store)(recipe.asgi)

    assert recipe.handler.idempotency.settings.namespace == "tests.recipes.fastapi_app.handler"
    assert around_the_instance.idempotency.settings.namespace == "mangum.adapter.Mangum"


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_key_with_another_body_is_422_and_nothing_runs(
    recipe: ModuleType, shape: str
) -> None:
    invoke(recipe.handler, post(shape))

    reused = invoke(recipe.handler, post(shape, body='{"sku": "tea-250g", "quantity": 3}'))

    problem_of(reused, 422, "key-reused")
    assert recipe.orders.writes == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_a_post_without_the_key_is_400_and_nothing_runs(
    recipe: ModuleType, shape: str, idempotency_table_local: IdempotencyTable
) -> None:
    response = invoke(recipe.handler, post(shape, key=None))

    problem = problem_of(response, 400, "key-missing")
    assert "Idempotency-Key" in problem["detail"]
    assert recipe.orders.writes == 0
    assert records(idempotency_table_local) == []


def test_a_duplicate_while_the_first_runs_is_409_with_retry_after(recipe: ModuleType) -> None:
    recipe.orders.hold = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(in_another_container, recipe.handler, post("http-api"))
        assert recipe.orders.entered.wait(10)

        duplicate = invoke(recipe.handler, post("http-api"))
        recipe.orders.hold.set()
        completed = first.result(timeout=10)
    retry = invoke(recipe.handler, post("http-api"))

    problem_of(duplicate, 409, "request-in-progress")
    # the first one's lease (its 30 s remaining) and the 2 s allowed for clock skew
    assert 29 <= int(duplicate["headers"]["Retry-After"]) <= 32
    assert recipe.orders.writes == 1
    assert completed["statusCode"] == 201
    assert retry["body"] == completed["body"]


def test_with_on_in_progress_wait_the_duplicate_waits_and_replays(recipe: ModuleType) -> None:
    """The recipe's Mangum handler under `on_in_progress="wait"`: no 409, the first answer."""
    waiting = idempotent_http(store=recipe.store, on_in_progress="wait")(recipe.handler.__wrapped__)
    recipe.orders.hold = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(in_another_container, waiting, post("http-api"))
        assert recipe.orders.entered.wait(10)
        duplicate = pool.submit(in_another_container, waiting, post("http-api"))
        deadline = time.monotonic() + 10
        while waiting.idempotency.stats["waiting"] == 0:
            assert time.monotonic() < deadline, "the duplicate never started waiting"
            time.sleep(0.01)
        recipe.orders.hold.set()
        completed, waited = first.result(timeout=10), duplicate.result(timeout=10)

    assert recipe.orders.writes == 1
    assert waited["statusCode"] == completed["statusCode"] == 201
    assert waited["body"] == completed["body"]
    assert waited["headers"]["Idempotent-Replayed"] == "true"


# -- tenants -------------------------------------------------------------------------------


def test_two_tenants_with_one_key_both_run_and_each_replays_its_own(recipe: ModuleType) -> None:
    alice = post("http-api", authorizer=jwt("alice"))
    bob = post("http-api", authorizer=jwt("bob"))

    first_alice, first_bob = invoke(recipe.handler, alice), invoke(recipe.handler, bob)
    again_alice, again_bob = invoke(recipe.handler, alice), invoke(recipe.handler, bob)

    assert recipe.orders.writes == 2
    assert first_alice["body"] != first_bob["body"]
    assert again_alice["body"] == first_alice["body"]
    assert again_bob["body"] == first_bob["body"]


def test_the_cognito_user_of_a_rest_api_is_one_tenant_with_the_http_api_one(
    recipe: ModuleType,
) -> None:
    """The scope is the authorizer's principal, whichever API Gateway flavour carries it."""
    claims = jwt("alice")["jwt"]["claims"]
    http_api = invoke(recipe.handler, post("http-api", authorizer=jwt("alice")))
    rest_api = invoke(recipe.handler, post("rest-api", authorizer={"claims": claims}))

    assert recipe.orders.writes == 1
    assert rest_api["body"] == http_api["body"]


# -- what is not stored --------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_a_route_that_raises_answers_500_unstored_and_the_retry_runs(
    recipe: ModuleType, shape: str, idempotency_table_local: IdempotencyTable
) -> None:
    recipe.orders.failures = 1

    failed = invoke(recipe.handler, post(shape))
    assert records(idempotency_table_local) == []
    retried = invoke(recipe.handler, post(shape))
    again = invoke(recipe.handler, post(shape))

    assert failed["statusCode"] == 500  # Starlette's answer to the exception, via Mangum
    assert failed["body"] == "Internal Server Error"
    assert recipe.orders.writes == 2
    assert retried["statusCode"] == 201
    assert again["body"] == retried["body"]
    assert records(idempotency_table_local) == ["COMPLETED"]


def test_a_fastapi_validation_error_is_not_stored_and_the_corrected_body_runs(
    recipe: ModuleType, idempotency_table_local: IdempotencyTable
) -> None:
    """The route never ran: the client may fix the body and send it under the same key."""
    invalid = invoke(recipe.handler, post("http-api", body='{"sku": "tea-250g"}'))
    assert records(idempotency_table_local) == []
    corrected = invoke(recipe.handler, post("http-api"))
    retry = invoke(recipe.handler, post("http-api"))

    assert invalid["statusCode"] == 422
    assert invalid["headers"]["content-type"] == "application/json"  # not problem+json
    assert json.loads(invalid["body"])["detail"][0]["loc"] == ["body", "quantity"]
    assert recipe.orders.writes == 1
    assert corrected["statusCode"] == 201
    assert retry["body"] == corrected["body"]


def test_the_apps_own_4xx_after_the_route_ran_is_stored_and_replayed(recipe: ModuleType) -> None:
    """Only FastAPI's 422 is kept free: any other client error is the route's answer."""

    @recipe.app.post("/orders/{order_id}/cancel", status_code=202)
    def cancel(order_id: str) -> dict[str, str]:
        recipe.orders[f"cancel-{order_id}"] = {}
        raise recipe.HTTPException(status_code=409, detail="already shipped")

    first = invoke(recipe.handler, post("http-api", path="/orders/o-1/cancel", body="{}"))
    retry = invoke(recipe.handler, post("http-api", path="/orders/o-1/cancel", body="{}"))

    assert recipe.orders.writes == 1
    assert first["statusCode"] == retry["statusCode"] == 409
    assert retry["body"] == first["body"]
    assert retry["headers"]["Idempotent-Replayed"] == "true"


def test_an_effect_inside_a_route_is_leased_for_the_invocations_remaining_time(
    recipe: ModuleType,
) -> None:
    """idempotent_http hands the Lambda context on, through Mangum's task and FastAPI's
    thread pool: an idempotent_function in a route holds its key for the invocation's
    remaining time, not the 900 s of a call without a context."""
    leases: list[int | None] = []

    @idempotent_function(key="order_id", store=recipe.store)
    def reserve_stock(order_id: str) -> dict[str, str]:
        execution = current_execution()
        assert execution.lease_until_ms is not None and execution.claimed_at_ms is not None
        leases.append(execution.lease_until_ms - execution.claimed_at_ms)
        return {"reserved": order_id}

    @recipe.app.post("/orders/{order_id}/reservation")
    def reserve(order_id: str) -> dict[str, str]:
        return reserve_stock(order_id)

    invoke(recipe.handler, post("http-api", path="/orders/o-1/reservation", body="{}"))

    assert leases == [30_000]


# -- Mangum's event loop and lifespan --------------------------------------------------------


def test_every_request_of_a_container_runs_on_the_loop_mangum_found(recipe: ModuleType) -> None:
    """Mangum takes the thread's event loop when it is built (at import, in the cold start)
    and runs each request on it with run_until_complete: one loop per container."""
    loops: list[asyncio.AbstractEventLoop] = []

    @recipe.app.post("/loop")
    async def which_loop() -> dict[str, str]:
        loops.append(asyncio.get_running_loop())
        return {}

    invoke(recipe.handler, post("http-api", path="/loop", body="{}"))
    invoke(recipe.handler, post("http-api", key="another", path="/loop", body="{}"))

    assert loops == [asyncio.get_event_loop()] * 2
    assert not loops[0].is_running()


@pytest.mark.parametrize(("lifespan", "startups"), [("auto", 2), ("off", 0)])
def test_mangum_runs_the_app_lifespan_around_every_request_unless_it_is_off(
    recipe: ModuleType, lifespan: str, startups: int
) -> None:
    """Why the recipe says lifespan="off": under "auto" (Mangum's default) the app's startup
    and shutdown run around each invocation, not once per container. Clients belong at
    module level, made once per cold start."""
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan_of(app: FastAPI) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan_of)
    app.include_router(recipe.app.router)
    asgi = Mangum(app, lifespan=lifespan)  # type: ignore[arg-type]

    @idempotent_http(store=recipe.store)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return asgi(event, context)

    invoke(handler, post("http-api"))
    invoke(handler, post("http-api", key="another"))

    assert events.count("startup") == events.count("shutdown") == startups
    assert recipe.orders.writes == 2
