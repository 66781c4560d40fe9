"""`idempotent` for Lambda handlers and `idempotent_function` for any function.

Each decoration builds its own `Idempotency` engine from its own arguments; a store passed to
several decorators is only shared I/O, never shared configuration. On an `async def` both give back
a coroutine function, run by `_protocol.coroutines` (imported only then: no cold start pays for
asyncio).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, Unpack, cast

from ._base import keys as _keys
from ._base import observe as _observe
from ._base.clock import SYSTEM_CLOCK
from ._base.errors import ConfigurationError
from ._base.keys import Selector
from ._protocol import execution as _execution
from ._protocol.callables import await_settled, call_settled, check_callable, is_coroutine_callable
from ._protocol.engine import ResultCache
from ._protocol.execution import MAX_EXTENSION_SECONDS, shown
from ._protocol.run import DEFAULT_CLOCK_SKEW_SECONDS, Idempotency, Settings
from ._stores import encoding as _encoding
from ._stores.dynamodb.layout import NATIVE_KEYS
from ._stores.dynamodb.store import DynamoDBStore
from ._stores.record import OnReplay

if TYPE_CHECKING:
    from ._base.metrics import MetricsOption
    from ._options import Clock, Options
    from ._stores.contract import IdempotencyStore
    from ._stores.record import InProgressPolicy

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

if TYPE_CHECKING:  # for the type checker only: making a Protocol class costs a cold start ~0.1 ms

    class IdempotentFunction(Protocol[P, R_co]):
        """What the decorators give back: the function as it was called, and its engine as
        `.idempotency` (`handler.idempotency.stats`), so a type checker knows both."""

        @property
        def idempotency(self) -> Idempotency: ...

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


def mark(function: Callable[P, R], engine: Idempotency) -> IdempotentFunction[P, R]:
    """`function` with its engine as `.idempotency`, typed so."""
    function.idempotency = engine  # type: ignore[attr-defined]
    return cast("IdempotentFunction[P, R]", function)


MAX_TTL_SECONDS = 10 * 365 * 86_400
"""The longest a result replays: past it, an expiry no store keeps as given (a Valkey
expiry out of range, a DynamoDB TTL centuries away) and surely a unit mistaken."""


def _store_all(result: Any) -> bool:
    return True


def build_engine(
    function: Callable[..., Any],
    *,
    key: Selector,
    payload: Selector | None = "@",
    store: IdempotencyStore | None = None,
    ttl_seconds: int = 3600,
    lease_seconds: float | None = None,
    on_in_progress: InProgressPolicy = "raise",
    namespace: str | None = None,
    scope: Selector | None = None,
    key_required: bool = True,
    max_wait_seconds: float | None = None,
    store_result: Callable[[Any], bool] | None = None,
    cache_size: int = 256,
    clock: Clock = SYSTEM_CLOCK,
    clock_skew_seconds: float = DEFAULT_CLOCK_SKEW_SECONDS,
    on_replay: OnReplay | None = None,
    metrics: MetricsOption = None,
    awaits: bool = False,
) -> Idempotency:
    """Validate one decorator's arguments and build its engine (shared by every front end).
    `awaits`: the front end awaits a coroutine function's result (`_protocol.coroutines`)."""
    check_callable(function, awaits=awaits)
    if not isinstance(ttl_seconds, int) or not 0 < ttl_seconds <= MAX_TTL_SECONDS:
        raise ConfigurationError(
            f"ttl_seconds must be a positive whole number of at most {MAX_TTL_SECONDS:,} "
            f"(ten years), not {ttl_seconds!r}"
        )
    if lease_seconds is not None and not _seconds(lease_seconds, MAX_EXTENSION_SECONDS, 0):
        raise ConfigurationError(
            "lease_seconds must be a finite number of seconds, more than 0 and at most "
            f"{MAX_EXTENSION_SECONDS} (366 days, the longest a Lambda execution lives), "
            f"not {shown(lease_seconds)}"
        )
    if max_wait_seconds is not None and not _seconds(max_wait_seconds, MAX_EXTENSION_SECONDS):
        raise ConfigurationError(
            "max_wait_seconds must be a finite number of seconds, not negative (None: no "
            f"cap), not {shown(max_wait_seconds)}"
        )
    if on_in_progress not in ("raise", "wait"):
        raise ConfigurationError(
            f"on_in_progress must be 'raise' or 'wait', not {on_in_progress!r}"
        )
    if not _seconds(clock_skew_seconds, 60):
        raise ConfigurationError(
            f"clock_skew_seconds must be between 0 and 60, not {shown(clock_skew_seconds)}"
        )
    if cache_size < 0:
        raise ConfigurationError(f"cache_size must not be negative, not {cache_size!r}")
    layout = NATIVE_KEYS if store is None else store.layout
    if scope is not None and not layout.supports_scope:
        raise ConfigurationError(
            f"{store!r} keys records as Powertools does, which has no scope: put the tenant "
            "in the key expression instead (e.g. key='[tenant, order_id]')"
        )
    namespace = layout.namespace(function, namespace)
    # the default store is the one the decorator creates on first use, checked as it will be
    (store if store is not None else DynamoDBStore()).check_decoration(
        namespace, payload=payload is not None
    )
    exact = layout is NATIVE_KEYS  # Powertools' layout hashes what its own JMESPath parses
    settings = Settings(
        key=_keys.compile_selector(key, role="key", exact_numbers=exact),
        payload=None
        if payload is None
        else _keys.compile_selector(payload, role="payload", exact_numbers=exact),
        scope=None if scope is None else _keys.compile_selector(scope, role="scope"),
        store=_store_provider(store),
        namespace=namespace,
        ttl_seconds=ttl_seconds,
        lease_seconds=lease_seconds,
        on_in_progress=on_in_progress,
        max_wait_seconds=max_wait_seconds,
        key_required=key_required,
        should_store=store_result if store_result is not None else _store_all,
        clock=clock,
        skew_ms=int(clock_skew_seconds * 1000),
        on_replay=on_replay,
        layout=layout,
        observe=_observe.observer(metrics, namespace),
    )
    return Idempotency(
        settings,
        return_type=functools.cache(lambda: _encoding.return_type_of(function)),
        cache=ResultCache(max_items=cache_size) if cache_size > 0 else None,
    )


def _store_provider(store: IdempotencyStore | None) -> Callable[[], IdempotencyStore]:
    """The store, created on first use when not given, so unit tests that set
    IDEMPOTENCY_DISABLED need no table at import time."""
    if store is not None:
        return lambda: store
    return functools.cache(DynamoDBStore)


def idempotent(
    *, key: Selector, **options: Unpack[Options]
) -> Callable[[Callable[P, R]], IdempotentFunction[P, R]]:
    """Make a Lambda handler `handler(event, context)` idempotent on `key`, a JMESPath
    expression over the event or a callable of it. See `Options` for the rest."""

    def decorate(handler: Callable[P, R]) -> IdempotentFunction[P, R]:
        engine = build_engine(handler, key=key, awaits=True, **options)
        if is_coroutine_callable(handler):
            return _async_handler(handler, engine)

        @functools.wraps(handler)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            event = args[0] if args else kwargs.get("event")
            context = args[1] if len(args) > 1 else kwargs.get("context")
            durable = None
            if hasattr(context, "execution_context") or _envelope_shaped(event):
                durable = _durable_run(event, context)
            if durable is not None:
                context = durable.lambda_context  # nested functions lease per invocation
            token = _execution.lambda_context.set(context)
            try:
                return engine.run(
                    event, context, lambda: call_settled(handler, *args, **kwargs), durable
                )
            finally:
                _execution.lambda_context.reset(token)

        return mark(wrapper, engine)

    return decorate


def _async_handler(handler: Callable[P, R], engine: Idempotency) -> IdempotentFunction[P, R]:
    """`idempotent` on an async def handler: the same, awaited (`_protocol.coroutines`)."""
    from ._protocol import coroutines as _async

    @functools.wraps(handler)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        event = args[0] if args else kwargs.get("event")
        context = args[1] if len(args) > 1 else kwargs.get("context")
        if (hasattr(context, "execution_context") or _envelope_shaped(event)) and (
            _durable_run(event, context) is not None
        ):
            raise ConfigurationError(
                "@idempotent on an async def cannot protect a durable execution: the Durable "
                "Execution SDK calls sync handlers. Decorate a plain def handler"
            )
        token = _execution.lambda_context.set(context)
        try:
            return await _async.run(
                engine, event, context, lambda: await_settled(handler, *args, **kwargs)
            )
        finally:
            _execution.reset(_execution.lambda_context, token)

    return mark(wrapper, engine)  # type: ignore[arg-type]  # R is the coroutine's type


def _envelope_shaped(event: Any) -> bool:
    return (isinstance(event, dict) and "CheckpointToken" in event) or hasattr(
        event, "checkpoint_token"
    )


def _durable_run(event: Any, context: Any) -> Any:
    """The durable execution a handler runs in (`_protocol.durable`, imported only then), or None;
    refuses `@idempotent` outside `@durable_execution`, where it would see the SDK's envelope."""
    from ._protocol import durable as _durable

    if _durable.is_invocation_envelope(event):
        raise ConfigurationError(
            "@idempotent is outside @durable_execution: it sees the SDK's invocation envelope, "
            "not your event, and a suspension as a return value. Put it inside: "
            "@durable_execution, then @idempotent(...), then def handler(event, context)"
        )
    return _durable.durable_run(context)


def idempotent_function(
    *, key: Selector, **options: Unpack[Options]
) -> Callable[[Callable[P, R]], IdempotentFunction[P, R]]:
    """Make any function idempotent. The selectors see its arguments as a dict by parameter
    name (dataclasses and pydantic models as dicts), however they were passed:
    `@idempotent_function(key="order.id")` on `def ship(order: Order)`.

    The lease is the remaining time of a Lambda context among the arguments or of the
    enclosing `idempotent` handler, else `lease_seconds`.
    """

    def decorate(function: Callable[P, R]) -> IdempotentFunction[P, R]:
        engine = build_engine(function, key=key, awaits=True, **options)
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError) as exc:  # a builtin type or a C function without one
            raise ConfigurationError(
                f"idempotent_function cannot read the parameters of {function!r}, which its "
                f"selectors see by name: decorate a def that calls it ({exc})"
            ) from exc

        def selected(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], Any]:
            """What the selectors see, and the Lambda context the lease follows."""
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            data: dict[str, Any] = {}
            context = None
            for name, value in bound.arguments.items():
                if hasattr(value, "get_remaining_time_in_millis"):
                    context = value
                elif name not in ("self", "cls"):
                    data[name] = _plain(value)
            if context is None:
                context = _execution.lambda_context.get()
            return data, context

        if is_coroutine_callable(function):
            from ._protocol import coroutines as _async

            @functools.wraps(function)
            async def awaiting(*args: P.args, **kwargs: P.kwargs) -> Any:
                data, context = selected(*args, **kwargs)
                call = lambda: await_settled(function, *args, **kwargs)  # noqa: E731
                return await _async.run(engine, data, context, call)

            return mark(awaiting, engine)  # type: ignore[arg-type]  # R is the coroutine's

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            data, context = selected(*args, **kwargs)
            return engine.run(data, context, lambda: call_settled(function, *args, **kwargs))

        return mark(wrapper, engine)

    return decorate


def _plain(value: Any) -> Any:
    """Dataclasses and pydantic models as dicts, so JMESPath can select inside them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return model_dump(mode="json")
    return value


def _seconds(value: Any, most: float, above: float | None = None) -> bool:
    """A duration a decorator can use: a number (not a bool), from 0 (or past `above`) to
    `most`. NaN, infinity, a string and an int too large for a float fail here, at
    decoration, not as a ValueError or OverflowError in every call."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if not 0 <= value <= most:  # False for NaN; compared before any float() of a huge int
        return False
    return above is None or value > above
