"""Sample: create a payment once per Idempotency-Key, however often the client retries
(HTTP API with a JWT authorizer: POST /payments, GET /payments).

    POST /payments
    Idempotency-Key: "5f1d7a2c-8b9e-4c3d-a6f0-2e4b8c9d1a7f"
    {"amount_cents": 2500, "currency": "EUR", "description": "Order 1001"}

The first request answers 201 with the new payment. A retry gets the same 201 back, marked
`Idempotent-Replayed: true`; the same key with another body gets 422; a POST without a key
gets 400. Keys are scoped to the caller's JWT subject, so another tenant sending the same
key gets a payment of its own. GET passes straight through, with no idempotency check.
"""

import base64
import json
import uuid
from datetime import UTC, datetime

from lambda_idempotency import DynamoDBStore, idempotent_http

store = DynamoDBStore()  # IDEMPOTENCY_TABLE from template.yaml
CURRENCIES = ("EUR", "GBP", "USD")


@idempotent_http(store=store, ttl_seconds=86400)
def lambda_handler(event, context):
    if event["requestContext"]["http"]["method"] == "GET":
        # This sample keeps no ledger; the route shows that GET is never held up by keys.
        return respond(200, {"payments": []})
    order = read_json(event)
    amount, currency = order.get("amount_cents"), order.get("currency")
    if not isinstance(amount, int) or amount <= 0 or currency not in CURRENCIES:
        return respond(
            400,
            {"error": f"amount_cents must be a positive integer, currency one of {CURRENCIES}"},
        )
    payment = {
        "id": f"pay_{uuid.uuid4().hex[:16]}",
        "amount_cents": amount,
        "currency": currency,
        "description": order.get("description"),
        "status": "created",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return respond(201, payment, Location=f"/payments/{payment['id']}")


def read_json(event):
    body = event.get("body") or "{}"
    if event.get("isBase64Encoded"):
        body = base64.b64decode(body)
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def respond(status, document, **headers):
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **headers},
        "body": json.dumps(document),
    }
