"""The reliability scenarios: one trial of each, on DynamoDB Local, with faults injected.

Every trial builds its own world (`Rig`: a fresh table, the library's own default client
with a `FaultInjector` on it, fake clocks) and measures what a user would notice:

- effects: how often the handler's effect happened per key (counted by the handler, or read
  from a ledger item its enlisted write updates): must be 1 (0 where nothing should run);
- lock: how long, after the faulty call, a retry from another container kept getting
  `InProgressError` while nothing ran (fake-clock milliseconds, probed every `STEP_MS`).

Budgets for the lock: where the library knows it holds the key with nothing running and
DynamoDB takes writes, the key must be free at once (0); where DynamoDB refused every write
too (a failed release, a crash), at most the lease plus the clock-skew allowance.

Both the CI tests (`test_scenarios.py`, a few trials) and `make reliability` (many trials,
`benchmarks/reliability.py`) run these functions.
"""

from __future__ import annotations

import base64
import contextlib
import decimal
import functools
import multiprocessing
import os
import signal
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3

from lambda_idempotency import (
    DynamoDBStore,
    IdempotencyError,
    InProgressError,
    current_execution,
    idempotent,
    idempotent_http,
)
from lambda_idempotency.testing import FakeClock, FakeLambdaContext, create_idempotency_table
from tests.http_events import http_event
from tests.reliability.faults import (
    KINDS,
    Captured,
    Fault,
    FaultInjector,
    drain_retry_quota,
    fast_retries,
)

LEASE_MS = 3_000
"""Each invocation's remaining time, hence its lease: small, so trials take fake seconds."""
ALLOWANCE_MS = 2_000
"""The clock-skew allowance the design promises (default 2 s)."""
SKEW_MS = 1_900
"""Skew between two callers' clocks, within the allowance."""
STEP_MS = 250
"""How often a waiting retry probes the key (the lock's resolution)."""
BURST = 5
"""Consecutive faults on one call: more than botocore's attempts, so the library sees them."""
KEY = "order-1"
NAMESPACE = "reliability"


class HandlerFailedError(Exception):
    """The handler's own failure."""


class TrialTimeout(BaseException):
    """A trial that did not finish in time (an unbounded loop, unbounded CPU)."""


@dataclass
class Trial:
    """What one trial measured."""

    effects: int = 0
    lock_ms: int = 0
    injected: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    run: Callable[[Rig], None]
    lock_budget_ms: int = 0
    effects: tuple[int, ...] = (1,)
    """Allowed counts of the effect per key."""
    isolated: bool = False
    """Run in a child process that is killed at the deadline (CPU-bound inputs)."""
    timeout_s: float = 20.0
    faulty: bool = False
    """A fault scenario: a trial that injected nothing proves nothing, and fails."""

    def verdict(self, trial: Trial) -> list[str]:
        problems = list(trial.problems)
        if self.faulty and trial.injected == 0:
            problems.append("no fault was injected: the call was never made")
        if trial.effects not in self.effects:
            wanted = " or ".join(map(str, self.effects))
            problems.append(f"effect ran {trial.effects} times, expected {wanted}")
        if trial.lock_ms > self.lock_budget_ms:
            problems.append(
                f"key locked with nothing running for {trial.lock_ms} ms "
                f"(budget {self.lock_budget_ms} ms)"
            )
        return problems


# -- the world of one trial -----------------------------------------------------------------


class Rig:
    """A fresh table, the library's own default client with faults, and counters."""

    def __init__(self, endpoint: str) -> None:
        self.table = f"reliability-{uuid.uuid4().hex[:12]}"
        self.store = DynamoDBStore(self.table, endpoint_url=endpoint, region_name="us-east-1")
        self.client: Any = self.store.client
        self.admin: Any = boto3.client(
            "dynamodb", endpoint_url=endpoint, region_name="us-east-1"
        )  # no faults: for setup and inspection
        create_idempotency_table(self.admin, self.table)
        self.faults = FaultInjector(self.client)
        fast_retries(self.client)
        start = (self.store_time() // 1000 + 1) * 1000  # whole seconds: TTLs are in seconds
        self.clock = FakeClock(start)
        self.trial = Trial()
        self.runs = 0

    @staticmethod
    def store_time() -> int:
        return FakeClock().now_ms()

    def close(self) -> None:
        self.faults.close()
        with contextlib.suppress(Exception):
            self.admin.delete_table(TableName=self.table)

    # -- handlers ---------------------------------------------------------------------------

    def handler(
        self,
        work: Callable[[dict[str, Any]], Any],
        *,
        clock: FakeClock | None = None,
        returns: Any = None,
        **options: Any,
    ) -> Callable[[dict[str, Any]], Any]:
        """`work` under `idempotent`, as one container runs it (no warm cache, so every call
        asks the store), with a Lambda context whose remaining time is `LEASE_MS`."""
        clock = clock or self.clock

        def handler(event: dict[str, Any], context: Any) -> Any:
            self.runs += 1
            return work(event)

        if returns is not None:
            handler.__annotations__["return"] = returns
        protected = idempotent(
            store=self.store,
            key="id",
            namespace=NAMESPACE,
            clock=clock,
            cache_size=0,
            **options,
        )(handler)
        return lambda event: protected(event, FakeLambdaContext(LEASE_MS, clock=clock))

    def effect(self, result: Any = "done") -> Callable[[dict[str, Any]], Any]:
        def work(event: dict[str, Any]) -> Any:
            self.trial.effects += 1
            return result

        return work

    def debit(self, result: Any = "debited") -> Callable[[dict[str, Any]], Any]:
        """An effect kept in DynamoDB: a ledger update enlisted in the completion."""

        def work(event: dict[str, Any]) -> Any:
            self.enlist()
            return result

        return work

    def enlist(self) -> None:
        current_execution().add_write(
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": {"S": "ledger"}},
                    "UpdateExpression": "ADD debits :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        )

    def ledger(self) -> int:
        item = self.admin.get_item(
            TableName=self.table, Key={"pk": {"S": "ledger"}}, ConsistentRead=True
        ).get("Item")
        return 0 if item is None else int(item["debits"]["N"])

    # -- what a user notices ----------------------------------------------------------------

    def call(self, handler: Callable[[], Any], *, expect: type[BaseException] | None = None) -> Any:
        """Call once; a typed IdempotencyError (or `expect`) is an answer, anything else a
        problem. Returns the result, or the exception."""
        try:
            return handler()
        except TrialTimeout:
            raise
        except BaseException as exc:
            if isinstance(exc, IdempotencyError) or (
                expect is not None and isinstance(exc, expect)
            ):
                return exc
            self.trial.problems.append(f"untyped error: {type(exc).__name__}: {exc}"[:200])
            return exc

    def retry_until_free(
        self,
        handler: Callable[[dict[str, Any]], Any],
        *,
        clock: FakeClock | None = None,
        cap_ms: int = LEASE_MS + ALLOWANCE_MS + SKEW_MS + 4 * STEP_MS,
    ) -> Any:
        """A client retrying every STEP_MS: records how long the key answered 'in progress'
        with nothing running, and returns the first other answer."""
        clock = clock or self.clock
        self.faults.clear()
        started = clock.now_ms()
        while True:
            answer = self.call(lambda: handler({"id": KEY}))
            if not isinstance(answer, InProgressError):
                self.trial.lock_ms = max(self.trial.lock_ms, clock.now_ms() - started)
                return answer
            if clock.now_ms() - started > cap_ms:
                self.trial.lock_ms = max(self.trial.lock_ms, clock.now_ms() - started)
                self.trial.problems.append(f"still in progress after {cap_ms} ms")
                return answer
            clock.advance(STEP_MS / 1000)

    def expect_result(self, answer: Any, wanted: Any, what: str = "the retry") -> None:
        if isinstance(answer, BaseException):
            if not isinstance(answer, IdempotencyError):
                return  # already a problem
            self.trial.problems.append(f"{what} got {type(answer).__name__}: {answer}"[:200])
        elif answer != wanted:
            self.trial.problems.append(f"{what} got a different result: {_short(answer)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def big_result(size: int, tag: str = "a") -> dict[str, str]:
    """A result of about `size` bytes that does not compress (base64 of random bytes)."""
    return {"tag": tag, "blob": base64.b64encode(os.urandom(size * 3 // 4)).decode()}


CHUNKED_BYTES = 600_000
"""Over the 350 KB inline limit once stored, so the result goes to chunk items."""


# -- faults at every call -------------------------------------------------------------------


def at_claim(kind: str) -> Callable[[Rig], None]:
    def run(rig: Rig) -> None:
        rig.faults.add(Fault("claim", kind, count=BURST))
        first = rig.call(lambda: rig.handler(rig.effect())({"id": KEY}))
        rig.trial.injected = rig.faults.injected
        if not isinstance(first, BaseException) and first != "done":
            rig.trial.problems.append(f"the first call got {_short(first)}")
        rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")

    return run


def at_complete(kind: str, *, mode: str) -> Callable[[Rig], None]:
    """mode: plain (PutItem), transactional (an enlisted write), chunked (a large result)."""

    def run(rig: Rig) -> None:
        result: Any = "done" if mode != "chunked" else big_result(CHUNKED_BYTES)
        work = rig.effect(result) if mode == "plain" else rig.debit(result)
        rig.faults.add(Fault(frozenset({"complete", "chunks"}), kind, count=BURST))
        first = rig.call(lambda: rig.handler(work)({"id": KEY}))
        rig.trial.injected = rig.faults.injected
        answer = rig.retry_until_free(rig.handler(work))
        if mode != "plain":
            rig.trial.effects = rig.ledger()
        if not isinstance(first, BaseException) and first != result:
            rig.trial.problems.append(f"the first call got {_short(first)}")
        rig.expect_result(answer, result)

    return run


def at_release(kind: str) -> Callable[[Rig], None]:
    def run(rig: Rig) -> None:
        def fails(event: dict[str, Any]) -> Any:
            raise HandlerFailedError("the handler failed before its effect")

        rig.faults.add(Fault("release", kind, count=BURST))
        first = rig.call(lambda: rig.handler(fails)({"id": KEY}), expect=HandlerFailedError)
        if not isinstance(first, HandlerFailedError):
            rig.trial.problems.append(f"the handler's error was replaced by {first!r}"[:200])
        rig.trial.injected = rig.faults.injected
        rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")

    return run


def at_wait(kind: str) -> Callable[[Rig], None]:
    """A duplicate waits (`on_in_progress="wait"`) while the holder runs; its GetItems fail."""

    def run(rig: Rig) -> None:
        waiter_clock = FakeClock(rig.clock.now_ms())
        waiter = rig.handler(rig.effect(), clock=waiter_clock, on_in_progress="wait")

        def holder(event: dict[str, Any]) -> Any:
            rig.faults.add(Fault("get", kind, count=BURST))
            rig.call(lambda: waiter(event))  # must not run the effect: the holder is running
            rig.trial.injected = rig.faults.injected
            rig.faults.clear()
            rig.trial.effects += 1
            return "done"

        rig.expect_result(rig.call(lambda: rig.handler(holder)({"id": KEY})), "done", "holder")
        rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")

    return run


def at_replay(kind: str) -> Callable[[Rig], None]:
    """A replay of a chunked result whose BatchGetItem fails: never a second run."""

    def run(rig: Rig) -> None:
        result = big_result(CHUNKED_BYTES)
        work = rig.effect(result)
        rig.expect_result(rig.call(lambda: rig.handler(work)({"id": KEY})), result, "first call")
        rig.faults.add(Fault("batch_get", kind, count=BURST))
        replay = rig.call(lambda: rig.handler(work)({"id": KEY}))
        rig.trial.injected = rig.faults.injected
        if not isinstance(replay, BaseException):
            rig.expect_result(replay, result, "the faulty replay")
        rig.expect_result(rig.retry_until_free(rig.handler(work)), result)

    return run


# -- delayed duplicates, the retry quota ----------------------------------------------------


def stale_claim_after_release(rig: Rig) -> None:
    """The first claim's request is delayed in the network and lands after the handler
    failed and released the key: it must not lock the key again."""

    def fails(event: dict[str, Any]) -> Any:
        raise HandlerFailedError("failed")

    rig.faults.add(Fault("claim", "capture"))
    rig.call(lambda: rig.handler(fails)({"id": KEY}), expect=HandlerFailedError)
    rig.faults.clear()
    rig.faults.deliver(_only(rig.faults.captured))
    rig.trial.injected = 1
    rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")


def stale_claim_after_completion(rig: Rig) -> None:
    rig.faults.add(Fault("claim", "capture"))
    rig.call(lambda: rig.handler(rig.effect())({"id": KEY}))
    rig.faults.clear()
    rig.clock.advance(1)
    rig.faults.deliver(_only(rig.faults.captured))
    rig.trial.injected = 1
    rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")


def stale_release_after_takeover(rig: Rig) -> None:
    """A failed run's release, delayed, lands while the retry runs: it must not free (or
    delete) the retry's record."""

    def fails(event: dict[str, Any]) -> Any:
        raise HandlerFailedError("failed")

    rig.faults.add(Fault("release", "capture"))
    rig.call(lambda: rig.handler(fails)({"id": KEY}), expect=HandlerFailedError)
    rig.faults.clear()
    stale = _only(rig.faults.captured)

    def retry(event: dict[str, Any]) -> Any:
        rig.faults.deliver(stale)
        rig.trial.injected = 1
        intruder = rig.call(lambda: rig.handler(rig.effect())(event))
        if not isinstance(intruder, InProgressError):
            rig.trial.problems.append(f"a third call got {_short(intruder)} mid-run")
        rig.trial.effects += 1
        return "done"

    rig.expect_result(rig.call(lambda: rig.handler(retry)({"id": KEY})), "done", "the retry")
    rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")


def quota_then_throttle(rig: Rig) -> None:
    """A throttling burst spends the client's retry quota; then one throttle hits the
    completion write, which botocore will no longer retry."""
    drain_retry_quota(rig.client, rig.faults, rig.table)
    rig.faults.add(Fault("complete", "throttled", count=1))
    rig.call(lambda: rig.handler(rig.effect())({"id": KEY}))
    rig.trial.injected = rig.faults.injected
    rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")


def _only(captured: list[Captured]) -> Captured:
    if not captured:
        raise AssertionError("no request was captured")
    return captured[0]


# -- zombies and skew -----------------------------------------------------------------------


def zombie(mode: str) -> Callable[[Rig], None]:
    """A's lease lapses mid-handler and B takes the key over and completes; then A finishes
    (completes plainly, transactionally, chunked, or fails and releases). A must not touch
    B's record: the retry replays B's result and only B's enlisted write landed."""

    def run(rig: Rig) -> None:
        later = FakeClock(rig.clock.now_ms() + LEASE_MS + ALLOWANCE_MS + 500)
        chunked = mode == "chunked"
        theirs: Any = big_result(CHUNKED_BYTES, "B") if chunked else "B"
        mine: Any = big_result(CHUNKED_BYTES, "A") if chunked else "A"

        def taker(event: dict[str, Any]) -> Any:
            rig.enlist()
            return theirs

        def zombie_work(event: dict[str, Any]) -> Any:
            rig.expect_result(
                rig.call(lambda: rig.handler(taker, clock=later)(event)), theirs, "the taker"
            )
            if mode == "release":
                raise HandlerFailedError("the zombie fails")
            if mode != "plain":
                rig.enlist()
            return mine

        rig.call(lambda: rig.handler(zombie_work)({"id": KEY}), expect=HandlerFailedError)
        rig.trial.effects = rig.ledger()
        rig.expect_result(rig.retry_until_free(rig.handler(taker), clock=later), theirs)
        rig.trial.effects = rig.ledger()

    return run


def skewed_takeover(rig: Rig) -> None:
    """B's clock runs 1.9 s ahead of A's; B calls just before A's lease ends on A's clock:
    A is still running, so B must not take over."""
    ahead = FakeClock(0)

    def holder(event: dict[str, Any]) -> Any:
        rig.clock.advance((LEASE_MS - 100) / 1000)
        ahead.ms = rig.clock.now_ms() + SKEW_MS
        other = rig.call(lambda: rig.handler(rig.effect(), clock=ahead)(event))
        if not isinstance(other, InProgressError):
            rig.trial.problems.append(f"a caller 1.9 s ahead got {_short(other)}")
        rig.trial.effects += 1
        return "done"

    rig.expect_result(rig.call(lambda: rig.handler(holder)({"id": KEY})), "done", "the holder")
    rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")


def skewed_expiry(rig: Rig) -> None:
    """A completes with a 1 s TTL; 0.1 s before it expires on A's clock, B (1.9 s ahead)
    retries: the record is live, B must replay."""
    rig.call(lambda: rig.handler(rig.effect(), ttl_seconds=1)({"id": KEY}))
    ahead = FakeClock(rig.clock.now_ms() + 900 + SKEW_MS)
    rig.expect_result(
        rig.call(lambda: rig.handler(rig.effect(), clock=ahead, ttl_seconds=1)({"id": KEY})),
        "done",
        "a caller 1.9 s ahead",
    )


def skewed_crash(rig: Rig) -> None:
    """A (clock 1.9 s ahead) fails and cannot release (DynamoDB refuses): B, behind, gets
    the key within the lease, the allowance and the skew."""

    def fails(event: dict[str, Any]) -> Any:
        raise HandlerFailedError("failed")

    holder_clock = FakeClock(rig.clock.now_ms() + SKEW_MS)
    rig.faults.add(Fault("release", "5xx", count=10**6))
    rig.call(lambda: rig.handler(fails, clock=holder_clock)({"id": KEY}), expect=HandlerFailedError)
    rig.trial.injected = rig.faults.injected
    rig.expect_result(rig.retry_until_free(rig.handler(rig.effect())), "done")


# -- results the store cannot hold ----------------------------------------------------------


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


UNSTORABLE: dict[str, tuple[Callable[[], Any], Any]] = {
    "bytes": (lambda: b"\x00\xffpayload", bytes),
    "nan": (lambda: decimal.Decimal("NaN"), decimal.Decimal),
    "int-10**5000": (lambda: 10**5000, int),
    "decimal-1e5000": (lambda: decimal.Decimal("1e5000"), decimal.Decimal),
    "tuple-keys": (lambda: {(1, 2): "pair"}, None),
    "circular": (_circular, None),
    "object": (object, None),
    "1.5MB": (lambda: big_result(1_500_000), None),
    "5MB": (lambda: big_result(5_000_000), None),
    "5.9MB": (lambda: big_result(5_900_000), None),
}


def unstorable(name: str) -> Callable[[Rig], None]:
    """The handler ran and returned what the store may not hold: the key must stay
    completed; the retry replays it or gets a typed error, and never runs it again."""
    make, returns = UNSTORABLE[name]

    def run(rig: Rig) -> None:
        value = make()
        rig.call(lambda: rig.handler(rig.effect(value), returns=returns)({"id": KEY}))
        answer = rig.retry_until_free(rig.handler(rig.effect(value), returns=returns))
        if not isinstance(answer, BaseException) and not _same(answer, value):
            rig.trial.problems.append(f"the retry replayed a different value: {_short(answer)}")

    return run


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, decimal.Decimal) and isinstance(right, decimal.Decimal):
        return left.compare_total(right) == 0
    try:
        return bool(left == right)
    except RecursionError:
        return False


# -- hostile input, and records we did not write --------------------------------------------

HOSTILE: dict[str, list[str]] = {
    "huge-exponent": ['{"amount": 1e1000000}', '{"amount": 1.5e4400}', '{"amount": 1e5000}'],
    "deep-nesting": [
        *('{"a":' * depth + "1" + "}" * depth for depth in range(900, 1001, 5)),
        "[" * 100_000 + "]" * 100_000,
    ],
    "lone-surrogate": ['{"name": "\ud800"}', '"\udfff"'],
}
"""Bodies Lambda can deliver. Nesting depths step through the window where json.loads still
accepts a document that a recursive hash can no longer walk (it moves with stack depth)."""


def hostile(name: str) -> Callable[[Rig], None]:
    """Hostile bodies to an `idempotent_http` handler, each under its own key: answered 4xx
    with nothing run, or fingerprinted correctly (run once, the repeat replays)."""

    def run(rig: Rig) -> None:
        runs: dict[str, int] = {}

        @idempotent_http(store=rig.store, namespace=NAMESPACE, clock=rig.clock, cache_size=0)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            key = event["headers"]["idempotency-key"]
            runs[key] = runs.get(key, 0) + 1
            return {"statusCode": 201, "body": "created"}

        for number, body in enumerate(HOSTILE[name]):
            key = f"k-{number}"
            event = http_event("http-api", headers={"Idempotency-Key": key}, body=body)
            for attempt in ("first", "repeat"):
                answer = rig.call(functools.partial(handler, event, FakeLambdaContext(LEASE_MS)))
                status = answer.get("statusCode") if isinstance(answer, dict) else None
                answered = isinstance(status, int) and (200 <= status < 300 or 400 <= status < 500)
                if not answered and not isinstance(answer, BaseException):
                    rig.trial.problems.append(f"body {number}, {attempt}: {_short(answer)}")
            rig.trial.effects = max(rig.trial.effects, runs.get(key, 0))

    return run


def refused_without_record(rig: Rig) -> None:
    """Every refused claim comes back without the record, and every read finds nothing (an
    endpoint ignoring ReturnValuesOnConditionCheckFailure, the record gone in between):
    a typed error after a bounded number of calls."""

    def holder(event: dict[str, Any]) -> Any:
        rig.faults.add(Fault(frozenset({"claim", "get"}), "strip_item", count=10**6))
        answer = rig.call(lambda: rig.handler(rig.effect())(event))
        rig.trial.injected = rig.faults.injected
        rig.faults.clear()
        if not isinstance(answer, IdempotencyError):
            rig.trial.problems.append(f"the duplicate got {_short(answer)}, not a typed error")
        if rig.trial.injected > 20:
            rig.trial.problems.append(f"{rig.trial.injected} calls before giving up")
        rig.trial.effects += 1
        return "done"

    rig.expect_result(rig.call(lambda: rig.handler(holder)({"id": KEY})), "done", "the holder")


def foreign_status(status: str) -> Callable[[Rig], None]:
    """A record whose status we never write (another library's INPROGRESS, an EXPIRED):
    a typed IdempotencyError, and the handler does not run."""

    def run(rig: Rig) -> None:
        rig.call(lambda: rig.handler(rig.effect())({"id": KEY}))
        items = rig.admin.scan(TableName=rig.table)["Items"]
        (pk,) = [item["pk"]["S"] for item in items if "status" in item]
        rig.admin.update_item(
            TableName=rig.table,
            Key={"pk": {"S": pk}},
            UpdateExpression="SET #s = :s",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": {"S": status}},
        )
        answer = rig.call(lambda: rig.handler(rig.effect())({"id": KEY}))
        if not isinstance(answer, IdempotencyError):
            rig.trial.problems.append(f"got {_short(answer)}, not a typed IdempotencyError")

    return run


# -- the catalogue --------------------------------------------------------------------------

FREED = LEASE_MS + ALLOWANCE_MS + STEP_MS
"""The lock a failed release may leave: the lease, the allowance, one probe step."""

SCENARIOS: dict[str, Scenario] = {}


def _add(name: str, what: str, run: Callable[[Rig], None], **options: Any) -> None:
    SCENARIOS[name] = Scenario(name, what, run, **options)


for _kind in KINDS:
    _add(f"claim/{_kind}", f"claim: {_kind} x{BURST}", at_claim(_kind), faulty=True)
    for _mode in ("plain", "transactional", "chunked"):
        _add(
            f"complete-{_mode}/{_kind}",
            f"completion ({_mode}): {_kind} x{BURST}",
            at_complete(_kind, mode=_mode),
            lock_budget_ms=FREED,
            faulty=True,
        )
    _add(
        f"release/{_kind}",
        f"release: {_kind} x{BURST}",
        at_release(_kind),
        lock_budget_ms=FREED,
        faulty=True,
    )
    _add(f"wait-get/{_kind}", f"waiter's GetItem: {_kind} x{BURST}", at_wait(_kind), faulty=True)
    _add(
        f"replay-batch-get/{_kind}",
        f"replay's BatchGetItem: {_kind} x{BURST}",
        at_replay(_kind),
        faulty=True,
    )

_add(
    "stale-claim/after-release",
    "claim delivered again after the release",
    stale_claim_after_release,
    faulty=True,
)
_add(
    "stale-claim/after-completion",
    "claim delivered again after the completion",
    stale_claim_after_completion,
    faulty=True,
)
_add(
    "stale-release/during-retry",
    "release delivered again while the retry runs",
    stale_release_after_takeover,
    faulty=True,
)
_add(
    "quota-spent/throttle-on-completion",
    "retry quota spent by a throttling burst, then one throttle on completion",
    quota_then_throttle,
    lock_budget_ms=FREED,
    faulty=True,
)
for _mode in ("plain", "transactional", "chunked", "release"):
    _add(f"zombie/{_mode}", f"zombie owner finishes late ({_mode})", zombie(_mode))
_add("skew/+1.9s-live-lease", "caller 1.9 s ahead of a live lease", skewed_takeover)
_add("skew/+1.9s-ttl", "caller 1.9 s ahead of a 1 s TTL", skewed_expiry)
_add(
    "skew/-1.9s-failed-holder",
    "caller 1.9 s behind a holder that could not release",
    skewed_crash,
    lock_budget_ms=FREED + SKEW_MS,
    faulty=True,
)
for _name in UNSTORABLE:
    _add(f"unstorable/{_name}", f"result {_name}", unstorable(_name))
for _name in HOSTILE:
    _add(
        f"hostile/{_name}",
        f"HTTP body: {_name}",
        hostile(_name),
        effects=(0, 1),
        isolated=True,
        timeout_s=8.0,
    )
_add(
    "refused-claim/without-record",
    "refused claims come back without the record",
    refused_without_record,
    timeout_s=10.0,
    faulty=True,
)
for _status in ("INPROGRESS", "EXPIRED"):
    _add(f"foreign-status/{_status}", f"record status {_status}", foreign_status(_status))


# -- running trials -------------------------------------------------------------------------


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TrialTimeout in the main thread after `seconds` (between bytecodes). The timer
    is the one pytest-timeout's signal method uses for the test's own limit: that limit's
    time left is set again afterwards."""

    def fire(signum: int, frame: Any) -> None:
        raise TrialTimeout(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            left = outer - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def run_trial(scenario: Scenario, endpoint: str) -> tuple[Trial, list[str]]:
    """One trial; returns what it measured and the verdict's problems (empty: PASS)."""
    if scenario.isolated:
        trial = _run_isolated(scenario, endpoint)
    else:
        trial = _run_here(scenario, endpoint)
    return trial, scenario.verdict(trial)


def _run_here(scenario: Scenario, endpoint: str) -> Trial:
    rig = Rig(endpoint)
    try:
        with deadline(scenario.timeout_s):
            scenario.run(rig)
    except TrialTimeout as exc:
        rig.trial.problems.append(str(exc))
    except Exception as exc:  # the harness itself broke: say where
        rig.trial.problems.append(
            f"trial error: {type(exc).__name__}: {exc} "
            f"at {traceback.extract_tb(exc.__traceback__)[-1].lineno}"[:300]
        )
    finally:
        rig.trial.injected = max(rig.trial.injected, rig.faults.total)
        rig.close()
    return rig.trial


def _child(name: str, endpoint: str, answers: Any) -> None:
    answers.put(_run_here(SCENARIOS[name], endpoint))


def _run_isolated(scenario: Scenario, endpoint: str) -> Trial:
    """In a fresh process, killed at the deadline: CPU stuck in C code ignores signals."""
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    child = context.Process(target=_child, args=(scenario.name, endpoint, answers))
    child.start()
    child.join(scenario.timeout_s + 5)  # + the child's own start-up (imports)
    if child.is_alive():
        child.kill()
        child.join()
        answers.close()
        return Trial(problems=[f"no answer within {scenario.timeout_s} s (killed)"])
    try:
        trial: Trial = answers.get(timeout=5)
    except Exception:
        trial = Trial(problems=[f"the trial's process died (exit code {child.exitcode})"])
    answers.close()
    return trial
