"""Hot key: many callers of one key wait (`on_in_progress="wait"`) for the one that runs.

All callers are released at once on a barrier; one claims the key and runs a body that takes
the handler's time, the others wait and replay its result. What matters to them: how soon
after the handler's time each has its answer, and what their polls cost the key's partition
(every poll is a strongly consistent GetItem, counted per caller on the wire).

Two ways to run the callers: as threads of one process (they share its GIL, so each one's
round trips queue behind the others' CPU), and as processes of their own, each with its own
client, as separate Lambda execution environments are (on this machine they still share its
cores with each other and with DynamoDB Local). And two kinds of caller: a first wait, whose
container has not seen the function run, and one whose container has run it once before (a
warm container of a function in use), which polls when the holder is due.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import statistics
import threading
import time
import uuid
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


THREADS = "threads"
PROCESSES = "processes"
MODES = (THREADS, PROCESSES)
SEEN = (False, True)
"""Whether the callers' containers ran the handler once before the trial (on another key)."""
Case = tuple[int, str, bool, float]
"""Callers, how they run, whether they have seen a run, the handler's time in seconds."""


def run_trial(
    endpoint_url: str,
    table: str,
    *,
    callers: int,
    work_seconds: float,
    mode: str = THREADS,
    seen: bool = False,
) -> Trial:
    if mode == PROCESSES:
        return run_trial_in_processes(
            endpoint_url, table, callers=callers, work_seconds=work_seconds, seen=seen
        )
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
    if seen:
        handler(order_event(f"hot-key-seen-{uuid.uuid4()}"), LambdaContext())
        ran.clear()
        reads.clear()
        claimed.clear()
    ran_before = work.executions
    event = order_event(f"hot-key-{next(_keys)}")
    answers: list[tuple[float, int, str]] = [(0.0, 0, "no answer")] * callers
    released: list[float] = []
    barrier = threading.Barrier(callers + 1)

    def caller(index: int) -> None:
        barrier.wait()
        released.append(time.perf_counter())
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
    for thread in threads:
        thread.join(timeout=120)
    start = min(released)  # the first caller past the barrier
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
        executions=work.executions - ran_before,
    )


def run_trial_in_processes(
    endpoint_url: str, table: str, *, callers: int, work_seconds: float, seen: bool = False
) -> Trial:
    """One trial with every caller in a process of its own (forked, so nothing is imported
    again), warm: its client made and one invocation of another key run before the barrier
    (of the trial's handler itself when `seen`)."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(callers + 1)
    warmed = context.Barrier(callers)
    answers = context.Queue()
    event = order_event(f"hot-key-{next(_keys)}")

    def caller() -> None:
        client = dynamodb_client(endpoint_url)
        # A warm execution environment: its connection open, the store's first call made.
        client.get_item(TableName=table, Key={OURS.key_attribute: {"S": "warm-up"}})
        warm = OURS.wrap(client, table, Work().handler(), cache=False)
        warm(order_event(f"hot-key-warm-up-{uuid.uuid4()}"), LambdaContext())
        reads = 0
        claimed: list[float] = []

        def count_read(**_: Any) -> None:
            nonlocal reads
            reads += 1

        def note_claim(**_: Any) -> None:
            if not claimed:
                claimed.append(time.perf_counter())

        work = Work(seconds=work_seconds)
        handler = OURS.wrap(client, table, work.handler(), cache=False, on_in_progress="wait")
        if seen:
            # Once every process is set up (forked, imported, connected): as a run of a warm
            # container, not one slowed by 63 others' start.
            warmed.wait(timeout=120)
            handler(order_event(f"hot-key-seen-{uuid.uuid4()}"), LambdaContext())
        ran_before = work.executions
        client.meta.events.register("before-send.dynamodb.GetItem", count_read)
        client.meta.events.register("after-call.dynamodb.PutItem", note_claim)
        barrier.wait()
        released = time.perf_counter()
        try:
            handler(event, LambdaContext())
            outcome = "result"
        except Exception as exc:
            outcome = type(exc).__name__
        finished = time.perf_counter()
        answers.put(
            (
                released,
                finished,
                claimed[0] if claimed else None,
                reads,
                work.executions - ran_before,
                outcome,
            )
        )

    processes = [context.Process(target=caller, daemon=True) for _ in range(callers)]
    for process in processes:
        process.start()
    barrier.wait(timeout=120)
    results = [answers.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    # From the first caller past the barrier (one monotonic clock in every process): this
    # process may be scheduled after its children.
    start = min(released for released, *_ in results)
    return Trial(
        waiters=[
            Waiter(
                finished - start,
                (start if claimed is None else claimed) - start,
                reads,
                executions > 0,
                outcome,
            )
            for _, finished, claimed, reads, executions, outcome in results
        ],
        executions=sum(executions for *_, executions, _ in results),
    )


def measure(
    endpoint_url: str,
    table: dict[str, str],
    *,
    callers: int,
    trials: int,
    work_seconds: tuple[float, ...],
    few_callers: int | None = None,
) -> dict[Case, list[Trial]]:
    """Trials for each way of running the callers, each kind of caller and each handler time,
    interleaved, each on a new key, after one trial left out (it opens the client's
    connections). With `few_callers`, processes again with that many callers: whether a lag
    comes from the poll schedule or from this machine's cores, which `callers` processes
    saturate."""
    ways = [(callers, mode) for mode in MODES]
    if few_callers:
        ways.append((few_callers, PROCESSES))
    results: dict[Case, list[Trial]] = {
        (n, mode, seen, seconds): []
        for seen in SEEN
        for n, mode in ways
        for seconds in work_seconds
    }
    run_trial(endpoint_url, table["ours"], callers=callers, work_seconds=min(work_seconds))
    for _ in range(trials):
        for (n, mode, seen, seconds), runs in results.items():
            runs.append(
                run_trial(
                    endpoint_url,
                    table["ours"],
                    callers=n,
                    work_seconds=seconds,
                    mode=mode,
                    seen=seen,
                )
            )
    return results


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds < 1 else f"{seconds:g} s"


MODE_TITLES = {THREADS: "threads of one process", PROCESSES: "processes"}
SEEN_TITLES = {False: "first wait", True: "has seen a run"}


def _row(
    trials: list[Trial], *, callers: int, mode: str, seen: bool, work_seconds: float
) -> list[str]:
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
        f"hot key: {callers - 1} waiters, {MODE_TITLES[mode]}, {SEEN_TITLES[seen]}, "
        f"handler {_duration(work_seconds)}",
        " to ".join(map(str, executions)),
        f"+{_ms(statistics.median(holders))} / +{_ms(max(holders))} ms",
        f"+{_ms(statistics.median(over))} / +{_ms(max(over))} ms",
        f"{len(polled)} of {len(waiters)}",
        f"+{_ms(statistics.median(lag))} / +{_ms(max(lag))} ms",
        f"{statistics.mean(reads):.1f} (max {max(reads)})",
        f"{statistics.mean(rates or [0.0]):.1f} (max {max(rates or [0.0]):.1f})",
        str(others),
    ]


def section(results: dict[Case, list[Trial]], *, callers: int) -> Section:
    trials = min(len(runs) for runs in results.values())
    few = sorted({n for n, *_ in results if n != callers})
    rows = [
        _row(runs, callers=n, mode=mode, seen=seen, work_seconds=seconds)
        for (n, mode, seen, seconds), runs in sorted(
            results.items(), key=lambda item: (item[0][3], item[0][2], -item[0][0], item[0][1])
        )
    ]
    return Section(
        title="Hot key",
        method=(
            f"{callers} callers invoke the same handler with the same event at once (released "
            'by a barrier) against DynamoDB Local, with `on_in_progress="wait"`: one runs the '
            "body (it sleeps the handler's time), the others wait for its result. The callers "
            "run as threads of one process, and as processes of their own (forked, each with "
            "its own client and an open connection), as separate Lambda execution "
            "environments are. Either all callers wait for the first time (their containers "
            "have not seen the function run), or each caller's container has run the handler "
            "once before, on another key (a warm function in use): such a waiter polls when "
            "its holder is due. "
            + (
                f"The processes run again {few[0]} at a time, which this machine's cores carry "
                f"without queueing (it has {os.cpu_count()}): {callers} processes polling "
                "every few tens of milliseconds keep every core busy, and the lag measured then "
                "is this machine's, not the schedule's. "
                if few
                else ""
            )
            + f"{trials} trials per case, interleaved, each on a new key; times are "
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
            "waiter's wait runs from its refused claim to its answer. Threads share one "
            "process's GIL, so their round trips queue behind each other's CPU; processes do "
            "not, but all callers still share this machine's cores with DynamoDB Local, which "
            "separate Lambda execution environments and DynamoDB do not.",
            "A waiter that has seen a run polls densely (25 to 50 ms apart) from 100 ms before "
            "the holder is due to 250 ms after the longest run it saw; outside that window, and "
            "on a first wait, it polls a quarter of the holder's age apart (100 to 500 ms), so "
            "a first wait answers up to that much after the holder.",
        ],
    )
