"""The protocol for coroutine functions: the steps of `Idempotency.run`, driven from a loop.

- Every step that calls DynamoDB (claim, poll, complete, release) runs in a worker thread
  (the loop's default executor, the caller's context copied into it), so the loop serves its
  other tasks while a store call is in flight. The store's own client serves both: boto3
  clients are thread-safe.
- A step's sleep (a duplicate polling its holder, a completion backing off) is
  `asyncio.sleep`; an injected clock sleeps with its `async_sleep` coroutine if it has one,
  else with its `sleep` in the worker thread (a test's fake clock moves its time there).
  `time.sleep` never runs on the loop. A duplicate waiting on a store that wakes it blocks
  in a thread of its own (`_protocol.waiting.Block`), never on the loop nor in the executor.
- The coroutine itself runs in the caller's task, with `current_execution()` set: tasks it
  creates copy the context, and see it too.

Cancellation (`asyncio.CancelledError`, and so a timeout around the call):

- while the claim is in flight: the worker thread goes on (a request cannot be taken back),
  so its end is awaited; a claim it won is released, fenced, before the cancellation goes
  on. Between two polls of a holder: the wait stops, nothing was claimed.
- while the coroutine runs: the key is released, fenced, as for any exception.
- while the result is being stored: the effect has happened, so the completion runs to its
  end (a retry then replays it) and the cancellation goes on after it.

A release or a completion is never left halfway: cancellations that arrive while one runs
(a second cancel, a timeout firing again) are held until it ends, which each store call's
own timeouts bound, and then the task is cancelled. The result of a cancelled call is lost
to its caller, never its key: no key stays locked by a cancelled caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from .._base import observe as _observe
from .._base.clock import SystemClock
from .._base.errors import DeferredResultError
from . import claiming as _claiming
from . import completing as _completing
from . import execution as _execution
from . import replaying as _replaying
from . import waiting as _waiting
from .execution import Execution
from .run import Idempotency, _disabled, new_execution

if TYPE_CHECKING:
    from .._stores.contract import IdempotencyStore

if TYPE_CHECKING:
    from .._options import Clock

T = TypeVar("T")
Steps = Generator[float, None, Any]
CLOSED_STEP_WAIT_SECONDS = 60.0
"""How long a coroutine closed while its claim is in flight blocks for the claim's end: past
the client's own bounds (2 s to connect, 10 s to read, 3 attempts)."""


async def run(engine: Idempotency, data: Any, context: Any, call: Callable[[], Awaitable[T]]) -> T:
    """`Idempotency.run`, for a call that returns an awaitable."""
    if _disabled():
        engine._warn_disabled()  # points at the `await` of the decorated coroutine
        return await _run_unprotected(engine, call)
    pinned = _observe.pin_xray_entity()  # outcomes counted in worker threads go on it too
    try:
        return await _protected(engine, data, context, call)
    finally:
        with contextlib.suppress(ValueError):  # closed from another context: nothing to undo
            _observe.unpin_xray_entity(pinned)


async def _protected(
    engine: Idempotency, data: Any, context: Any, call: Callable[[], Awaitable[T]]
) -> T:
    identity = engine._identify(data)
    if identity is None:
        return await _run_unprotected(engine, call)
    pk, payload_hash = identity
    if engine.cache is not None:
        cached = _replaying.from_cache(engine, pk, payload_hash)
        if cached is not _replaying.MISS:
            return cached  # type: ignore[no-any-return]

    execution = new_execution(pk, None)
    later = _replaying.on_replay_later.set(True)  # copied into the steps' worker threads
    try:
        store, replay = await _acquire(engine, execution, payload_hash, context)
    finally:
        _execution.reset(_replaying.on_replay_later, later)
    if isinstance(replay, _replaying.Replayed):  # `on_replay` here, on the loop
        return _replaying.replayed(engine, replay.result, replay.info)  # type: ignore[no-any-return]
    if replay is not _claiming.CLAIMED:
        return replay  # type: ignore[no-any-return]

    execution._extender = lambda seconds: _claiming.extend_lease(
        engine, store, execution, payload_hash, seconds
    )
    execution._clock = engine.settings.clock
    execution._unsettled = []
    token = _execution.activate(execution)
    cancelled = False  # while the last beat settled, after the effect: complete, then cancel
    try:
        result = await call()
        if execution._unsettled:  # a beat in flight when its block ended: off the loop
            settling = _in_thread(execution.settle_beats)
            cancelled = await _outlast(settling)
            settling.result()
        if execution._failure is not None:
            raise execution._failure  # a heartbeat lost the key: complete nothing
    except GeneratorExit:
        # The coroutine is being closed, not awaited (a task destroyed while pending): no
        # await is allowed any more, so the release blocks, rather than lock the key.
        _completing.release(engine, store, execution, reason="GeneratorExit")
        raise
    except BaseException as exc:
        reason, routine = type(exc).__name__, isinstance(exc, Exception)
        await _to_the_end(
            _completing.release, engine, store, execution, reason=reason, routine=routine
        )
        raise
    finally:
        execution._extender = None
        _execution.deactivate(execution, token)
    try:
        encoded = _completing.encode(engine, execution, result)  # here: as it was returned
    except DeferredResultError:  # a forgotten `await` inside the result: nothing happened
        reason = "DeferredResultError"
        await _to_the_end(_completing.release, engine, store, execution, reason=reason)
        raise
    finishing = _completing.finish_encoded(engine, store, execution, payload_hash, encoded)
    await _drive_to_the_end(finishing, engine.settings.clock)
    if cancelled:
        raise asyncio.CancelledError
    return result


async def _acquire(
    engine: Idempotency, execution: Execution, payload_hash: str | None, context: Any
) -> tuple[IdempotencyStore, Any]:
    """The store and what `_protocol.claiming.acquire` returned. Cancelled meanwhile: a claim in
    flight is awaited, and released if it won; a wait between polls just stops."""
    steps = _claim_steps(engine, execution, payload_hash, context)
    clock = engine.settings.clock
    running: _Step | None = None
    try:
        while True:
            running = _Step(steps)
            step = _in_thread(running)
            try:
                done, value = await asyncio.shield(step)
            except GeneratorExit:
                # Closed, not awaited (its task dropped): no await is allowed any more, and
                # the step's future cannot complete while we hold the loop. Wait for its
                # worker thread itself, then release in place a claim it won.
                if running.ended.wait(CLOSED_STEP_WAIT_SECONDS):
                    outcome = running.outcome
                    if outcome is not None and outcome[0] and outcome[1][1] is _claiming.CLAIMED:
                        _completing.release(
                            engine, outcome[1][0], execution, reason="GeneratorExit"
                        )
                raise
            except asyncio.CancelledError:
                await _outlast(step)
                if not step.cancelled() and step.exception() is None:
                    done, value = step.result()
                    if done and value[1] is _claiming.CLAIMED:
                        store = value[0]
                        await _to_the_end(
                            _completing.release, engine, store, execution, reason="CancelledError"
                        )
                raise
            if done:
                return value  # type: ignore[no-any-return]
            if isinstance(value, _waiting.Block):
                await _blocked(value)
            else:
                await _sleep(clock, value)
    finally:
        if running is None or running.ended.is_set():
            steps.close()  # a step still running (closed, waited for in vain) is left be


class _Step:
    """One step of a generator in a worker thread, whose end the loop's own thread can wait
    for even while the loop cannot run (a coroutine being closed)."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.ended = threading.Event()
        self.outcome: tuple[bool, Any] | None = None

    def __call__(self) -> tuple[bool, Any]:
        try:
            self.outcome = _advance(self.steps)
            return self.outcome
        finally:
            self.ended.set()


def _claim_steps(
    engine: Idempotency, execution: Execution, payload_hash: str | None, context: Any
) -> Generator[float, None, tuple[IdempotencyStore, Any]]:
    store = engine.settings.store()  # the first call may build a client: off the loop too
    # The claim reads the clock in this worker thread, when it sends: however long it
    # queued for a worker, its lease is the invocation's whole remaining time.
    outcome = yield from _claiming.acquire(engine, store, execution, payload_hash, context)
    return store, outcome


async def _drive_to_the_end(steps: Steps, clock: Clock) -> Any:
    """Run steps to their end whatever cancellations arrive, then let the first go on."""
    cancelled = False
    while True:
        running = _Step(steps)
        step = _in_thread(running)
        try:
            cancelled = await _outlast(step) or cancelled
        except GeneratorExit:
            # Closed, not awaited: no await is allowed any more, and the effect has
            # happened. The steps go on in place, blocking, as a plain function's do.
            if running.ended.wait(CLOSED_STEP_WAIT_SECONDS):
                outcome = running.outcome
                if outcome is not None and not outcome[0]:
                    _drive_in_place(steps, clock, outcome[1])
            raise
        done, value = step.result()
        if done:
            break
        sleeping = asyncio.ensure_future(_sleep(clock, value))
        try:
            cancelled = await _outlast(sleeping) or cancelled
        except GeneratorExit:
            sleeping.cancel()
            _drive_in_place(steps, clock, 0.0)
            raise
    if cancelled:
        raise asyncio.CancelledError
    return value


def _drive_in_place(steps: Steps, clock: Clock, seconds: float) -> None:
    """The rest of the steps on this thread, sleeping with the clock: a closed coroutine's
    completion. Its failures are logged by the steps; the close goes on."""
    try:
        while True:
            clock.sleep(seconds)
            seconds = next(steps)
    except StopIteration:
        pass
    except Exception:  # logged as completion_failed by the steps
        pass


async def _to_the_end(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`function` in the worker thread, to its end whatever cancellations arrive meanwhile;
    then the first of them goes on."""
    future = _in_thread(function, *args, **kwargs)
    if await _outlast(future):
        raise asyncio.CancelledError
    return future.result()


async def _outlast(future: asyncio.Future[Any]) -> bool:
    """Wait for `future` to end through any number of cancellations; True if one came."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # the future's own failure: its owner reads it
            pass
    return cancelled


def _in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """`function` running in the loop's default executor, in a copy of our context."""
    run = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return asyncio.get_running_loop().run_in_executor(None, run)


def _advance(steps: Steps) -> tuple[bool, Any]:
    """One step, in the worker thread: (False, seconds to sleep) or (True, the outcome).
    A future cannot carry StopIteration, so the end comes back as a value."""
    try:
        return False, next(steps)
    except StopIteration as end:
        return True, end.value


async def _blocked(block: _waiting.Block) -> None:
    """`block` in a thread of its own; cancelled, the wait stops here (the thread ends at
    the block's timeout, having changed nothing)."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            block()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_settle, ended)

    threading.Thread(target=run, name="idempotency-wait", daemon=True).start()
    await ended


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _sleep(clock: Clock, seconds: float) -> None:
    if isinstance(clock, SystemClock):
        await asyncio.sleep(seconds)
        return
    async_sleep = getattr(clock, "async_sleep", None)
    if async_sleep is not None:
        await async_sleep(seconds)
    else:
        await _in_thread(clock.sleep, seconds)


async def _run_unprotected(engine: Idempotency, call: Callable[[], Awaitable[T]]) -> T:
    execution = Execution(None, None, None)
    token = _execution.activate(execution)
    try:
        result = await call()
    finally:
        _execution.deactivate(execution, token)
    if execution.writes:
        await _to_the_end(lambda: engine.settings.store().commit_writes(execution.writes))
    return result
