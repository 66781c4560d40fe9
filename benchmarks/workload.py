"""What both libraries wrap: one business handler, its events, a Lambda context, a client.

Everything the libraries see is identical, so any difference in a measurement is theirs.
"""

from __future__ import annotations

import json
import random
import string
import threading
import time
from collections.abc import Callable
from typing import Any

REGION = "us-east-1"
KEY_SELECTION = "order_id"
"""The idempotency key, as a JMESPath expression over the event (both libraries)."""
PAYLOAD_SELECTION = "@"
"""What must match on a retry: the whole event (our default; Powertools' validation)."""

Handler = Callable[[dict[str, Any], Any], Any]


class ChargeDeclinedError(Exception):
    """The business handler's own failure: both libraries release the key and re-raise it."""


def order_event(order_id: str) -> dict[str, Any]:
    """A small direct-invoke event, the shape of a payment request."""
    return {
        "order_id": order_id,
        "customer_id": "cus_4242",
        "amount": 1250,
        "currency": "EUR",
        "items": [{"sku": "SKU-0001", "quantity": 2}, {"sku": "SKU-0002", "quantity": 1}],
    }


class LambdaContext:
    """The parts of Lambda's context both libraries read, with a fixed remaining time."""

    function_name = "benchmark"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:benchmark"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def __init__(self, remaining_ms: int = 30_000) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class Work:
    """The business handler's body: a charge, optionally slow, failing, gated or large.

    `executions` counts bodies that ran (thread-safe), which is what idempotency is about.
    `hold()` makes the next body wait until `release()`, to keep a key in flight.
    """

    def __init__(
        self,
        *,
        fails: bool = False,
        seconds: float = 0.0,
        result_bytes: int | None = None,
        random_text: bool = False,
    ) -> None:
        self.fails = fails
        self.seconds = seconds
        make = random_text_document if random_text else result_document
        self.document = None if result_bytes is None else make(result_bytes)
        self.executions = 0
        self._lock = threading.Lock()
        self._gate = threading.Event()
        self._gate.set()
        self.entered = threading.Event()

    def handler(self) -> Handler:
        """A plain function, as Powertools' decorator requires, calling this body."""

        def handler(event: dict[str, Any], context: Any) -> Any:
            return self(event)

        return handler

    def async_handler(self) -> Handler:
        """An `async def` calling this body: what the async path protects."""

        async def handler(event: dict[str, Any], context: Any) -> Any:
            return self(event)

        return handler

    def __call__(self, event: dict[str, Any]) -> Any:
        with self._lock:
            self.executions += 1
        if not self._gate.is_set():
            self.entered.set()
            self._gate.wait()
        if self.seconds:
            time.sleep(self.seconds)
        if self.fails:
            raise ChargeDeclinedError("card declined")
        if self.document is not None:
            return self.document
        return {
            "order_id": event["order_id"],
            "status": "charged",
            "charge_id": "ch_3PxL2eEZvKYlo2C0",
            "amount": event["amount"],
            "currency": event["currency"],
        }

    def hold(self) -> None:
        self.entered.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()


_WORDS = (
    *("express", "standard", "priority", "warehouse", "north", "south", "parcel", "fragile"),
    *("gift", "wrap", "return", "label", "blue", "green", "red", "small", "medium", "large"),
    *("cotton", "steel", "wooden", "refill", "bundle", "spare"),
)


def result_document(size: int) -> dict[str, Any]:
    """A JSON result of about `size` bytes, shaped like an order with line items.

    Seeded, so every run stores the same bytes. Ids and prices are random digits, as real
    ones are, so it compresses like an API response, not like a run of one character.
    """
    rng = random.Random(size)
    lines: list[dict[str, Any]] = []
    document: dict[str, Any] = {"order_id": "ord_benchmark", "currency": "EUR", "lines": lines}
    approximate = 60
    while approximate < size:
        line = {
            "line": len(lines) + 1,
            "sku": f"SKU-{rng.randrange(10**6):06d}",
            "id": f"li_{rng.getrandbits(64):016x}",
            "description": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8))),
            "quantity": rng.randint(1, 9),
            "unit_price": f"{rng.randint(100, 99_999) / 100:.2f}",
            "shipping": rng.choice(("express", "standard", "priority")),
        }
        lines.append(line)
        approximate += len(json.dumps(line, separators=(",", ":"))) + 1
    return document


TEXT_ALPHABET = string.ascii_letters + string.digits + " .,-"
"""66 characters, none escaped in JSON: random text over them carries ~6 bits a character."""


def random_text_document(size: int) -> dict[str, Any]:
    """A JSON result of `size` bytes that is mostly high-entropy text (a free-text note, an
    encoded token or document): what compression can do least for. Seeded."""
    rng = random.Random(-size)
    head = {"order_id": "ord_benchmark", "note": ""}
    room = max(0, size - len(json.dumps(head, separators=(",", ":"))))
    return {**head, "note": "".join(rng.choices(TEXT_ALPHABET, k=room))}


def dynamodb_client(endpoint_url: str, *, max_pool_connections: int = 10) -> Any:
    """A boto3 DynamoDB client on the given endpoint; both libraries get one made this way."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id="benchmark",
        aws_secret_access_key="benchmark",
        config=Config(max_pool_connections=max_pool_connections),
    )


def our_default_client(endpoint_url: str) -> Any:
    """The client our store makes for itself (fixed user agent, no client-side validation),
    on this endpoint: what a user who passes no client runs."""
    import os

    from lambda_idempotency._stores.dynamodb.client import default_client

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "benchmark")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "benchmark")
    return default_client(endpoint_url, REGION)


def create_table(client: Any, name: str, key_attribute: str) -> str:
    """A table keyed on each library's own hash key attribute."""
    from lambda_idempotency import AttributeNames
    from lambda_idempotency.testing import create_idempotency_table

    return create_idempotency_table(client, name, AttributeNames(pk=key_attribute))
