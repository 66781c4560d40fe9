"""The tracers whose wrappers on botocore the lean paths call themselves.

X-Ray's SDK (and Powertools' Tracer, which is it) and OpenTelemetry's botocore instrumentation
see a call through two wrapt wrappers on botocore's classes: one on `BaseClient._make_api_call`
opens a subsegment or span around the call and reads the client, the operation, its parameters
and the answer (or the error); one on `Endpoint.prepare_request` puts the trace header on each
attempt's request. The lean path does neither method's work through botocore, so it calls the
wrappers itself, with what botocore would give them: the client, `(operation, parameters)`, and
each attempt's `AWSRequest` before it is prepared. The tracer's own code runs as it would, on
the same arguments, and records what it would.

Only wrappers named here are called; any other wrapper on those methods (or a wrapper on any
other method the path does not call) is something the path cannot honour, and the client makes
the call (`CannotHonourError`, which names the wrapper).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .plan import CannotHonourError

HONOURED = {
    "_make_api_call": frozenset(
        {
            "aws_xray_sdk.ext.botocore.patch._xray_traced_botocore",
            "opentelemetry.instrumentation.botocore.BotocoreInstrumentor._patched_api_call",
        }
    ),
    "prepare_request": frozenset(
        {
            "aws_xray_sdk.ext.boto_utils.inject_header",
            "opentelemetry.instrumentation.botocore."
            "BotocoreInstrumentor._patched_endpoint_prepare_request",
        }
    ),
}
"""Per botocore method, the wrappers the lean paths call in its place: X-Ray's (Powertools'
Tracer patches with it) and OpenTelemetry's."""

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
"""wrapt's calling convention: `wrapper(wrapped, instance, args, kwargs)`."""


def unwrapped(value: object, name: str) -> tuple[object, tuple[Wrapper, ...]]:
    """What `value` (a class's attribute `name`) wraps, and the wrappers around it, outermost
    first; CannotHonourError when a wrapper is not one the path calls. A plain function comes
    back as it is, with no wrappers."""
    wrappers: list[Wrapper] = []
    while _is_wrapt_wrapper(value):
        wrapper = getattr(value, "_self_wrapper", None)
        if wrapper_name(wrapper) not in HONOURED.get(name, ()):
            raise CannotHonourError(f"{name} is patched by {wrapper_name(wrapper)}")
        if getattr(value, "_self_enabled", None) is not None:
            raise CannotHonourError(f"{name} is patched by a wrapper enabled per call")
        assert wrapper is not None
        wrappers.append(wrapper)
        value = value.__wrapped__  # type: ignore[attr-defined]
    return value, tuple(wrappers)


def through(
    wrappers: tuple[Wrapper, ...],
    instance: Any,
    wrapped: Callable[..., Any],
    args: tuple[Any, ...],
) -> Any:
    """`wrapped(*args)` called as botocore's wrapped method would be: through each wrapper,
    outermost first, each given `instance` and `args` as wrapt gives them."""
    if len(wrappers) == 1:  # the usual case: no frame of ours between the caller and it
        return wrappers[0](wrapped, instance, args, {})
    call = wrapped
    for wrapper in reversed(wrappers):
        call = _bound(wrapper, instance, call)
    return call(*args)


def _bound(wrapper: Wrapper, instance: Any, inner: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return wrapper(inner, instance, args, kwargs)

    return call


def _is_wrapt_wrapper(value: object) -> bool:
    return any(
        cls.__name__ == "FunctionWrapper" and cls.__module__.split(".")[0] in ("wrapt", "_wrappers")
        for cls in type(value).__mro__
    )


def wrapper_name(wrapper: Any) -> str:
    """Where a wrapper's code is: its module and name as its code has them (a wrapper made
    with `functools.wraps` carries the names of what it wraps, not its own)."""
    function = getattr(wrapper, "__func__", wrapper)
    code = getattr(function, "__code__", None)
    module = getattr(function, "__globals__", {}).get("__name__")
    if code is not None and module is not None:
        return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
