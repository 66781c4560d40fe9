"""Values that JSON does not carry natively: replayed as the first run returned them, hashed
without losing a digit; and the scope and the cache under pressure."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import sys
import threading
from decimal import Decimal
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, ScopeMissingError, idempotent
from lambda_idempotency._base.keys import payload_hash
from lambda_idempotency._protocol.engine import CachedResult, ResultCache


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Item:
    n: int


@dataclasses.dataclass
class Invoice:
    amount: Decimal
    issued: datetime.datetime
    due: datetime.date
    colour: Colour
    pair: tuple[int, Item]
    lines: tuple[Item, ...]


def test_replay_rebuilds_decimal_datetime_enum_and_tuples_exactly(
    moto_store: DynamoDBStore,
) -> None:
    first = Invoice(
        amount=Decimal("12345678901234567.89"),
        issued=datetime.datetime(2026, 11, 22, 3, 4, 5),
        due=datetime.date(2026, 12, 1),
        colour=Colour.RED,
        pair=(1, Item(2)),
        lines=(Item(3), Item(4)),
    )

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Invoice:
        return first

    assert handler({"id": 1}, None) == first
    replay = handler({"id": 1}, None)
    assert replay == first
    assert handler.idempotency.stats["replayed"] == 1


def test_hashes_keep_every_digit_of_a_decimal() -> None:
    assert payload_hash(Decimal("0.1")) != payload_hash(Decimal("0.10000000000000000001"))
    assert payload_hash(Decimal("1")) == payload_hash(1)
    assert payload_hash(Decimal("2.5")) == payload_hash(2.5)


def test_explicit_scope_that_selects_nothing_refuses_to_run(moto_store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", scope="tenant")
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "ok"

    with pytest.raises(ScopeMissingError):
        handler({"id": 1}, None)
    assert runs == []


def test_cache_under_contending_threads_stays_consistent_and_bounded() -> None:
    """A thread pool in one container: lookups, replacements and evictions of the same keys at
    once. Unlocked, a lookup races an eviction (KeyError from a replay) and the byte count
    drifts from what is held, so the cache is no longer bounded in bytes."""
    cache = ResultCache(max_items=8, max_bytes=64)
    workers = 8
    barrier = threading.Barrier(workers, timeout=10)
    errors: list[BaseException] = []

    def hammer(offset: int) -> None:
        try:
            barrier.wait()  # all at once, not one after another
            for n in range(3_000):
                pk = f"k{(n + offset) % 12}"
                cache.put(pk, CachedResult(2**40, None, b"x" * ((n + offset) % 13)))
                cache.get(f"k{(n * 7 + offset) % 12}", 0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(offset,)) for offset in range(workers)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads between almost every bytecode
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        sys.setswitchinterval(interval)

    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    held = sum(len(entry.document) for entry in cache._entries.values())
    assert cache._bytes == held <= 64
    assert len(cache) <= 8
