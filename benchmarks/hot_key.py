"""Hot key: many callers of one key wait (`on_in_progress="wait"`) for the one that runs.

All callers are released at once on a barrier; one claims the key and runs a body that takes
the handler's time, the others wait and replay its result. What matters to them: how soon
after the handler's time each has its answer, and what their polls cost the key's partition
(every poll is a strongly consistent GetItem, counted per caller on the wire).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from .contenders import OURS
from .report import Section, Table
from .workload import LambdaContext, Work, dynamodb_client, order_event

_keys = itertools.count()


@dataclass(frozen=True)
class Waiter:
    answered: float
    """Seconds from the barrier to this caller's answer."""
    refused: float
    """Seconds from the barrier to the answer of its first claim (refused, for a waiter)."""
    reads: int
    """GetItems this caller sent (its polls; a replay of a small result reads nothing more)."""
    ran: bool
    """This caller ran the body (the holder); every other one waited."""
    outcome: str


@dataclass(frozen=True)
class Trial:
    waiters: list[Waiter]
    executions: int

    @property
    def holder_answered(self) -> float:
        return next(w.answered for w in self.waiters if w.ran)


def run_trial(endpoint_url: str, table: str, *, callers: int, work_seconds: float) -> Trial:
    client = dynamodb_client(endpoint_url, max_pool_connections=callers)
    reads: dict[int, int] = {}
    claimed: dict[int, float] = {}
    lock = threading.Lock()

    def count_read(**_: Any) -> None:
        with lock:
            thread = threading.get_ident()
            reads[thread] = reads.get(thread, 0) + 1

    def note_claim(**_: Any) -> None:
        claimed.setdefault(threading.get_ident(), time.perf_counter())

    client.meta.events.register("before-send.dynamodb.GetItem", count_read)
    client.meta.events.register("after-call.dynamodb.PutItem", note_claim)
    work = Work(seconds=work_seconds)
    ran: set[int] = set()

    def body(event: dict[str, Any], context: Any) -> Any:
        ran.add(threading.get_ident())
        return work(event)

    handler = OURS.wrap(client, table, body, cache=False, on_in_progress="wait")
    event = order_event(f"hot-key-{next(_keys)}")
    answers: list[tuple[float, int, str]] = [(0.0, 0, "no answer")] * callers
    barrier = threading.Barrier(callers + 1)

    def caller(index: int) -> None:
        barrier.wait()
        try:
            handler(event, LambdaContext())
            outcome = "result"
        except Exception as exc:
            outcome = type(exc).__name__
        answers[index] = (time.perf_counter(), threading.get_ident(), outcome)

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(callers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join(timeout=120)
    return Trial(
        waiters=[
            Waiter(
                finished - start,
                claimed.get(ident, start) - start,
                reads.get(ident, 0),
                ident in ran,
                outcome,
            )
            for finished, ident, outcome in answers
        ],
        executions=work.executions,
    )


def measure(
    endpoint_url: str,
    table: dict[str, str],
    *,
    callers: int,
    trials: int,
    work_seconds: tuple[float, ...],
) -> dict[float, list[Trial]]:
    """Trials for each handler time, interleaved, each on a new key, after one trial left
    out (it opens the client's connections)."""
    results: dict[float, list[Trial]] = {seconds: [] for seconds in work_seconds}
    run_trial(endpoint_url, table["ours"], callers=callers, work_seconds=min(work_seconds))
    for _ in range(trials):
        for seconds in work_seconds:
            results[seconds].append(
                run_trial(endpoint_url, table["ours"], callers=callers, work_seconds=seconds)
            )
    return results


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds < 1 else f"{seconds:g} s"


def _row(trials: list[Trial], *, callers: int, work_seconds: float) -> list[str]:
    waiters = [(trial, w) for trial in trials for w in trial.waiters if not w.ran]
    polled = [(trial, w) for trial, w in waiters if w.reads > 0]
    over = [w.answered - work_seconds for _, w in waiters]
    holders = [trial.holder_answered - work_seconds for trial in trials]
    lag = [w.answered - trial.holder_answered for trial, w in polled] or [0.0]
    reads = [w.reads for _, w in polled] or [0]
    rates = [w.reads / (w.answered - w.refused) for _, w in polled if w.answered > w.refused]
    executions = sorted({trial.executions for trial in trials})
    others = sum(w.outcome != "result" for _, w in waiters)
    return [
        f"hot key: {callers - 1} waiters, handler {_duration(work_seconds)}",
        " to ".join(map(str, executions)),
        f"+{_ms(statistics.median(holders))} / +{_ms(max(holders))} ms",
        f"+{_ms(statistics.median(over))} / +{_ms(max(over))} ms",
        f"{len(polled)} of {len(waiters)}",
        f"+{_ms(statistics.median(lag))} / +{_ms(max(lag))} ms",
        f"{statistics.mean(reads):.1f} (max {max(reads)})",
        f"{statistics.mean(rates or [0.0]):.1f} (max {max(rates or [0.0]):.1f})",
        str(others),
    ]


def section(results: dict[float, list[Trial]], *, callers: int) -> Section:
    trials = min(len(runs) for runs in results.values())
    rows = [_row(runs, callers=callers, work_seconds=seconds) for seconds, runs in results.items()]
    return Section(
        title="Hot key",
        method=(
            f"{callers} threads invoke the same handler with the same event at once (released "
            'by a barrier) against DynamoDB Local, with `on_in_progress="wait"`: one runs the '
            "body (it sleeps the handler's time), the others wait for its result. "
            f"{trials} trials per handler time, interleaved, each on a new key; times are "
            "over every waiter of every trial. Reads are the GetItems each waiter sent, counted "
            "on the client."
        ),
        tables=[
            Table(
                [
                    "case",
                    "handler runs",
                    "holder answered after the handler's time (p50 / max)",
                    "waiters answered after the handler's time (p50 / max)",
                    "waiters that polled",
                    "they answered after the holder (p50 / max)",
                    "their reads (mean)",
                    "their reads per second of waiting (mean)",
                    "waiters without the result",
                ],
                rows,
            )
        ],
        notes=[
            "Times after the handler's time count from the barrier, so they include the claim "
            f"among {callers} concurrent ones and the completion write: the holder's own answer "
            "is the floor. A waiter whose refused claim came back after the holder completed "
            "replays from it without a poll; the others polled, and their lag after the "
            "holder's answer (its result stored) is what the poll schedule controls. A "
            "waiter's wait runs from its refused claim to its answer. All callers share one "
            "process (and its GIL) and the machine with DynamoDB Local, so their round trips "
            "queue behind each other in a way separate Lambda containers' do not.",
        ],
    )
