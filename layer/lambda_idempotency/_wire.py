"""A lean path for the store's own DynamoDB requests, through the client's own botocore parts.

A boto3 call spends about 40 % of its CPU in generic steps our fixed request shapes do not
need: parameter events, the endpoint ruleset, the model-walking serializer, the call events.
`FastWire` skips only those. It builds the JSON body with a serializer compiled once from the
client's own model, resolves the endpoint through the client's own ruleset resolver once per
table, and hands the request to the client's own `Endpoint`: so signing (botocore's signer, the
client's credentials, refreshed as botocore refreshes them), `request-created`, `before-send`
(moto, recorders, fault injectors), the client's HTTP session, the response parser,
`needs-retry` (standard, adaptive and legacy modes, the shared quota, DynamoDB's x-amz-crc32)
and `after-call` are botocore's own. Errors are the client's own exception classes. Two of
those parts are made cheaper without changing what they produce: the request's headers and
SigV4's choice of signed headers (`_wire_request`), and the parser's walk of the model, compiled
once per shape, with an error's body decoded once (`_wire_parse`).

It steps aside, call by call, for anything it cannot honour: a handler on an event it skips
(a Stubber, endpoint discovery, a user's hook), any botocore method whose work it does instead
of calling it, patched or replaced on the class or on the one client, endpoint or signer
(X-Ray, OpenTelemetry, `mock.patch.object`), an operation whose model needs more than it
knows, or a botocore whose private parts it relies on are missing. The client then does the
call as usual. Enlisted writes, the one data it sends that the store did not build, are
checked as the client checks parameters. And before it serves a client at all, it proves
itself against the client's own way on this botocore (`_wire_check`), or steps aside.
"""

from __future__ import annotations

import base64
import contextlib
import json
import operator
import os
import types
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote

try:
    import botocore.context as _botocore_context
except ImportError:  # pragma: no cover - botocore before 1.36
    _botocore_context = None  # type: ignore[assignment]

OPERATIONS = {
    "put_item": "PutItem",
    "get_item": "GetItem",
    "transact_write_items": "TransactWriteItems",
    "batch_get_item": "BatchGetItem",
    "batch_write_item": "BatchWriteItem",
}
"""The requests the protocol makes; the operators' scan and delete go through the client."""

CLIENT_METHODS = (
    "_make_api_call",
    "_make_request",
    "_convert_to_request_dict",
    "_emit_api_params",
    "_resolve_endpoint_ruleset",
)
ENDPOINT_METHODS = (
    "make_request",
    "_send_request",
    "create_request",
    "prepare_request",
    "_get_response",
    "_do_get_response",
    "_send",
)
SIGNER_METHODS = ("handler", "sign", "_choose_signer")
"""botocore's methods this path does not call (it does their work itself): patched or wrapped,
on the class or on the one object (`mock.patch.object`, X-Ray's wrapt proxies on
`_make_api_call` and `prepare_request`, a tool adding a header in `sign`), the client makes
the call, so the patch sees it."""
SIGNER = "botocore.signers.RequestSigner.handler"
VALIDATES = "lambda_idempotency._wire.validate_user_data"
USER_DATA = frozenset({"TransactWriteItems"})
"""The operations whose requests carry data the store did not build (enlisted writes): checked
as the client checks parameters. The others are built by the store's own code."""
UA_REBUILD = "botocore.useragent.UserAgentString.rebuild_and_replace_user_agent_handler"
SKIPPED_EVENTS = {
    "provide-client-params": frozenset(),
    "before-parameter-build": frozenset(
        {
            # What these do for DynamoDB is done here: the idempotency token, nothing else.
            "botocore.handlers.generate_idempotent_uuid",
            "botocore.handlers._handle_request_validation_mode_member",
            "botocore.discovery.block_endpoint_discovery_required_operations",
            VALIDATES,  # our own client's check of enlisted writes, made here too
        }
    ),
    "before-endpoint-resolution": frozenset(),
    "before-call": frozenset(
        {
            "botocore.handlers.add_recursion_detection_header",  # done here, the same way
            "botocore.handlers.inject_api_version_header_if_needed",  # not for DynamoDB
        }
    ),
    "choose-signer": frozenset(
        {  # asked once per endpoint
            "botocore.handlers.set_operation_specific_signer",
            "botocore.handlers._set_auth_scheme_preference_signer",
        }
    ),
    "before-sign": frozenset(),
    "before-parse": frozenset(),
    "response-received": frozenset(),
}
"""The events `_make_api_call` emits and this path does not, with botocore's own handlers on
them that it stands in for. Any other handler on one of them sends the call to the client."""

Encoder = Callable[[Any], Any]


class CannotHonourError(Exception):
    """Something this path cannot honour: the client does the call."""


def fast_wire(client: Any) -> Any:
    """A `FastWire` over `client`, or `client` itself when the lean path cannot serve it or
    its self-check on this client found a difference with the client's own way."""
    try:
        wire = FastWire(client)
    except CannotHonourError:
        return client
    from ._wire_check import verified

    return wire if verified(wire) else client


class FastWire:
    """The store's five operations, with the client's arguments, results and exceptions."""

    def __init__(self, client: Any) -> None:
        import botocore.client
        import botocore.validate

        if not isinstance(client, botocore.client.BaseClient):
            raise CannotHonourError("not a botocore client")
        client = _untyped(client)
        try:
            model = client.meta.service_model
            self._events = client.meta.events
            self._emitter = self._events._emitter
            self._emitter._lookup_cache  # noqa: B018  (the attribute the guard watches)
            self._endpoint = client._endpoint
            self._endpoint.make_request  # noqa: B018
            self._resolve = client._resolve_endpoint_ruleset
            self._user_agent = client._user_agent_creator.to_string
            self._config = client.meta.config
            self._signer = client._request_signer
            self._signer.get_auth_instance  # noqa: B018
            self._choose_signer = self._signer._choose_signer
            self._signing_name = self._signer._signing_name
            self._region_name = self._signer._region_name
            parser = self._endpoint._response_parser_factory.create_parser("json")
            for private in (
                "_update_retries_context",
                "_needs_retry",
                "_encode_headers",
                "_add_modeled_error_fields",
            ):
                getattr(self._endpoint, private)
        except AttributeError as exc:
            raise CannotHonourError(f"botocore without {exc.name}") from exc
        from botocore.endpoint import convert_to_response_dict

        self._use_cheaper_parts(parser)
        self._convert_to_response_dict = convert_to_response_dict
        if getattr(self._config, "auth_scheme_preference", None):
            raise CannotHonourError("an auth scheme preference")
        protocol = getattr(model, "resolved_protocol", None) or model.metadata.get("protocol")
        if protocol != "json" or model.service_name != "dynamodb":
            raise CannotHonourError(f"protocol {protocol}")
        self.client = client
        self._service_id = model.service_id.hyphenize()
        # The client's serializer says whether it checks parameters (its config does not:
        # botocore builds a new one for `meta.config` without that option).
        serializer = getattr(client, "_serializer", None)
        if serializer is None:
            raise CannotHonourError("botocore without _serializer")
        self._validates = isinstance(serializer, botocore.validate.ParamValidationDecorator)
        self._own_objects = _watched(client, self._endpoint, self._signer)
        self._own_methods = [  # per class: its methods read in one go, and botocore's own
            (
                type(owner),
                operator.attrgetter(*sorted(names)),
                tuple(_botocore_function(type(owner), name) for name in sorted(names)),
            )
            for owner, names in self._own_objects
        ]
        self._plans: dict[str, _Plan | None] = {}
        self._endpoints: dict[tuple[str, tuple[str, ...]], _ResolvedEndpoint] = {}
        self._verdict = _Verdict(None, False, {}, {}, frozenset())
        for method, operation in OPERATIONS.items():
            try:
                self._plans[method] = _Plan(model.operation_model(operation), client, method)
            except CannotHonourError:
                self._plans[method] = None

    def __repr__(self) -> str:
        return f"FastWire({self.client!r})"

    def over(self, twin: Any) -> FastWire:
        """This path's compiled parts (plans, parser, request classes) over `twin`, a copy of
        its client with parts of its own (the self-check's, in _wire_check)."""
        lean = FastWire.__new__(FastWire)
        lean.__dict__.update(self.__dict__)
        lean.client = twin
        lean._events = lean._emitter = twin.meta.events
        lean._endpoint = twin._endpoint
        lean._resolve = twin._resolve_endpoint_ruleset
        lean._signer = twin._request_signer
        lean._choose_signer = twin._request_signer._choose_signer
        lean._own_objects = _watched(twin, twin._endpoint, twin._request_signer)
        lean._plans = dict(self._plans)
        lean._endpoints = {}
        lean._verdict = _Verdict(None, False, {}, {}, frozenset())
        return lean

    def served(self) -> list[str]:
        """The client methods this path serves for this client (the others: the client)."""
        return [method for method, plan in self._plans.items() if plan is not None]

    def _use_cheaper_parts(self, parser: Any) -> None:
        """botocore's parser, request and signer, made cheaper where this botocore has the
        private parts that relies on; else its own (still built and signed directly)."""
        from ._wire_parse import compiled_parser
        from ._wire_request import wire_parts

        self._parser = compiled_parser(parser)
        self._forget_answer: Callable[[], None] = getattr(self._parser, "forget", _nothing)
        parts = wire_parts()
        self._AWSRequest = _signing_request_class() if parts is None else parts.request
        self._sigv4: type | None = None if parts is None else parts.sigv4
        self._headers_dict: type | None = None if parts is None else parts.headers
        self._encode_headers = self._endpoint._encode_headers if parts is None else None

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self._call("put_item", params)

    def get_item(self, **params: Any) -> dict[str, Any]:
        return self._call("get_item", params)

    def transact_write_items(self, **params: Any) -> dict[str, Any]:
        return self._call("transact_write_items", params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self._call("batch_get_item", params)

    def batch_write_item(self, **params: Any) -> dict[str, Any]:
        return self._call("batch_write_item", params)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "client":
            raise AttributeError(name)  # ours, not yet set: never the client's
        return getattr(self.client, name)  # scan, delete_item, meta, exceptions...

    # -- the guard --------------------------------------------------------------------------

    def usable(self, method: str) -> bool:
        """Whether this call may take the lean path."""
        return self._plans[method] is not None and self._current_verdict() is not None

    def _current_verdict(self) -> _Verdict | None:
        """The hooks this call honours, or None when the client must make it. Cheap when
        nothing changed: botocore drops the emitter's lookup cache on every register and
        unregister, and the cache read before the handlers were looked at is the one the
        verdict is kept for (a hook registered meanwhile drops it again: checked again)."""
        client = self.client
        if client._endpoint is not self._endpoint or client._request_signer is not self._signer:
            return None
        for owner, names in self._own_objects:
            if not names.isdisjoint(owner.__dict__):
                return None  # patched on this one object (mock.patch.object, a wrapper)
        for cls, methods_of, functions in self._own_methods:
            # identity, not ==: a wrapt proxy (X-Ray's) claims to equal what it wraps
            if not all(map(operator.is_, methods_of(cls), functions)):
                return None  # patched or overridden: the patch sees the call
        cache = getattr(self._emitter, "_lookup_cache", None)
        if cache is None:
            return None
        verdict = self._verdict
        if verdict.cache is not cache:
            verdict = self._verdict = self._check_handlers(cache)
        return verdict if verdict.clear else None

    def _check_handlers(self, cache: object) -> _Verdict:
        handlers = self._emitter._handlers
        created_handlers: dict[str, list[Any | None]] = {}
        created_names: dict[str, set[str]] = {}
        validated = set()
        for operation in OPERATIONS.values():
            for event, ours in SKIPPED_EVENTS.items():
                name = f"{event}.{self._service_id}.{operation}"
                found = [_handler_name(h) for h in handlers.prefix_search(name)]
                if any(found_name not in ours for found_name in found):
                    return _Verdict(cache, False, {}, {}, frozenset())
                if VALIDATES in found:
                    validated.add(operation)
            # request-created's handlers are all called, in their order, as botocore's emit
            # calls them (Powertools adds one to every client to extend the user agent); the
            # client's own signer among them signs here.
            created = list(
                handlers.prefix_search(f"request-created.{self._service_id}.{operation}")
            )
            if [h for h in created if _handler_name(h) == SIGNER] != [self._signer.handler]:
                return _Verdict(cache, False, {}, {}, frozenset())
            created_handlers[operation] = [
                None if _handler_name(h) == SIGNER else h for h in created
            ]
            created_names[operation] = {_handler_name(h) for h in created}
        return _Verdict(cache, True, created_handlers, created_names, frozenset(validated))

    # -- one call ---------------------------------------------------------------------------

    def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        plan = self._plans[method]
        verdict = None if plan is None else self._current_verdict()
        if plan is None or verdict is None:
            result: dict[str, Any] = getattr(self.client, method)(**params)
            return result
        with _request_context():
            response: dict[str, Any] = self._call_lean(plan, verdict, params)
        return response

    def _call_lean(self, plan: _Plan, verdict: _Verdict, params: dict[str, Any]) -> dict[str, Any]:
        """One call, as `_make_api_call` makes it."""
        if plan.name in USER_DATA and (self._validates or plan.name in verdict.validated):
            validate_user_data(params, plan.operation_model)  # as the client would
        if plan.token_member is not None and plan.token_member not in params:
            params[plan.token_member] = str(uuid.uuid4())
        body = json.dumps(plan.encode(params)).encode("utf-8")
        try:
            resolved = self._resolved_endpoint(plan, params)
        except CannotHonourError:
            self._plans[plan.method] = None
            result: dict[str, Any] = getattr(self.client, plan.method)(**params)
            return result
        context = {**plan.context, **resolved.context()}
        headers = dict(plan.headers)
        headers.update(resolved.headers)
        # botocore builds the user agent twice a call (about 30 µs each unless it is fixed):
        # when its request-created handler rebuilds it anyway, the first would be thrown away.
        rebuilt = UA_REBUILD in verdict.created_names.get(plan.name, ())
        headers["User-Agent"] = (
            "rebuilt when the request is created" if rebuilt else self._user_agent()
        )
        _add_recursion_detection_header(headers)
        request_dict = {
            "url_path": "/",
            "query_string": "",
            "method": plan.http_method,
            "headers": headers,
            "body": body,
            "url": resolved.url,
            "context": context,
        }
        try:
            http, parsed = self._send(plan, verdict, resolved, request_dict)
        except Exception as exc:
            self._events.emit(
                f"after-call-error.{self._service_id}.{plan.name}", exception=exc, context=context
            )
            raise
        self._events.emit(
            f"after-call.{self._service_id}.{plan.name}",
            http_response=http,
            parsed=parsed,
            model=plan.operation_model,
            context=context,
        )
        if http.status_code >= 300:
            code = context.get("error_code_override") or parsed.get("Error", {}).get("Code")
            error: Any = self.client.exceptions.from_code(code)
            raise error(parsed, plan.name)
        response: dict[str, Any] = parsed
        return response

    def _send(
        self,
        plan: _Plan,
        verdict: _Verdict,
        resolved: _ResolvedEndpoint,
        request_dict: dict[str, Any],
    ) -> tuple[Any, dict[str, Any]]:
        """botocore's Endpoint._send_request, with the request built and signed directly."""
        endpoint = self._endpoint
        context = request_dict["context"]
        attempts = 1
        endpoint._update_retries_context(context, attempts)
        success, exception = self._attempt(plan, verdict, resolved, request_dict)
        while endpoint._needs_retry(
            attempts, plan.operation_model, request_dict, success, exception
        ):
            attempts += 1
            endpoint._update_retries_context(context, attempts, success)
            success, exception = self._attempt(plan, verdict, resolved, request_dict)
        if success is not None and "ResponseMetadata" in success[1]:
            success[1]["ResponseMetadata"]["RetryAttempts"] = attempts - 1
        if exception is not None:
            raise exception
        assert success is not None
        return success

    def _sign(self, request: Any, resolved: _ResolvedEndpoint) -> None:
        """RequestSigner.sign, less its per-call events: the signature version was chosen
        once per endpoint, and nobody listens on before-sign (else the client signs)."""
        signing = request.context.get("signing", {})
        auth = self._signer.get_auth_instance(
            signing_name=signing.get("signing_name", self._signing_name),
            region_name=signing.get("region", self._region_name),
            signature_version=resolved.signature_version,
        )
        if self._sigv4 is not None and type(auth) is self._sigv4.__base__:
            auth.__class__ = self._sigv4  # botocore's SigV4Auth, picking headers cheaper
        auth.add_auth(request)

    def _attempt(
        self,
        plan: _Plan,
        verdict: _Verdict,
        resolved: _ResolvedEndpoint,
        request_dict: dict[str, Any],
    ) -> tuple[tuple[Any, dict[str, Any]] | None, Exception | None]:
        """One attempt, as Endpoint.create_request and _do_get_response make it."""
        request = self._AWSRequest(
            method=request_dict["method"],
            url=request_dict["url"],
            data=request_dict["body"],
            headers=request_dict["headers"],
        )
        request.context = request_dict["context"]
        for handler in verdict.created_handlers[plan.name]:
            if handler is None:  # the client's own signer's place in the order
                self._sign(request, resolved)
            else:
                handler(request=request, operation_name=plan.name, event_name=plan.created_event)
        if self._encode_headers is not None:
            self._encode_headers(request.headers)
        prepared = request.prepare()  # Endpoint.prepare_request, without its hooks
        try:
            responses = self._events.emit(plan.send_event, request=prepared)
            http = next((response for response in responses if response[1] is not None), None)
            http = self._endpoint.http_session.send(prepared) if http is None else http[1]
        except Exception as exc:
            return None, exc
        headers = getattr(http, "headers", None)
        if self._headers_dict is not None and type(headers) is self._headers_dict.__base__:
            headers.__class__ = self._headers_dict  # the same headers, read cheaper
        response_dict = self._convert_to_response_dict(http, plan.operation_model)
        try:
            parsed = self._parser.parse(response_dict, plan.operation_model.output_shape)
            if http.status_code >= 300:
                self._endpoint._add_modeled_error_fields(
                    response_dict, parsed, plan.operation_model, self._parser
                )
        finally:
            self._forget_answer()
        return (http, parsed), None

    def _resolved_endpoint(self, plan: _Plan, params: Mapping[str, Any]) -> _ResolvedEndpoint:
        """The client's own ruleset answer, once per operation and tables: DynamoDB's rules
        read the table names (account-based endpoints from a table ARN)."""
        key = (plan.name, plan.tables(params))
        resolved = self._endpoints.get(key)
        if resolved is not None:
            _register_features(resolved.features)
        else:
            context = dict(plan.context)
            features_before = _features()
            url, headers, properties = self._resolve(plan.operation_model, params, context)
            if properties:
                context["endpoint_properties"] = properties
            signing = context.get("signing", {})
            if signing.get("request_credentials") or signing.get("identity_cache") is not None:
                raise CannotHonourError("credentials chosen per request")
            signature_version = self._choose_signer(plan.name, "standard", context)
            if signature_version != "v4":
                raise CannotHonourError(f"signature {signature_version}")
            resolved = _ResolvedEndpoint(
                url=_urljoin(url),
                headers=dict(headers or {}),
                signature_version=signature_version,
                extra={k: v for k, v in context.items() if plan.context.get(k) is not v},
                features=_features() - features_before,
            )
            self._endpoints[key] = resolved
        return resolved


class _Verdict(NamedTuple):
    """What the hook check found, for the lookup cache it read first: read as one object, so
    a call never mixes two checks' answers."""

    cache: object
    clear: bool
    created_handlers: dict[str, list[Any | None]]
    created_names: dict[str, set[str]]
    validated: frozenset[str]
    """The operations on which our own client checks enlisted writes (`validate_user_data`)."""


def validate_user_data(params: Mapping[str, Any], model: Any, **_: Any) -> None:
    """botocore's parameter check, on the operations that carry data the store did not build.

    Our own client skips botocore's check on every request (the store builds them; about 35
    µs each) but carries this on `before-parameter-build` for those operations, so an enlisted
    write such as `{"SS": "vip"}` is refused (ParamValidationError) rather than sent as the
    set of its letters; the fast path does the same, and so, for a client that checks every
    request, it checks these."""
    if model.name in USER_DATA:
        from botocore.validate import validate_parameters

        validate_parameters(params, model.input_shape)


class _ResolvedEndpoint:
    __slots__ = ("extra", "features", "headers", "signature_version", "url")

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        signature_version: str,
        extra: dict[str, Any],
        features: set[str],
    ) -> None:
        self.features = features
        self.url = url
        self.headers = headers
        self.signature_version = signature_version
        self.extra = extra

    def context(self) -> dict[str, Any]:
        """A fresh copy per call: the signer and retry handlers write into the context."""
        return {
            key: dict(value) if isinstance(value, dict) else value
            for key, value in self.extra.items()
        }


class _Plan:
    """What one operation needs, read from the client's model once."""

    def __init__(self, operation_model: Any, client: Any, method: str) -> None:
        if (
            operation_model.http_checksum
            or operation_model.http_checksum_required
            or getattr(operation_model, "request_compression", None)
            or operation_model.endpoint
            or operation_model.has_streaming_input
            or operation_model.has_streaming_output
        ):
            raise CannotHonourError(operation_model.name)
        metadata = operation_model.metadata
        self.operation_model = operation_model
        self.method = method
        self.name = operation_model.name
        self.http_method = operation_model.http.get("method", "POST")
        self.headers = {
            "X-Amz-Target": f"{metadata['targetPrefix']}.{operation_model.name}",
            "Content-Type": f"application/x-amz-json-{metadata['jsonVersion']}",
        }
        self.auth_type = getattr(operation_model, "resolved_auth_type", None)
        self.unsigned_payload = getattr(operation_model, "unsigned_payload", None)
        self.auth_options = operation_model.service_model.metadata.get("auth")
        shape = operation_model.input_shape
        self.encode: Encoder = _compile(shape, {}) or dict
        self.token_member = next(iter(operation_model.idempotent_members), None)
        self.tables = _table_reader(operation_model.name)
        service_id = operation_model.service_model.service_id.hyphenize()
        self.created_event = f"request-created.{service_id}.{self.name}"
        self.send_event = f"before-send.{service_id}.{self.name}"
        self.context: dict[str, Any] = {
            "client_region": client.meta.region_name,
            "client_config": client.meta.config,
            "has_streaming_input": False,
            "auth_type": self.auth_type,
            "unsigned_payload": self.unsigned_payload,
            "auth_options": self.auth_options,
        }


def _table_reader(operation: str) -> Callable[[Mapping[str, Any]], tuple[str, ...]]:
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return lambda params: tuple(params.get("RequestItems", ()))
    if operation == "TransactWriteItems":
        return lambda params: tuple(
            str(action.get("TableName"))
            for item in params.get("TransactItems", ())
            for action in item.values()
        )
    return lambda params: (str(params.get("TableName")),)


def _compile(shape: Any, memo: dict[str, list[Encoder | None]]) -> Encoder | None:
    """An encoder for `shape` that does what botocore's JSON serializer does: unknown members
    raise KeyError, blobs become base64; None where the value goes out as it came in."""
    if shape is None:
        return None
    kind = shape.type_name
    if kind in ("string", "integer", "long", "boolean"):
        return None
    if kind == "blob":
        return _base64
    if kind == "list":
        member = _compile(shape.member, memo)
        if member is None:
            return list
        return lambda value: [member(item) for item in value]
    if kind == "map":
        inner = _compile(shape.value, memo)
        if inner is None:
            return dict
        return lambda value: {key: inner(item) for key, item in value.items()}
    if kind != "structure" or shape.is_document_type:
        raise CannotHonourError(f"{kind} members")
    cell = memo.get(shape.name)
    if cell is not None:  # a recursive shape (AttributeValue's M and L): encoded once built
        built = cell
        return lambda value: built[0](value)  # type: ignore[misc]  # noqa: PLW0108
    cell = memo[shape.name] = [None]
    members: dict[str, tuple[str, Encoder | None]] = {}
    for name, member_shape in shape.members.items():
        members[name] = (member_shape.serialization.get("name", name), None)
    for name, member_shape in shape.members.items():
        members[name] = (members[name][0], _compile(member_shape, memo))

    # Members sent as they come (strings, numbers, flags): a value holding only those is
    # checked for unknown members and sent as it is, no copy (most AttributeValues).
    plain = frozenset(
        name
        for name, (wire_name, encode) in members.items()
        if encode is None and wire_name == name
    )

    def structure(value: Any) -> dict[str, Any]:
        if value.keys() <= plain:
            return value  # type: ignore[no-any-return]
        out = {}
        for key, item in value.items():
            wire_name, encode = members[key]
            out[wire_name] = item if encode is None else encode(item)
        return out

    cell[0] = structure
    return structure


def _base64(value: Any) -> str:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return base64.b64encode(value).strip().decode("utf-8")


def _signing_request_class() -> type:
    """botocore's AWSRequest, but `body` is the bytes we built: botocore's property prepares a
    whole copy of the request (headers included) each time the signer reads it, and what it
    returns for a non-empty bytes body is those same bytes."""
    from botocore.awsrequest import AWSRequest

    class SigningRequest(AWSRequest):
        @property
        def body(self) -> Any:
            return self.data

    return SigningRequest


def _request_context() -> Any:
    """botocore's per-call context (what `_make_api_call` runs in): the user agent lists the
    features each call used. Older botocore has none."""
    if _botocore_context is None:
        return contextlib.nullcontext()
    return _botocore_context.start_as_current_context()


def _features() -> set[str]:
    context = None if _botocore_context is None else _botocore_context.get_context()
    return set() if context is None else set(context.features)


def _register_features(features: set[str]) -> None:
    """The features the cached endpoint resolution registered when it ran, for this call."""
    context = None if _botocore_context is None else _botocore_context.get_context()
    if features and context is not None:
        context.features.update(features)


def _add_recursion_detection_header(headers: dict[str, str]) -> None:
    """botocore's add_recursion_detection_header: in Lambda, the trace ID goes with the call."""
    trace_id = os.environ.get("_X_AMZN_TRACE_ID")
    if trace_id and "AWS_LAMBDA_FUNCTION_NAME" in os.environ and "X-Amzn-Trace-Id" not in headers:
        headers["X-Amzn-Trace-Id"] = quote(trace_id, safe="-=;:+&[]{}\"',")


def _urljoin(endpoint_url: str) -> str:
    from botocore.awsrequest import prepare_request_dict

    request = {"headers": {}, "url_path": "/", "query_string": ""}
    prepare_request_dict(request, endpoint_url=endpoint_url)
    return str(request["url"])


def _nothing() -> None:
    pass


def _watched(client: Any, endpoint: Any, signer: Any) -> list[tuple[Any, frozenset[str]]]:
    """The objects whose own attributes may shadow a method this path does not call."""
    return [
        (client, frozenset(CLIENT_METHODS + tuple(OPERATIONS))),
        (endpoint, frozenset(ENDPOINT_METHODS)),
        (signer, frozenset(SIGNER_METHODS)),
    ]


def _untyped(value: Any) -> Any:
    return value


def _botocore_function(cls: type, name: str) -> object:
    """botocore's own method, as `cls` has it; CannotHonourError when it is patched already:
    X-Ray and OpenTelemetry wrap botocore's methods with wrapt proxies, which are no
    functions, and a wrapper made with `functools.wraps` carries botocore's names but not its
    code (botocore's own decorator on `_make_api_call` is botocore's code)."""
    import botocore

    function = getattr(cls, name, None)
    code = getattr(function, "__code__", None)
    if (
        type(function) is not types.FunctionType
        or code is None
        or not code.co_filename.startswith(os.path.dirname(botocore.__file__) + os.sep)
    ):
        raise CannotHonourError(f"{name} is patched")
    return function


def _handler_name(handler: Any) -> str:
    function = getattr(handler, "__func__", handler)
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
