"""Contention: many concurrent duplicates of one key, released at once on a barrier.

Each caller is a thread invoking the same decorated handler with the same event against
DynamoDB Local; the handler's body sleeps a little, as real work would, so the duplicates
arrive while the first caller still holds the key. What matters: the body runs once, and
how soon every caller has an answer (the result, or a refusal it can retry on).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from .contenders import OURS, POWERTOOLS, Contender, InProgressPolicy
from .report import Section, Table, milliseconds
from .workload import LambdaContext, Work, dynamodb_client, order_event

VARIANTS: tuple[tuple[str, Contender, InProgressPolicy], ...] = (
    ("lambda-idempotency, on_in_progress=raise", OURS, "raise"),
    ("lambda-idempotency, on_in_progress=wait", OURS, "wait"),
    ("Powertools", POWERTOOLS, "raise"),
)
_keys = itertools.count()


@dataclass(frozen=True)
class Trial:
    executions: int
    results: int
    refused: int
    """Callers told the key is in flight (InProgressError / IdempotencyAlreadyInProgressError)."""
    errors: int
    all_answered: float
    """Seconds from the barrier until the last caller returned or raised."""


def run_trial(
    contender: Contender,
    policy: InProgressPolicy,
    endpoint_url: str,
    table: str,
    *,
    callers: int,
    work_seconds: float,
) -> Trial:
    client = dynamodb_client(endpoint_url, max_pool_connections=callers)
    work = Work(seconds=work_seconds)
    handler = contender.wrap(client, table, work.handler(), cache=False, on_in_progress=policy)
    in_progress = contender.in_progress_error()
    event = order_event(f"contention-{contender.slug}-{policy}-{next(_keys)}")
    outcomes: list[str] = ["no answer"] * callers
    finished = [0.0] * callers
    barrier = threading.Barrier(callers + 1)

    def caller(index: int) -> None:
        barrier.wait()
        try:
            handler(event, LambdaContext())
            outcomes[index] = "result"
        except in_progress:
            outcomes[index] = "refused"
        except Exception as exc:
            outcomes[index] = type(exc).__name__
        finished[index] = time.perf_counter()

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(callers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join(timeout=120)
    return Trial(
        executions=work.executions,
        results=outcomes.count("result"),
        refused=outcomes.count("refused"),
        errors=callers - outcomes.count("result") - outcomes.count("refused"),
        all_answered=max(finished) - start,
    )


def measure(
    endpoint_url: str, table: dict[str, str], *, callers: int, trials: int, work_seconds: float
) -> dict[str, list[Trial]]:
    """Trials of every variant, interleaved, each on a new key."""
    results: dict[str, list[Trial]] = {label: [] for label, _, _ in VARIANTS}
    for trial in range(trials):
        order = VARIANTS if trial % 2 == 0 else VARIANTS[::-1]
        for label, contender, policy in order:
            results[label].append(
                run_trial(
                    contender,
                    policy,
                    endpoint_url,
                    table[contender.slug],
                    callers=callers,
                    work_seconds=work_seconds,
                )
            )
    return results


def _spread(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low} to {high}"


def section(results: dict[str, list[Trial]], *, callers: int, work_seconds: float) -> Section:
    rows = []
    chart: dict[str, Any] = {"variants": []}
    trials = 0
    for label, _, _ in VARIANTS:
        runs = results[label]
        trials = len(runs)
        answered = statistics.median(run.all_answered for run in runs)
        rows.append(
            [
                label,
                _spread([run.executions for run in runs]),
                _spread([run.results for run in runs]),
                _spread([run.refused for run in runs]),
                _spread([run.errors for run in runs]),
                milliseconds(answered),
            ]
        )
        chart["variants"].append(
            {
                "label": label,
                "answered": answered,
                "answered_min": min(run.all_answered for run in runs),
                "answered_max": max(run.all_answered for run in runs),
                "results": statistics.median(run.results for run in runs),
            }
        )
    return Section(
        title="Contention",
        method=(
            f"{callers} threads invoke the same handler with the same event at once (released "
            f"by a barrier) against DynamoDB Local; the handler's body takes "
            f"{milliseconds(work_seconds)}. {trials} trials per variant, interleaved, each on "
            "a new key; counts show the range over trials, the time its median."
        ),
        tables=[
            Table(
                [
                    "variant",
                    "handler runs",
                    "callers with the result",
                    "callers refused (in progress)",
                    "other errors",
                    "every caller answered after",
                ],
                rows,
            )
        ],
        notes=[
            "A refused caller has an answer it can act on (ours carries `retry_after`, the "
            'seconds until the holder\'s lease lapses); with `on_in_progress="wait"` every '
            "caller gets the result itself, at the cost of polling until the holder completes.",
        ],
        chart=chart,
    )
