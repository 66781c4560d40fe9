"""Where a result lives: in the record, or in an item of its own read after the refused claim.

Every replay is a refused conditional claim, billed like a write of the record it finds, so a
result in the record costs its size in write units on every retry; in an item of its own it
costs a read (half a unit per 4 KB, eventually consistent) and one more round trip, on the
replay and on the first run. This measures both placements on DynamoDB Local for the same
random-text results (they barely compress, so the stored size follows the result's), which
is what chose the library's rule: a result stays in the record while the record fits in 1 KB.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .contenders import OURS
from .report import Section, Table
from .storage import (
    LAMBDA_MS_DOLLARS_128MB,
    RANDOM,
    Phase,
    _attempt,
    _invoke,
    _units,
    item_size,
)

RECORD = "the record"
OWN_ITEM = "an item of its own"


@contextlib.contextmanager
def _inline_limit(limit: int) -> Iterator[None]:
    """Every result kept in the record up to `limit` stored bytes, whatever the key."""
    from lambda_idempotency._stores.dynamodb.store import DynamoDBStore

    original = DynamoDBStore.inline_limit
    DynamoDBStore.inline_limit = lambda self, pk, **_: limit  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoDBStore.inline_limit = original  # type: ignore[method-assign]


@dataclass(frozen=True)
class Placement:
    result_bytes: int
    where: str
    record_bytes: int
    first: Phase
    again: Phase
    first_ms: float
    """Median latency of a first run (claim, result, completion), unmetered."""
    replay_ms: float
    """Median latency of a replay from the store (warm cache off), unmetered."""


def _placed(where: str) -> contextlib.AbstractContextManager[None]:
    """In the record while an item can hold it (the layout before 1 KB records), or always in
    an item of its own."""
    from lambda_idempotency._stores.dynamodb.store import INLINE_RESULT_BYTES

    return _inline_limit(INLINE_RESULT_BYTES if where == RECORD else 0)


def measure_one(endpoint_url: str, size: int, where: str, calls: int) -> Placement:
    with _placed(where):
        client, _, invoke, rules, table = _invoke(OURS, RANDOM, size, endpoint_url, meter=True)
        assert rules is not None
        _attempt(lambda: invoke("warm-up"))
        rules.take()
        _attempt(lambda: invoke("metered"))
        first = rules.take()
        _attempt(lambda: invoke("metered"))
        again = rules.take()
        items = client.scan(TableName=table, ConsistentRead=True)["Items"]
        record = max(
            (item_size(item) for item in items if "#chunk#" not in item["pk"]["S"]), default=0
        )
        _, _, timed, _, _ = _invoke(OURS, RANDOM, size, endpoint_url, meter=False)
        _attempt(lambda: timed("warm-up"))
        firsts, replays = [], []
        for index in range(calls):
            call = functools.partial(timed, f"timed-{index}")
            started = time.perf_counter()
            _attempt(call)
            firsts.append(time.perf_counter() - started)
            started = time.perf_counter()
            _attempt(call)
            replays.append(time.perf_counter() - started)
    return Placement(
        result_bytes=size,
        where=where,
        record_bytes=record,
        first=first,
        again=again,
        first_ms=statistics.median(firsts) * 1000,
        replay_ms=statistics.median(replays) * 1000,
    )


def measure(endpoint_url: str, sizes: tuple[int, ...], calls: int) -> list[Placement]:
    return [
        measure_one(endpoint_url, size, where, calls)
        for size in sizes
        for where in (RECORD, OWN_ITEM)
    ]


def crossover(results: list[Placement]) -> list[str]:
    """The smallest result whose replays cost less in their own item, and what the extra
    round trip costs there, in latency and in a small function's billed time."""
    pairs = {(p.result_bytes, p.where): p for p in results}
    for size in sorted({p.result_bytes for p in results}):
        inline, own = pairs.get((size, RECORD)), pairs.get((size, OWN_ITEM))
        if inline is None or own is None:
            continue
        if own.again.dollars_per_million < inline.again.dollars_per_million:
            extra_ms = own.replay_ms - inline.replay_ms
            return [
                f"Crossover: from the {size:,} B result on (its record: "
                f"{inline.record_bytes:,} B), a replay costs less with the result in its own "
                f"item: ${own.again.dollars_per_million:.2f} against "
                f"${inline.again.dollars_per_million:.2f} a million replays, for "
                f"{extra_ms:+.2f} ms of replay latency here (the extra `BatchGetItem`; "
                f"${extra_ms * LAMBDA_MS_DOLLARS_128MB * 1e6:.3f} a million replays of a "
                "128 MB function's billed time). Every KB past the first adds a write unit "
                "to each replay of a result kept in the record, and a read unit buys 4 KB "
                "of an item of its own for a fifth of the price: the record keeps a result "
                "only while the whole record fits in 1 KB."
            ]
    return ["No crossover in the sizes measured: every replay cost the same in both places."]


def section(results: list[Placement]) -> Section:
    rows = [
        [
            f"{p.result_bytes:,} B random text",
            p.where,
            f"{p.record_bytes:,} B",
            p.first.round_trips,
            _units(p.first),
            p.again.round_trips,
            _units(p.again),
            f"${p.again.dollars_per_million:,.2f}",
            f"{p.first_ms:.2f} ms",
            f"{p.replay_ms:.2f} ms",
        ]
        for p in results
    ]
    return Section(
        title="Where a result lives",
        method=(
            "Our library only, the same random-text results stored two ways on DynamoDB Local: "
            "in the record (as every result up to 350 KB was before) and in an item of its "
            "own (`BatchWriteItem` before the fenced completion, `BatchGetItem` eventually "
            "consistent after the refused claim). Capacity priced as in the storage section "
            "(reported where DynamoDB Local reports it, rules for the refused claim); dollars "
            "are on-demand US East. Latencies are medians of unmetered calls, each on a new "
            "key, warm cache off."
        ),
        tables=[
            Table(
                [
                    "result",
                    "stored in",
                    "record item",
                    "round trips, first run",
                    "first run",
                    "round trips, replay",
                    "per replay",
                    "per million replays",
                    "first run p50",
                    "replay p50",
                ],
                rows,
            )
        ],
        notes=crossover(results),
    )
