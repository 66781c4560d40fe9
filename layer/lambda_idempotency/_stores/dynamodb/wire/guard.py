"""The fast wire path's guard: whether a call may take the lean path, or the client must make
it because something it cannot honour is there.

Two kinds of things: botocore's methods the path does not call (it does their work
itself), patched or replaced on the class or on the one client, endpoint or signer (X-Ray,
OpenTelemetry, `mock.patch.object`): the client makes the call, so the patch sees it; and a
handler on an event the path does not emit (a Stubber, endpoint discovery, a user's hook).
The handlers' verdict is kept for the emitter's lookup cache it read, so a call pays for
the check only after a hook was registered or unregistered.
"""

from __future__ import annotations

import operator
import os
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from .plan import OPERATIONS, CannotHonourError

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
VALIDATES = "lambda_idempotency._stores.dynamodb.wire.plan.validate_user_data"
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


class Guard:
    """The verdict on one client, endpoint and signer (`FastWire`'s, or its twin's in the
    self-check, which shares the per-class part, `own_methods`)."""

    def __init__(
        self,
        client: Any,
        endpoint: Any,
        signer: Any,
        emitter: Any,
        service_id: str,
        own_methods: list[tuple[type, Callable[[Any], Any], tuple[object, ...]]] | None = None,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.signer = signer
        self._emitter = emitter
        self._service_id = service_id
        self.own_objects = watched(client, endpoint, signer)
        if own_methods is None:
            own_methods = [  # per class: its methods read in one go, and botocore's own
                (
                    type(owner),
                    operator.attrgetter(*sorted(names)),
                    tuple(_botocore_function(type(owner), name) for name in sorted(names)),
                )
                for owner, names in self.own_objects
            ]
        self.own_methods = own_methods
        self._verdict = Verdict(None, False, {}, {}, frozenset())

    def verdict(self) -> Verdict | None:
        """The hooks this call honours, or None when the client must make it. Cheap when
        nothing changed: botocore drops the emitter's lookup cache on every register and
        unregister, and the cache read before the handlers were looked at is the one the
        verdict is kept for (a hook registered meanwhile drops it again: checked again)."""
        client = self.client
        if client._endpoint is not self.endpoint or client._request_signer is not self.signer:
            return None
        for owner, names in self.own_objects:
            if not names.isdisjoint(owner.__dict__):
                return None  # patched on this one object (mock.patch.object, a wrapper)
        for cls, methods_of, functions in self.own_methods:
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

    def _check_handlers(self, cache: object) -> Verdict:
        handlers = self._emitter._handlers
        created_handlers: dict[str, list[Any | None]] = {}
        created_names: dict[str, set[str]] = {}
        validated = set()
        for operation in OPERATIONS.values():
            for event, ours in SKIPPED_EVENTS.items():
                name = f"{event}.{self._service_id}.{operation}"
                found = [handler_name(h) for h in handlers.prefix_search(name)]
                if any(found_name not in ours for found_name in found):
                    return Verdict(cache, False, {}, {}, frozenset())
                if VALIDATES in found:
                    validated.add(operation)
            # request-created's handlers are all called, in their order, as botocore's emit
            # calls them (Powertools adds one to every client to extend the user agent); the
            # client's own signer among them signs here.
            created = list(
                handlers.prefix_search(f"request-created.{self._service_id}.{operation}")
            )
            if [h for h in created if handler_name(h) == SIGNER] != [self.signer.handler]:
                return Verdict(cache, False, {}, {}, frozenset())
            created_handlers[operation] = [
                None if handler_name(h) == SIGNER else h for h in created
            ]
            created_names[operation] = {handler_name(h) for h in created}
        return Verdict(cache, True, created_handlers, created_names, frozenset(validated))


class Verdict(NamedTuple):
    """What the hook check found, for the lookup cache it read first: read as one object, so
    a call never mixes two checks' answers."""

    cache: object
    clear: bool
    created_handlers: dict[str, list[Any | None]]
    created_names: dict[str, set[str]]
    validated: frozenset[str]
    """The operations on which our own client checks enlisted writes (`validate_user_data`)."""


def watched(client: Any, endpoint: Any, signer: Any) -> list[tuple[Any, frozenset[str]]]:
    """The objects whose own attributes may shadow a method this path does not call."""
    return [
        (client, frozenset(CLIENT_METHODS + tuple(OPERATIONS))),
        (endpoint, frozenset(ENDPOINT_METHODS)),
        (signer, frozenset(SIGNER_METHODS)),
    ]


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


def handler_name(handler: Any) -> str:
    function = getattr(handler, "__func__", handler)
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
