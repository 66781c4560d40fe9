"""`idempotent_http` end to end on DynamoDB Local, with every HTTP event shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    NotAnHttpEventError,
    PayloadMismatchError,
    Status,
    ValkeyStore,
    idempotent_function,
    idempotent_http,
)
from tests.conftest import FakeClock, FakeContext, RoundTrips
from tests.http_events import SHAPES, header_field, http_event, jwt

KEY = "8e03978e-40d5-43e8-bc93-6894a57f9324"
BODY = '{"amount_cents": 2500, "currency": "EUR"}'
JSON = {"Content-Type": "application/json"}


def reply(event: dict[str, Any], status: int, body: str, headers: dict[str, str]) -> dict[str, Any]:
    """A handler's response in the shape its source reads, as a real handler writes it."""
    response: dict[str, Any] = {"statusCode": status, "body": body, "isBase64Encoded": False}
    if "elb" in event["requestContext"]:
        response["statusDescription"] = f"{status} Created" if status == 201 else str(status)
    if "elb" in event["requestContext"] and "multiValueHeaders" in event:
        response["multiValueHeaders"] = {name: [value] for name, value in headers.items()}
    else:
        response["headers"] = headers
    return response


def payments(store: DynamoDBStore, **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    """A create-payment handler that counts its runs and answers 201 with a new id."""
    runs: list[dict[str, Any]] = []

    @idempotent_http(store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        payment = f"p-{len(runs)}"
        headers = {"Content-Type": "application/json", "Location": f"/payments/{payment}"}
        return reply(event, 201, json.dumps({"id": payment}), headers)

    return handler, runs


def post(shape: str, key: str | None = KEY, body: str = BODY, **request: Any) -> dict[str, Any]:
    headers = {**JSON, **request.pop("headers", {})}
    if key is not None:
        headers["Idempotency-Key"] = key
    return http_event(shape, headers=headers, body=body, **request)


def stored_keys(store: DynamoDBStore | ValkeyStore) -> list[str]:
    """Keys a record holds: a release leaves only a tombstone, which holds nothing. (The
    store is empty at the test's start: a table, or a Valkey prefix, of its own.)"""
    if isinstance(store, ValkeyStore):
        found = (store.pk_of(key) for key in store.client.scan_iter(match=f"{store.prefix}*"))
        records = [store.get(pk) for pk in found if pk is not None]
        return [r.pk for r in records if r is not None and r.status is not Status.RELEASED]
    items = store.client.scan(TableName=store.table_name)["Items"]
    return [item["pk"]["S"] for item in items if item["status"]["S"] != "RELEASED"]


def assert_problem(response: dict[str, Any], shape: str, status: int, type_: str) -> dict[str, Any]:
    """A problem response in the shape the source expects; its body, parsed."""
    assert response["statusCode"] == status
    headers = header_field(response)
    if shape == "alb-multi-value":
        assert "headers" not in response
        assert headers["content-type"] == ["application/problem+json"]
    else:
        assert "multiValueHeaders" not in response
        assert headers["content-type"] == "application/problem+json"
    if shape.startswith("alb"):
        assert response["statusDescription"].startswith(f"{status} ")
    assert response["isBase64Encoded"] is False
    problem = json.loads(response["body"])
    assert set(problem) == {"type", "title", "status", "detail"}
    assert problem["type"] == f"urn:lambda-idempotency:problem:{type_}"
    assert problem["status"] == status
    return problem  # type: ignore[no-any-return]


# -- each event shape, end to end ----------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_first_request_runs_and_the_retry_replays_status_headers_and_body(
    store: DynamoDBStore, shape: str
) -> None:
    handler, runs = payments(store, cache_size=0)

    first = handler(post(shape), FakeContext())
    retry = handler(post(shape), FakeContext())

    assert len(runs) == 1
    assert first["statusCode"] == retry["statusCode"] == 201
    assert retry["body"] == first["body"] == '{"id": "p-1"}'
    replayed = ["true"] if shape == "alb-multi-value" else "true"
    assert header_field(retry) == {**header_field(first), "idempotent-replayed": replayed}
    assert "idempotent-replayed" not in header_field(first)
    if shape.startswith("alb"):
        assert retry["statusDescription"] == "201 Created"
    if shape == "alb-multi-value":  # the target group reads multiValueHeaders only
        assert "headers" not in retry


def test_a_handler_with_only_multi_value_headers_on_rest_is_marked_there(
    store: DynamoDBStore,
) -> None:
    @idempotent_http(store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201, "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"]}, "body": ""}

    handler(post("rest-api"), None)
    retry = handler(post("rest-api"), None)

    assert retry["multiValueHeaders"] == {
        "Set-Cookie": ["a=1", "b=2"],
        "Idempotent-Replayed": ["true"],
    }
    assert "headers" not in retry


def test_replays_from_the_warm_cache_are_marked_too(store: DynamoDBStore) -> None:
    handler, runs = payments(store)  # the default in-memory cache
    handler(post("http-api"), None)
    round_trips = RoundTrips(store.client)

    retry = handler(post("http-api"), None)

    assert round_trips.take() == []
    assert retry["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


# -- every refusal, as problem+json ------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_missing_key_is_400_and_nothing_runs_or_is_stored(store: DynamoDBStore, shape: str) -> None:
    handler, runs = payments(store)

    response = handler(post(shape, key=None), None)

    problem = assert_problem(response, shape, 400, "key-missing")
    assert problem["title"] == "Idempotency key missing"
    assert "Idempotency-Key header" in problem["detail"]
    assert runs == []
    assert stored_keys(store) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_malformed_key_is_400_with_the_reason(store: DynamoDBStore, shape: str) -> None:
    handler, runs = payments(store)

    response = handler(post(shape, key="abc\x01def"), None)

    problem = assert_problem(response, shape, 400, "key-invalid")
    assert problem["title"] == "Idempotency key invalid"
    assert "control character (U+0001)" in problem["detail"]
    assert runs == []
    assert stored_keys(store) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_request_in_flight_is_409_with_retry_after_from_the_lease(
    store: DynamoDBStore, shape: str
) -> None:
    clock = FakeClock()
    duplicates: list[dict[str, Any]] = []

    @idempotent_http(store=store, clock=clock)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if not duplicates:  # a retry arrives while the first request still holds the key
            duplicates.append(handler(post(shape), FakeContext(30_000, clock=clock)))
        return {"statusCode": 201, "body": "{}"}

    assert handler(post(shape), FakeContext(30_000, clock=clock))["statusCode"] == 201

    (duplicate,) = duplicates
    problem = assert_problem(duplicate, shape, 409, "request-in-progress")
    assert problem["title"] == "Request in progress"
    retry_after = header_field(duplicate)["retry-after"]
    # The first second past the holder's lease (its 30 s) and the 2 s clock-skew allowance:
    # then it surely answers (at 32.000 s the lease has not lapsed on a clock 2 s behind).
    assert retry_after == (["33"] if shape == "alb-multi-value" else "33")


def documented_problems() -> dict[str, dict[str, Any]]:
    """The problem responses docs/http.md shows, by problem type."""
    text = (Path(__file__).parents[2] / "docs" / "http.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    shown = [json.loads(block) for block in blocks if "problem+json" in block]
    return {json.loads(response["body"])["type"].rsplit(":", 1)[1]: response for response in shown}


def test_the_problem_responses_docs_show_are_answered_word_for_word(
    store: DynamoDBStore,
) -> None:
    """docs/http.md shows a client each refusal as it arrives: status, header names as
    spelled, and the body with its detail. What the front end answers is exactly that."""
    clock = FakeClock()
    duplicates: list[dict[str, Any]] = []

    @idempotent_http(store=store, clock=clock, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if not duplicates:  # the docs' retry arrives 9 s before the key is sure to answer
            duplicates.append(handler(post("http-api"), FakeContext(6_000, clock=clock)))
        return {"statusCode": 201, "body": "{}"}

    assert handler(post("http-api"), FakeContext(6_000, clock=clock))["statusCode"] == 201
    answered = {
        "key-missing": handler(post("http-api", key=None), None),
        "key-invalid": handler(post("http-api", key="abc\x07"), None),
        "request-in-progress": duplicates[0],
        "key-reused": handler(post("http-api", body='{"amount_cents": 1}'), None),
    }
    assert answered == documented_problems()


@pytest.mark.parametrize("shape", SHAPES)
def test_same_key_with_another_body_is_422(store: DynamoDBStore, shape: str) -> None:
    handler, runs = payments(store, cache_size=0)
    handler(post(shape), None)

    response = handler(post(shape, body='{"amount_cents": 9900, "currency": "EUR"}'), None)

    problem = assert_problem(response, shape, 422, "key-reused")
    assert problem["title"] == "Idempotency key reused"
    assert "different request" in problem["detail"]
    assert len(runs) == 1


def test_same_key_on_another_path_is_422(store: DynamoDBStore) -> None:
    handler, runs = payments(store)
    handler(post("rest-api", path="/payments"), None)

    response = handler(post("rest-api", path="/refunds"), None)

    assert_problem(response, "rest-api", 422, "key-reused")
    assert len(runs) == 1


# -- tenants ------------------------------------------------------------------------------

TENANTS = {
    "http-api-jwt": ("http-api", jwt("tenant-a"), jwt("tenant-b")),
    "rest-cognito": ("rest-api", {"claims": {"sub": "tenant-a"}}, {"claims": {"sub": "tenant-b"}}),
    "rest-lambda": ("rest-api", {"principalId": "tenant-a"}, {"principalId": "tenant-b"}),
    "http-api-lambda": (
        "http-api",
        {"lambda": {"principalId": "tenant-a"}},
        {"lambda": {"principalId": "tenant-b"}},
    ),
    "url-iam": (
        "function-url",
        {"iam": {"userArn": "arn:aws:iam::111111111111:user/a"}},
        {"iam": {"userArn": "arn:aws:iam::222222222222:user/b"}},
    ),
}


@pytest.mark.parametrize("authorizers", TENANTS.values(), ids=TENANTS.keys())
def test_another_tenant_with_the_same_key_gets_its_own_run_never_the_first_body(
    store: DynamoDBStore, authorizers: tuple[str, dict[str, Any], dict[str, Any]]
) -> None:
    shape, tenant_a, tenant_b = authorizers
    handler, runs = payments(store)

    a = handler(post(shape, authorizer=tenant_a), None)
    b = handler(post(shape, authorizer=tenant_b), None)
    a_again = handler(post(shape, authorizer=tenant_a), None)

    assert len(runs) == 2
    assert (a["body"], b["body"]) == ('{"id": "p-1"}', '{"id": "p-2"}')
    assert "Idempotent-Replayed" not in b["headers"]
    assert a_again["body"] == a["body"]
    assert len(stored_keys(store)) == 2


def test_scope_override_replaces_the_principal(store: DynamoDBStore) -> None:
    handler, runs = payments(store, scope=lambda event: event["headers"]["x-tenant"])

    handler(post("http-api", headers={"X-Tenant": "t-1"}), None)
    handler(post("http-api", headers={"X-Tenant": "t-2"}), None)
    handler(post("http-api", headers={"X-Tenant": "t-1"}), None)

    assert len(runs) == 2


# -- what is stored -----------------------------------------------------------------------


def test_a_500_is_not_stored_and_the_retry_runs_again(store: DynamoDBStore) -> None:
    statuses = iter([500, 201])
    runs: list[int] = []

    @idempotent_http(store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": next(statuses), "body": json.dumps({"run": len(runs)})}

    failed = handler(post("http-api"), None)
    assert stored_keys(store) == []
    retried = handler(post("http-api"), None)
    replayed = handler(post("http-api"), None)

    assert (failed["statusCode"], retried["statusCode"], replayed["statusCode"]) == (500, 201, 201)
    assert "headers" not in failed and "headers" not in retried
    assert replayed["body"] == '{"run": 2}'
    assert replayed["headers"] == {"Idempotent-Replayed": "true"}
    assert len(runs) == 2


@pytest.mark.parametrize("status", [201, 400, 404, 409])
def test_2xx_and_4xx_answers_are_stored_and_replayed(store: DynamoDBStore, status: int) -> None:
    runs: list[int] = []

    @idempotent_http(store=store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": status, "headers": JSON, "body": '{"run": 1}'}

    handler(post("rest-api"), None)
    retry = handler(post("rest-api"), None)

    assert (retry["statusCode"], retry["body"]) == (status, '{"run": 1}')
    assert retry["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


def test_store_status_decides_what_is_stored(store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent_http(store=store, store_status=lambda status: status < 400)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": 409, "body": "{}"}

    handler(post("http-api"), None)
    handler(post("http-api"), None)

    assert len(runs) == 2
    assert stored_keys(store) == []


def test_a_handler_exception_releases_the_key_and_propagates(store: DynamoDBStore) -> None:
    attempts: list[int] = []

    @idempotent_http(store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("card network down")
        return {"statusCode": 201, "body": "{}"}

    with pytest.raises(ConnectionError, match="card network down"):
        handler(post("http-api"), None)
    assert stored_keys(store) == []
    assert handler(post("http-api"), None)["statusCode"] == 201


def test_an_idempotency_error_from_inside_the_handler_is_not_answered_as_ours(
    store: DynamoDBStore,
) -> None:
    """A nested decorator's PayloadMismatchError is the handler's failure, not a 422 for
    this request's key: it propagates and the key is released."""

    @idempotent_function(store=store, key="order_id")
    def reserve(order_id: str, quantity: int) -> int:
        return quantity

    @idempotent_http(store=store)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        reserve("o-1", 1)
        reserve("o-1", 2)
        return {"statusCode": 201, "body": "{}"}

    with pytest.raises(PayloadMismatchError):
        handler(post("http-api"), None)
    assert len(stored_keys(store)) == 1  # reserve's record; the request's key was released


def test_an_http_api_result_without_status_code_replays_as_a_200(store: DynamoDBStore) -> None:
    @idempotent_http(store=store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"id": "p-1"}

    assert handler(post("http-api"), None) == {"id": "p-1"}
    assert handler(post("http-api"), None) == {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json", "Idempotent-Replayed": "true"},
        "body": '{"id": "p-1"}',
        "isBase64Encoded": False,
    }


# -- the key header -----------------------------------------------------------------------


def test_header_name_case_does_not_matter_between_attempts(store: DynamoDBStore) -> None:
    handler, runs = payments(store)
    event = post("rest-api", key=None, headers={"IDEMPOTENCY-KEY": KEY})
    retry = post("rest-api", key=None, headers={"idempotency-key": KEY})

    handler(event, None)

    assert handler(retry, None)["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


def test_quoted_and_bare_forms_are_the_same_key(store: DynamoDBStore) -> None:
    handler, runs = payments(store)
    handler(post("http-api", key=f'"{KEY}"'), None)

    assert handler(post("http-api", key=KEY), None)["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


@pytest.mark.parametrize(("length", "status"), [(255, 201), (256, 400)])
def test_keys_of_up_to_255_characters_are_accepted(
    store: DynamoDBStore, length: int, status: int
) -> None:
    handler, _ = payments(store)
    response = handler(post("http-api", key="k" * length), None)
    assert response["statusCode"] == status


@pytest.mark.parametrize("shape", ["rest-api", "http-api", "alb-multi-value"])
def test_two_key_values_are_400(store: DynamoDBStore, shape: str) -> None:
    handler, runs = payments(store)

    response = handler(post(shape, key=None, headers={"Idempotency-Key": ["k-1", "k-2"]}), None)

    problem = assert_problem(response, shape, 400, "key-invalid")
    assert "send one Idempotency-Key" in problem["detail"]
    assert runs == []


def test_json_retry_with_other_key_order_whitespace_or_base64_replays(store: DynamoDBStore) -> None:
    handler, runs = payments(store)
    handler(post("http-api", body='{"amount_cents":2500,"currency":"EUR"}'), None)

    reordered = handler(
        post("http-api", body='{ "currency": "EUR",\n "amount_cents": 2500 }'), None
    )
    encoded = handler(post("http-api", body=BODY, base64_body=True), None)

    assert reordered["headers"]["Idempotent-Replayed"] == "true"
    assert encoded["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


def test_a_custom_header_name(store: DynamoDBStore) -> None:
    handler, runs = payments(store, header="X-Request-Id")

    missing = handler(post("http-api"), None)  # Idempotency-Key is not the header now
    handler(post("http-api", key=None, headers={"x-request-id": "r-1"}), None)
    replay = handler(post("http-api", key=None, headers={"X-Request-Id": "r-1"}), None)

    assert "X-Request-Id header" in json.loads(missing["body"])["detail"]
    assert replay["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


# -- methods, optional keys, payload ------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"])
def test_methods_not_protected_pass_straight_through_with_no_store_call(
    store: DynamoDBStore, method: str
) -> None:
    handler, runs = payments(store)
    round_trips = RoundTrips(store.client)

    first = handler(http_event("http-api", method=method), None)  # no key, no body
    second = handler(http_event("http-api", method=method, headers={"Idempotency-Key": KEY}), None)

    assert round_trips.take() == []
    assert len(runs) == 2
    assert first["statusCode"] == second["statusCode"] == 201
    assert "Idempotent-Replayed" not in second["headers"]


def test_configured_methods_are_the_protected_ones(store: DynamoDBStore) -> None:
    handler, runs = payments(store, methods=("PUT",))

    handler(post("http-api", method="PUT"), None)
    handler(post("http-api", method="PUT"), None)
    handler(post("http-api", method="POST"), None)  # not protected now: runs, no key needed

    assert len(runs) == 2


def test_optional_key_runs_unprotected_without_one(store: DynamoDBStore) -> None:
    handler, runs = payments(store, required=False)

    handler(post("http-api", key=None), None)
    handler(post("http-api", key=None), None)
    malformed = handler(post("http-api", key='"unterminated'), None)

    assert len(runs) == 2
    assert stored_keys(store) == []
    assert malformed["statusCode"] == 400  # a key that is there must still be well formed


def test_payload_none_turns_the_fingerprint_off(store: DynamoDBStore) -> None:
    handler, runs = payments(store, payload=None)
    handler(post("http-api"), None)

    other_body = handler(post("http-api", body='{"amount_cents": 1}'), None)

    assert other_body["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


def test_a_non_http_event_is_a_clear_error(store: DynamoDBStore) -> None:
    handler, runs = payments(store)
    with pytest.raises(NotAnHttpEventError):
        handler({"Records": [{"messageId": "m-1", "body": "{}"}]}, None)
    assert runs == []


def test_handler_called_with_keywords(store: DynamoDBStore) -> None:
    handler, runs = payments(store)
    handler(event=post("http-api"), context=None)
    assert handler(event=post("http-api"), context=None)["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


def test_json_numbers_compare_by_exact_value(store: DynamoDBStore) -> None:
    handler, runs = payments(store)

    handler(post("http-api", body='{"amount": 100}'), None)
    replay = handler(post("http-api", body='{"amount": 100.0}'), None)  # the same number
    assert replay["statusCode"] == 201 and len(runs) == 1

    other_key = "0f1e2d3c-4b5a-4968-8776-655443322110"
    handler(post("http-api", key=other_key, body='{"amount": 0.1}'), None)
    refused = handler(
        post("http-api", key=other_key, body='{"amount": 0.10000000000000000001}'), None
    )
    assert_problem(refused, "http-api", 422, "key-reused")


def test_hostile_bodies_get_an_answer_not_a_crash(store: DynamoDBStore) -> None:
    handler, runs = payments(store)

    first = handler(post("http-api", body='{"name": "\\ud800"}'), None)
    again = handler(post("http-api", body='{"name": "\\ud800"}'), None)
    assert first["statusCode"] == again["statusCode"] == 201
    assert len(runs) == 1

    too_deep = "[" * 100_000 + "]" * 100_000  # valid JSON past the parser's depth
    refused = handler(post("http-api", key="deep-1", body=too_deep), None)
    assert_problem(refused, "http-api", 400, "body-unfingerprintable")
    assert len(runs) == 1
