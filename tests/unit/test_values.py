"""Values that JSON does not carry natively: replayed as the first run returned them, hashed
without losing a digit; and the scope and the cache under pressure."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import threading
from decimal import Decimal
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, ScopeMissingError, idempotent
from lambda_idempotency._cache import CachedResult, ResultCache
from lambda_idempotency._keys import payload_hash


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


def test_cache_survives_many_threads() -> None:
    cache = ResultCache(max_items=8)
    errors: list[BaseException] = []

    def hammer(offset: int) -> None:
        try:
            for n in range(2_000):
                pk = f"k{(n + offset) % 32}"
                cache.put(pk, CachedResult(2**40, None, b"x" * (n % 5)))
                cache.get(pk, 0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(offset,)) for offset in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(cache) <= 8
    assert cache._bytes == sum(len(entry.document) for entry in cache._entries.values())
