"""Calls of DynamoDBStore at fixed times, and a look at the requests it sends: shared by the
store's tests on moto (tests/unit) and on DynamoDB Local (tests/integration)."""

from __future__ import annotations

import json
from typing import Any

from lambda_idempotency import DynamoDBStore

NOW = 1_800_000_000_000  # epoch ms; the store takes every time as an argument
HOUR_S = NOW // 1000 + 3600
SKEW = 2_000


def claim(store: DynamoDBStore, owner: str, now_ms: int = NOW, **options: Any) -> Any:
    options.setdefault("lease_until_ms", now_ms + 10_000)
    options.setdefault("expiration_s", now_ms // 1000 + 3600)
    options.setdefault("payload_hash", None)
    return store.claim("k", owner=owner, now_ms=now_ms, **options)


def item(store: DynamoDBStore, pk: str = "k") -> dict[str, Any]:
    client: Any = store.client
    return client.get_item(TableName=store.table_name, Key={"pk": {"S": pk}}).get("Item", {})  # type: ignore[no-any-return]


class Requests:
    """The parameters of each request a client sends, by operation, as DynamoDB gets them."""

    def __init__(self, client: Any) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("before-call.dynamodb", self._record)

    def _record(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.sent.append((model.name, json.loads(params["body"] or b"{}")))

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [body for name, body in self.sent if name == operation]
