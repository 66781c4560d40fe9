"""The protocol, top to bottom:

    claim → (replay | mismatch | in progress | run) → complete | release

`Idempotency` is one decorator's engine: its settings, its cache and its counters
(`_protocol.engine`). Nothing per call lives on it; each call builds its own `Execution`. The steps
have rooms of their own: `_protocol.claiming` (claim, or wait for the holder), `_protocol.replaying`
(a completed result as the caller gets it), `_protocol.completing` (store the result, or release).

The steps that wait (a duplicate polling its holder, a completion backing off) are generators that
yield the seconds to sleep, so one protocol serves two drivers: `run` below sleeps with the clock;
`_protocol.coroutines.run` (imported only for coroutine functions) steps them in a worker thread,
off the event loop, and sleeps with `asyncio.sleep`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from .._base.errors import StoreError
from .._stores.record import OWNER_CHARS, OnReplay
from . import claiming as _claiming
from . import completing as _completing
from . import execution as _execution
from . import replaying as _replaying
from .engine import (
    DEFAULT_CLOCK_SKEW_SECONDS,
    DEFAULT_LEASE_SECONDS,
    Engine,
    Settings,
)
from .execution import Execution

if TYPE_CHECKING:
    from .durable import DurableRun

__all__ = [
    "DEFAULT_CLOCK_SKEW_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "Idempotency",
    "OnReplay",
    "Settings",
]

T = TypeVar("T")
V = TypeVar("V")


class Idempotency(Engine):
    """Runs calls of one decorated function under the protocol."""

    _warned_disabled = False

    def __repr__(self) -> str:
        return f"Idempotency(namespace={self.settings.namespace!r})"

    def run(
        self, data: Any, context: Any, call: Callable[[], T], durable: DurableRun | None = None
    ) -> T:
        """`data` is what the selectors see (the event, or the bound arguments). `durable`:
        the durable execution the call is an invocation of (`_protocol.durable`): it owns the key
        across its invocations, and `context` is then the invocation's Lambda context."""
        if _disabled():
            self._warn_disabled()
            return self._run_unprotected(call)
        identity = self._identify(data)
        if identity is None:
            return self._run_unprotected(call)
        pk, payload_hash = identity
        if self.cache is not None:
            cached = _replaying.from_cache(self, pk, payload_hash)
            if cached is not _replaying.MISS:
                return cached  # type: ignore[no-any-return]

        store = self.settings.store()
        execution = new_execution(pk, durable)
        sleep = self.settings.clock.sleep
        steps = _claiming.acquire(self, store, execution, payload_hash, context, durable)
        try:
            replay = drive(steps, sleep)
        except StoreError as exc:
            if durable is not None and durable.ends_execution(exc):
                # A later invocation of a durable execution holds the key from an earlier
                # one: a failed claim fails the execution, and what fails it frees its key
                # (fenced on the execution: lands only if the record is still its own).
                _completing.release(self, store, execution, reason="claim failed")
            raise
        if replay is not _claiming.CLAIMED:
            return replay  # type: ignore[no-any-return]

        execution._extender = lambda seconds: _claiming.extend_lease(
            self, store, execution, payload_hash, seconds
        )
        execution._clock = self.settings.clock
        token = _execution.activate(execution)
        try:
            result = call()
            if execution._failure is not None:
                raise execution._failure  # a heartbeat lost the key: complete nothing
        except BaseException as exc:
            if durable is not None and not durable.ends_execution(exc):
                # A suspension (wait, callback) or an invocation Lambda runs again: the
                # execution goes on, and keeps its key.
                self._count("suspended", logging.DEBUG, pk, reason=type(exc).__name__)
                raise
            routine = isinstance(exc, Exception)  # not an interruption (a signal, a cancel)
            _completing.release(self, store, execution, reason=type(exc).__name__, routine=routine)
            raise
        finally:
            execution._extender = None
            _execution.deactivate(execution, token)
        drive(_completing.finish(self, store, execution, payload_hash, result), sleep)
        return result

    def _run_unprotected(self, call: Callable[[], T]) -> T:
        execution = Execution(None, None, None)
        token = _execution.activate(execution)
        try:
            result = call()
        finally:
            _execution.deactivate(execution, token)
        if execution.writes:
            self.settings.store().commit_writes(execution.writes)
        return result

    def _warn_disabled(self) -> None:
        if not self._warned_disabled:
            self._warned_disabled = True
            warnings.warn(
                f"IDEMPOTENCY_DISABLED (or POWERTOOLS_IDEMPOTENCY_DISABLED) is set: "
                f"{self.settings.namespace} runs without protection",
                RuntimeWarning,
                stacklevel=4,
            )


def drive(steps: Generator[float, None, V], sleep: Callable[[float], None]) -> V:
    """Run steps to their end, sleeping as long as each asks: the sync driver."""
    while True:
        try:
            seconds = next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        sleep(seconds)


def new_execution(pk: str, durable: DurableRun | None) -> Execution:
    """A call's execution, with a fresh fencing token (a durable execution's own token)."""
    owner = os.urandom(OWNER_CHARS // 2).hex() if durable is None else durable.owner
    return Execution(pk, owner, None)


TRUTHY = ("1", "y", "yes", "t", "true", "on")
"""What Powertools' strtobool reads as true, so its users' test settings keep working."""


DISABLED_VARIABLES = ("IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED")


def _disabled() -> bool:
    """Read on every call (a test sets it at any time), first as CPython keeps the environment
    (`os.environ._data`, its names encoded): two dict look-ups when neither is set, where
    `os.environ.get` raises and catches a KeyError for each."""
    data, ours, powertools = _ENVIRONMENT
    if data is not None and ours not in data and powertools not in data:
        return False
    return (
        os.environ.get("IDEMPOTENCY_DISABLED", "").lower() in ("1", "true", "yes")
        or os.environ.get("POWERTOOLS_IDEMPOTENCY_DISABLED", "").lower() in TRUTHY
    )


def _environment() -> tuple[dict[Any, Any] | None, Any, Any]:
    data = getattr(os.environ, "_data", None)
    encodekey = getattr(os.environ, "encodekey", None)
    if not isinstance(data, dict) or encodekey is None:
        return None, None, None
    ours, powertools = (encodekey(name) for name in DISABLED_VARIABLES)
    return data, ours, powertools


_ENVIRONMENT = _environment()
