"""Faults injected into a real boto3 DynamoDB client, through botocore's event system.

A `FaultInjector` hooks `before-send.dynamodb` on one client. Every request the client sends
(each botocore retry included) is classified by what it does for the protocol, read from its
JSON body, so the rules hold however the library spells a step:

    claim       PutItem / UpdateItem writing an IN_PROGRESS record
    complete    a write carrying the COMPLETED record (PutItem, UpdateItem, TransactWriteItems)
    chunks      a write of result chunks only (BatchWriteItem, or a transaction without the record)
    release     DeleteItem with a condition, or a write of a RELEASED tombstone
    get         GetItem          batch_get   BatchGetItem

A `Fault` names a call, the occurrences it hits and what happens to them:

    unsent      the request never leaves: EndpointConnectionError / ConnectTimeoutError
    lost        the request is applied by DynamoDB (sent here, for real), the answer is lost:
                ReadTimeoutError
    throttled   a synthetic 400 ThrottlingException / ProvisionedThroughputExceededException
    5xx         a synthetic 500 InternalServerError
    refused     a synthetic 400 ValidationException: DynamoDB will not take this request, ever
                (an item past 400 KB, a permission missing); not retried
    capture     sent as usual, and a copy kept to be delivered again later (`deliver`): a
                delayed duplicate of the request, arriving when the test chooses
    strip_item  sent for real, and `Item` removed from the answer (an endpoint that ignores
                ReturnValuesOnConditionCheckFailure, or a record gone before the read)

botocore's standard retry mode sees these exactly as it would see the real thing: it retries
what it retries, and its per-client retry quota is spent as it would be (`drain_retry_quota`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

KINDS = ("unsent", "lost", "throttled", "5xx")
"""The faults every DynamoDB call is tried with."""

_JSON = "application/x-amz-json-1.0"
_ERRORS = {
    "ThrottlingException": (400, "com.amazonaws.dynamodb.v20120810#ThrottlingException"),
    "ProvisionedThroughputExceededException": (
        400,
        "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
    ),
    "InternalServerError": (500, "com.amazonaws.dynamodb.v20120810#InternalServerError"),
    "ValidationException": (400, "com.amazon.coral.validate#ValidationException"),
}


@dataclass
class Fault:
    """Hit occurrences `first` .. `first + count - 1` of `call` (1-based, retries count), or
    with `share` below 1 a random share of them (seeded: a hot key's throttling hits some
    requests and lets others through)."""

    call: str | frozenset[str]
    kind: str
    first: int = 1
    count: int = 1
    injected: int = 0
    share: float = 1.0
    _draws: random.Random = field(default_factory=lambda: random.Random(0), repr=False)

    def hits(self, call: str, occurrence: int) -> bool:
        calls = {self.call} if isinstance(self.call, str) else self.call
        if call not in calls or not self.first <= occurrence < self.first + self.count:
            return False
        return self.share >= 1.0 or self._draws.random() < self.share


@dataclass(frozen=True)
class Captured:
    """A signed request as it went on the wire, to be delivered again."""

    call: str
    method: str
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FaultInjector:
    """Faults for one client. `seen` counts requests per call; `captured` holds copies."""

    client: Any
    faults: list[Fault] = field(default_factory=list)
    seen: collections.Counter[str] = field(default_factory=collections.Counter)
    captured: list[Captured] = field(default_factory=list)
    total: int = 0
    """Faults injected since the start, cleared rules included."""
    _http: urllib3.PoolManager = field(default_factory=lambda: urllib3.PoolManager(maxsize=4))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Callers on many threads share one client: count and draw one request at a time."""

    def __post_init__(self) -> None:
        self.client.meta.events.register("before-send.dynamodb", self._before_send)

    def add(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    @property
    def injected(self) -> int:
        return sum(fault.injected for fault in self.faults)

    def deliver(self, captured: Captured) -> tuple[int, dict[str, Any]]:
        """Send a captured request again, now: its status and decoded answer."""
        status, _, body = self._send(captured.method, captured.url, captured.headers, captured.body)
        return status, json.loads(body or b"{}")

    def close(self) -> None:
        self.client.meta.events.unregister("before-send.dynamodb", self._before_send)
        self._http.clear()

    # -- the hook ---------------------------------------------------------------------------

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        body = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        operation = _header(request.headers, "X-Amz-Target").rsplit(".", 1)[-1]
        call = classify(operation, json.loads(body or b"{}"))
        with self._lock:
            self.seen[call] += 1
            fault = next((f for f in self.faults if f.hits(call, self.seen[call])), None)
            if fault is None:
                return None
            fault.injected += 1
            self.total += 1
        url, headers = request.url, {k: _text(v) for k, v in request.headers.items()}
        match fault.kind:
            case "unsent":
                error = ConnectTimeoutError if fault.injected % 2 == 0 else EndpointConnectionError
                raise error(endpoint_url=url)
            case "lost":
                self._send(request.method, url, headers, body)
                raise ReadTimeoutError(endpoint_url=url)
            case "throttled":
                code = (
                    "ProvisionedThroughputExceededException"
                    if fault.injected % 2 == 0
                    else "ThrottlingException"
                )
                return _error_response(url, code)
            case "5xx":
                return _error_response(url, "InternalServerError")
            case "refused":
                return _error_response(url, "ValidationException")
            case "capture":
                self.captured.append(Captured(call, request.method, url, headers, body))
                return None
            case "strip_item":
                status, answer_headers, answer = self._send(request.method, url, headers, body)
                document = json.loads(answer or b"{}")
                document.pop("Item", None)
                return _response(url, status, json.dumps(document).encode(), answer_headers)
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _send(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        answer = self._http.request(method, url, body=body, headers=headers, retries=False)
        return answer.status, dict(answer.headers), answer.data


def classify(operation: str, body: dict[str, Any]) -> str:
    """What a DynamoDB request does for the protocol (see the module docstring)."""
    match operation:
        case "GetItem":
            return "get"
        case "BatchGetItem":
            return "batch_get"
        case "BatchWriteItem":
            return "chunks"
        case "DeleteItem":
            return "release" if "ConditionExpression" in body else "delete"
        case "PutItem" | "UpdateItem":
            statuses = _statuses(body)
            for status, call in (
                ("RELEASED", "release"),
                ("COMPLETED", "complete"),
                ("IN_PROGRESS", "claim"),
            ):
                if status in statuses:
                    return call
            return "chunks" if "#chunk#" in json.dumps(body.get("Item", {})) else "other"
        case "TransactWriteItems":
            items = [item.get("Put", {}).get("Item", {}) for item in body.get("TransactItems", [])]
            if any(item.get("status", {}).get("S") == "COMPLETED" for item in items):
                return "complete"
            if any("#chunk#" in item.get("pk", {}).get("S", "") for item in items):
                return "chunks"
            return "business"
    return operation


def _statuses(body: dict[str, Any]) -> set[str]:
    """Status values a PutItem writes, or an UpdateItem's values name (RELEASED, ...)."""
    found = {body.get("Item", {}).get("status", {}).get("S")}
    if "UpdateExpression" in body:
        found |= {
            value.get("S")
            for value in body.get("ExpressionAttributeValues", {}).values()
            if isinstance(value, dict)
        }
    return {status for status in found if isinstance(status, str)}


def _error_response(url: str, code: str) -> AWSResponse:
    status, error_type = _ERRORS[code]
    body = json.dumps({"__type": error_type, "message": "injected by the reliability suite"})
    return _response(url, status, body.encode(), {})


def _response(url: str, status: int, body: bytes, headers: dict[str, str]) -> AWSResponse:
    kept = {
        name: value
        for name, value in headers.items()
        if name.lower() not in ("content-length", "x-amz-crc32", "transfer-encoding")
    }
    kept.setdefault("content-type", _JSON)
    kept.setdefault("x-amzn-requestid", "reliability-suite")
    return AWSResponse(url, status, HTTPHeaders.from_dict(kept), _Body(body))


class _Body:
    """What `AWSResponse.content` reads: the bytes, as one chunk."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def _header(headers: Any, name: str) -> str:
    return _text(headers.get(name, b""))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- botocore's retries ---------------------------------------------------------------------


def _retry_handler(client: Any) -> Any:
    """botocore's standard-mode RetryHandler registered on this client, if any."""
    emitter = client.meta.events._emitter
    for handler in emitter._handlers.prefix_search("needs-retry.dynamodb.PutItem"):
        owner = getattr(handler, "__self__", None)
        if type(owner).__name__ == "RetryHandler":
            return owner
    return None


def fast_retries(client: Any, scale: float = 0.01) -> None:
    """Shrink botocore's retry backoff (jitter times scale) so trials take milliseconds. What is
    retried, how often, and the retry quota are untouched."""
    handler = _retry_handler(client)
    if handler is not None:
        handler._retry_policy._retry_backoff._random = lambda: random.random() * scale


def retry_capacity(client: Any) -> int | None:
    """What is left of the client's shared retry quota (None: no standard-mode quota)."""
    handler = _retry_handler(client)
    if handler is None:
        return None
    return int(handler._retry_quota._quota.available_capacity)


def drain_retry_quota(client: Any, injector: FaultInjector, table: str) -> int:
    """A throttling burst in a warm container: throttle GetItems until the client's retry
    quota cannot pay for one more throttled retry. Returns the calls it took."""
    fault = injector.add(Fault("get", "throttled", count=10**9))
    calls = 0
    try:
        while (retry_capacity(client) or 0) > 0 and calls < 1000:
            calls += 1
            with contextlib.suppress(ClientError):
                client.get_item(TableName=table, Key={"pk": {"S": "burst"}})
    finally:
        injector.faults.remove(fault)
    return calls
