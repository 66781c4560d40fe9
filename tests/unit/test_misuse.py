"""Misuse refused where it is made: a callable whose result is not known when it returns is
refused at decoration by every front end; one that returns such a result anyway (a plain
function that hands back a coroutine, a generator, a future...) gets `DeferredResultError`,
its key is released, nothing of what it deferred runs, and a correct call later runs once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from unittest.mock import AsyncMock

import pytest

from lambda_idempotency import (
    ConfigurationError,
    DeferredResultError,
    DynamoDBStore,
    MisuseError,
    Status,
    idempotent,
    idempotent_function,
    idempotent_http,
    idempotent_record,
    process_batch,
)
from tests.batch_events import batch, failed, sqs_record
from tests.conftest import FakeContext
from tests.http_events import http_event
from tests.unit.test_decorators import items

# -- the front ends, each applied to the same user callable --------------------------------


def _process_batch_with(function: Any, store: DynamoDBStore) -> Any:
    """process_batch with a plain record handler: it is decorated when the batch comes."""
    return process_batch(batch(sqs_record("m-1", {"n": 1})), FakeContext(), function)


DECORATE: dict[str, Callable[[Any, DynamoDBStore], Any]] = {
    "idempotent": lambda f, store: idempotent(key="order_id", store=store)(f),
    "idempotent_function": lambda f, store: idempotent_function(key="order_id", store=store)(f),
    "idempotent_http": lambda f, store: idempotent_http(store=store)(f),
    "idempotent_record": lambda f, store: idempotent_record(store=store)(f),
    "process_batch": _process_batch_with,
}


@pytest.fixture
def default_table(moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch) -> DynamoDBStore:
    """process_batch's plain handlers use the default store: the same moto table."""
    monkeypatch.setenv("IDEMPOTENCY_TABLE", moto_store.table_name)
    return moto_store


class Untouchable:
    """A DynamoDB client that fails the test on any use: decoration makes no call."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"DynamoDB was called ({name}) at decoration")


@pytest.fixture
def untouched(monkeypatch: pytest.MonkeyPatch) -> DynamoDBStore:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "never-used")
    return DynamoDBStore("never-used", client=Untouchable())  # type: ignore[arg-type]


# -- callables that defer their result, as users write them ----------------------------------

effects: list[str] = []


async def charge_async(*args: Any, **kwargs: Any) -> str:
    effects.append("async")
    return "charged"


def charge_generator(*args: Any, **kwargs: Any) -> Iterator[str]:
    effects.append("generator")
    yield "charged"


async def charge_async_generator(*args: Any, **kwargs: Any) -> AsyncIterator[str]:
    effects.append("async generator")
    yield "charged"


@contextlib.contextmanager
def charging(*args: Any, **kwargs: Any) -> Iterator[str]:
    effects.append("context manager")
    yield "charged"


@contextlib.asynccontextmanager
async def charging_async(*args: Any, **kwargs: Any) -> AsyncIterator[str]:
    effects.append("async context manager")
    yield "charged"


class AsyncCharger:
    async def __call__(self, *args: Any, **kwargs: Any) -> str:
        effects.append("async __call__")
        return "charged"

    async def charge(self, *args: Any, **kwargs: Any) -> str:
        effects.append("async method")
        return "charged"


class GeneratorCharger:
    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        effects.append("generator __call__")
        yield "charged"


def _marked_by_asyncio() -> Callable[..., Any]:
    """A sync wrapper marked as a coroutine function the way asyncio's marker does it (what
    AsyncMock and pre-3.12 `markcoroutinefunction` backports such as asgiref's set)."""

    @functools.wraps(charge_async)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return charge_async(*args, **kwargs)

    wrapper._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
    return wrapper


DEFERRING: dict[str, tuple[Callable[[], Any], str]] = {
    "async def": (lambda: charge_async, "`charge_async` is a coroutine function"),
    "generator function": (lambda: charge_generator, "`charge_generator` is a generator"),
    "async generator function": (
        lambda: charge_async_generator,
        "`charge_async_generator` is an async generator function",
    ),
    "@contextmanager": (lambda: charging, "`charging` is a @contextmanager function"),
    "@asynccontextmanager": (
        lambda: charging_async,
        "`charging_async` is an @asynccontextmanager function",
    ),
    "functools.partial of async def": (
        lambda: functools.partial(charge_async, "acme"),
        "`charge_async` is a coroutine function",
    ),
    "nested partial of async def": (
        lambda: functools.partial(functools.partial(charge_async), "acme"),
        "`charge_async` is a coroutine function",
    ),
    "instance with async __call__": (
        AsyncCharger,
        "`AsyncCharger.__call__` is a coroutine function",
    ),
    "instance with generator __call__": (
        GeneratorCharger,
        "`GeneratorCharger.__call__` is a generator function",
    ),
    "bound async method": (
        lambda: AsyncCharger().charge,
        "`AsyncCharger.charge` is a coroutine function",
    ),
    "staticmethod of async def": (
        lambda: staticmethod(charge_async),
        "`charge_async` is a coroutine function",
    ),
    "classmethod of async def": (
        lambda: classmethod(charge_async),
        "`charge_async` is a coroutine function",
    ),
    "AsyncMock": (AsyncMock, "is a coroutine function"),
    "marked with asyncio's coroutine marker": (
        _marked_by_asyncio,
        "`charge_async` is a coroutine function",
    ),
}
if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+: the stdlib's own mark
    DEFERRING["inspect.markcoroutinefunction"] = (
        lambda: inspect.markcoroutinefunction(lambda *args, **kwargs: charge_async()),
        "is a coroutine function",
    )


AWAITING = ("idempotent", "idempotent_function")
"""The front ends that await a coroutine function's result (and give back one)."""


def _awaited(front_end: str, misuse: str) -> bool:
    """A coroutine function (however it is reached) under a front end that awaits it; a
    classmethod object is not callable, and stays refused."""
    coroutine_function = DEFERRING[misuse][1].endswith("is a coroutine function")
    return front_end in AWAITING and coroutine_function and misuse != "classmethod of async def"


CLASSMETHODS_AWAITED = {(front_end, "classmethod of async def") for front_end in AWAITING}
"""Awaited, but a classmethod object is not callable: refused with where to put it."""


@pytest.mark.parametrize(
    ("front_end", "misuse"),
    [
        (f, m)
        for f in DECORATE
        for m in DEFERRING
        if not _awaited(f, m) and (f, m) not in CLASSMETHODS_AWAITED
    ],
)
def test_a_callable_that_defers_its_result_is_refused_at_decoration_saying_why(
    untouched: DynamoDBStore, front_end: str, misuse: str
) -> None:
    make, names_it = DEFERRING[misuse]
    effects.clear()

    with pytest.raises(ConfigurationError) as refused:
        DECORATE[front_end](make(), untouched)

    message = str(refused.value)
    assert names_it in message
    assert "before" in message and "effect happens" in message  # why
    if "async" in misuse or "Async" in misuse or "marker" in misuse or "mark" in misuse:
        if front_end in AWAITING:  # an async generator, an async context manager
            assert "async def" in message  # what to decorate instead
        else:
            assert "asyncio.run" in message  # and the way to do it
    assert effects == []


@pytest.mark.parametrize(("front_end", "misuse"), sorted(CLASSMETHODS_AWAITED))
def test_a_classmethod_of_an_async_def_is_refused_with_the_order_to_use(
    untouched: DynamoDBStore, front_end: str, misuse: str
) -> None:
    with pytest.raises(ConfigurationError, match="put @classmethod above"):
        DECORATE[front_end](DEFERRING[misuse][0](), untouched)


@pytest.mark.parametrize(
    ("front_end", "misuse"),
    [(f, m) for f in DECORATE for m in DEFERRING if _awaited(f, m)],
)
def test_a_coroutine_function_is_awaited_by_idempotent_and_idempotent_function(
    untouched: DynamoDBStore, front_end: str, misuse: str
) -> None:
    """However the coroutine function is reached (a partial, a method, an async __call__,
    a marker), the decorated callable is a coroutine function: `_protocol.coroutines` awaits it."""
    make, _ = DEFERRING[misuse]
    effects.clear()

    protected = DECORATE[front_end](make(), untouched)

    assert inspect.iscoroutinefunction(protected)
    assert effects == []


def test_a_classmethod_object_under_the_decorator_is_refused_with_the_order_to_use(
    moto_store: DynamoDBStore,
) -> None:
    def refund(cls: type, order_id: str) -> str:
        return "refunded"

    with pytest.raises(ConfigurationError, match="put @classmethod above"):
        idempotent_function(key="order_id", store=moto_store)(classmethod(refund))


# -- what stays accepted ----------------------------------------------------------------


def test_the_workaround_a_plain_def_that_runs_the_coroutine_is_protected(
    moto_store: DynamoDBStore,
) -> None:
    """A sync function wrapping a coroutine function (`__wrapped__` points at it) is accepted:
    it runs the coroutine to its end, and is how async code is protected today."""
    runs: list[str] = []

    async def charge(order_id: str) -> dict[str, str]:
        await asyncio.sleep(0)
        runs.append(order_id)
        return {"charged": order_id}

    @idempotent_function(key="order_id", store=moto_store)
    @functools.wraps(charge)
    def charge_now(order_id: str) -> dict[str, str]:
        return asyncio.run(charge(order_id))

    assert charge_now("o-1") == {"charged": "o-1"}
    assert charge_now("o-1") == {"charged": "o-1"}
    assert runs == ["o-1"]


class Charger:
    def __call__(self, order_id: str) -> str:
        return f"charged {order_id}"


@pytest.mark.parametrize(
    "plain",
    [
        lambda order_id: order_id,
        functools.partial(lambda prefix, order_id: prefix + order_id, "o-"),
        Charger(),
    ],
    ids=["lambda", "partial", "instance"],
)
def test_plain_callables_are_accepted_and_run_once(
    moto_store: DynamoDBStore, plain: Callable[..., Any]
) -> None:
    protected = idempotent_function(key="order_id", store=moto_store)(plain)
    assert protected(order_id="1") == protected(order_id="1")


# -- a plain function that returns a result still to come, at run time ------------------


def _coroutine(ran: list[str]) -> Any:
    async def charge() -> str:
        ran.append("coroutine")
        return "charged"

    return charge()


def _generator(ran: list[str]) -> Any:
    def charge() -> Iterator[str]:
        ran.append("generator")
        yield "charged"

    return charge()


def _async_generator(ran: list[str]) -> Any:
    async def charge() -> AsyncIterator[str]:
        ran.append("async generator")
        yield "charged"

    return charge()


def _lazy_map(ran: list[str]) -> Any:
    return map(ran.append, ["map"])


def _context_manager(ran: list[str]) -> Any:
    @contextlib.contextmanager
    def charging() -> Iterator[str]:
        ran.append("context manager")
        yield "charged"

    return charging()


class _Awaitable:
    def __init__(self, ran: list[str]) -> None:
        self.ran = ran

    def __await__(self) -> Iterator[None]:
        self.ran.append("awaitable")
        yield None


RUN_TIME: dict[str, Callable[[list[str], list[Callable[[], None]]], Any]] = {
    "coroutine": lambda ran, cleanup: _coroutine(ran),
    "generator": lambda ran, cleanup: _generator(ran),
    "async generator": lambda ran, cleanup: _async_generator(ran),
    "lazy iterator": lambda ran, cleanup: _lazy_map(ran),
    "context manager": lambda ran, cleanup: _context_manager(ran),
    "awaitable": lambda ran, cleanup: _Awaitable(ran),
}


def _pending_future(ran: list[str], cleanup: list[Callable[[], None]]) -> Any:
    """A future queued behind a busy worker: not started when it is returned."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    busy = threading.Event()
    pool.submit(busy.wait, 10)
    cleanup.append(lambda: (busy.set(), pool.shutdown(wait=True)))
    return pool.submit(ran.append, "future")


def _asyncio_task(ran: list[str], cleanup: list[Callable[[], None]]) -> Any:
    """A task created on a loop that has not run it yet."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(_coroutine(ran))

    def finish() -> None:
        loop.run_until_complete(asyncio.sleep(0))  # lets the cancelled task end
        loop.close()

    cleanup.append(finish)
    return task


RUN_TIME["pending future"] = _pending_future
RUN_TIME["asyncio task"] = _asyncio_task


def _stopped(result: Any) -> bool:
    """Closed or cancelled, so nothing can run it; what the library only drops (an async
    generator, an iterator, an awaitable) runs only if someone holds it, and nobody does."""
    if inspect.iscoroutine(result):
        return inspect.getcoroutinestate(result) == inspect.CORO_CLOSED
    if inspect.isgenerator(result):
        return inspect.getgeneratorstate(result) == inspect.GEN_CLOSED
    if isinstance(result, concurrent.futures.Future | asyncio.Future):
        return result.cancelled()
    return True


class Calls:
    """One front end around a user function that first returns a result still to come
    (`deferred`), then, fixed, runs its effect and returns its result."""

    def __init__(self, front_end: str, store: DynamoDBStore, deferred: Callable[[], Any]) -> None:
        self.front_end = front_end
        self.store = store
        self.deferred: Callable[[], Any] | None = deferred
        self.runs: list[str] = []
        self.handler = self._decorated()

    def _body(self) -> Any:
        if self.deferred is not None:
            return self.deferred()
        self.runs.append("ran")
        return {"charged": 5}

    def _decorated(self) -> Any:
        store, body = self.store, self._body
        if self.front_end == "idempotent_function":
            return idempotent_function(key="order_id", store=store)(lambda order_id: body())
        if self.front_end == "idempotent_http":

            def api(event: Any, context: Any) -> Any:
                result = body()
                if isinstance(result, dict):
                    return {"statusCode": 201, "body": json.dumps(result)}
                return result

            return idempotent_http(store=store)(api)
        if self.front_end in ("idempotent_record", "process_batch"):

            def record_handler(record: Any) -> Any:
                return body()

            if self.front_end == "process_batch":
                return record_handler  # decorated by process_batch, with its defaults
            return idempotent_record(store=store)(record_handler)
        return idempotent(key="order_id", store=store)(lambda event, context: body())

    def __call__(self) -> Any:
        """The outcome of one call: its result, or the error it raised (a batch reports it)."""
        if self.front_end == "idempotent_function":
            return self.handler(order_id="o-1")
        if self.front_end == "idempotent_http":
            event = http_event("http-api", headers={"Idempotency-Key": "k-1"}, body="{}")
            return self.handler(event, FakeContext())
        if self.front_end in ("idempotent_record", "process_batch"):
            event = batch(sqs_record("m-1", {"n": 1}))
            return failed(process_batch(event, FakeContext(), self.handler))
        return self.handler({"order_id": "o-1"}, FakeContext())


@pytest.mark.parametrize("front_end", DECORATE)
@pytest.mark.parametrize("kind", RUN_TIME)
def test_a_result_still_to_come_releases_the_key_runs_nothing_and_a_fixed_call_runs_once(
    default_table: DynamoDBStore, front_end: str, kind: str
) -> None:
    moto_store = default_table
    deferred_ran: list[str] = []
    cleanup: list[Callable[[], None]] = []
    made: list[Any] = []

    def deferred() -> Any:
        made.append(RUN_TIME[kind](deferred_ran, cleanup))
        return made[-1]

    calls = Calls(front_end, moto_store, deferred)
    try:
        if front_end in ("idempotent_record", "process_batch"):
            assert calls() == ["m-1"]  # reported, redelivered: never acknowledged
        else:
            with pytest.raises(DeferredResultError, match="not known when it returns") as raised:
                calls()
            assert isinstance(raised.value, MisuseError)
            assert raised.value.key_hash is not None
            assert "key was released" in str(raised.value)
    finally:
        for finish in cleanup:
            finish()

    assert deferred_ran == []  # closed or cancelled: it never runs, now or later
    assert len(made) == 1
    assert _stopped(made[0])
    assert [item["status"]["S"] for item in items(moto_store)] == [Status.RELEASED.value]

    calls.deferred = None  # the function fixed: the next call runs, once, then replays
    first, retry = calls(), calls()
    assert calls.runs == ["ran"]
    if front_end == "idempotent_http":
        assert (first["statusCode"], retry["statusCode"]) == (201, 201)
        assert retry["headers"]["Idempotent-Replayed"] == "true"
    elif front_end in ("idempotent_record", "process_batch"):
        assert first == retry == []
    else:
        assert first == retry == {"charged": 5}


def test_a_future_already_running_is_reported_as_going_on(moto_store: DynamoDBStore) -> None:
    """What cannot be stopped is said so: the key is released all the same."""
    started, finish = threading.Event(), threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:

        @idempotent_function(key="order_id", store=moto_store)
        def charge(order_id: str) -> Any:
            future = pool.submit(lambda: (started.set(), finish.wait(10)))
            started.wait(10)
            return future

        try:
            with pytest.raises(DeferredResultError, match="could not be cancelled"):
                charge("o-1")
        finally:
            finish.set()
    assert [item["status"]["S"] for item in items(moto_store)] == [Status.RELEASED.value]


def test_unprotected_runs_refuse_a_result_still_to_come_too(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With IDEMPOTENCY_DISABLED (users' unit tests) the misuse shows up just the same."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    ran: list[str] = []

    @idempotent_function(key="order_id", store=moto_store)
    def charge(order_id: str) -> Any:
        return _coroutine(ran)

    with (
        pytest.warns(RuntimeWarning, match="IDEMPOTENCY_DISABLED"),
        pytest.raises(DeferredResultError) as raised,
    ):
        charge("o-1")
    assert raised.value.key_hash is None
    assert ran == []


def test_a_callable_without_readable_parameters_is_refused_at_decoration(
    untouched: DynamoDBStore,
) -> None:
    """idempotent_function gives its selectors the arguments by name: a callable whose
    parameters cannot be read gets a ConfigurationError, not a raw ValueError."""
    with pytest.raises(ConfigurationError, match="cannot read the parameters"):
        idempotent_function(key="order_id", store=untouched)(dict)


def test_a_record_handler_that_cannot_be_weakly_referenced_runs(
    default_table: DynamoDBStore,
) -> None:
    """process_batch keeps a plain handler's engine by a weak reference; one it cannot
    reference that way (here a staticmethod object) is decorated for each batch instead of
    failing with a raw TypeError."""
    seen: list[str] = []

    def ship(record: Any) -> None:
        seen.append(record.message_id)

    event = batch(sqs_record("m-1", {"n": 1}))
    assert process_batch(event, FakeContext(), staticmethod(ship)) == {"batchItemFailures": []}
    assert process_batch(event, FakeContext(), staticmethod(ship)) == {"batchItemFailures": []}
    assert seen == ["m-1"]
