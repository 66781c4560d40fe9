"""Events of the sources Powertools' event data classes wrap, with the key and payload
expressions a Powertools user writes for each: what `@event_source(data_class=...)` outside
an idempotency decorator hands the handler.

Each case is (name, data class, event builder, key expression, payload expression); the
builder takes a key value and an amount, so a test can vary the key and the payload apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from aws_lambda_powertools.utilities.data_classes import (
    APIGatewayProxyEvent,
    APIGatewayProxyEventV2,
    EventBridgeEvent,
    SQSEvent,
)

from tests.http_events import http_event


class SourceCase(NamedTuple):
    name: str
    data_class: type[Any]
    build: Callable[[str, Any], dict[str, Any]]
    key: str
    payload: str


def _http(shape: str) -> Callable[[str, Any], dict[str, Any]]:
    def build(key: str, amount: Any) -> dict[str, Any]:
        body = json.dumps({"order_id": key, "amount": amount})
        event = http_event(shape, headers={"Content-Type": "application/json"}, body=body)
        event["requestContext"]["requestId"] = f"req-{key}"
        return event

    return build


def sqs(key: str, amount: Any) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"msg-{key}",
                "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
                "body": json.dumps({"order_id": key, "amount": amount}),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1545082649183",
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": "1545082649185",
                },
                "messageAttributes": {},
                "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue",
                "awsRegion": "us-east-2",
            }
        ]
    }


def eventbridge(key: str, amount: Any) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"evt-{key}",
        "detail-type": "OrderPlaced",
        "source": "com.example.orders",
        "account": "123456789012",
        "time": "2024-05-01T12:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"order_id": key, "amount": amount},
    }


CASES = [
    SourceCase(
        "rest-api", APIGatewayProxyEvent, _http("rest-api"), "requestContext.requestId", "body"
    ),
    SourceCase(
        "http-api", APIGatewayProxyEventV2, _http("http-api"), "requestContext.requestId", "body"
    ),
    # An index: not one of the selectors `_base.keys` runs without the JMESPath interpreter.
    SourceCase("sqs", SQSEvent, sqs, "Records[0].messageId", "Records[0].body"),
    SourceCase("eventbridge", EventBridgeEvent, eventbridge, "detail.order_id", "detail"),
]
