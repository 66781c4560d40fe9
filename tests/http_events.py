"""HTTP events for the tests, built on what `sam local generate-event` prints.

tests/events/ holds the generator's output, unedited (SAM CLI 1.170, default options):

    sam local generate-event apigateway aws-proxy       > apigateway-aws-proxy.json
    sam local generate-event apigateway http-api-proxy  > apigateway-http-api-proxy.json
    sam local generate-event alb request                > alb-request.json

SAM CLI has no generator for Function URLs: function-url.json is the request example of the
Lambda developer guide (payload 2.0, IAM auth), unchanged.

`http_event` starts from one of them and sets what a test is about the way that source
delivers it: HTTP APIs and ALB lower-case header names; HTTP APIs join a repeated header's
values with commas; REST APIs carry every value in multiValueHeaders and the last one in
headers; an ALB target group carries either headers (last value) or multiValueHeaders.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).with_name("events")
SHAPES = ("rest-api", "http-api", "function-url", "alb", "alb-multi-value")
_FILES = {
    "rest-api": "apigateway-aws-proxy.json",
    "http-api": "apigateway-http-api-proxy.json",
    "function-url": "function-url.json",
    "alb": "alb-request.json",
    "alb-multi-value": "alb-request.json",
}


@functools.cache
def _base(shape: str) -> dict[str, Any]:
    return json.loads((EVENTS / _FILES[shape]).read_text())  # type: ignore[no-any-return]


def http_event(
    shape: str,
    *,
    method: str = "POST",
    path: str = "/payments",
    headers: Mapping[str, str | list[str]] | None = None,
    body: str | None = None,
    base64_body: bool = False,
    authorizer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An event of `shape` for one request. `headers` values may be lists (a header sent
    several times); `authorizer` replaces requestContext.authorizer (not for ALB)."""
    event = copy.deepcopy(_base(shape))
    sent = {
        name: [value] if isinstance(value, str) else value
        for name, value in (headers or {}).items()
    }
    context = event["requestContext"]
    if shape in ("http-api", "function-url"):
        context["http"]["method"] = method
        event["rawPath"] = context["http"]["path"] = path
        if shape == "http-api":
            event["routeKey"] = context["routeKey"] = f"{method} {path}"
        event["headers"].update({name.lower(): ",".join(values) for name, values in sent.items()})
    elif shape == "rest-api":
        event["httpMethod"] = context["httpMethod"] = method
        event["path"] = event["resource"] = context["resourcePath"] = path
        context["path"] = f"/{context['stage']}{path}"
        event["pathParameters"] = None
        for name, values in sent.items():
            event["headers"][name] = values[-1]
            event["multiValueHeaders"][name] = values
    else:
        event["httpMethod"] = method
        event["path"] = path
        if shape == "alb-multi-value":
            event["multiValueHeaders"] = {
                name: [value] for name, value in event.pop("headers").items()
            }
            event["multiValueQueryStringParameters"] = {
                name: [value] for name, value in event.pop("queryStringParameters").items()
            }
            for name, values in sent.items():
                event["multiValueHeaders"][name.lower()] = values
        else:
            for name, values in sent.items():
                event["headers"][name.lower()] = values[-1]
    if authorizer is not None and shape not in ("alb", "alb-multi-value"):
        context["authorizer"] = authorizer
    _set_body(event, shape, body, base64_body)
    return event


def _set_body(event: dict[str, Any], shape: str, body: str | None, base64_body: bool) -> None:
    if body is None:  # no body: REST APIs send null, ALB an empty string, HTTP APIs nothing
        event["isBase64Encoded"] = False
        if shape == "rest-api":
            event["body"] = None
        elif shape.startswith("alb"):
            event["body"] = ""
        else:
            event.pop("body", None)
        return
    event["isBase64Encoded"] = base64_body
    event["body"] = base64.b64encode(body.encode()).decode() if base64_body else body


def jwt(
    sub: str, issuer: str = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example"
) -> dict[str, Any]:
    """An HTTP API JWT authorizer's part of requestContext."""
    return {"jwt": {"claims": {"iss": issuer, "sub": sub}, "scopes": None}}


def header_field(response: Mapping[str, Any]) -> dict[str, Any]:
    """A response's headers, whichever field carries them, by lower-case name; the values
    of multiValueHeaders as lists."""
    single = response.get("headers") or {}
    multi = response.get("multiValueHeaders") or {}
    return {str(name).lower(): value for name, value in {**single, **multi}.items()}
