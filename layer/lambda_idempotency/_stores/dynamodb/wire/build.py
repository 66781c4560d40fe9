"""The fast wire path's request: built, signed and made ready to send as botocore's client
and endpoint make it, with the parts botocore would find the same on every call found once.

The endpoint comes from the client's own ruleset resolver, once per operation and tables
(DynamoDB's rules read the table names); the signature version is chosen once per endpoint;
the headers are the operation's, the endpoint's, the user agent and the recursion detection
header; each attempt gets a request of its own, through `request-created`'s handlers in
their order, the client's own signer signing in its place (`RequestSigner.sign`, less its
per-call events), and prepared as `Endpoint.prepare_request` prepares it, without its hooks.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from .guard import BotocoreMethods, Verdict
from .plan import CannotHonourError, Plan
from .tracers import through

try:
    import botocore.context as _botocore_context
except ImportError:  # pragma: no cover - botocore before 1.36
    _botocore_context = None  # type: ignore[assignment]


class RequestBuilder:
    """One client's requests: its resolver, signer and user agent, the cheaper request parts
    this botocore allows (`_stores.dynamodb.wire.request`), and the endpoints resolved so far."""

    def __init__(
        self,
        *,
        resolve: Callable[..., Any],
        signer: Any,
        signing_name: str,
        region_name: str,
        user_agent: Callable[[], str],
        request_class: type,
        sigv4: type | None,
        encode_headers: Callable[[Any], None] | None,
        endpoint: Any = None,
        methods: BotocoreMethods | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._methods = methods
        """The tracers' wrappers on `Endpoint.prepare_request` to call (None: none, ever)."""
        self._resolve = resolve
        self._choose_signer = signer._choose_signer
        self._signer = signer
        self._signing_name = signing_name
        self._region_name = region_name
        self._user_agent = user_agent
        self._AWSRequest = request_class
        self._sigv4 = sigv4
        self._encode_headers = encode_headers
        self._endpoints: dict[tuple[str, tuple[str, ...]], ResolvedEndpoint] = {}

    def over(self, resolve: Callable[..., Any], signer: Any) -> RequestBuilder:
        """This builder with another client's resolver and signer (the self-check's twin),
        and no endpoint resolved yet."""
        builder = copy.copy(self)
        builder._resolve = resolve
        builder._signer = signer
        builder._choose_signer = signer._choose_signer
        builder._endpoints = {}
        builder._methods = None  # the self-check's twin: no tracer sees its requests
        return builder

    def request_dict(
        self, plan: Plan, verdict: Verdict, params: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], ResolvedEndpoint]:
        """The request as `_convert_to_request_dict` makes it, and its endpoint;
        CannotHonourError when the endpoint needs what this path does not do."""
        resolved = self._resolved_endpoint(plan, params)
        context = {**plan.context, **resolved.context()}
        headers = dict(plan.headers)
        headers.update(resolved.headers)
        # botocore builds the user agent twice a call (about 30 µs each unless it is fixed):
        # when its request-created handler rebuilds it anyway, the first would be thrown away.
        rebuilt = plan.name in verdict.ua_rebuilt
        headers["User-Agent"] = (
            "rebuilt when the request is created" if rebuilt else self._user_agent()
        )
        if plan.name not in verdict.before_call:  # else botocore's own before-call handler
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
        return request_dict, resolved

    def prepared(
        self,
        plan: Plan,
        verdict: Verdict,
        resolved: ResolvedEndpoint,
        request_dict: dict[str, Any],
    ) -> Any:
        """One attempt's request, as Endpoint.create_request makes it: `request-created`'s
        handlers in their order, the client's own signer in its place, then prepared."""
        request = self._AWSRequest(
            method=request_dict["method"],
            url=request_dict["url"],
            data=request_dict["body"],
            headers=request_dict["headers"],
        )
        request.context = request_dict["context"]
        for handler in verdict.created_handlers[plan.name]:
            if handler is None and resolved.ask_signer:  # a user's hook chose how: as it says
                self._signer.handler(operation_name=plan.name, request=request)
            elif handler is None:  # the client's own signer's place in the order
                self._sign(request, resolved)
            else:
                handler(request=request, operation_name=plan.name, event_name=plan.created_event)
        wrappers = None if self._methods is None else self._methods.wrappers.get("prepare_request")
        if wrappers:  # a tracer's trace header, put on as around `Endpoint.prepare_request`
            return through(wrappers, self._endpoint, self._prepare, (request,))
        return self._prepare(request)

    def _prepare(self, request: Any) -> Any:
        """Endpoint.prepare_request, without its hooks."""
        if self._encode_headers is not None:
            self._encode_headers(request.headers)
        return request.prepare()

    def _sign(self, request: Any, resolved: ResolvedEndpoint) -> None:
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

    def _resolved_endpoint(self, plan: Plan, params: Mapping[str, Any]) -> ResolvedEndpoint:
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
            resolved = ResolvedEndpoint(
                url=_urljoin(url),
                headers=dict(headers or {}),
                signature_version=signature_version,
                extra={k: v for k, v in context.items() if plan.context.get(k) is not v},
                features=_features() - features_before,
            )
            self._endpoints[key] = resolved
        return resolved


class ResolvedEndpoint:
    __slots__ = ("ask_signer", "extra", "features", "headers", "signature_version", "url")

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
        self.ask_signer = False
        """Whether the client's signer decides afresh how to sign (a user's hook changed
        what it reads); else `signature_version`, chosen once."""

    def asking_the_signer(self) -> ResolvedEndpoint:
        """This endpoint, for one call whose signing a user's hook changed."""
        copied = ResolvedEndpoint(
            url=self.url,
            headers=self.headers,
            signature_version=self.signature_version,
            extra=self.extra,
            features=self.features,
        )
        copied.ask_signer = True
        return copied

    def context(self) -> dict[str, Any]:
        """A fresh copy per call: the signer and retry handlers write into the context."""
        return {
            key: dict(value) if isinstance(value, dict) else value
            for key, value in self.extra.items()
        }


SIGNING_CHOICE = ("auth_type", "signing", "request_credentials", "identity_cache")
"""What botocore's signer reads of a call's context to choose how to sign it."""


def signing_choice(context: Mapping[str, Any]) -> tuple[Any, ...]:
    """A copy of what the signer would read of `context`, to tell whether a hook changed it."""
    return tuple(
        dict(value) if isinstance(value, dict) else value
        for value in (context.get(name) for name in SIGNING_CHOICE)
    )


def signing_request_class() -> type:
    """botocore's AWSRequest, but `body` is the bytes we built: botocore's property prepares a
    whole copy of the request (headers included) each time the signer reads it, and what it
    returns for a non-empty bytes body is those same bytes."""
    from botocore.awsrequest import AWSRequest

    class SigningRequest(AWSRequest):
        @property
        def body(self) -> Any:
            return self.data

    return SigningRequest


def request_context() -> Any:
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
