"""The per-call object: who holds the key, until when, and the writes to commit with it."""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._base.clock import monotonic_ms
from .._base.errors import ConfigurationError, LeaseLostError, NoActiveExecutionError, StoreError

if TYPE_CHECKING:
    from .._options import Clock

_TRANSACT_ACTIONS = frozenset({"Put", "Update", "Delete", "ConditionCheck"})
MAX_ENLISTED_WRITES = 99
"""DynamoDB transactions hold 100 items; the idempotency record takes one."""
MAX_EXTENSION_SECONDS = 31_622_400
"""The longest `extend_lease` (and a heartbeat's `extend_by`) takes: 366 days, the longest
any Lambda execution lives (a durable execution's longest timeout, the longest lease the
library writes itself). A longer lease could only outlive its holder: a crash would lock the
key past any run that could ever complete it."""
MIN_BEAT_SECONDS = 0.05
"""The shortest heartbeat period: each beat is a write (a WCU); faster is a write loop."""


class Execution:
    """Created for each protected call; reach it with `current_execution()` in the handler.

    key_hash: the stored `pk`, or None when the call runs unprotected (disabled, no key).
    owner: the claim's fencing token. lease_until_ms, claimed_at_ms: epoch milliseconds.
    answer_by_ms: when the invocation must answer; completion retries stop then.
    writes: the enlisted business writes, committed with the result.
    """

    __slots__ = (
        "_answer_end_ms",
        "_clock",
        "_closed",
        "_extender",
        "_extending",
        "_failure",
        "_lease_end_ms",
        "_refusal",
        "_released",
        "_unsettled",
        "answer_by_ms",
        "claimed_at_ms",
        "key_hash",
        "lease_until_ms",
        "owner",
        "writes",
    )

    def __init__(self, key_hash: str | None, owner: str | None, lease_until_ms: int | None) -> None:
        self.key_hash = key_hash
        self.owner = owner
        self.lease_until_ms = lease_until_ms
        self.claimed_at_ms: int | None = None
        self.answer_by_ms: int | None = None
        self.writes: list[Mapping[str, Any]] = []
        self._extender: Callable[[float], int] | None = None
        """Set by the engine while it holds the key: writes a longer lease, fenced."""
        self._extending = threading.Lock()
        """One extension at a time (a heartbeat's thread, the handler): each reads the lease
        the previous one wrote, so a later write never lands a shorter lease."""
        self._closed = False
        """Set by the engine when the call has returned (or raised): writes are taken."""
        self._clock: Clock | None = None
        """The engine's clock, set with `_extender`: a heartbeat checks its lease with it."""
        self._answer_end_ms: int | None = None
        """`answer_by_ms` on the clock's monotonic reading: what completion retries are timed
        by, so a step of the wall clock neither gives up early nor retries past the end."""
        self._lease_end_ms: int | None = None
        """The lease's end on the clock's monotonic reading (`_base.clock.monotonic_ms`), set
        with `lease_until_ms` at the claim and moved by each extension, as long after as we
        asked: the end of a heartbeat block judges by it, so a step of the wall clock
        (NTP) neither ends a lease the store still holds nor stretches one it dropped."""
        self._failure: BaseException | None = None
        """Why a heartbeat stopped holding the key: the engine raises it when the call
        returns, so a call whose key may have been taken over completes nothing."""
        self._unsettled: list[Callable[[], None]] | None = None
        """Set to a list by the async driver: a heartbeat whose beat is still in flight when
        its block ends on the event loop leaves its join here, for the driver to run in a
        worker thread before it completes (`settle_beats`), rather than block the loop."""
        self._refusal: str | None = None
        """Why this call's store cannot commit enlisted writes (`enlisted_writes_refusal`:
        ValkeyStore), set by the engine: `add_write` refuses at once, inside the handler,
        rather than the completion after the effect (which would release, and run it again)."""
        self._released = False
        """Set when an extension found our own tombstone (an operator forced a release):
        no lease is held since, so none can lapse; the completion's owner fence decides."""

    def __repr__(self) -> str:
        return f"Execution(key_hash={self.key_hash!r}, writes={len(self.writes)})"

    def add_write(self, transact_item: Mapping[str, Any]) -> None:
        """Enlist one `TransactWriteItems` item (`{"Put": {...}}`, `Update`, `Delete` or
        `ConditionCheck`, low-level client shape). It commits in the same transaction as the
        stored result: both land, or neither does. Discarded if the result is not stored."""
        if self._refusal is not None:
            raise ConfigurationError(self._refusal, key_hash=self.key_hash)
        if not isinstance(transact_item, Mapping) or len(transact_item) != 1:
            raise ConfigurationError(
                "add_write takes one TransactWriteItems item, e.g. {'Put': {...}}"
            )
        (action,) = transact_item
        if action not in _TRANSACT_ACTIONS:
            raise ConfigurationError(
                f"add_write: {action!r} is not one of {', '.join(sorted(_TRANSACT_ACTIONS))}"
            )
        request = transact_item[action]
        if not isinstance(request, Mapping) or not isinstance(request.get("TableName"), str):
            raise ConfigurationError(f"add_write: {action} needs a TableName")
        for part in ("Item", "Key"):
            values = request.get(part)
            if values is not None and not _low_level(values):
                raise ConfigurationError(
                    f"add_write: {action}.{part} must be in the low-level client's shape, "
                    'e.g. {"id": {"S": "42"}}'
                )
        if self._closed:
            # A thread or task the call started, enlisting after it returned: the result is
            # (being) stored without this write, which would silently never commit.
            raise NoActiveExecutionError(
                "add_write after the protected call returned: the write would not commit with "
                "its result; enlist before the call returns (await the tasks that enlist)"
            )
        if len(self.writes) >= MAX_ENLISTED_WRITES:
            raise ConfigurationError(f"at most {MAX_ENLISTED_WRITES} writes can be enlisted")
        self.writes.append(transact_item)

    def extend_lease(self, seconds: float) -> int | None:
        """Hold the key for `seconds` more from now (long work: a batch, an export), with a
        write fenced on our claim, so no other caller takes it over and waiters keep waiting.
        Returns the new lease end (epoch ms); never shortens the lease. Raises LeaseLostError
        when our lease lapsed and another caller took the key over: stop, the work is theirs
        now. After an operator released the key (`release --force`), nothing is written and
        the lease end is returned unchanged: the call goes on, and its completion stands
        unless another caller claimed the key since. Does nothing (None) when the call runs
        without a key (disabled, no key)."""
        _check_seconds("extend_lease", "seconds", seconds, 0.0)
        with self._extending:
            extender = self._extender
            return None if extender is None else extender(seconds)

    @contextmanager
    def heartbeat(self, every: float, extend_by: float) -> Iterator[None]:
        """Extend the lease by `extend_by` seconds every `every` seconds while the block runs,
        from a daemon thread. A failed beat (throttled, a lost answer) is tried again at the
        next one. The heartbeat never stops silently: if it stopped holding the key for any
        reason (the key lost, a refused write, an error in its thread, the lease lapsed
        between beats), the block ends with LeaseLostError (or the StoreError that stopped
        it), and so does the protected call, which then completes nothing. In a coroutine, a
        beat still in flight when the block ends is waited for by the call, off the loop: if
        it lost the key, the call (not the block) ends with the error."""
        _check_seconds("heartbeat", "every", every, MIN_BEAT_SECONDS)
        _check_seconds("heartbeat", "extend_by", extend_by, 0.0)
        if not every < extend_by:
            raise ConfigurationError(
                f"heartbeat needs every < extend_by, so beats overlap (every={shown(every)}, "
                f"extend_by={shown(extend_by)})"
            )
        stop = threading.Event()
        failure: list[BaseException] = []
        missed: list[StoreError] = []

        def beat() -> None:
            try:
                while not stop.wait(every):
                    try:
                        self.extend_lease(extend_by)
                    except StoreError as exc:
                        if not exc.retryable:
                            raise
                        missed.append(exc)  # the next beat tries again, within the lease
            except BaseException as exc:  # anything that ends the beats is reported
                failure.append(exc)

        def settle() -> None:
            thread.join()
            self._failure = self._failure or _stopped(self, failure, missed)

        thread = threading.Thread(target=beat, name="lambda-idempotency-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            if self._unsettled is not None and thread.is_alive() and _on_a_loop():
                self._unsettled.append(settle)  # the driver joins it off the loop
            else:
                settle()
        if self._failure is not None:
            raise self._failure

    def settle_beats(self) -> None:
        """Wait for the beats still in flight when their heartbeat blocks ended (see
        `_unsettled`), and record why they stopped holding the key, if they did."""
        while self._unsettled:
            self._unsettled.pop()()


def _on_a_loop() -> bool:
    """This thread runs an event loop (asyncio is imported wherever one could)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and asyncio._get_running_loop() is not None


def _check_seconds(method: str, name: str, seconds: Any, least: float) -> None:
    """A duration the lease can honour: a finite number, past 0 (at least `least` if given),
    at most MAX_EXTENSION_SECONDS. Anything else (inf, nan, a string, a bool) is refused
    here, at the call, never inside a heartbeat's thread."""
    honoured = (
        not isinstance(seconds, bool)
        and isinstance(seconds, int | float)
        and -MAX_EXTENSION_SECONDS <= seconds <= MAX_EXTENSION_SECONDS  # before a float of it
        and math.isfinite(seconds)
        and (seconds >= least if least else seconds > 0)
    )
    if not honoured:
        low = f"at least {least}" if least else "more than 0"
        raise ConfigurationError(
            f"{method}: {name} must be a finite number of seconds, {low} and at most "
            f"{MAX_EXTENSION_SECONDS} (366 days, the longest a Lambda execution lives), "
            f"not {shown(seconds)}"
        )


def shown(value: Any) -> str:
    """A refused value as an error message shows it: short, and never itself an error (an
    int past the interpreter's digit limit cannot be turned into a string)."""
    try:
        text = repr(value)
    except ValueError:
        return f"an {type(value).__name__} too long to show"
    return text if len(text) <= 40 else text[:37] + "..."


def _stopped(
    execution: Execution, failure: list[BaseException], missed: list[StoreError]
) -> BaseException | None:
    """Why a heartbeat did not hold its key, or None when it did."""
    key_hash = execution.key_hash
    if failure:
        (error,) = failure
        if isinstance(error, LeaseLostError | StoreError):
            return error
        lost = LeaseLostError(
            f"the heartbeat stopped ({type(error).__name__}): the lease may have lapsed and "
            "another caller taken the key over",
            key_hash=key_hash,
        )
        lost.__cause__ = error
        return lost
    clock, lease_end = execution._clock, execution._lease_end_ms
    lapsed = clock is not None and lease_end is not None and monotonic_ms(clock) > lease_end
    if lapsed and not execution._released:  # released: no lease held since, none to lapse
        lost = LeaseLostError(
            "the heartbeat did not hold the key: the lease lapsed before the block ended, "
            "and another caller may have taken it over",
            key_hash=key_hash,
        )
        lost.__cause__ = missed[-1] if missed else None
        return lost
    return None


def _low_level(values: Any) -> bool:
    """Every attribute value typed, as the low-level client sends them: {"S": "42"}."""
    return isinstance(values, Mapping) and all(
        isinstance(value, Mapping) and len(value) == 1 for value in values.values()
    )


_current: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "lambda_idempotency_execution", default=None
)
lambda_context: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "lambda_idempotency_lambda_context", default=None
)
"""The Lambda context of the decorated handler that is running, so nested
`idempotent_function` calls lease for the invocation's remaining time too."""


def current_execution() -> Execution:
    """The execution of the innermost decorated call that is running."""
    execution = _current.get()
    if execution is None:
        raise NoActiveExecutionError("current_execution() called outside an idempotent call")
    return execution


def activate(execution: Execution) -> contextvars.Token[Execution | None]:
    return _current.set(execution)


def deactivate(execution: Execution, token: contextvars.Token[Execution | None]) -> None:
    """The call has returned (or raised): its execution is no longer current, and takes no
    more writes (a task or thread it started may still hold it)."""
    execution._closed = True
    reset(_current, token)


def reset(variable: contextvars.ContextVar[Any], token: contextvars.Token[Any]) -> None:
    """`variable.reset(token)`, except in another context than the one that set it: a
    coroutine closed from outside its task (dropped, then collected) runs its `finally`
    there, where there is nothing of ours to undo, and its close must not fail."""
    with contextlib.suppress(ValueError):  # only ever "created in a different Context"
        variable.reset(token)
