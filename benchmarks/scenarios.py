"""The five invocation scenarios, set up the same way for either library.

A `Subject` is one scenario wired to one library on one client; calling it makes one
invocation and says how it ended. The same subjects serve the CPU section (answered from a
recording) and the latency section (answered by DynamoDB Local).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from .contenders import Contender
from .workload import ChargeDeclinedError, LambdaContext, Work, order_event

HOLDER_REMAINING_MS = 900_000
"""The in-flight holder's remaining time: its lease outlasts any run of the suite."""


@dataclass(frozen=True)
class Scenario:
    slug: str
    title: str
    expected: str
    """How every invocation must end: "result", "in progress" or "handler error"."""
    cache: bool = False
    """The local result cache (ours: cache_size; Powertools: use_local_cache)."""
    fails: bool = False
    fresh_keys: bool = True
    """A new key per invocation; otherwise one key for all of them."""
    completed_first: bool = False
    """One invocation before the measured ones, so the key is completed (and cached)."""
    in_flight: bool = False
    """Another invocation holds the key, unfinished, while the scenario runs."""


FIRST_RUN = Scenario("first_run", "First run", "result")
REPLAY = Scenario("replay", "Replay", "result", fresh_keys=False, completed_first=True)
IN_FLIGHT = Scenario(
    "in_flight", "In-flight duplicate", "in progress", fresh_keys=False, in_flight=True
)
HANDLER_ERROR = Scenario("handler_error", "Handler error", "handler error", fails=True)
WARM_CACHE = Scenario(
    "warm_cache", "Warm-cache replay", "result", cache=True, fresh_keys=False, completed_first=True
)
SCENARIOS = (FIRST_RUN, REPLAY, IN_FLIGHT, HANDLER_ERROR, WARM_CACHE)

_runs = itertools.count()


class Subject:
    """One scenario, one library, one client. Use as a context manager: entering sets the
    scenario up (completes the key, starts the holder), leaving lets the holder finish."""

    def __init__(self, scenario: Scenario, contender: Contender, client: Any, table: str) -> None:
        self.scenario = scenario
        self.contender = contender
        self.work = Work(fails=scenario.fails)
        self.handler = contender.wrap(client, table, self._body(), cache=scenario.cache)
        self.context = LambdaContext()
        self._in_progress = contender.in_progress_error()
        self._prefix = f"{scenario.slug}-{contender.slug}-{next(_runs)}"
        self._fixed = order_event(f"{self._prefix}-0")
        self._calls = itertools.count(1)
        self._holder: threading.Thread | None = None

    def _body(self) -> Any:
        return self.work.handler()

    def __call__(self) -> str:
        """One invocation; returns how it ended."""
        if self.scenario.fresh_keys:
            event = order_event(f"{self._prefix}-{next(self._calls)}")
        else:
            event = self._fixed
        try:
            self.handler(event, self.context)
        except ChargeDeclinedError:
            return "handler error"
        except self._in_progress:
            return "in progress"
        return "result"

    def __enter__(self) -> Subject:
        if self.scenario.completed_first:
            self.handler(self._fixed, self.context)
        if self.scenario.in_flight:
            self.work.hold()
            self._holder = threading.Thread(
                target=self.handler,
                args=(self._fixed, LambdaContext(HOLDER_REMAINING_MS)),
                name=f"holder-{self._prefix}",
                daemon=True,
            )
            self._holder.start()
            if not self.work.entered.wait(timeout=60):
                raise RuntimeError(f"{self.contender.name}: the holder never claimed its key")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.work.release()
        if self._holder is not None:
            self._holder.join(timeout=60)
            self._holder = None

    def check(self, outcome: str) -> None:
        if outcome != self.scenario.expected:
            raise RuntimeError(
                f"{self.contender.name}, {self.scenario.title}: "
                f"expected {self.scenario.expected}, got {outcome}"
            )


class AsyncSubject(Subject):
    """Ours on an `async def` handler, each invocation awaited on one long-lived event loop
    (`run_until_complete`, whose own cost `loop_floor` measures): the async path."""

    def __init__(self, scenario: Scenario, contender: Contender, client: Any, table: str) -> None:
        self.loop = asyncio.new_event_loop()
        super().__init__(scenario, contender, client, table)
        async_handler = self.handler
        self.engine = async_handler.idempotency  # type: ignore[attr-defined]

        def handler(event: dict[str, Any], context: Any) -> Any:
            return self.loop.run_until_complete(async_handler(event, context))

        self.handler = handler

    def _body(self) -> Any:
        return self.work.async_handler()

    def close(self) -> None:
        """Stop the loop's worker threads and close it (its self-pipe is a socket pair)."""
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


def loop_floor(loop: asyncio.AbstractEventLoop) -> Any:
    """One empty coroutine through `run_until_complete`: what driving a call from outside
    the loop costs, apart from the library."""

    async def nothing() -> None:
        return None

    return lambda: loop.run_until_complete(nothing())
