"""The fast wire path proves itself on first use, per client, or steps aside.

The lean path re-does part of botocore's request pipeline (`_stores.dynamodb.wire.path`), relying on
botocore behaving as the version it was written against: a release that adds a default header, a
checksum or a canonicalisation rule inside a function whose name stays would make it send something
else, unsigned changes silently. So before it serves a client, each operation it serves is made both
ways, the client's own (`client.put_item(...)`, botocore's whole pipeline) and the lean one, on a
twin of the client: the same model, config, endpoint resolver, serializer, user agent, parser
factory and botocore handlers, but an event emitter, endpoint and signer of its own, fixed
credentials and no HTTP session. Compared:

- the request each way sends, byte for byte: method, URL, every header (the signature
  among them) and body, signed in the same second with the same invocation ID;
- the answer each way reads from canned answers of each shape (a success per operation, a
  refused condition with its item, a cancelled transaction, a throttle, a 500): the result,
  or the exception's class, message and response, types included;
- the retry decision botocore's retry handler takes on each answer, each way.

Anything different, or any exception in the check: `fast_wire` gives the client itself for
that client, and one warning line says what differed and which botocore. No request leaves
the process, no handler of the user's runs, no retry quota is spent. It costs about 10 ms of
CPU per client, once (docs/benchmarks.md); IDEMPOTENCY_FAST_WIRE_CHECK=0 skips it.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import weakref
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from ...._base import observe as _observe
from .guard import SIGNER, handler_name
from .lean import FastWire
from .plan import OPERATIONS
from .tracers import unwrapped

TABLE = "self-check"
TOKEN = "self-check-client-request-token"
INVOCATION_ID = "00000000-0000-4000-8000-00000000c4ec"
CREDENTIALS = ("AKIDSELFCHECKEXAMPLE", "self-check-secret", "self-check-token")
ACCOUNT_ID = "123456789012"

_ITEM = {
    "pk": {"S": "check#1"},
    "status": {"S": "COMPLETED"},
    "expiration": {"N": "1800003600"},
    "result": {"B": b"\x00\xff{}"},
    "chunks": {"BS": [b"a", b"\x01"]},
    "tags": {"SS": ["a", "b"]},
    "nested": {"M": {"list": {"L": [{"N": "-1.5e3"}, {"NULL": True}, {"BOOL": False}]}}},
}
_KEY = {"pk": {"S": "check#1"}}
_NAMES = {"#pk": "pk", "#status": "status", "#owner": "owner"}
_VALUES = {":owner": {"S": "owner-a"}, ":in_progress": {"S": "IN_PROGRESS"}}
REQUESTS: dict[str, dict[str, Any]] = {
    "put_item": {
        "TableName": TABLE,
        "Item": _ITEM,
        "ConditionExpression": "attribute_not_exists(#pk) OR (#status = :in_progress AND "
        "#owner = :owner)",
        "ExpressionAttributeNames": _NAMES,
        "ExpressionAttributeValues": _VALUES,
        "ReturnValues": "ALL_OLD",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    },
    "get_item": {"TableName": TABLE, "Key": _KEY, "ConsistentRead": True},
    "transact_write_items": {
        "TransactItems": [
            {
                "Put": {
                    "TableName": TABLE,
                    "Item": _ITEM,
                    "ConditionExpression": "#owner = :owner",
                    "ExpressionAttributeNames": {"#owner": "owner"},
                    "ExpressionAttributeValues": {":owner": {"S": "owner-a"}},
                }
            },
            {
                "Update": {
                    "TableName": "orders",
                    "Key": {"id": {"S": "order#1"}},
                    "UpdateExpression": "SET #s = :s",
                    "ExpressionAttributeNames": {"#s": "state"},
                    "ExpressionAttributeValues": {":s": {"S": "paid"}},
                }
            },
        ],
        "ClientRequestToken": TOKEN,
    },
    "batch_get_item": {
        "RequestItems": {
            TABLE: {
                "Keys": [_KEY, {"pk": {"S": "check#2"}}],
                "ConsistentRead": True,
                "ProjectionExpression": "#r",
                "ExpressionAttributeNames": {"#r": "result"},
            }
        }
    },
    "batch_write_item": {
        "RequestItems": {TABLE: [{"PutRequest": {"Item": _ITEM}}, {"DeleteRequest": {"Key": _KEY}}]}
    },
}
"""One request of each operation the lean path serves, with every type the store sends."""


def _wire_item(item: Mapping[str, Any]) -> Any:
    """An item as DynamoDB sends it (blobs in base64)."""
    return json.loads(json.dumps(item, default=lambda b: base64.b64encode(b).decode()))


_CAPACITY = {"TableName": TABLE, "CapacityUnits": 1.5, "Table": {"CapacityUnits": 1.5}}
SUCCESS: dict[str, dict[str, Any]] = {
    "put_item": {"Attributes": _wire_item(_ITEM), "ConsumedCapacity": _CAPACITY},
    "get_item": {"Item": _wire_item(_ITEM)},
    "transact_write_items": {},
    "batch_get_item": {
        "Responses": {TABLE: [_wire_item(_ITEM)]},
        "UnprocessedKeys": {TABLE: {"Keys": [{"pk": {"S": "check#2"}}]}},
    },
    "batch_write_item": {"UnprocessedItems": {}, "ConsumedCapacity": [_CAPACITY]},
}
"""A success answer of each operation."""


def _error(code: str, **fields: Any) -> dict[str, Any]:
    return {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": code, **fields}


FAILURES: list[tuple[str, str, int, dict[str, Any]]] = [
    (
        "a refused condition with its item",
        "put_item",
        400,
        _error("ConditionalCheckFailedException", Item=_wire_item(_ITEM)),
    ),
    (
        "a cancelled transaction",
        "transact_write_items",
        400,
        _error(
            "TransactionCanceledException",
            CancellationReasons=[
                {"Code": "ConditionalCheckFailed", "Item": _wire_item(_ITEM)},
                {"Code": "None"},
            ],
        ),
    ),
    ("a throttle", "put_item", 400, _error("ThrottlingException")),
    ("a service error", "get_item", 500, _error("InternalServerError")),
]
"""Each shape of error answer the protocol reads: (what, method, status, body)."""

_logger_outcome = "fast_wire_off"
_verdicts: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def verified(wire: FastWire) -> bool:
    """Whether the lean path may serve `wire`'s client: checked once per client (a second
    store on the same client reuses the verdict), and a difference logged once."""
    if os.environ.get("IDEMPOTENCY_FAST_WIRE_CHECK", "").lower() in ("0", "false", "no"):
        return True  # the operator vouches for this botocore (docs/operations.md)
    client = wire.client
    try:
        return _verdicts[client] is None
    except KeyError:
        pass
    except TypeError:  # a client that cannot be weakly referenced: checked each time
        return differences(wire) is None
    differs = _verdicts[client] = differences(wire)
    if differs is not None:
        import botocore

        _observe.emit(
            logging.WARNING,
            _logger_outcome,
            None,
            reason="the fast wire path's self-check found a difference: the client makes "
            "every call",
            differs=differs,
            botocore=botocore.__version__,
        )
    return differs is None


DATED_TRIES = 5
"""How many times the check is made while the second turns between the two ways: on a busy
machine (many processes starting at once on two cores) one way can take most of a second."""


def differences(wire: FastWire) -> str | None:
    """What first differs between the client's way and the lean way, or None. The requests
    are signed again when the second turned between the two ways (SigV4 dates them)."""
    try:
        for _ in range(DATED_TRIES):
            differs = _compare(wire)
            if differs != _DATED:
                break
    except Exception as exc:  # the check itself failed: the client is the safe way
        return f"the self-check raised {type(exc).__name__}"
    return differs


_DATED = "the requests were signed in different seconds"


def _compare(wire: FastWire) -> str | None:
    twin = _Twin(wire)
    methods = [method for method in wire.served() if method in REQUESTS]
    cases: list[tuple[str, str, int, dict[str, Any]]] = [
        ("a success", method, 200, SUCCESS[method]) for method in methods
    ]
    cases += [case for case in FAILURES if case[1] in methods]
    for what, method, status, body in cases:
        by_client = twin.run(twin.client_call, method, status, body)
        by_lean = twin.run(twin.lean_call, method, status, body)
        operation = OPERATIONS[method]
        if what == "a success":
            differs = _request_differs(by_client.request, by_lean.request)
            if differs is not None:
                return differs if differs == _DATED else f"{operation} request: {differs}"
        if by_client.outcome != by_lean.outcome:
            return f"{operation}, {what}: the answer read"
        if by_client.retry != by_lean.retry:
            return f"{operation}, {what}: the retry decision"
    return None


def _request_differs(by_client: Any, by_lean: Any) -> str | None:
    if by_client is None or by_lean is None:
        return "not sent"
    client_headers, lean_headers = _headers(by_client), _headers(by_lean)
    if client_headers.get("x-amz-date") != lean_headers.get("x-amz-date"):
        return _DATED
    if by_client.method != by_lean.method:
        return "the method"
    if by_client.url != by_lean.url:
        return "the URL"
    for name in sorted(client_headers.keys() - lean_headers.keys()):
        return f"header {name} (the client's only)"
    for name in sorted(lean_headers.keys() - client_headers.keys()):
        return f"header {name} (the lean path's only)"
    for name in sorted(client_headers):
        if client_headers[name] != lean_headers[name]:
            return f"header {name} (its value)"  # the signature, when another one differs
    if bytes(by_client.body or b"") != bytes(by_lean.body or b""):
        return "the body"
    return None


def _headers(request: Any) -> dict[str, Any]:
    """Every header, by lower-cased name; the user agent's feature list (`m/E,b`) as a set:
    botocore joins a set there, in no fixed order from one call to the next."""
    headers: dict[str, Any] = {}
    for name, value in request.headers.items():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        headers.setdefault(name.lower(), []).append(text)
    agent = headers.get("user-agent")
    if agent is not None:
        headers["user-agent"] = [
            frozenset(part[2:].split(",")) if part.startswith("m/") else part
            for value in agent
            for part in value.split(" ")
        ]
    return headers


class _Run:
    __slots__ = ("outcome", "request", "retry")

    def __init__(self) -> None:
        self.request: Any = None
        self.outcome: Any = None
        self.retry: list[bool | None] = []


class _NoNetwork:
    """The twin's HTTP session: the self-check answers in `before-send`, never over HTTP."""

    def send(self, request: Any) -> Any:
        raise RuntimeError("the self-check never sends")

    def close(self) -> None:
        pass


class _Twin:
    """A copy of the client whose emitter, endpoint and signer are its own: botocore's own
    handlers, but `before-send` answers from the canned answer and `needs-retry` records
    what each retry handler would decide (without acting on it, or spending quota)."""

    def __init__(self, wire: FastWire) -> None:
        import botocore.credentials
        import botocore.hooks

        client = wire.client
        emitter: Any = botocore.hooks.HierarchicalEmitter()  # private parts used: untyped
        twin = _copy(client)
        # a tracer's wrapper records each call of `_make_api_call`: not the check's
        twin.__class__ = _untraced_class(type(client), "_make_api_call")
        twin.meta = _copy(client.meta)
        twin.meta.events = emitter
        twin._endpoint = _copy(client._endpoint)
        twin._endpoint._event_emitter = emitter
        # a tracer's wrapper adds its header in prepare_request: not on the check's requests
        twin._endpoint.__class__ = _untraced_class(type(client._endpoint), "prepare_request")
        twin._endpoint.http_session = _NoNetwork()
        signer = twin._request_signer = _copy(client._request_signer)
        signer._event_emitter = emitter
        signer._credentials = _credentials(botocore.credentials.Credentials)
        if getattr(twin, "_ruleset_resolver", None) is not None:
            resolver = twin._ruleset_resolver = _copy(client._ruleset_resolver)
            resolver._event_emitter = emitter
            # The account ID the endpoint rules read, from the fixed credentials: the client's
            # would be read from its own, which may fetch them (a network call).
            resolver._builtins = {
                name: ACCOUNT_ID
                if getattr(name, "value", name) == "AWS::Auth::AccountId"
                else value
                for name, value in resolver._builtins.items()
            }
        service = client.meta.service_model.service_id.hyphenize()
        real = client.meta.events._emitter._handlers
        self._retry_handlers: dict[str, list[Any]] = {}
        for method in OPERATIONS:
            operation = OPERATIONS[method]
            # first of all: botocore calls a more specific event's handlers first
            emitter._register_first(f"request-created.{service}.{operation}", _same_invocation_id)
            for event in _CLIENT_EVENTS:
                name = f"{event}.{service}.{operation}"
                for handler in real.prefix_search(name):
                    if not _botocores(handler):
                        continue  # a user's hook: not what is checked, never run for a check
                    own = signer.handler if handler_name(handler) == SIGNER else handler
                    emitter._register(name, own)  # botocore's: no signature check
            self._retry_handlers[operation] = [
                handler
                for handler in real.prefix_search(f"needs-retry.{service}.{operation}")
                if _botocores(handler)
            ]
        emitter._register(f"before-send.{service}", self._answer)
        emitter._register(f"needs-retry.{service}", self._decide)
        self._emitter = emitter
        self._service = service
        self.client = twin
        self.lean = wire.over(twin)
        self._run = _Run()
        self._status = 200
        self._body = b"{}"

    def client_call(self, method: str, params: dict[str, Any]) -> Any:
        return getattr(self.client, method)(**params)

    def lean_call(self, method: str, params: dict[str, Any]) -> Any:
        if not self.lean.usable(method):
            raise RuntimeError(f"the lean path would not serve {method}")
        return self.lean._call(method, params)

    def run(
        self, way: Callable[[str, dict[str, Any]], Any], method: str, status: int, body: Any
    ) -> _Run:
        run = self._run = _Run()
        self._status, self._body = status, json.dumps(body).encode()
        try:
            result = way(method, dict(REQUESTS[method]))  # neither way changes a value
        except Exception as exc:
            run.outcome = _exception(exc)
        else:
            run.outcome = ("result", _typed(result))
        return run

    def _answer(self, request: Any, **_: Any) -> Any:
        import botocore.awsrequest

        awsrequest: Any = botocore.awsrequest
        self._run.request = request
        headers = {
            "x-amzn-RequestId": "SELF-CHECK",
            "Content-Type": "application/x-amz-json-1.0",
            "x-amz-crc32": str(zlib.crc32(self._body)),
        }
        return awsrequest.AWSResponse(request.url, self._status, headers, _Body(self._body))

    def _decide(self, **kwargs: Any) -> None:
        """What each botocore retry handler on the real client would decide; no retry here."""
        operation = kwargs["operation"].name
        for handler in self._retry_handlers.get(operation, ()):
            self._run.retry.append(_retry_decision(handler, kwargs))


_CLIENT_EVENTS = (
    "provide-client-params",
    "before-parameter-build",
    "before-endpoint-resolution",
    "before-call",
    "request-created",
    "choose-signer",
    "before-sign",
    "response-received",
    "before-parse",
)
"""The events botocore's own handlers are copied onto the twin for; before-send, needs-retry
and after-call (the adaptive rate limiter, the retry quota) are the twin's own."""


def _untraced(cls: type, name: str) -> object:
    """botocore's own `cls.name`, without the tracers' wrappers the path calls itself."""
    owner = next(klass for klass in cls.__mro__ if name in klass.__dict__)
    function, _ = unwrapped(owner.__dict__[name], name)
    return function


def _untraced_class(cls: type, name: str) -> type:
    """`cls` itself, or a subclass with botocore's own `name` where a tracer wraps it."""
    own = _untraced(cls, name)
    if getattr(cls, name, None) is own:
        return cls
    return type(cls.__name__, (cls,), {name: own})


def _botocores(handler: Any) -> bool:
    """A handler botocore registers on its clients (a Stubber's is the user's)."""
    name = handler_name(handler)
    return name.startswith("botocore.") and not name.startswith("botocore.stub.")


def _same_invocation_id(request: Any, **_: Any) -> None:
    """Both ways send the same `amz-sdk-invocation-id` (botocore draws one per call): set
    before botocore's handlers on `request-created` read it, which both ways call."""
    request.context.setdefault("retries", {})["invocation-id"] = INVOCATION_ID


def _retry_decision(handler: Any, kwargs: dict[str, Any]) -> bool | None:
    """Whether botocore's retry handler would retry: its policy asked, the quota left alone
    (standard and adaptive modes), or the legacy handler asked (it keeps no state)."""
    import botocore.retries.standard
    import botocore.retryhandler

    owner: Any = getattr(handler, "__self__", None)
    if isinstance(owner, botocore.retries.standard.RetryHandler):
        owner = _untyped(owner)
        context = owner._retry_event_adapter.create_retry_context(**kwargs)
        return bool(owner._retry_policy.should_retry(context))
    if isinstance(handler, botocore.retryhandler.RetryHandler):
        return handler(**kwargs) is not None
    return None  # not a retry decision (the adaptive rate limiter's bookkeeping)


def _exception(exc: Exception) -> tuple[Any, ...]:
    return (
        "exception",
        type(exc).__name__,
        str(exc),
        _typed(getattr(exc, "response", None)),
        getattr(exc, "operation_name", None),
    )


def _typed(value: Any) -> Any:
    """`value` with the type of each part kept: `b"a" == bytearray(b"a")`, `1 == 1.0` and
    `True == 1` in Python, not for a caller that checks types."""
    if isinstance(value, dict):
        return ("dict", sorted((key, _typed(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(item) for item in value])
    return (type(value).__name__, value)


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def _credentials(credentials_class: type) -> Any:
    try:
        return credentials_class(*CREDENTIALS, account_id=ACCOUNT_ID)
    except TypeError:  # botocore before account IDs in credentials
        return credentials_class(*CREDENTIALS)


def _untyped(value: Any) -> Any:
    return value


def _copy(value: Any) -> Any:
    """A shallow copy that runs no `__getattr__` of the object's (a client's asks its
    emitter), without what was set on the one object in place of a method of its class (a
    mock, a tracer's wrapper): those are the user's, and the twin runs botocore's own."""
    cls = type(value)
    twin = object.__new__(cls)
    twin.__dict__.update(
        (name, item)
        for name, item in value.__dict__.items()
        if not callable(getattr(cls, name, None))
    )
    return twin
