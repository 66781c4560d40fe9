"""Throughput: distinct-key first runs per second against DynamoDB Local, beside raw PutItem.

A first run needs two writes (claim, complete), so the physical ceiling is half of what raw
`PutItem` manages on the same endpoint with the same threads: a ratio of 0.5 is perfect.
Every variant gets the same fixed time window; variants and thread counts interleave, and
the report gives the median over repeats.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from .contenders import OURS, POWERTOOLS, Contender
from .report import Section, Table
from .workload import LambdaContext, Work, dynamodb_client, order_event

PHYSICAL_RATIO = 0.5
"""Two writes per first run against one per raw PutItem."""
RAW = "raw PutItem"
_runs = itertools.count()

CallFactory = Callable[[str], Callable[[int], Any]]
"""prefix -> call(i): one invocation with the i-th key under that prefix."""


def _raw_put(client: Any, table: str, key_attribute: str) -> CallFactory:
    def factory(prefix: str) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            return client.put_item(
                TableName=table, Item={key_attribute: {"S": f"{prefix}-{i}"}, "n": {"N": str(i)}}
            )

        return call

    return factory


def _library(contender: Contender, client: Any, table: str) -> CallFactory:
    handler = contender.wrap(client, table, Work().handler(), cache=False)
    context = LambdaContext()

    def factory(prefix: str) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            return handler(order_event(f"{prefix}-{i}"), context)

        return call

    return factory


def rate(factory: CallFactory, *, threads: int, seconds: float) -> float:
    """Invocations per second over `threads` threads running for `seconds`."""
    run = next(_runs)
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)
    deadline = [0.0]
    finished = [0.0] * threads

    def worker(index: int) -> None:
        call = factory(f"tp-{run}-{index}")
        barrier.wait()
        i = 0
        while time.perf_counter() < deadline[0]:
            call(i)
            i += 1
        counts[index] = i
        finished[index] = time.perf_counter()

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for worker_thread in workers:
        worker_thread.start()
    start = time.perf_counter()
    deadline[0] = start + seconds
    barrier.wait()
    for worker_thread in workers:
        worker_thread.join()
    return sum(counts) / (max(finished) - start)


def measure(
    endpoint_url: str,
    tables: dict[str, str],
    *,
    thread_counts: tuple[int, ...],
    seconds: float,
    repeats: int,
) -> dict[tuple[str, int], list[float]]:
    """(variant, threads) -> invocations per second, one per repeat (in repeat order)."""
    pool = max(thread_counts)
    variants: dict[str, CallFactory] = {
        RAW: _raw_put(
            dynamodb_client(endpoint_url, max_pool_connections=pool), tables[OURS.slug], "pk"
        ),
    }
    for contender in (OURS, POWERTOOLS):
        client = dynamodb_client(endpoint_url, max_pool_connections=pool)
        variants[contender.name] = _library(contender, client, tables[contender.slug])
    for factory in variants.values():  # warm connections and code paths
        rate(factory, threads=pool, seconds=min(seconds, 0.5))
    samples: dict[tuple[str, int], list[float]] = {}
    names = list(variants)
    for repeat in range(repeats):
        for threads in thread_counts:
            shift = (repeat + threads) % len(names)
            for name in names[shift:] + names[:shift]:
                samples.setdefault((name, threads), []).append(
                    rate(variants[name], threads=threads, seconds=seconds)
                )
    return samples


def section(
    samples: dict[tuple[str, int], list[float]],
    *,
    thread_counts: tuple[int, ...],
    seconds: float,
    repeats: int,
) -> Section:
    results = {key: statistics.median(values) for key, values in samples.items()}
    rows = []
    chart: dict[str, Any] = {
        "spread": {
            name: [
                [
                    min(v / r for v, r in zip(samples[name, t], samples[RAW, t], strict=True)),
                    max(v / r for v, r in zip(samples[name, t], samples[RAW, t], strict=True)),
                ]
                for t in thread_counts
            ]
            for name in (OURS.name, POWERTOOLS.name)
        },
        "threads": list(thread_counts),
        RAW: [],
        OURS.name: [],
        POWERTOOLS.name: [],
    }
    for threads in thread_counts:
        raw = results[RAW, threads]
        ours = results[OURS.name, threads]
        theirs = results[POWERTOOLS.name, threads]
        rows.append(
            [
                str(threads),
                f"{raw:,.0f}",
                f"{ours:,.0f}",
                f"{theirs:,.0f}",
                f"{ours / raw:.2f} ({ours / raw / PHYSICAL_RATIO:.0%} of 0.5)",
                f"{theirs / raw:.2f} ({theirs / raw / PHYSICAL_RATIO:.0%} of 0.5)",
                f"{ours / theirs:.2f}x",
            ]
        )
        for name, value in ((RAW, raw), (OURS.name, ours), (POWERTOOLS.name, theirs)):
            chart[name].append(value)
    return Section(
        title="Throughput",
        method=(
            f"Distinct-key first runs per second against DynamoDB Local, each variant given "
            f"{seconds:g} s per thread count, interleaved, median of {repeats} repeats; raw "
            "`PutItem` of a small item with the same threads on the same endpoint is the "
            "reference. A first run is two writes, so 0.5 of raw is the physical ceiling."
        ),
        tables=[
            Table(
                [
                    "threads",
                    "raw PutItem/s",
                    "ours invocations/s",
                    "Powertools invocations/s",
                    "ours ÷ raw",
                    "Powertools ÷ raw",
                    "ours ÷ Powertools",
                ],
                rows,
            )
        ],
        notes=[
            "Client and DynamoDB Local share the machine's cores, so past a few threads both "
            "fight for the same CPU; the ratios, not the absolute rates, carry over.",
        ],
        chart=chart,
    )
