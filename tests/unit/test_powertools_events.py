"""Powertools' event data classes are Mappings, not dicts: `@event_source` may sit outside
our decorators or inside them, and either way the key, the payload and the replay work."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import (
    APIGatewayProxyEvent,
    APIGatewayProxyEventV2,
    event_source,
)

from lambda_idempotency import (
    DynamoDBStore,
    PayloadMismatchError,
    idempotent,
    idempotent_function,
    idempotent_http,
)
from lambda_idempotency._base.keys import payload_hash
from tests.http_events import http_event

KEY = "2b8c7f0e-8f39-4a51-9d0c-3f6f1f0b8a11"


def event(body: str = '{"amount": 12.50}', shape: str = "http-api") -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Idempotency-Key": KEY}
    return http_event(shape, headers=headers, body=body)


DATA_CLASSES = {"http-api": APIGatewayProxyEventV2, "rest-api": APIGatewayProxyEvent}


@pytest.mark.parametrize("shape", DATA_CLASSES)
@pytest.mark.parametrize("event_source_outside", [True, False], ids=["outside", "inside"])
def test_idempotent_with_the_whole_event_as_payload(
    moto_store: DynamoDBStore, shape: str, event_source_outside: bool
) -> None:
    data_class = DATA_CLASSES[shape]
    runs: list[Any] = []

    def handler(event: Any, context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"statusCode": 201, "body": json.dumps({"id": f"p-{len(runs)}"})}

    protect = idempotent(store=moto_store, key="requestContext.requestId", cache_size=0)
    decorated = (
        event_source(protect(handler), data_class=data_class)
        if event_source_outside
        else protect(event_source(handler, data_class=data_class))
    )

    first = decorated(event(shape=shape), None)
    assert decorated(event(shape=shape), None) == first
    with pytest.raises(PayloadMismatchError):
        decorated(event('{"amount": 99}', shape=shape), None)
    assert len(runs) == 1
    assert isinstance(runs[0], data_class)


def test_a_data_class_hashes_as_the_event_it_wraps() -> None:
    raw = event()
    assert payload_hash(APIGatewayProxyEventV2(raw)) == payload_hash(raw)


def test_idempotent_http_under_event_source(moto_store: DynamoDBStore) -> None:
    runs: list[Any] = []

    @event_source(data_class=APIGatewayProxyEventV2)
    @idempotent_http(store=moto_store, cache_size=0)
    def handler(event: APIGatewayProxyEventV2, context: Any) -> dict[str, Any]:
        runs.append(event.json_body)
        return {"statusCode": 201, "body": "created"}

    assert handler(event('{"amount": 12.50}'), None)["statusCode"] == 201
    replay = handler(event('{ "amount": 12.5 }'), None)
    assert replay["headers"]["Idempotent-Replayed"] == "true"
    assert handler(event('{"amount": 13}'), None)["statusCode"] == 422
    assert len(runs) == 1


def test_idempotent_function_takes_a_data_class_argument(moto_store: DynamoDBStore) -> None:
    runs: list[Any] = []

    @idempotent_function(store=moto_store, key="request.requestContext.requestId")
    def charge(request: APIGatewayProxyEventV2) -> str:
        runs.append(request)
        return "charged"

    assert charge(APIGatewayProxyEventV2(event())) == "charged"
    assert charge(APIGatewayProxyEventV2(event())) == "charged"
    assert len(runs) == 1
