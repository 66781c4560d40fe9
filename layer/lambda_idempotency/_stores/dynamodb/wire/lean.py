"""`FastWire`: the store's five operations over one client's botocore parts, each call either
lean or, when the guard says so, the client's own.

It reads the client's parts once (and refuses a client whose private parts it relies on are
missing), then puts together the plan per operation (`_stores.dynamodb.wire.plan`), the guard
(`_stores.dynamodb.wire.guard`), the request builder (`_stores.dynamodb.wire.build`) and the sender
(`_stores.dynamodb.wire.send`). One call reads top to bottom in `_call_lean`: enlisted writes
checked, idempotency token, body, request, exchange, `after-call`, the client's own exception for an
error answer.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from .build import (
    RequestBuilder,
    ResolvedEndpoint,
    request_context,
    signing_choice,
    signing_request_class,
)
from .guard import Guard, Verdict
from .plan import OPERATIONS, USER_DATA, CannotHonourError, Plan, validate_user_data
from .send import Sender
from .tracers import through


class FastWire:
    """The store's five operations, with the client's arguments, results and exceptions."""

    def __init__(self, client: Any) -> None:
        parts = _client_parts(client)
        cheaper = _cheaper_parts(parts.endpoint, parts.parser)
        self.client = client
        self._events = parts.events
        self._service_id = parts.model.service_id.hyphenize()
        self._validates = parts.validates
        self._guard = Guard(client, parts.endpoint, parts.signer, parts.emitter, self._service_id)
        self._honours_tracers = True
        """Whether a tracer's wrappers are called (`tracers`): not in the self-check's twin."""
        self._builder = RequestBuilder(
            resolve=client._resolve_endpoint_ruleset,
            signer=parts.signer,
            signing_name=parts.signer._signing_name,
            region_name=parts.signer._region_name,
            user_agent=client._user_agent_creator.to_string,
            request_class=cheaper.request_class,
            sigv4=cheaper.sigv4,
            encode_headers=cheaper.encode_headers,
            endpoint=parts.endpoint,
            methods=self._guard.methods,
        )
        self._sender = Sender(
            endpoint=parts.endpoint,
            events=parts.events,
            builder=self._builder,
            parser=cheaper.parser,
            forget_answer=cheaper.forget_answer,
            headers_dict=cheaper.headers_dict,
            convert_to_response_dict=parts.convert_to_response_dict,
        )
        self._plans: dict[str, Plan | None] = {}
        for method, operation in OPERATIONS.items():
            try:
                self._plans[method] = Plan(parts.model.operation_model(operation), client, method)
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
        lean._events = twin.meta.events
        lean._guard = Guard(
            twin,
            twin._endpoint,
            twin._request_signer,
            twin.meta.events,
            self._service_id,
            self._guard.methods,
        )
        lean._honours_tracers = False  # the self-check's calls are no user's: never traced
        lean._builder = self._builder.over(twin._resolve_endpoint_ruleset, twin._request_signer)
        lean._sender = self._sender.over(twin._endpoint, twin.meta.events, lean._builder)
        lean._plans = dict(self._plans)
        return lean

    def served(self) -> list[str]:
        """The client methods this path serves for this client (the others: the client)."""
        return [method for method, plan in self._plans.items() if plan is not None]

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

    def usable(self, method: str) -> bool:
        """Whether this call may take the lean path (`Guard.verdict`)."""
        return self._plans[method] is not None and self._guard.verdict() is not None

    # -- one call ---------------------------------------------------------------------------

    def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        plan = self._plans[method]
        verdict = None if plan is None else self._guard.verdict()
        if plan is None or verdict is None:
            result: dict[str, Any] = getattr(self.client, method)(**params)
            return result
        wrappers = self._guard.methods.wrappers.get("_make_api_call")
        if wrappers and self._honours_tracers:
            # a tracer's subsegment or span around the call, as around `_make_api_call`
            lean = functools.partial(self._in_context, plan, verdict)
            traced: dict[str, Any] = through(wrappers, self.client, lean, (plan.name, params))
            return traced
        with request_context():
            response: dict[str, Any] = self._call_lean(plan, verdict, params)
        return response

    def _in_context(
        self, plan: Plan, verdict: Verdict, operation_name: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """What a tracer's wrapper calls as `_make_api_call(operation_name, params)`."""
        with request_context():
            return self._call_lean(plan, verdict, params, traced=True)

    def _call_lean(
        self, plan: Plan, verdict: Verdict, params: dict[str, Any], *, traced: bool = False
    ) -> dict[str, Any]:
        """One call, as `_make_api_call` makes it (inside a tracer's wrapper: `traced`), in
        short steps: a tracer's stack trace of a refused claim (X-Ray's on every replay) reads
        where each frame stands in its function, in time linear in how far in that is."""
        prepared = self._request_dict(plan, verdict, params)
        if prepared is None:
            return self._by_client(plan, params, traced=traced)
        request_dict, resolved = prepared
        http, parsed = self._exchange(plan, verdict, request_dict, resolved)
        return self._answer(plan, http, parsed, request_dict["context"])

    def _request_dict(
        self, plan: Plan, verdict: Verdict, params: dict[str, Any]
    ) -> tuple[dict[str, Any], ResolvedEndpoint] | None:
        """The request as `_make_api_call` builds it, and its endpoint; None when the endpoint
        needs what this path does not do (the client makes this call, and the next ones)."""
        if plan.name in USER_DATA and (self._validates or plan.name in verdict.validated):
            validate_user_data(params, plan.operation_model)  # as the client would
        if plan.token_member is not None and plan.token_member not in params:
            params[plan.token_member] = str(uuid.uuid4())
        body = json.dumps(plan.encode(params)).encode("utf-8")
        try:
            return self._builder.request_dict(plan, verdict, params, body)
        except CannotHonourError:
            self._plans[plan.method] = None
            return None

    def _by_client(self, plan: Plan, params: dict[str, Any], *, traced: bool) -> dict[str, Any]:
        if traced:  # inside the tracer's wrapper already: what it wraps makes the call
            make_api_call = self._guard.methods.unwrapped["_make_api_call"]
            made: dict[str, Any] = make_api_call(self.client, plan.name, params)
            return made
        result: dict[str, Any] = getattr(self.client, plan.method)(**params)
        return result

    def _exchange(
        self,
        plan: Plan,
        verdict: Verdict,
        request_dict: dict[str, Any],
        resolved: ResolvedEndpoint,
    ) -> tuple[Any, dict[str, Any]]:
        """`before-call` (a user's hook: as `_make_api_call` emits it), then the request sent,
        retried and read, unless the hook answered."""
        context = request_dict["context"]
        answer = None
        if plan.name in verdict.before_call:
            chosen = signing_choice(context)
            _, answer = self._events.emit_until_response(
                f"before-call.{self._service_id}.{plan.name}",
                model=plan.operation_model,
                params=request_dict,
                request_signer=self.client._request_signer,
                context=context,
            )
            if signing_choice(context) != chosen:
                resolved = resolved.asking_the_signer()
        if answer is not None:
            return answer  # type: ignore[no-any-return]
        try:
            return self._sender.send(plan, verdict, resolved, request_dict)
        except Exception as exc:
            self._events.emit(
                f"after-call-error.{self._service_id}.{plan.name}",
                exception=exc,
                context=context,
            )
            raise

    def _answer(
        self, plan: Plan, http: Any, parsed: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]:
        """`after-call`, then the answer, or its error raised as the client raises it."""
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
        return parsed


class _ClientParts(NamedTuple):
    model: Any
    events: Any
    emitter: Any
    endpoint: Any
    signer: Any
    parser: Any
    validates: bool
    convert_to_response_dict: Callable[[Any, Any], dict[str, Any]]


def _client_parts(client: Any) -> _ClientParts:
    """The client's botocore parts the path drives, or CannotHonourError: not a botocore
    DynamoDB client over JSON, or a botocore without a private part the path relies on."""
    import botocore.client
    import botocore.validate

    if not isinstance(client, botocore.client.BaseClient):
        raise CannotHonourError("not a botocore client")
    client = _untyped(client)
    try:
        model = client.meta.service_model
        events = client.meta.events
        emitter = events._emitter
        emitter._lookup_cache  # noqa: B018  (the attribute the guard watches)
        endpoint = client._endpoint
        endpoint.make_request  # noqa: B018
        client._resolve_endpoint_ruleset  # noqa: B018
        client._user_agent_creator.to_string  # noqa: B018
        config = client.meta.config
        signer = client._request_signer
        signer.get_auth_instance  # noqa: B018
        signer._choose_signer  # noqa: B018
        signer._signing_name  # noqa: B018
        signer._region_name  # noqa: B018
        parser = endpoint._response_parser_factory.create_parser("json")
        for private in (
            "_update_retries_context",
            "_needs_retry",
            "_encode_headers",
            "_add_modeled_error_fields",
        ):
            getattr(endpoint, private)
    except AttributeError as exc:
        raise CannotHonourError(f"botocore without {exc.name}") from exc
    from botocore.endpoint import convert_to_response_dict

    if getattr(config, "auth_scheme_preference", None):
        raise CannotHonourError("an auth scheme preference")
    protocol = getattr(model, "resolved_protocol", None) or model.metadata.get("protocol")
    if protocol != "json" or model.service_name != "dynamodb":
        raise CannotHonourError(f"protocol {protocol}")
    # The client's serializer says whether it checks parameters (its config does not:
    # botocore builds a new one for `meta.config` without that option).
    serializer = getattr(client, "_serializer", None)
    if serializer is None:
        raise CannotHonourError("botocore without _serializer")
    validates = isinstance(serializer, botocore.validate.ParamValidationDecorator)
    return _ClientParts(
        model, events, emitter, endpoint, signer, parser, validates, convert_to_response_dict
    )


class _CheaperParts(NamedTuple):
    parser: Any
    forget_answer: Callable[[], None]
    request_class: type
    sigv4: type | None
    headers_dict: type | None
    encode_headers: Callable[[Any], None] | None


def _cheaper_parts(endpoint: Any, parser: Any) -> _CheaperParts:
    """botocore's parser, request and signer, made cheaper where this botocore has the
    private parts that relies on; else its own (still built and signed directly)."""
    from .parse import compiled_parser
    from .request import wire_parts

    compiled = compiled_parser(parser)
    parts = wire_parts()
    return _CheaperParts(
        parser=compiled,
        forget_answer=getattr(compiled, "forget", _nothing),
        request_class=signing_request_class() if parts is None else parts.request,
        sigv4=None if parts is None else parts.sigv4,
        headers_dict=None if parts is None else parts.headers,
        encode_headers=endpoint._encode_headers if parts is None else None,
    )


def _nothing() -> None:
    pass


def _untyped(value: Any) -> Any:
    return value
