"""The keys two versions compute: each key feature's decorated handler, built the same way in
either process (the test's, this version; the driver's, the previous release), run on the
same events. What they store is compared: a record's key (`pk`: namespace, scope and key,
hashed) and its payload hash; equal in both versions means a retry sent across an upgrade
finds the record its first attempt left.

Standard library only, and only the public API every release has had (`idempotent`,
`idempotent_function`, `idempotent_http`, `process_batch`, `idempotent_record`), so the
previous release runs it as it is. The events come from the test (tests/http_events.py,
tests/tenant_events.py), as JSON, the same bytes to both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LEASE_SECONDS = 120


class Context:
    """What a handler's `context` offers the decorators: a fixed remaining time."""

    function_name = "compat-keys"
    aws_request_id = "compat"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def named(module: str, qualname: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A handler whose module and qualified name are these, wherever it is defined: the
    default namespace is made of them (and AWS_LAMBDA_FUNCTION_NAME, unset here)."""

    def rename(function: Callable[..., Any]) -> Callable[..., Any]:
        function.__module__, function.__qualname__ = module, qualname
        return function

    return rename


def handler(event: Any, context: Any) -> dict[str, Any]:
    return {"ok": True}


def http_handler(event: Any, context: Any) -> dict[str, Any]:
    return {"statusCode": 201, "body": '{"ok": true}', "headers": {"Content-Type": "x/y"}}


def record_handler(record: Any) -> dict[str, Any]:
    return {"ok": True}


def cases(lib: Any, store: Any) -> dict[str, Callable[[], Callable[[Any], Any]]]:
    """Each key feature's handler, under `lib` (either version's `lambda_idempotency`), as
    a call of one event: built when first used (a Powertools table refuses `scope=`)."""
    common: dict[str, Any] = {"store": store, "lease_seconds": LEASE_SECONDS, "cache_size": 0}

    def plain(**options: Any) -> Callable[[Any], Any]:
        protected = lib.idempotent(**common, **options)(named("app", "handler")(_copy(handler)))
        return lambda event: protected(event, Context())

    def http(**options: Any) -> Callable[[Any], Any]:
        protected = lib.idempotent_http(**common, **options)(
            named("api", "handler")(_copy(http_handler))
        )
        return lambda event: protected(event, Context())

    def batch(**options: Any) -> Callable[[Any], Any]:
        record = lib.idempotent_record(**common, **options)(
            named("worker", "record")(_copy(record_handler))
        )
        return lambda event: lib.process_batch(event, Context(), record)

    def function() -> Callable[[Any], Any]:
        @lib.idempotent_function(key="order_id", namespace="keys.function", **common)
        def function(order_id: str, amount: float) -> str:
            return str(order_id)

        return lambda event: function(event["order_id"], amount=event["amount"])

    payload = "{a: amount, c: currency, l: lines}"
    return {
        "key": lambda: plain(key="order_id", payload="order_id", namespace="keys.key"),
        "key_list": lambda: plain(key="[order_id, customer]", namespace="keys.key_list"),
        "key_callable": lambda: plain(key=_joined, namespace="keys.key_callable"),
        "scope": lambda: plain(key="order_id", scope="tenant", namespace="keys.scope"),
        "payload": lambda: plain(key="order_id", payload=payload, namespace="keys.payload"),
        "payload_event": lambda: plain(key="order_id", namespace="keys.payload_event"),
        "namespace_default": lambda: plain(key="order_id"),
        "function": function,
        "http": lambda: http(namespace="keys.http"),
        "http_no_scope": lambda: http(namespace="keys.http_no_scope", scope=None),
        "http_default_namespace": http,
        "batch": lambda: batch(namespace="keys.batch"),
        "batch_key": lambda: batch(
            namespace="keys.batch_key", key="powertools_json(body).order_id"
        ),
        "batch_default_namespace": batch,
    }


def _joined(event: Any) -> str:
    return f"{event['order_id']}/{event['customer']}"


def _copy(function: Callable[..., Any]) -> Callable[..., Any]:
    """A fresh function object, so that renaming one case's handler leaves the others."""

    def copy(*args: Any) -> Any:
        return function(*args)

    return copy


def run(lib: Any, store: Any, calls: list[dict[str, Any]]) -> list[str]:
    """Each call (`{"case": ..., "event": ...}`) once; what each gave, as its error's type
    or "ok" (the keys are read from the table afterwards)."""
    made, built = cases(lib, store), {}
    said = []
    for call in calls:
        try:
            if call["case"] not in built:
                built[call["case"]] = made[call["case"]]()
            built[call["case"]](call["event"])
            said.append("ok")
        except Exception as exc:
            said.append(f"{type(exc).__name__}: {str(exc)[:200]}")
    return said
