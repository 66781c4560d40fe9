"""A lean path for the store's own DynamoDB requests, through the client's own botocore parts.

A boto3 call spends about 40 % of its CPU in generic steps our fixed request shapes do not need:
parameter events, the endpoint ruleset, the model-walking serializer, the call events. `FastWire`
skips only those. It builds the JSON body with a serializer compiled once from the client's own
model, resolves the endpoint through the client's own ruleset resolver once per table, and hands the
request to the client's own `Endpoint`: so signing (botocore's signer, the client's credentials,
refreshed as botocore refreshes them), `request-created`, `before-send` (moto, recorders, fault
injectors), the client's HTTP session, the response parser, `needs-retry` (standard, adaptive and
legacy modes, the shared quota, DynamoDB's x-amz-crc32) and `after-call` are botocore's own. Errors
are the client's own exception classes. Two of those parts are made cheaper without changing what
they produce: the request's headers and SigV4's choice of signed headers
(`_stores.dynamodb.wire.request`), and the parser's walk of the model, compiled once per shape, with
an error's body decoded once (`_stores.dynamodb.wire.parse`).

It steps aside, call by call, for anything it cannot honour: a handler on an event it skips (a
Stubber, endpoint discovery, a user's hook), any botocore method whose work it does instead of
calling it, patched or replaced on the class or on the one client, endpoint or signer
(`mock.patch.object`, a tracer it does not know), an operation whose model needs more than it
knows, or a botocore whose private parts it relies on are missing. The client then does the
call as usual. X-Ray's and OpenTelemetry's wrappers it calls itself (`_stores.dynamodb.wire.
tracers`), and a user's `before-call` hook it calls as the client does.
Enlisted writes, the one data it sends that the store did not build, are checked as the client
checks parameters. And before it serves a client at all, it proves itself against the client's own
way on this botocore (`_stores.dynamodb.wire.check`), or steps aside.

The parts, each read top to bottom on its own: the plan per operation
(`_stores.dynamodb.wire.plan`), the guard on patches and hooks (`_stores.dynamodb.wire.guard`), the
request built and signed (`_stores.dynamodb.wire.build`), sent, retried and parsed
(`_stores.dynamodb.wire.send`), and `FastWire` putting them together (`_stores.dynamodb.wire.lean`).
This module is the door: `fast_wire` gives a client's path.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ...._base import observe as _observe
from .guard import tell_once
from .lean import FastWire
from .plan import OPERATIONS, CannotHonourError, validate_user_data

__all__ = ["OPERATIONS", "CannotHonourError", "FastWire", "fast_wire", "validate_user_data"]


def fast_wire(client: Any) -> Any:
    """A `FastWire` over `client`, or `client` itself when the lean path cannot serve it or
    its self-check on this client found a difference with the client's own way."""
    try:
        wire = FastWire(client)
    except CannotHonourError as exc:
        _tell_why(client, str(exc))
        return client
    unplanned = sorted(method for method, plan in wire._plans.items() if plan is None)
    if unplanned:  # their operation's model is not the one the path was written for
        _tell_why(client, f"the model of {', '.join(unplanned)} changed")
    from .check import verified

    return wire if verified(wire) else client


CHOSEN_BY_THE_USER = (
    "not a botocore client",
    "credentials chosen per request",
    "an auth scheme preference",
    "signature ",
)
"""Reasons that are a client set up so on purpose (a test double, a signing choice): a debug
line. A method patched by a tracer the path does not know (or a test's patch) gets one info
line a process, naming it (`guard.tell_once`). Any other reason is a botocore the path was not
written for, which costs every call its CPU saving: a warning."""


_told: weakref.WeakSet[Any] = weakref.WeakSet()


def _tell_why(client: Any, reason: str) -> None:
    """One line per client the path cannot serve (or serves only in part), with why: once,
    however many stores share the client."""
    import botocore

    if " is patched" in reason:  # by someone the path does not know: named, once a process
        tell_once(reason)
        return
    try:
        if client in _told:
            return
        _told.add(client)
    except TypeError:  # a client that cannot be weakly referenced: told each time
        pass

    meant = reason.startswith(CHOSEN_BY_THE_USER)
    _observe.emit(
        logging.DEBUG if meant else logging.WARNING,
        "fast_wire_off",
        None,
        reason=f"the fast wire path cannot serve this client ({reason}): the client makes "
        "those calls",
        botocore=botocore.__version__,
    )
