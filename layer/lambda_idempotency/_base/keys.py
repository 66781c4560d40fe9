"""Selecting the key, payload and scope from an event, and hashing them (from the canonical
text `_base.canonical` writes).

Raw keys and payloads never leave this module: the store sees `pk` (namespace + sha256)
and `payload_hash`, and so do the log lines.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import canonical as _canonical
from .errors import ConfigurationError, PayloadInvalidError

if TYPE_CHECKING:
    from typing import Protocol

Selector = str | Callable[[Any], Any]
"""A JMESPath expression over the event (Powertools' functions available), or a callable."""


def raw_event(data: Any) -> Any:
    """What a JMESPath selector sees of the value it is given, as Powertools' idempotency
    prepares it (`_prepare_data`): a dataclass as `dataclasses.asdict`, a pydantic model as
    `model_dump(mode="json")` (a pydantic v1 model as `.dict()`), an event source data class
    (`APIGatewayProxyEvent`, `SQSEvent`, ... from `@event_source` outside our decorator)
    as the raw event it wraps; anything else as it is. A dict costs one type check."""
    if type(data) is dict or isinstance(data, type):
        return data
    if hasattr(data, "__dataclass_fields__"):
        return dataclasses.asdict(data)
    model_dump = getattr(data, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    as_dict = getattr(data, "dict", None)
    if callable(as_dict):
        return as_dict()
    return getattr(data, "raw_event", data)


def compile_selector(
    selector: Selector, *, role: str, exact_numbers: bool = True
) -> Callable[[Any], Any]:
    """Turn a selector into a function of the event, failing at decoration time if invalid.

    A JMESPath expression runs over `raw_event(event)`, as Powertools' expressions do, so
    its keys and hashes are those of the plain event; a callable sees the event as given.
    With `exact_numbers`, `powertools_json` keeps a number a float cannot hold as a Decimal
    (our canonical hashing); without it, floats, as Powertools hashes them."""
    if callable(selector):
        return selector
    if not isinstance(selector, str) or not selector.strip():
        raise ConfigurationError(f"{role} must be a JMESPath expression or a callable")
    import jmespath
    from jmespath.exceptions import JMESPathError
    from jmespath.visitor import TreeInterpreter

    try:
        expression = jmespath.compile(selector)
    except JMESPathError as exc:
        raise ConfigurationError(f"{role} {selector!r} is not valid JMESPath: {exc}") from exc
    direct = _direct(expression.parsed, root=True)
    if direct is not None:
        return direct
    options = None
    if "powertools_" in selector and _calls_powertools(expression.parsed):
        # Powertools' functions (powertools_json, powertools_base64, ...) cost an import, so
        # only expressions that use them pay for it; without Powertools installed, the
        # decoration fails on a MissingExtraError naming its extra.
        try:
            functions = _json_functions(exact_numbers)
        except ModuleNotFoundError as exc:
            from .extras import missing_extra

            raise missing_extra(exc, f"{role} {selector!r} (Powertools' functions)") from exc
        options = jmespath.Options(custom_functions=functions)
    # `expression.search` builds a tree interpreter per call; one per selector does the same.
    interpreter, parsed = TreeInterpreter(options), expression.parsed

    def search(data: Any) -> Any:
        if type(data) is not dict:
            data = raw_event(data)
        return interpreter.visit(parsed, data)

    return search


def _calls_powertools(node: Mapping[str, Any]) -> bool:
    """Whether the parsed expression calls one of Powertools' functions (`powertools_json`,
    ...), not merely names a field that starts like one."""
    if node.get("type") == "function_expression" and str(node.get("value", "")).startswith(
        "powertools_"
    ):
        return True
    return any(
        _calls_powertools(child) for child in node.get("children", ()) if isinstance(child, dict)
    )


@functools.cache
def _json_functions(exact_numbers: bool) -> Any:
    """Powertools' JMESPath functions; with `exact_numbers`, a `powertools_json` whose
    numbers are floats only where the float reads back as the same value, so two bodies
    that differ past double precision (`0.30000000000000001`, `0.3`) never hash alike.
    Needs Powertools installed (the `powertools` extra)."""
    from aws_lambda_powertools.utilities.jmespath_utils import PowertoolsFunctions

    if not exact_numbers:
        return PowertoolsFunctions()
    import json
    from decimal import Decimal

    from jmespath.functions import signature

    def exact_float(text: str) -> float | Decimal:
        number = float(text)
        exact = Decimal(text)
        return number if Decimal(repr(number)) == exact else exact

    class ExactFunctions(PowertoolsFunctions):
        @signature({"types": ["string"]})
        def _func_powertools_json(self, value: str) -> Any:
            return json.loads(value, parse_float=exact_float)

    return ExactFunctions()


def _direct(node: Mapping[str, Any], *, root: bool = False) -> Callable[[Any], Any] | None:
    """The selectors keys mostly are (`@`, `id`, `body.order.id`, `[id, amount]`) as plain
    functions, with the JMESPath interpreter's semantics: a field of a non-object is null,
    and a path stops at the first null. None for anything else. At the `root`, the value is
    first the raw event (`raw_event`), checked inline: no call more for a dict."""
    kind = node["type"]
    if kind == "current":
        return raw_event if root else _identity
    if kind == "field":
        name = node["value"]
        if root:

            def root_field(value: Any) -> Any:
                if type(value) is not dict:
                    value = raw_event(value)
                try:
                    return value.get(name)
                except AttributeError:
                    return None

            return root_field

        def field(value: Any) -> Any:
            try:
                return value.get(name)
            except AttributeError:
                return None

        return field
    if kind not in ("subexpression", "multi_select_list"):
        return None
    children = node["children"]
    if kind == "subexpression":
        # Only the path's first step meets the root.
        steps = [_direct(child, root=root and not at) for at, child in enumerate(children)]
    else:
        steps = [_direct(child) for child in children]
    known = [step for step in steps if step is not None]
    if len(known) != len(steps):
        return None
    if kind == "subexpression":

        def path(value: Any) -> Any:
            for step in known:
                value = step(value)
                if value is None:
                    return None
            return value

        return path

    def select(value: Any) -> Any:
        if root and type(value) is not dict:
            value = raw_event(value)
        return None if value is None else [step(value) for step in known]

    return select


def _identity(value: Any) -> Any:
    return value


def describe_event(event: Any) -> str:
    """The event's kind and top-level keys, never its values (they may be personal data)."""
    if isinstance(event, Mapping):
        keys = sorted(str(key) for key in event)
        more = ", ..." if len(keys) > 6 else ""
        return f"a mapping with keys {', '.join(keys[:6])}{more}" if keys else "an empty mapping"
    return f"a {type(event).__qualname__}"


def is_missing(value: Any) -> bool:
    """None, an empty string and empty containers are no key: protecting on them would merge
    every such request into one."""
    if value is None:
        return True
    if isinstance(value, str | list | tuple | dict):
        return len(value) == 0 or (
            isinstance(value, list | tuple) and all(item is None for item in value)
        )
    return False


def _sha256(value: Any, role: str) -> str:
    """Key order, whitespace and the spelling of a number never change the hash of the same
    value (`_base.canonical` says what counts as the same)."""
    try:
        return hashlib.sha256(_canonical.canonical_bytes(value)).hexdigest()
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadInvalidError(f"the selected {role} cannot be fingerprinted: {exc}") from exc


def default_namespace(function: Callable[..., Any]) -> str:
    """Function name, module and qualified name: every SAM sample is `app.lambda_handler`, so
    the Lambda function's name keeps two functions sharing a table apart."""
    lambda_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
    while isinstance(function, functools.partial):
        # A partial has no name of its own ("functools.partial" for all of them): two
        # partials of different functions must not share their keys.
        function = function.func
    module = getattr(function, "__module__", "")
    qualname = getattr(function, "__qualname__", type(function).__qualname__)
    return f"{lambda_name}.{module}.{qualname}" if lambda_name else f"{module}.{qualname}"


if TYPE_CHECKING:  # for the type checker only: making a Protocol class costs a cold start
    # ~0.04 ms, and nothing checks a layout against it at run time
    class KeyLayout(Protocol):
        """How a store's records are keyed: what a decorator asks its store's layout for."""

        supports_scope: bool
        """Whether a scope (tenant) can enter the key."""

        def namespace(self, function: Callable[..., Any], given: str | None) -> str:
            """The key prefix for a decorated function, resolved once at decoration."""

        def record_key(self, namespace: str, scope: Any, key: Any) -> str:
            """The stored key of a selected key value (and scope, when the layout has one)."""

        def payload_hash(self, payload: Any) -> str:
            """The stored hash of a selected payload."""


def key_hash(namespace: str, scope: Any, key: Any) -> str:
    """The record's `pk`. The scope (tenant) is inside the hash, so tenants never collide."""
    return f"{namespace}#{_sha256([scope, key], 'key')}"


def payload_hash(payload: Any) -> str:
    return _sha256(payload, "payload")
