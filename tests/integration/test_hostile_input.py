"""Hostile input on DynamoDB Local: every body Lambda can deliver is fingerprinted in
bounded work (its effect runs once, the retry replays) or refused with a 4xx problem and a
typed error, never a crash or a 5xx."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    IdempotencyError,
    MisuseError,
    PayloadInvalidError,
    idempotent,
    idempotent_function,
    idempotent_http,
)
from tests.conftest import FakeContext
from tests.http_events import http_event

KEY = "5f0b3c8e-hostile"
JSON = {"Content-Type": "application/json"}


def payments(store: DynamoDBStore) -> tuple[Any, list[str]]:
    runs: list[str] = []

    @idempotent_http(store=store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["body"])
        return {"statusCode": 201, "body": json.dumps({"id": f"p-{len(runs)}"})}

    return handler, runs


def post(body: str, key: str = KEY) -> dict[str, Any]:
    return http_event("http-api", headers={**JSON, "Idempotency-Key": key}, body=body)


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


HASHED = {
    "exponent-1e1000000": '{"amount": 1e1000000}',
    "exponent-1e5000": '{"amount": 1e5000}',
    "exponent-1.5e4400": '{"amount": 1.5e4400}',
    "tiny-exponent": '{"amount": -1e-999999}',
    "int-of-5000-digits": '{"amount": ' + "7" * 5000 + "}",
    "number-of-200000-digits": '{"amount": 0.' + "3" * 200_000 + "}",
    "lone-surrogate-escaped": '{"name": "\\ud800"}',
    "lone-surrogate-raw": '{"name": "\ud800"}',
    "raw-surrogate-not-json": "name=\udfff",
    "deep-900": nested(900),
}


@pytest.mark.parametrize("body", HASHED.values(), ids=HASHED.keys())
def test_a_hostile_body_runs_once_and_its_retry_replays(store: DynamoDBStore, body: str) -> None:
    handler, runs = payments(store)

    first = handler(post(body), FakeContext())
    retry = handler(post(body), FakeContext())

    assert first["statusCode"] == 201
    assert retry["statusCode"] == 201
    assert retry["headers"]["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


@pytest.mark.parametrize(
    ("body", "same", "other"),
    [
        ('{"amount": 1e1000000}', '{"amount":10E+999999}', '{"amount": 1e1000001}'),
        (
            '{"amount": 0.1000000000000000000001}',
            '{"amount": 1.000000000000000000001e-1}',
            '{"amount": "0.1000000000000000000001"}',
        ),
        ('{"amount": 100}', '{"amount": 100.00}', '{"amount": 100.0000000000000000001}'),
    ],
    ids=["huge-exponent", "beyond-float", "integral"],
)
def test_a_number_counts_by_its_exact_value(
    store: DynamoDBStore, body: str, same: str, other: str
) -> None:
    handler, runs = payments(store)

    handler(post(body), FakeContext())
    replay = handler(post(same), FakeContext())
    reused = handler(post(other), FakeContext())

    assert replay["headers"]["Idempotent-Replayed"] == "true"
    assert reused["statusCode"] == 422
    assert len(runs) == 1


REFUSED = {
    "nested-100000": nested(100_000),
    "array-nested-3000000": "[" * 3_000_000 + "]" * 3_000_000,
    "exponent-past-decimal-range": '{"amount": 1e99999999999999999999}',
}


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_a_body_that_cannot_be_read_by_value_is_a_400_problem(
    store: DynamoDBStore, body: str
) -> None:
    handler, runs = payments(store)

    response = handler(post(body), FakeContext())

    assert response["statusCode"] == 400
    assert response["headers"]["Content-Type"] == "application/problem+json"
    problem = json.loads(response["body"])
    assert problem["type"] == "urn:lambda-idempotency:problem:body-unfingerprintable"
    assert problem["status"] == 400
    assert runs == []
    assert store.client.scan(TableName=store.table_name)["Items"] == []


def test_every_depth_the_parser_reads_is_answered_never_raised(store: DynamoDBStore) -> None:
    """Around the parser's limit a body either parses and is fingerprinted (any depth the
    parser accepts hashes), or is refused with 400; which one depends on the stack the
    handler runs on, never an exception."""
    handler, runs = payments(store)
    executed = 0
    for depth in range(900, 1_100, 10):
        key = f"{KEY}-{depth}"
        first = handler(post(nested(depth), key), FakeContext())
        assert first["statusCode"] in (201, 400)
        if first["statusCode"] == 201:
            executed += 1
            retry = handler(post(nested(depth), key), FakeContext())
            assert retry["headers"]["Idempotent-Replayed"] == "true"
        else:
            assert json.loads(first["body"])["type"].endswith(":body-unfingerprintable")
    assert len(runs) == executed


# -- idempotent and idempotent_function ----------------------------------------------------


def deep_list(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_VALUES = {
    "decimal-1e1000000": Decimal("1e1000000"),
    "decimal-minus-1e-999999": Decimal("-1e-999999"),
    "int-10**5000": 10**5000,
    "decimal-1e5000": Decimal("1e5000"),
    "nested-50000": deep_list(50_000),
    "lone-surrogate": "\ud800",
    "nan": float("nan"),
}


@pytest.mark.parametrize("value", HOSTILE_VALUES.values(), ids=HOSTILE_VALUES.keys())
def test_idempotent_fingerprints_hostile_values_and_runs_once(
    store: DynamoDBStore, value: Any
) -> None:
    runs: list[Any] = []

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event)
        return "done"

    assert handler({"id": "order-1", "amount": value}, FakeContext()) == "done"
    assert handler({"id": "order-1", "amount": value}, FakeContext()) == "done"
    assert len(runs) == 1
    assert handler.idempotency.stats["replayed"] == 1


def circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = [loop]
    return loop


UNHASHABLE = {
    "bytes": b"\x00\x01",
    "circular": circular(),
    "int-of-200000-bits": 1 << 200_000,
    "object": object(),
}


@pytest.mark.parametrize("value", UNHASHABLE.values(), ids=UNHASHABLE.keys())
def test_a_value_with_no_fingerprint_is_a_typed_error_and_nothing_runs(
    store: DynamoDBStore, value: Any
) -> None:
    runs: list[Any] = []

    @idempotent(store=store, key="id")
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event)
        return "done"

    @idempotent_function(store=store, key="order_id")
    def charge(order_id: str, amount: Any) -> str:
        runs.append(amount)
        return "charged"

    for call in (
        lambda: handler({"id": "order-2", "amount": value}, FakeContext()),
        lambda: charge("order-2", value),
    ):
        with pytest.raises(PayloadInvalidError) as caught:
            call()
        assert isinstance(caught.value, IdempotencyError)
        assert not isinstance(caught.value, MisuseError)
    assert runs == []
    assert store.client.scan(TableName=store.table_name)["Items"] == []
