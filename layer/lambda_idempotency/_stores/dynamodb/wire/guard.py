"""The fast wire path's guard: whether a call may take the lean path, or the client must make
it because something it cannot honour is there.

Two kinds of things: botocore's methods the path does not call (it does their work
itself), patched or replaced on the class or on the one client, endpoint or signer
(`mock.patch.object`, a tracer it does not know; X-Ray's and OpenTelemetry's wrappers it calls
itself, `tracers`): the client makes the call, so the patch sees it; and a handler on an event
the path does not emit (a Stubber, endpoint discovery, a user's hook on `before-sign`).
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
from .tracers import unwrapped, wrapper_name

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
on the class or on the one object (`mock.patch.object`, a tool adding a header in `sign`), the
client makes the call, so the patch sees it; the tracers' wrappers on `_make_api_call` and
`prepare_request` named in `tracers.HONOURED` the path calls itself."""
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
BEFORE_CALL = frozenset(
    {
        "botocore.handlers.add_recursion_detection_header",  # done here, the same way
        "botocore.handlers.inject_api_version_header_if_needed",  # not for DynamoDB
    }
)
"""botocore's own handlers on `before-call`, whose work the path does itself; with any other
handler there (a user's hook), the path emits `before-call` as `_make_api_call` does."""


class Guard:
    """The verdict on one client, endpoint and signer (`FastWire`'s, or its twin's in the
    self-check, which shares the per-class part, `methods`)."""

    def __init__(
        self,
        client: Any,
        endpoint: Any,
        signer: Any,
        emitter: Any,
        service_id: str,
        methods: BotocoreMethods | None = None,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.signer = signer
        self._emitter = emitter
        self._service_id = service_id
        self.own_objects = watched(client, endpoint, signer)
        if methods is None:
            methods = BotocoreMethods([(type(owner), names) for owner, names in self.own_objects])
        self.methods = methods
        self._verdict = Verdict(None, False, {}, frozenset(), frozenset(), frozenset())

    def verdict(self) -> Verdict | None:
        """The hooks this call honours, or None when the client must make it. Cheap when
        nothing changed: botocore drops the emitter's lookup cache on every register and
        unregister, and the cache read before the handlers were looked at is the one the
        verdict is kept for (a hook registered meanwhile drops it again: checked again)."""
        client = self.client
        if client._endpoint is not self.endpoint or client._request_signer is not self.signer:
            return None
        for owner, names in self.own_objects:
            if not names.isdisjoint(owner.__dict__):  # patched on this one object
                patched = ", ".join(sorted(names.intersection(owner.__dict__)))
                tell_once(f"{patched} patched on the one {type(owner).__name__}")
                return None
        if not self.methods.unchanged() and not self.methods.found_again():
            return None  # patched with what the path cannot call: the patch sees the call
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
        ua_rebuilt = set()
        validated = set()
        before_call = set()
        for operation in OPERATIONS.values():
            hooked = handlers.prefix_search(f"before-call.{self._service_id}.{operation}")
            if any(handler_name(h) not in BEFORE_CALL for h in hooked):
                before_call.add(operation)
            for event, ours in SKIPPED_EVENTS.items():
                name = f"{event}.{self._service_id}.{operation}"
                found = [handler_name(h) for h in handlers.prefix_search(name)]
                if any(found_name not in ours for found_name in found):
                    foreign = next(n for n in found if n not in ours)
                    tell_once(f"a handler on {event}, which it does not emit: {foreign}")
                    return Verdict(cache, False, {}, frozenset(), frozenset(), frozenset())
                if VALIDATES in found:
                    validated.add(operation)
            # request-created's handlers are all called, in their order, as botocore's emit
            # calls them (Powertools adds one to every client to extend the user agent); the
            # client's own signer among them signs here.
            created = list(
                handlers.prefix_search(f"request-created.{self._service_id}.{operation}")
            )
            if [h for h in created if handler_name(h) == SIGNER] != [self.signer.handler]:
                tell_once("a request-created signer other than the client's own")
                return Verdict(cache, False, {}, frozenset(), frozenset(), frozenset())
            created_handlers[operation] = [
                None if handler_name(h) == SIGNER else h for h in created
            ]
            names = [handler_name(h) for h in created]
            # botocore rebuilds the user agent when the request is created: built before, it
            # would be thrown away, unless someone reads it first (a user's hook)
            if UA_REBUILD in names and operation not in before_call:
                readers = names[: names.index(UA_REBUILD)]
                if all(n == SIGNER or n.startswith("botocore.") for n in readers):
                    ua_rebuilt.add(operation)
        return Verdict(
            cache,
            True,
            created_handlers,
            frozenset(ua_rebuilt),
            frozenset(validated),
            frozenset(before_call),
        )


class Verdict(NamedTuple):
    """What the hook check found, for the lookup cache it read first: read as one object, so
    a call never mixes two checks' answers."""

    cache: object
    clear: bool
    created_handlers: dict[str, list[Any | None]]
    ua_rebuilt: frozenset[str]
    """The operations whose user agent botocore rebuilds in request-created, nobody reading
    it before: not built before that."""
    validated: frozenset[str]
    """The operations on which our own client checks enlisted writes (`validate_user_data`)."""
    before_call: frozenset[str]
    """The operations with a handler of someone else's on `before-call`: emitted for them."""


def watched(client: Any, endpoint: Any, signer: Any) -> list[tuple[Any, frozenset[str]]]:
    """The objects whose own attributes may shadow a method this path does not call."""
    return [
        (client, frozenset(CLIENT_METHODS + tuple(OPERATIONS))),
        (endpoint, frozenset(ENDPOINT_METHODS)),
        (signer, frozenset(SIGNER_METHODS)),
    ]


class BotocoreMethods:
    """botocore's methods the path does not call, on each class it reads them from: each
    botocore's own function, or wrapped only by a tracer the path calls itself (`tracers`).
    Checked on every call by identity; found again only when one changed (a tracer set up
    after the path was built: its wrappers are called from then on)."""

    def __init__(self, names_by_class: list[tuple[type, frozenset[str]]]) -> None:
        self._names_by_class = [(cls, tuple(sorted(names))) for cls, names in names_by_class]
        self.wrappers: dict[str, tuple[Any, ...]] = {}
        """Per wrapped method (`_make_api_call`, `prepare_request`), the wrappers to call."""
        self.unwrapped: dict[str, Any] = {}
        """Per wrapped method, botocore's own function under the wrappers."""
        self._plain: list[tuple[type, Callable[[type], tuple[object, ...]], tuple[object, ...]]]
        self._wrapped: list[tuple[Any, str, object]]
        self._refused: tuple[object, ...] | None = None
        self._find()

    def unchanged(self) -> bool:
        """Whether every method is still what was found: botocore's functions read through
        the class in one go, a wrapper where the class finds it (read through the class, a
        wrapt wrapper gives a new bound proxy each time)."""
        for cls, methods_of, functions in self._plain:
            if not all(map(operator.is_, methods_of(cls), functions)):
                return False
        return all(owner.get(name) is value for owner, name, value in self._wrapped)

    def found_again(self) -> bool:
        """Whether the methods as they are now are still ones the path can honour (a patch
        it cannot honour is looked at once, not on every call while it stays)."""
        current = self._current()
        if current == self._refused:
            return False
        try:
            self._find()
        except CannotHonourError as exc:
            self._refused = current
            tell_once(str(exc))
            return False
        self._refused = None
        return True

    def _current(self) -> tuple[object, ...]:
        return tuple(
            next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
            for cls, names in self._names_by_class
            for name in names
        )

    def _find(self) -> None:
        plain: list[tuple[type, Callable[[type], tuple[object, ...]], tuple[object, ...]]] = []
        wrapped: list[tuple[Any, str, object]] = []
        wrappers, unwrapped_functions = {}, {}
        for cls, names in self._names_by_class:
            functions = {}
            for name in names:
                # where the class finds it, and nothing before that (a subclass shadowing it)
                before = []
                for klass in cls.__mro__:
                    if name in klass.__dict__:
                        break
                    before.append((klass.__dict__, name, None))
                else:
                    raise CannotHonourError(f"botocore without {name}")
                value = klass.__dict__[name]
                function, around = unwrapped(value, name)
                _check_botocore_code(function, name)
                if around:
                    wrappers[name] = around
                    unwrapped_functions[name] = function
                    wrapped += [*before, (klass.__dict__, name, value)]
                else:
                    functions[name] = getattr(cls, name)
            if functions:
                get: Any = operator.attrgetter(*functions)
                methods_of = get if len(functions) > 1 else (lambda c, get=get: (get(c),))
                plain.append((cls, methods_of, tuple(functions.values())))
        self._plain, self._wrapped = plain, wrapped
        self.wrappers, self.unwrapped = wrappers, unwrapped_functions


def _check_botocore_code(function: object, name: str) -> None:
    """CannotHonourError unless `function` is botocore's own: a wrapper made with
    `functools.wraps` carries botocore's names but not its code (botocore's own decorator on
    `_make_api_call` is botocore's code)."""
    import botocore

    code = getattr(function, "__code__", None)
    if (
        type(function) is not types.FunctionType
        or code is None
        or not code.co_filename.startswith(os.path.dirname(botocore.__file__) + os.sep)
    ):
        raise CannotHonourError(f"{name} is patched by {wrapper_name(function)}")


_told: set[str] = set()


def tell_once(reason: str) -> None:
    """One log line per process and reason: the fast wire path steps aside for a patch it
    cannot honour (which one, by name), and the client makes those calls."""
    if reason in _told:
        return
    _told.add(reason)
    import logging

    import botocore

    from ...._base import observe

    observe.emit(
        logging.INFO,
        "fast_wire_off",
        None,
        reason=f"the fast wire path cannot honour this ({reason}): the client makes the calls",
        botocore=botocore.__version__,
    )


def handler_name(handler: Any) -> str:
    function = getattr(handler, "__func__", handler)
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
