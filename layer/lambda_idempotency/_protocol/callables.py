"""What a decorator can protect: a callable whose result is known when it returns.

The protocol completes the key with what the call returned. A coroutine function returns a
coroutine before its body has run, a generator function a generator, a `@contextmanager`
function a context manager whose body runs only inside `with`: completing the key then
stores a "not stored" marker for an effect that has not happened yet, and if it then fails
or never happens, every retry gets an error until the key expires.

Two checks, so no such call ever completes a key:

- `check_callable`, at decoration: a callable that says it defers its result (its code
  flags, asyncio's coroutine marker, contextlib's helper, an async `__call__`, through
  `functools.partial`, bound methods, `staticmethod` and `classmethod`) is refused with a
  `ConfigurationError`. A wrapper that only says so through `__wrapped__` is not: a plain function
  that runs a coroutine to its end with `asyncio.run` looks the same. The front ends that await
  (`idempotent`, `idempotent_function`: `_protocol.coroutines`) take coroutine functions, and
  complete the key with what the coroutine returned (`await_settled`).
- `call_settled`, at run time, inside the protected call: a result that is still to come (a
  coroutine, a generator, an awaitable, a future, an iterator) is stopped where it can be
  (closed, cancelled) and never returned; `DeferredResultError` is raised instead, so the
  protocol releases the key, fenced on its owner, as for any exception. The key never holds
  a marker for an effect that did not happen, and a correct call later runs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable
from types import CodeType
from typing import Any, TypeVar

from .._base.errors import ConfigurationError, DeferredResultError, NoActiveExecutionError
from .._stores.encoding import deferred_kind
from . import execution as _execution

R = TypeVar("R")

ASYNC_ADVICE = (
    "this front end takes plain functions (idempotent and idempotent_function take an "
    "async def): decorate a plain def that runs the coroutine to its end and returns its "
    "result, e.g. `return asyncio.run(charge(order))`"
)
WHY = "so the key would be completed before the effect happens"
DEFERS = {
    "a coroutine function": (
        f"calling it returns a coroutine before its body runs, {WHY}; {ASYNC_ADVICE}"
    ),
    "an async generator function": (
        f"calling it returns an async generator before its body runs, {WHY}; {ASYNC_ADVICE}"
    ),
    "a generator function": (
        f"calling it returns a generator before its body runs, {WHY}; decorate a function "
        "that returns the items, e.g. `return list(items(order))`"
    ),
    "a @contextmanager function": (
        f"calling it returns a context manager whose body runs only inside `with`, {WHY}; "
        "decorate the function that does the work inside the `with`"
    ),
    "an @asynccontextmanager function": (
        f"calling it returns a context manager whose body runs only inside `async with`, "
        f"{WHY}; {ASYNC_ADVICE}"
    ),
}
AWAITING_DEFERS = {
    "an async generator function": (
        f"calling it returns an async generator before its body runs, {WHY}; decorate an "
        "async def that collects the items, e.g. `return [item async for item in items(order)]`"
    ),
    "an @asynccontextmanager function": (
        f"calling it returns a context manager whose body runs only inside `async with`, "
        f"{WHY}; decorate the async def that does the work inside the `async with`"
    ),
}
"""The refusals of a front end that awaits coroutine functions: the async ways that still
defer their result."""
COROUTINE_FUNCTION = "a coroutine function"
RESULT_ADVICE = (
    "Return the finished result: run a coroutine to its end (`asyncio.run`), collect a "
    "generator or an iterator (`list(...)`), wait for a future (`.result()`)"
)
PLAIN_RESULTS = frozenset({dict, list, str, int, float, bool, type(None), tuple, bytes})
"""Results that need no further look: almost every result a handler returns."""


def check_callable(function: Any, *, awaits: bool = False) -> None:
    """Refuse, at decoration, a callable whose result is not known when it returns (when
    awaited, for a front end that `awaits` coroutine functions)."""
    found = _deferring(function)
    if found is not None:
        subject, kind = found
        if not awaits:
            raise ConfigurationError(f"{subject} is {kind}: {DEFERS[kind]}")
        if kind != COROUTINE_FUNCTION:
            reason = AWAITING_DEFERS.get(kind, DEFERS[kind])
            raise ConfigurationError(f"{subject} is {kind}: {reason}")
    if not callable(function):
        advice = ""
        if isinstance(function, classmethod):
            advice = ": put @classmethod above the idempotent decorator, so that it decorates "
            advice += "the function itself"
        raise ConfigurationError(f"{_name(function)} is not callable{advice}")


def is_coroutine_callable(function: Any) -> bool:
    """Whether calling `function` starts a coroutine: an async def, also through a partial,
    a method, an async `__call__` or a coroutine marker."""
    found = _deferring(function)
    return found is not None and found[1] == COROUTINE_FUNCTION


def call_settled(function: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """`function(*args, **kwargs)`, or DeferredResultError when what it returned is still to
    come; what can be stopped of it is stopped first, so it never runs after the key is
    free."""
    result = function(*args, **kwargs)
    result_type: type[Any] = type(result)
    if result_type in PLAIN_RESULTS:
        return result
    what = deferred_kind(result_type)
    if what is None:
        return result
    raise _deferred(function, result, what)


async def await_settled(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`await function(*args, **kwargs)`, refusing a result still to come as `call_settled`
    does (a coroutine that returns another coroutine, a generator...)."""
    result = await function(*args, **kwargs)
    result_type: type[Any] = type(result)
    if result_type in PLAIN_RESULTS:
        return result
    what = deferred_kind(result_type)
    if what is None:
        return result
    raise _deferred(function, result, what)


def _deferred(function: Any, result: Any, what: str) -> DeferredResultError:
    fate = _stop(result)
    try:
        key_hash = _execution.current_execution().key_hash
    except NoActiveExecutionError:  # run unprotected (IDEMPOTENCY_DISABLED, no key)
        key_hash = None
    return DeferredResultError(
        f"{_name(function)} returned {what} ({type(result).__qualname__}), whose result is "
        f"not known when it returns: nothing was stored and the key was released, as when a "
        f"function raises; the {what.split(' ', 1)[1]} {fate}. {RESULT_ADVICE}",
        key_hash=key_hash,
    )


def nested_deferred(found: tuple[Any, ...], key_hash: str | None) -> DeferredResultError:
    """DeferredResultError for results still to come found inside a result (a forgotten
    `await`: `return {"charge": charge(order)}`); each is stopped first, as a top-level one
    is, so none runs once the key is free."""
    fates = [_stop(value) for value in found]
    what = deferred_kind(type(found[0])) or "a result still to come"
    return DeferredResultError(
        f"the result holds {what} ({type(found[0]).__qualname__}"
        f"{f' and {len(found) - 1} more' if len(found) > 1 else ''}), whose result is not "
        f"known when the call returns: nothing was stored and the key was released, as when "
        f"a function raises; the {what.split(' ', 1)[1]} {fates[0]}. {RESULT_ADVICE}",
        key_hash=key_hash,
    )


def _stop(result: Any) -> str:
    """Close or cancel what is still to come, so it never runs once the key is free; say
    what became of it."""
    try:
        if inspect.iscoroutine(result) or inspect.isgenerator(result):
            result.close()
            return "was closed"
        cancel = getattr(result, "cancel", None)
        if callable(cancel) and cancel():
            return "was cancelled"
    except Exception:  # a loop already closed, a cancel() that raises: we tried
        pass
    if callable(getattr(result, "cancel", None)):
        return "could not be cancelled (it is running or done): its work may go on"
    return "was dropped"


def _deferring(function: Any) -> tuple[str, str] | None:
    """What defers its result (named as the message names it), and how."""
    target = _unwrapped(function)
    kind = _function_kind(target)
    if kind is not None:
        return _name(target), kind
    if inspect.isfunction(target) or isinstance(target, type):
        return None
    call = getattr(type(target), "__call__", None)  # noqa: B004 (an instance's own __call__)
    kind = None if call is None else _function_kind(_unwrapped(call))
    return None if kind is None else (f"`{type(target).__qualname__}.__call__`", kind)


def _function_kind(function: Any) -> str | None:
    if _is_coroutine_function(function):
        return "a coroutine function"
    if inspect.isasyncgenfunction(function):
        return "an async generator function"
    if inspect.isgeneratorfunction(function):
        return "a generator function"
    return _context_manager_kinds().get(getattr(function, "__code__", None))


def _unwrapped(function: Any) -> Any:
    """The function a partial, a bound method, a staticmethod or a classmethod calls."""
    while True:
        if isinstance(function, functools.partial | functools.partialmethod):
            function = function.func
        elif isinstance(function, staticmethod | classmethod) or inspect.ismethod(function):
            function = function.__func__
        else:
            return function


def _is_coroutine_function(function: Any) -> bool:
    """`inspect`'s test (code flags; `markcoroutinefunction` from Python 3.12), or asyncio's
    older marker (what `AsyncMock` and pre-3.12 `markcoroutinefunction` backports set).
    asyncio is looked up, never imported: if it is not loaded, nothing carries its marker."""
    if inspect.iscoroutinefunction(function):
        return True
    coroutines = sys.modules.get("asyncio.coroutines")
    marker = getattr(coroutines, "_is_coroutine", None)
    return marker is not None and getattr(function, "_is_coroutine", None) is marker


@functools.cache
def _context_manager_kinds() -> dict[CodeType | None, str]:
    """The code of the functions `contextlib.contextmanager` and `asynccontextmanager`
    return: one code object each, whatever function they decorate."""

    def body() -> Any:
        yield

    async def async_body() -> Any:
        yield

    return {
        contextlib.contextmanager(body).__code__: "a @contextmanager function",
        contextlib.asynccontextmanager(async_body).__code__: "an @asynccontextmanager function",
    }


def _name(function: Any) -> str:
    target = _unwrapped(function)
    name = getattr(target, "__qualname__", None)
    if not isinstance(name, str):
        name = f"{type(target).__qualname__} instance"
    return f"`{name}`"
