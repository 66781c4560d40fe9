"""HTTP events from two distinct principals of each authorizer kind, for the scope tests.

tests/events/principals.json holds, per kind, the parts of `requestContext` (or, for ALB,
the headers) that the source fills in for principal "a" and principal "b", in the shapes the
API Gateway, Lambda and Elastic Load Balancing developer guides document (and Powertools'
event data classes read): REST APIs carry IAM and API key callers in
`requestContext.identity` and authorizer output in `requestContext.authorizer`; HTTP APIs and
Function URLs carry `authorizer.jwt`, `authorizer.iam` (with `cognitoIdentity`) and
`authorizer.lambda`; mutual TLS puts the client certificate in `authentication.clientCert`.
`principal_event` lays one of them over a `tests.http_events` request.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tests.http_events import EVENTS, http_event


@functools.cache
def principals() -> dict[str, Any]:
    return json.loads((EVENTS / "principals.json").read_text())  # type: ignore[no-any-return]


KINDS = tuple(principals())


def shape_of(kind: str) -> str:
    return str(principals()[kind]["shape"])


def principal_event(kind: str, who: str, **request: Any) -> dict[str, Any]:
    """A request (`http_event` arguments) from principal `who` ("a" or "b") of `kind`."""
    part = principals()[kind][who]
    headers = {**request.pop("headers", {}), **part.get("headers", {})}
    event = http_event(shape_of(kind), headers=headers, **request)
    context = event["requestContext"]
    if "authorizer" in part:
        if part["authorizer"] is None:
            context.pop("authorizer", None)
        else:
            context["authorizer"] = part["authorizer"]
    if "identity" in part:
        context["identity"].update(part["identity"])
    if "authentication" in part:
        context["authentication"] = part["authentication"]
    return event
