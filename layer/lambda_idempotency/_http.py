"""`idempotent_http`: the HTTP front end, for API Gateway (REST and HTTP APIs), ALB and
Lambda Function URLs.

It reads the `Idempotency-Key` header, fingerprints the request (method, path, body) and
scopes the key to the caller's principal, then hands the call to the same `Idempotency`
engine as `idempotent`. What the engine refuses becomes an RFC 9457 problem response; what
it replays gets `Idempotent-Replayed: true`. The contract for clients is docs/http.md.
"""

from __future__ import annotations

import decimal
import enum
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Required, TypedDict, TypeVar, Unpack

from ._base import canonical as _canonical
from ._base import keys as _keys
from ._base.errors import (
    ConfigurationError,
    InProgressError,
    KeyMissingError,
    NewerFormatError,
    NotAnHttpEventError,
    PayloadInvalidError,
    PayloadMismatchError,
)
from ._base.keys import Selector
from ._base.observe import emit
from ._decorators import build_engine, mark
from ._protocol import execution as _execution
from ._protocol.callables import call_settled
from ._protocol.run import Idempotency
from ._stores.record import OnReplay
from ._tenant import authorizer_principal  # noqa: F401 (its former home; still importable)
from ._tenant import principal_or_anonymous as _principal_or_anonymous

if TYPE_CHECKING:
    from ._decorators import IdempotentFunction
    from ._options import Options

P = ParamSpec("P")
R = TypeVar("R")

IDEMPOTENCY_KEY = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
DEFAULT_METHODS = ("POST", "PATCH")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Never protected: they change nothing, so a retry is harmless and needs no key."""
MAX_KEY_LENGTH = 255
PROBLEM_JSON = "application/problem+json"


# -- response shapes --------------------------------------------------------------------


class HttpResponse(TypedDict, total=False):
    """A Lambda proxy response, as API Gateway, ALB and Function URLs read it."""

    statusCode: Required[int]
    statusDescription: str
    """ALB only, and required there: "409 Conflict"."""
    headers: dict[str, str]
    multiValueHeaders: dict[str, list[str]]
    """REST APIs; ALB target groups with multi-value headers on (then instead of headers)."""
    body: str
    isBase64Encoded: bool
    cookies: list[str]
    """HTTP APIs and Function URLs (payload 2.0)."""


class Problem(TypedDict):
    """An RFC 9457 problem details body."""

    type: str
    title: str
    status: int
    detail: str


class ProblemType(enum.Enum):
    """The refusals this front end answers with. The `type` URIs are part of the contract
    (docs/http.md): identifiers for clients to match on, not links."""

    KEY_MISSING = ("urn:lambda-idempotency:problem:key-missing", "Idempotency key missing", 400)
    KEY_INVALID = ("urn:lambda-idempotency:problem:key-invalid", "Idempotency key invalid", 400)
    REQUEST_IN_PROGRESS = (
        "urn:lambda-idempotency:problem:request-in-progress",
        "Request in progress",
        409,
    )
    KEY_REUSED = ("urn:lambda-idempotency:problem:key-reused", "Idempotency key reused", 422)
    NEWER_VERSION = (
        "urn:lambda-idempotency:problem:newer-version",
        "Request recorded by a newer version",
        503,
    )
    BODY_UNFINGERPRINTABLE = (
        "urn:lambda-idempotency:problem:body-unfingerprintable",
        "Request body cannot be fingerprinted",
        400,
    )

    def __init__(self, uri: str, title: str, status: int) -> None:
        self.uri = uri
        self.title = title
        self.status = status


# -- the request ------------------------------------------------------------------------


class Shape(enum.Enum):
    """The event shapes Lambda receives for an HTTP request."""

    REST_API = "API Gateway REST API (or HTTP API with payload 1.0)"
    HTTP_API = "API Gateway HTTP API (payload 2.0) or Lambda Function URL"
    ALB = "Application Load Balancer"


class HttpRequest:
    """One HTTP event, as the key, the fingerprint and the responses need it."""

    __slots__ = ("event", "method", "path", "shape")

    def __init__(self, event: Mapping[str, Any], shape: Shape, method: str, path: str) -> None:
        self.event = event
        self.shape = shape
        self.method = method
        self.path = path

    @classmethod
    def from_event(cls, event: Any) -> HttpRequest:
        if isinstance(event, Mapping):
            context = _mapping(event.get("requestContext"))
            http = _mapping(context.get("http"))
            if event.get("version") == "2.0" and isinstance(http.get("method"), str):
                path = event.get("rawPath") or http.get("path") or "/"
                return cls(event, Shape.HTTP_API, http["method"].upper(), str(path))
            method = event.get("httpMethod")
            if isinstance(method, str):
                shape = Shape.ALB if "elb" in context else Shape.REST_API
                return cls(event, shape, method.upper(), str(event.get("path") or "/"))
        raise NotAnHttpEventError(
            "idempotent_http needs an API Gateway, ALB or Function URL event, not "
            + _keys.describe_event(event)
        )

    @property
    def answers_multi_value(self) -> bool:
        """An ALB target group with multi-value headers on reads only multiValueHeaders."""
        return self.shape is Shape.ALB and isinstance(self.event.get("multiValueHeaders"), Mapping)

    def header(self, name: str) -> list[str]:
        """Every value of the header, its name matched in any case. Multi-value headers are
        the whole truth where the event has them: single `headers` keep only the last."""
        wanted = name.lower()
        multi = self.event.get("multiValueHeaders")
        if isinstance(multi, Mapping):
            return [
                str(value)
                for header, values in multi.items()
                if str(header).lower() == wanted and isinstance(values, list)
                for value in values
            ]
        single = _mapping(self.event.get("headers"))
        return [
            str(value)
            for header, value in single.items()
            if str(header).lower() == wanted and value is not None
        ]

    def body(self) -> bytes:
        body = self.event.get("body")
        if body is None:
            return b""
        if self.event.get("isBase64Encoded") is True:
            import base64
            import binascii

            try:
                return base64.b64decode(str(body), validate=True)
            except binascii.Error:
                pass  # not base64 after all: fingerprint it as sent
        # surrogatepass: a direct invoke can carry a lone surrogate; it is fingerprinted
        # byte for byte (it is no UTF-8 JSON) rather than crashing.
        return str(body).encode("utf-8", "surrogatepass")

    def fingerprint(self) -> list[Any]:
        """What a retry must repeat: method, path and body. A JSON body counts by its value,
        so other key order, whitespace or spelling of a number is the same request."""
        body = self.body()
        content_type = next(iter(self.header("content-type")), None)
        document = _read_json(body) if _may_be_json(content_type) else _NOT_JSON
        if document is _NOT_JSON:
            return [self.method, self.path, {"sha256": hashlib.sha256(body).hexdigest()}]
        return [self.method, self.path, {"json": document}]


_NOT_JSON: Any = object()


def _read_json(body: bytes) -> Any:
    """The body's JSON value, its numbers as Decimals so none loses a digit and each costs
    time linear in its spelling (a Python int past 18 digits would not); `_NOT_JSON` when
    it is no JSON. JSON too deep for the parser, or with an exponent past Decimal's range,
    is refused rather than counted byte for byte: its value is what a retry must repeat."""
    try:
        return json.loads(body, parse_float=decimal.Decimal, parse_int=_parse_int)
    except RecursionError:
        raise PayloadInvalidError("the JSON body is nested too deep to fingerprint") from None
    except decimal.DecimalException:
        raise PayloadInvalidError("the JSON body holds a number out of range") from None
    except ValueError:
        return _NOT_JSON


def _parse_int(text: str) -> int | decimal.Decimal:
    return int(text) if len(text) <= 18 else decimal.Decimal(text)


def _may_be_json(content_type: str | None) -> bool:
    if content_type is None:
        return True
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# -- the fingerprint's hash -------------------------------------------------------------


def canonical_payloads(layout: _keys.KeyLayout, *, fingerprint: bool = False) -> _keys.KeyLayout:
    """`layout` with payloads hashed by our canonical rules: the layout itself when they
    already are (the native one), else `CanonicalPayloads`. `fingerprint`: the payloads
    are `HttpRequest.fingerprint`'s (no float in them), hashed at the JSON encoder's speed."""
    if layout.payload_hash is _keys.payload_hash:
        return layout
    return CanonicalPayloads(layout, fingerprint=fingerprint)


class CanonicalPayloads:
    """A layout's record keys, and our meaning of a payload: for `idempotent_http`, whose
    fingerprint (or `payload=` selection) no other library hashes, under
    `layout="powertools"`.

    Powertools' encoder writes a Decimal as its string and a number as it was parsed, so
    through it `{"amount": 1.5}` and `{"amount": "1.5"}` are one request and `100` and
    `1e2` two. Here two payloads hash alike exactly when they are the same value by our
    canonical rules (`_base.canonical`), in one of two ways:

    - a payload whose every number is an integer below 10**18 in magnitude (however it
      is spelled: `1e2`, `100.0`) is hashed by the layout (Powertools' formula, the
      store's `hash_function` of `json.dumps(..., sort_keys=True)`) with those numbers as
      ints: for a body whose numbers are all written as plain integers (of at most 18
      characters), and for any body that is no JSON, the hash earlier versions stored, so
      a retry of a request they completed still replays after an upgrade;
    - any other payload is hashed as the native layout hashes it (sha256 of the canonical
      text).

    The two never meet: the way depends only on the payload's value (its numbers' values)
    and the types in it, never on its spelling or the stack; within the first, JSON text
    of ints, strings and containers is one-to-one; across the two, the hashed texts differ
    (the first has Powertools' `", "` separators, the canonical text none), and so do the
    hashes unless sha256 makes one of two different texts. `json.dumps` recurses: a
    payload nested nearly as deep as Python's recursion limit is `PayloadInvalidError`
    (as a body the parser cannot read that deep is), never another hash.
    """

    def __init__(self, layout: _keys.KeyLayout, *, fingerprint: bool = False) -> None:
        self.supports_scope = layout.supports_scope
        self.namespace = layout.namespace
        self.record_key = layout.record_key
        self._layout_hash = layout.payload_hash
        self._digest_text: Callable[[str], str] | None = getattr(layout, "digest_text", None)
        self._fingerprint = fingerprint and self._digest_text is not None

    def payload_hash(self, payload: Any) -> str:
        try:
            if self._fingerprint and self._digest_text is not None:
                text = _integral_text(payload)
                if text is not None:
                    return self._digest_text(text)
            else:
                integral = integral_json(payload)
                if integral is not _NOT_INTEGRAL:
                    return self._layout_hash(integral)
        except RecursionError:
            raise PayloadInvalidError("the payload is nested too deep to fingerprint") from None
        return _keys.payload_hash(payload)


_NOT_INTEGRAL: Any = object()
_INTEGER_LIMIT = 10**18


class _NotIntegralError(Exception):
    """The encoder met a number that is not an integer below 10**18 in magnitude."""


def _integral_default(value: Any) -> Any:
    if type(value) is decimal.Decimal:
        number = _integer_of(value)
        if number is not None:
            return number
    raise _NotIntegralError


_INTEGRAL_ENCODER = json.JSONEncoder(sort_keys=True, allow_nan=False, default=_integral_default)
"""Powertools' `json.dumps(value, sort_keys=True)` (the same separators, ASCII escapes and
key order), writing each Decimal as the int it equals and refusing any other."""


def _integral_text(fingerprint: Any) -> str | None:
    """Powertools' JSON text of a fingerprint with each number as the int it equals; None
    when one is not an integer below 10**18 in magnitude. The C encoder's speed, no walk
    in Python, for what `_read_json` makes: ints of at most 18 characters (written as
    they are), Decimals, NaN and the infinities (floats: refused), never another float."""
    try:
        return _INTEGRAL_ENCODER.encode(fingerprint)
    except _NotIntegralError:
        return None
    except ValueError:  # NaN or an infinity (allow_nan=False)
        return None


def integral_json(value: Any) -> Any:
    """`value`, a JSON value of the built-in types (dicts, lists, tuples, str, bool, None,
    numbers as int, float or Decimal), with every number as the int it equals, every
    tuple as a list and every key as its text; `_NOT_INTEGRAL` when a number is not an
    integer below 10**18 in magnitude (a fraction, a larger or non-finite number) or
    anything else is in it (a subclass, an enum, a model, a set: only a `payload=`
    callable returns those, the same types on every retry). Any depth: the walk keeps its
    own stack."""
    out: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(out, 0, value)]
    while stack:
        parent, slot, item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            parent[slot] = item
        elif kind is dict:
            members: dict[str, Any] = {}
            parent[slot] = members
            for key, member in item.items():
                name = key
                if type(key) is not str:
                    # A key is text, as in JSON (`{1: x}` is `{"1": x}`); two keys of
                    # one text (`{1: x, "1": y}`) are left to the canonical text.
                    try:
                        name = _canonical._key_text(key)
                    except TypeError:
                        return _NOT_INTEGRAL
                    if name in item or name in members:
                        return _NOT_INTEGRAL
                stack.append((members, name, member))
                members[name] = None
        elif kind is list or kind is tuple:
            elements: list[Any] = [None] * len(item)
            parent[slot] = elements
            stack.extend((elements, index, element) for index, element in enumerate(item))
        elif kind is int:
            if not -_INTEGER_LIMIT < item < _INTEGER_LIMIT:
                return _NOT_INTEGRAL
            parent[slot] = item
        elif kind is decimal.Decimal or kind is float:
            number = _integer_of(item)
            if number is None:
                return _NOT_INTEGRAL
            parent[slot] = number
        else:
            return _NOT_INTEGRAL
    return out[0]


def _integer_of(number: decimal.Decimal | float) -> int | None:
    """The int a Decimal or float equals, when it is an integer below 10**18 in magnitude;
    None otherwise. Time bounded by the number's digits, never by its exponent."""
    if isinstance(number, float):
        if number.is_integer() and -_INTEGER_LIMIT < number < _INTEGER_LIMIT:
            return int(number)
        return None
    if not number.is_finite():
        return None
    if number.is_zero():
        return 0
    if not 0 <= number.adjusted() < 18 or number != number.to_integral_value():
        return None
    return int(number)


# -- the key ----------------------------------------------------------------------------


class InvalidKeyError(Exception):
    """The key header is there but unusable; `detail` says why, for the 400 response.
    Private to this module: the wrapper turns it into a response."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def parse_key(values: Sequence[str], header: str = IDEMPOTENCY_KEY) -> str | None:
    """The key the header carries, or None when there is no such header.

    Accepts an RFC 8941 string (`"abc"`, with `\\"` and `\\\\` escapes) and a bare token
    (`abc`); either way at most 255 printable ASCII characters. Several values, as separate
    headers or joined by commas, are refused: the request is ambiguous.
    """
    if not values:
        return None
    if len(values) > 1:
        raise InvalidKeyError(f"send one {header} header; this request has {len(values)}")
    text = values[0].strip(" \t")
    if text.startswith('"'):
        key, end = _sf_string(text, header)
        rest = text[end:].lstrip(" \t")
        if rest.startswith(","):
            raise InvalidKeyError(f"send one {header} value; this request has several")
        if rest:
            raise InvalidKeyError(f"{header} has characters after its closing quote")
    else:
        if "," in text:
            raise InvalidKeyError(f"send one {header} value; this request has several")
        for char in text:
            if char in ' "\\':
                raise InvalidKeyError(f"{header} {_bad_char(char)}; quote the key to send it")
            if not "!" <= char <= "~":
                raise InvalidKeyError(f"{header} {_bad_char(char)}")
        key = text
    if not key:
        raise InvalidKeyError(f"{header} is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKeyError(
            f"{header} is {len(key)} characters long; at most {MAX_KEY_LENGTH} are allowed"
        )
    return key


def _sf_string(text: str, header: str) -> tuple[str, int]:
    """The RFC 8941 sf-string at the start of `text`, and where it ends."""
    chars: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if char == '"':
            return "".join(chars), index + 1
        if char == "\\":
            escaped = text[index + 1 : index + 2]
            if escaped not in ('"', "\\"):
                raise InvalidKeyError(f'in a quoted {header}, a backslash only escapes " or \\')
            chars.append(escaped)
            index += 2
            continue
        if not " " <= char <= "~":
            raise InvalidKeyError(f"{header} {_bad_char(char)}")
        chars.append(char)
        index += 1
    raise InvalidKeyError(f"{header} has no closing quote")


def _bad_char(char: str) -> str:
    if char == " ":
        return "contains a space"
    if char in '"\\':
        return f"contains {char!r} outside quotes"
    if ord(char) > 0x7F:
        return f"contains a non-ASCII character (U+{ord(char):04X})"
    return f"contains a control character (U+{ord(char):04X})"


# -- responses --------------------------------------------------------------------------


def status_below_500(status: int) -> bool:
    """The default `store_status`: a server error is not an answer worth replaying; the
    key is released so the retry runs again."""
    return status < 500


def status_of(response: Any) -> int:
    """The status the client sees. HTTP APIs and Function URLs answer a response without
    `statusCode` with 200; a `statusCode` that is no number is API Gateway's 502."""
    if isinstance(response, Mapping) and "statusCode" in response:
        try:
            return int(response["statusCode"])
        except (TypeError, ValueError):
            return 502
    return 200


def problem(
    request: HttpRequest,
    kind: ProblemType,
    detail: str,
    headers: Mapping[str, str] | None = None,
) -> HttpResponse:
    body: Problem = {
        "type": kind.uri,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
    }
    return respond(
        request, kind.status, {"Content-Type": PROBLEM_JSON, **(headers or {})}, json.dumps(body)
    )


def respond(
    request: HttpRequest, status: int, headers: Mapping[str, str], body: str
) -> HttpResponse:
    """A response in the shape the request's source expects."""
    response: HttpResponse = {"statusCode": status}
    if request.shape is Shape.ALB:
        response["statusDescription"] = _status_description(status)
    if request.answers_multi_value:
        response["multiValueHeaders"] = {name: [value] for name, value in headers.items()}
    else:
        response["headers"] = dict(headers)
    response["body"] = body
    response["isBase64Encoded"] = False
    return response


def _status_description(status: int) -> str:
    from http import HTTPStatus

    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def mark_replayed(response: Any, request: HttpRequest) -> Any:
    """The stored response with `Idempotent-Replayed: true`, in the header field its shape
    uses. An HTTP API response without `statusCode` is first spelled out as API Gateway
    reads it (200, JSON body), so it has headers to carry the mark."""
    if not isinstance(response, Mapping) or "statusCode" not in response:
        if request.shape is not Shape.HTTP_API:
            return response  # API Gateway answers it with 502 anyway: nothing to mark
        response = {
            "statusCode": 200,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps(response),
            "isBase64Encoded": False,
        }
    marked = dict(response)
    uses_multi_value = request.answers_multi_value or (
        "headers" not in marked and isinstance(marked.get("multiValueHeaders"), Mapping)
    )
    field = "multiValueHeaders" if uses_multi_value else "headers"
    headers = {
        name: value
        for name, value in _mapping(marked.get(field)).items()
        if str(name).lower() != REPLAYED_HEADER.lower()
    }
    headers[REPLAYED_HEADER] = ["true"] if uses_multi_value else "true"
    marked[field] = headers
    return marked


class _Replayed:
    """What the engine hands back for a replay, so the wrapper can mark it for this call."""

    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response


def _marker(on_replay: OnReplay | None) -> OnReplay:
    """The user's hook first (it sees the stored response), then our mark on what it
    returns: `Idempotent-Replayed` is part of the contract whatever the hook does."""
    if on_replay is None:
        return lambda response, info: _Replayed(response)
    return lambda response, info: _Replayed(on_replay(response, info))


# -- the decorator ----------------------------------------------------------------------


def idempotent_http(
    *,
    required: bool = True,
    methods: Iterable[str] = DEFAULT_METHODS,
    store_status: Callable[[int], bool] = status_below_500,
    header: str = IDEMPOTENCY_KEY,
    **options: Unpack[Options],
) -> Callable[[Callable[P, R]], IdempotentFunction[P, R | HttpResponse]]:
    """Make an HTTP handler `handler(event, context)` idempotent on its `Idempotency-Key`
    header, for API Gateway (REST and HTTP APIs), ALB and Function URLs.

    required: a protected request without the header is answered 400 (default); with
        False it runs unprotected.
    methods: the methods protected (default POST and PATCH); the others pass straight
        through with no store call. GET, HEAD and OPTIONS are never protected.
    scope: the tenant: the authorizer's principal by default (`authorizer_principal`),
        else a JMESPath expression or callable over the event; None for one shared scope.
    store_status: status -> bool; responses it refuses (default: 5xx) are not stored and
        their key is released, so the retry runs again.
    header: the header's name, matched in any case.
    on_replay: as for `idempotent`; what it returns is then marked `Idempotent-Replayed`.
    options: as for `idempotent` (`store`, `ttl_seconds`, ...); `payload` replaces the
        fingerprint (method, path, body) with a selector over the event, None turns it off.
    """
    protected = _protected_methods(methods)
    _check_header_name(header)
    for name, instead in (("key_required", "required"), ("store_result", "store_status")):
        if name in options:
            raise ConfigurationError(f"idempotent_http takes {instead}=, not {name}=")
    scope = options.pop("scope", _principal_or_anonymous)
    on_replay = options.pop("on_replay", None)
    payload: Callable[[HttpRequest], Any] | None = HttpRequest.fingerprint
    if "payload" in options:
        chosen = options.pop("payload")
        payload = None if chosen is None else _over_event(chosen, role="payload")

    def key(request: HttpRequest) -> str | None:
        return parse_key(request.header(header), header)

    def decorate(handler: Callable[P, R]) -> IdempotentFunction[P, R | HttpResponse]:
        # The caller's options were type-checked against Options; these replace four of them.
        settings: dict[str, Any] = {
            **options,
            "payload": payload,
            "scope": None if scope is None else _over_event(scope, role="scope"),
            "key_required": required,
            "store_result": lambda response: store_status(status_of(response)),
        }
        engine = build_engine(handler, key=key, on_replay=_marker(on_replay), **settings)
        # No other library hashes this payload: its meaning is ours in every layout (the
        # store's layout still keys the record, as Powertools would the same header).
        engine.settings = engine.settings._replace(
            layout=canonical_payloads(
                engine.settings.layout, fingerprint=payload is HttpRequest.fingerprint
            )
        )

        @functools.wraps(handler)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | HttpResponse:
            event = args[0] if args else kwargs.get("event")
            context = args[1] if len(args) > 1 else kwargs.get("context")
            request = HttpRequest.from_event(event)
            token = _execution.lambda_context.set(context)
            try:
                if request.method in protected:
                    call = functools.partial(call_settled, handler, *args, **kwargs)
                    return _answer(engine, request, context, header, call)
                emit(
                    logging.DEBUG,
                    "passed_through",
                    None,
                    namespace=engine.settings.namespace,
                    method=request.method,
                )
                return handler(*args, **kwargs)
            finally:
                _execution.lambda_context.reset(token)

        return mark(wrapper, engine)

    return decorate


def _answer(
    engine: Idempotency, request: HttpRequest, context: Any, header: str, handler: Callable[[], R]
) -> R | HttpResponse:
    """Run the handler under the protocol. A refusal before it ran becomes a problem
    response; a replay gets its mark. Errors the handler raises propagate unchanged."""
    handler_started = False

    def call() -> R:
        nonlocal handler_started
        handler_started = True
        return handler()

    try:
        outcome = engine.run(request, context, call)
    except (
        InvalidKeyError,
        KeyMissingError,
        InProgressError,
        NewerFormatError,
        PayloadMismatchError,
        PayloadInvalidError,
    ) as exc:
        if handler_started:  # raised inside the handler (a nested decorator): not ours
            raise
        return _refusal(request, exc, header, engine)
    if isinstance(outcome, _Replayed):
        return mark_replayed(outcome.response, request)  # type: ignore[no-any-return]
    return outcome


def _refusal(
    request: HttpRequest, exc: Exception, header: str, engine: Idempotency
) -> HttpResponse:
    """The problem response for a request the protocol refused before the handler ran.
    Refusals the engine did not count itself are counted here (log line, stats, metric)."""
    match exc:
        case InvalidKeyError(detail=detail):
            engine._count("key_invalid", logging.WARNING, None, detail=detail)
            return problem(request, ProblemType.KEY_INVALID, detail)
        case KeyMissingError():
            return problem(
                request,
                ProblemType.KEY_MISSING,
                f"this {request.method} needs an {header} header: a unique value per "
                "operation (a UUID, say), sent again unchanged on every retry",
            )
        case InProgressError(retry_after=retry_after):
            return problem(
                request,
                ProblemType.REQUEST_IN_PROGRESS,
                f"a request with this {header} is still being processed; "
                f"retry in {retry_after} s to get its response",
                {"Retry-After": str(retry_after)},
            )
        case NewerFormatError(retry_after=retry_after):
            return problem(
                request,
                ProblemType.NEWER_VERSION,
                f"this {header} was recorded by a newer version of this service, being "
                f"deployed; retry in {retry_after} s",
                {"Retry-After": str(retry_after)},
            )
        case PayloadMismatchError():
            return problem(
                request,
                ProblemType.KEY_REUSED,
                f"this {header} was used for a different request (method, path or body); "
                "a new request needs a new key",
            )
        case PayloadInvalidError():
            engine._count("payload_invalid", logging.WARNING, None, detail=str(exc))
            return problem(request, ProblemType.BODY_UNFINGERPRINTABLE, str(exc))
        case _:
            raise exc


def _over_event(selector: Selector, *, role: str) -> Callable[[HttpRequest], Any]:
    """A user's selector sees the event, as with `idempotent`, not our parsed request."""
    compiled = _keys.compile_selector(selector, role=role)
    return lambda request: compiled(request.event)


def _protected_methods(methods: Iterable[str]) -> frozenset[str]:
    if isinstance(methods, str):
        methods = (methods,)
    chosen = frozenset(str(method).strip().upper() for method in methods)
    if not chosen or "" in chosen:
        raise ConfigurationError("methods must name at least one HTTP method")
    safe = sorted(chosen & SAFE_METHODS)
    if safe:
        raise ConfigurationError(
            f"methods: {', '.join(safe)} change nothing and are never protected"
        )
    return chosen


def _check_header_name(header: str) -> None:
    token_chars = "!#$%&'*+-.^_`|~"
    if (
        not isinstance(header, str)
        or not header
        or not all(char.isascii() and (char.isalnum() or char in token_chars) for char in header)
    ):
        raise ConfigurationError(f"header must be an HTTP header name, not {header!r}")
