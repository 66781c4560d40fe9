"""`DirectWire`: the store's DynamoDB requests sent without a botocore client.

A botocore client is mostly its service model and endpoint rules, loaded and compiled when it
is built: about two thirds of a cold start's CPU for a function whose only AWS calls are the
store's. Our requests are five fixed shapes, so this path needs none of that: it signs with
botocore's own SigV4 signer and credentials, sends through botocore's own HTTP session
(urllib3, TLS, proxies and CA bundle as a client sets them), decides retries with botocore's
own standard retry handler (registered here as a client registers it: attempts, back-off, the
retry quota, DynamoDB's CRC32 check), and reads answers as botocore's parser does
(`shapes`), raising botocore's `ClientError`. `before-send` (moto, fault injectors, recorders)
is emitted as a client emits it, on `events`.

What a user can observe of a client it does not have, it cannot change: the path is used only
for a store that builds its own client, in Lambda, when the environment decides every setting
(`settings`); everything else (a client passed in, a patch of botocore it does not know, a
profile) goes through a client as before. A tracer's wrappers it calls itself (`traced`).
`renew` drops what must not outlive a fork or a SnapStart restore: pooled connections,
credentials resolved before it.
"""

from __future__ import annotations

import threading
import types
import uuid
from collections.abc import Callable
from typing import Any

from ..wire.guard import tell_once
from ..wire.tracers import through
from .model import (
    CONTENT_TYPE,
    ERROR_MEMBERS,
    OPERATIONS,
    RETRYABLE_ERRORS,
    SIGNING_NAME,
    TARGET_PREFIX,
)
from .settings import Settings, environment_settings
from .shapes import parsed_answer, request_body

MAX_ATTEMPTS = 3
"""As our default client's `total_max_attempts`."""
CONNECT_TIMEOUT, READ_TIMEOUT = 2, 10
"""As our default client's Config."""
MAX_POOL_CONNECTIONS = 10
"""botocore's default."""


class DirectWire:
    """The store's reads and writes over `settings`; any other method is `fallback()`'s (a
    client: the operators' scan, and transactions, whose enlisted writes a client checks)."""

    def __init__(self, settings: Settings, fallback: Callable[[], Any], user_agent: str) -> None:
        from botocore.hooks import HierarchicalEmitter

        self.settings = settings
        self._fallback = fallback
        self.events = HierarchicalEmitter()
        """botocore's events as a client emits them: `request-created`, `before-send`,
        `needs-retry`, `after-call` (with botocore's own retry handler on them)."""
        self._lock = threading.Lock()
        self._credentials = settings.credentials
        self._http: Any = None
        self._signer, self._request_class = _signing_classes()
        self._operations = {name: _Operation(name) for name in OPERATIONS.values()}
        import botocore

        # our default client's: the user agent it is given, and boto3's session's extra
        self._user_agent = f"{user_agent} Botocore/{botocore.__version__}"
        # our default client's `meta.config` (`_stores.dynamodb.client`; botocore gives it
        # without the parameter_validation option the client was built with)
        self._client_options = {
            "user_agent": user_agent,
            "connect_timeout": CONNECT_TIMEOUT,
            "read_timeout": READ_TIMEOUT,
            "retries": {"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
        }
        self._tracer_client: Any = None
        """The client tracers' wrappers read (`traced`), built on the first traced call."""
        self._register_botocore_handlers()

    def __repr__(self) -> str:
        return f"DirectWire({self.settings.url!r})"

    def _register_botocore_handlers(self) -> None:
        import botocore.handlers
        from botocore.model import ServiceId
        from botocore.retries import standard

        meta = types.SimpleNamespace(
            events=self.events,
            service_model=types.SimpleNamespace(service_id=ServiceId("DynamoDB")),
        )
        client: Any = types.SimpleNamespace(meta=meta)  # what the function reads of a client
        # In a client's order: its signer, then the retry handler's, then the generic
        # request-created handlers (the retry headers go on after the signature, unsigned).
        self.events.register("request-created.dynamodb", self._sign)
        standard.register_retry_handler(client, max_attempts=MAX_ATTEMPTS)
        # botocore's built-in handlers on the two events this path emits that a client gets
        # from its session (the retry headers; moto's mock_aws, which answers in before-send;
        # Powertools' user agent), as a session registers them
        for spec in botocore.handlers.BUILTIN_HANDLERS:
            event, handler = spec[0], spec[1]
            if not event.startswith(("request-created", "before-send")):
                continue
            order = spec[2] if len(spec) > 2 else None
            if order is botocore.handlers.REGISTER_FIRST:
                self.events.register_first(event, handler)
            elif order is botocore.handlers.REGISTER_LAST:
                self.events.register_last(event, handler)
            else:
                self.events.register(event, handler)
        # what libraries add to every new botocore session (Powertools' user agent): its hooks
        # on these events, as the client's session would have them
        session = _SessionEvents(self.events)
        for initializer in list(getattr(botocore, "_INITIALIZERS", ())):
            initializer(session)

    # -- the store's calls ----------------------------------------------------------------

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self._call("PutItem", params)

    def get_item(self, **params: Any) -> dict[str, Any]:
        return self._call("GetItem", params)

    def transact_write_items(self, **params: Any) -> Any:
        """Through the client: a transaction carries enlisted writes, data a user typed, which
        a client checks against the model (an `{"SS": "vip"}` would be stored as the set of
        its letters); the direct path has no model to check them with."""
        return self._fallback().transact_write_items(**params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self._call("BatchGetItem", params)

    def batch_write_item(self, **params: Any) -> dict[str, Any]:
        return self._call("BatchWriteItem", params)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("settings", "events"):
            raise AttributeError(name)
        return getattr(self._fallback(), name)  # scan, delete_item, meta...

    # -- the process's life ---------------------------------------------------------------

    def warm(self) -> None:
        """Do once now what the first call would: the HTTP session and its TLS context, the
        credentials read, a request signed (no request leaves)."""
        self._session()
        request = self._request("GetItem", b"{}", {"retries": {"attempt": 1, "invocation-id": "-"}})
        del request
        if _METHODS and _METHODS[0].wrappers:
            self._client_for_tracers()  # the service model a tracer reads, loaded now

    def renew(self) -> None:
        """After a fork or a SnapStart restore: no pooled connection from before is used (a
        child sharing its parent's socket reads the parent's answers), and credentials are
        read again from the environment the process now has."""
        # No lock: a fork copies a lock another thread held as held. The old pool is left to
        # the process it came from (closing would reach its sockets).
        self._http = None
        self._lock = threading.Lock()
        settings = environment_settings(None, self.settings.region, None)
        if not isinstance(settings, str):
            self._credentials = settings.credentials

    # -- one call -------------------------------------------------------------------------

    def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """One call, as a client's `_make_api_call` makes it: inside a tracer's wrapper when
        one is there (`wire.tracers`); by the client when something the path cannot honour
        patched botocore (its spans, or whatever it does, come from a client)."""
        methods = _METHODS[0] if _METHODS else None
        if methods is None or not (methods.unchanged() or methods.found_again()):
            return self._by_client(operation, params)
        wrappers = methods.wrappers.get("_make_api_call")
        if wrappers:
            return self._traced(wrappers, operation, params)
        return self._send_call(operation, params)

    def _by_client(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        method = next(m for m, name in OPERATIONS.items() if name == operation)
        answer: dict[str, Any] = getattr(self._fallback(), method)(**params)
        return answer

    def _traced(
        self, wrappers: tuple[Any, ...], operation: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """The call inside the tracers' wrappers, given the client they read
        (`traced.client_for_tracers`). A wrapper that fails before the request is made read
        what that client lacks: the client makes this call and the ones after it."""
        client = self._client_for_tracers()
        if client is None:
            return self._by_client(operation, params)
        made = []

        def make(operation_name: str, api_params: dict[str, Any]) -> dict[str, Any]:
            made.append(operation_name)
            return self._send_call(operation_name, api_params)

        try:
            answer: dict[str, Any] = through(wrappers, client, make, (operation, params))
        except Exception as exc:
            if made:
                raise
            self._tracer_client = _UNREADABLE
            tell_once(f"a tracer's wrapper raised {type(exc).__name__} reading the client")
            return self._by_client(operation, params)
        return answer

    def _client_for_tracers(self) -> Any:
        client = self._tracer_client
        if client is None:
            with self._lock:
                client = self._tracer_client
                if client is None:
                    from .traced import client_for_tracers

                    try:
                        client = client_for_tracers(
                            self.settings, self.events, self._client_options
                        )
                    except Exception as exc:  # a botocore without the model or its parts
                        client = _UNREADABLE
                        tell_once(f"{type(exc).__name__} loading the client tracers read")
                    self._tracer_client = client
        return None if client is _UNREADABLE else client

    def _send_call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """The call itself: sent, retried and read as `Endpoint._send_request` does, in short
        steps (a tracer's stack trace of a refused claim reads where each frame stands in its
        function, in time linear in how far in that is)."""
        model = self._operations[operation]
        context: dict[str, Any] = {"retries": {"attempt": 1, "invocation-id": str(uuid.uuid4())}}
        http, parsed = self._exchange(operation, model, request_body(params), context)
        return self._answer(operation, model, context, http, parsed)

    def _exchange(
        self, operation: str, model: _Operation, body: bytes, context: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        request_dict = {"context": context}
        attempts = 1
        success, exception = self._attempt(operation, body, context)
        while self._needs_retry(operation, model, attempts, request_dict, success, exception):
            attempts += 1
            context["retries"]["attempt"] = attempts
            if success is not None:
                _set_ttl(context["retries"], success)
            success, exception = self._attempt(operation, body, context)
        if success is not None:
            success[1]["ResponseMetadata"]["RetryAttempts"] = attempts - 1
        if exception is not None:
            raise exception
        assert success is not None
        return success

    def _answer(
        self,
        operation: str,
        model: _Operation,
        context: dict[str, Any],
        http: Any,
        parsed: dict[str, Any],
    ) -> dict[str, Any]:
        self.events.emit(
            f"after-call.dynamodb.{operation}",
            http_response=http,
            parsed=parsed,
            model=model,
            context=context,
        )
        if http.status_code >= 300:
            answer: Any = parsed
            raise _error_class(parsed.get("Error", {}).get("Code"))(answer, operation)
        return parsed

    def _needs_retry(
        self,
        operation: str,
        model: _Operation,
        attempts: int,
        request_dict: dict[str, Any],
        success: tuple[Any, dict[str, Any]] | None,
        exception: Exception | None,
    ) -> bool:
        responses = self.events.emit(
            f"needs-retry.dynamodb.{operation}",
            response=success,
            endpoint=None,
            operation=model,
            attempts=attempts,
            caught_exception=exception,
            request_dict=request_dict,
        )
        delay = next((response for _, response in responses if response is not None), None)
        if delay is None or delay is False:
            return False
        import time

        time.sleep(delay)
        return True

    def _attempt(
        self, operation: str, body: bytes, context: dict[str, Any]
    ) -> tuple[tuple[Any, dict[str, Any]] | None, Exception | None]:
        try:
            prepared = self._request(operation, body, context)
            responses = self.events.emit(f"before-send.dynamodb.{operation}", request=prepared)
            http = next((response for _, response in responses if response is not None), None)
            if http is None:
                http = self._session().send(prepared)
        except Exception as exc:
            return None, exc
        parsed = parsed_answer(operation, http.status_code, http.headers, http.content)
        return (http, parsed), None

    def _request(self, operation: str, body: bytes, context: dict[str, Any]) -> Any:
        """A request built, `request-created` emitted and signed, as a client's endpoint
        creates it, and prepared."""
        from ..wire.build import _add_recursion_detection_header

        headers = {
            "X-Amz-Target": f"{TARGET_PREFIX}.{operation}",
            "Content-Type": CONTENT_TYPE,
            "User-Agent": self._user_agent,
        }
        _add_recursion_detection_header(headers)
        request = self._request_class(
            method="POST", url=self.settings.url, data=body, headers=headers
        )
        request.context = context
        self.events.emit(
            f"request-created.dynamodb.{operation}", request=request, operation_name=operation
        )
        wrappers = _METHODS[0].wrappers.get("prepare_request") if _METHODS else None
        if wrappers:  # a tracer's trace header, as around `Endpoint.prepare_request`
            return through(wrappers, None, _prepare, (request,))
        return request.prepare()

    def _sign(self, request: Any, **_: Any) -> None:
        frozen = self._credentials.get_frozen_credentials()
        self._signer(frozen, SIGNING_NAME, self.settings.region).add_auth(request)

    def _session(self) -> Any:
        http = self._http
        if http is None:
            with self._lock:
                http = self._http
                if http is None:
                    http = self._http = _http_session(self.settings)
        return http


class _SessionEvents:
    """What a session initializer may call: registering on the path's events. Anything else
    it reaches for is an AttributeError, and the direct path steps aside."""

    def __init__(self, events: Any) -> None:
        self.register = events.register
        self.register_first = events.register_first
        self.register_last = events.register_last
        self.unregister = events.unregister


class _Operation:
    """What botocore's retry handler reads of an operation's model."""

    has_streaming_input = has_streaming_output = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.service_model = types.SimpleNamespace(service_name="dynamodb")
        self.error_shapes = [
            types.SimpleNamespace(name=code, metadata={"retryable": {"throttling": throttling}})
            for code, throttling in RETRYABLE_ERRORS.get(name, {}).items()
        ]
        self.metadata: dict[str, Any] = {}


def direct_wire(
    endpoint_url: str | None,
    region_name: str | None,
    table_name: str | None,
    fallback: Callable[[], Any],
    user_agent: str,
) -> DirectWire | str:
    """A `DirectWire`, or why the client must serve (`settings`, a tracer patching botocore)."""
    patched = _patched_botocore()
    if patched is not None:
        return patched
    try:
        settings = environment_settings(endpoint_url, region_name, table_name)
    except Exception as exc:  # partial credentials, an unreadable container endpoint...
        return f"{type(exc).__name__} reading the settings"  # the client raises it as it did
    if isinstance(settings, str):
        return settings
    try:
        return DirectWire(settings, fallback, user_agent)
    except Exception as exc:  # a session initializer that wants more than events
        return f"{type(exc).__name__} setting up botocore's handlers"


_METHODS: list[Any] = []
"""One element, once the first direct path was built: botocore's methods a tracer wraps to see
each call (`wire.guard.BotocoreMethods`), botocore's own or wrapped by a tracer whose wrappers
the path calls itself (X-Ray, Powertools' Tracer, OpenTelemetry)."""
_UNREADABLE = object()


def _patched_botocore() -> str | None:
    """Why a client must make the calls (something patching botocore the path cannot
    honour), or None. `__init__`: a tracer that hooks each client as it is built (Sentry's
    boto3 integration) would see none here."""
    from botocore.client import BaseClient
    from botocore.endpoint import Endpoint

    from ..wire.guard import BotocoreMethods
    from ..wire.plan import CannotHonourError

    if _METHODS:
        methods = _METHODS[0]
        return None if methods.unchanged() or methods.found_again() else "botocore is patched"
    try:
        methods = BotocoreMethods(
            [
                (BaseClient, frozenset({"_make_api_call", "__init__"})),
                (Endpoint, frozenset({"prepare_request", "_send"})),
            ]
        )
    except CannotHonourError as exc:
        return f"botocore's {exc} (a tracer)"
    _METHODS[:] = [methods]
    return None


def _prepare(request: Any) -> Any:
    return request.prepare()


_ERROR_CLASSES: dict[str, type] = {}


def _error_class(code: str | None) -> Any:
    """As a client's `exceptions.from_code`: a ClientError subclass named after a modeled
    error (made once per process), else ClientError itself."""
    from botocore.exceptions import ClientError

    if code not in ERROR_MEMBERS:
        return ClientError
    found = _ERROR_CLASSES.get(code)
    if found is None:
        # named and placed as botocore's error factory makes them
        found = _ERROR_CLASSES[code] = type(
            code, (ClientError,), {"__module__": "botocore.errorfactory"}
        )
    return found


def _set_ttl(retries: dict[str, Any], success: tuple[Any, dict[str, Any]]) -> None:
    """botocore's TTL in `amz-sdk-request` for a retry after an answer (from its date)."""
    from botocore.endpoint import Endpoint

    set_ttl = getattr(Endpoint, "_set_ttl", None)
    calculate = getattr(Endpoint, "_calculate_ttl", None)
    if set_ttl is None or calculate is None:
        return
    endpoint = types.SimpleNamespace(_calculate_ttl=lambda *args: calculate(None, *args))
    set_ttl(endpoint, retries, READ_TIMEOUT, success)


def _http_session(settings: Settings) -> Any:
    """botocore's HTTP session, as a client's endpoint builds it with our default Config."""
    import socket

    from botocore import httpsession

    session_class: Any = httpsession.URLLib3Session  # its stubs' types are narrower than it

    options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    if settings.keepalive:
        options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    return session_class(
        verify=settings.verify,
        proxies=settings.proxies,
        timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
        max_pool_connections=MAX_POOL_CONNECTIONS,
        socket_options=options,
    )


def _signing_classes() -> tuple[type, type]:
    """The SigV4 signer a client would choose (botocore's, or awscrt's where it is installed:
    botocore then maps "v4" to the CRT's), or botocore's cheaper twin (`wire.request`) where
    this botocore allows it; and the request class it signs. The twin and its request come
    from one `wire_parts()`: the twin signs its own request's headers in one pass."""
    from botocore.auth import AUTH_TYPE_MAPS, SigV4Auth

    from ..wire.build import signing_request_class
    from ..wire.request import wire_parts

    parts = wire_parts()
    request_class = signing_request_class() if parts is None else parts.request
    chosen: type = AUTH_TYPE_MAPS["v4"]
    if chosen is not SigV4Auth:
        return chosen, request_class
    return (SigV4Auth if parts is None else parts.sigv4), request_class
