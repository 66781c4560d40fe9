"""The fast wire path's exchange: a request sent, retried and parsed as botocore's
`Endpoint._send_request` does it, through the client's own parts.

`before-send` (moto, recorders, fault injectors) may answer instead of the network; the client's
HTTP session sends otherwise; the client's parser reads the answer (compiled once per shape where
this botocore allows, `_stores.dynamodb.wire.parse`); the client's `needs-retry` handler decides
each retry (standard, adaptive and legacy modes, the shared quota, DynamoDB's x-amz-crc32), and each
attempt is a request built and signed afresh (`_stores.dynamodb.wire.build`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .build import RequestBuilder, ResolvedEndpoint
from .guard import Verdict
from .plan import Plan

Outcome = tuple[tuple[Any, dict[str, Any]] | None, Exception | None]
"""An attempt's (HTTP response, parsed answer), or the exception it raised."""


class Sender:
    """One client's endpoint, events and parser, for sending the requests it builds."""

    def __init__(
        self,
        *,
        endpoint: Any,
        events: Any,
        builder: RequestBuilder,
        parser: Any,
        forget_answer: Callable[[], None],
        headers_dict: type | None,
        convert_to_response_dict: Callable[[Any, Any], dict[str, Any]],
    ) -> None:
        self._endpoint = endpoint
        self._events = events
        self._builder = builder
        self._parser = parser
        self._forget_answer = forget_answer
        self._headers_dict = headers_dict
        self._convert_to_response_dict = convert_to_response_dict

    def over(self, endpoint: Any, events: Any, builder: RequestBuilder) -> Sender:
        """This sender through another client's endpoint and events (the self-check's twin)."""
        sender = copy.copy(self)
        sender._endpoint = endpoint
        sender._events = events
        sender._builder = builder
        return sender

    def send(
        self,
        plan: Plan,
        verdict: Verdict,
        resolved: ResolvedEndpoint,
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

    def _attempt(
        self,
        plan: Plan,
        verdict: Verdict,
        resolved: ResolvedEndpoint,
        request_dict: dict[str, Any],
    ) -> Outcome:
        """One attempt, as Endpoint.create_request and _do_get_response make it."""
        prepared = self._builder.prepared(plan, verdict, resolved, request_dict)
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
