"""A result replayed from the table is kept warm in the container: what the next call gets
from memory must be exactly what the table would have given it, for exactly as long, with the
same payload check. On moto, with a fake clock and a count of the requests sent."""

from __future__ import annotations

import decimal
import json
import logging
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, PayloadMismatchError, ReplayInfo, idempotent
from tests.conftest import FakeClock, RoundTrips

RESULT = {"receipt": b"\x00\xffPDF", "amount": decimal.Decimal("10.50")}
"""Bytes and a Decimal: stored as typed JSON, which must be read back as such."""


def two_containers(
    store: DynamoDBStore, clock: FakeClock, **options: Any
) -> tuple[Any, Any, list[int], list[ReplayInfo]]:
    """The same function in two warm containers: one ran the call, the other replays it."""
    runs: list[int] = []
    infos: list[ReplayInfo] = []

    def hook(result: Any, info: ReplayInfo) -> Any:
        infos.append(info)
        return result

    def make(cache_size: int) -> Any:
        @idempotent(
            store=store,
            key="order_id",
            payload="@",
            namespace="charges",
            clock=clock,
            cache_size=cache_size,
            on_replay=hook,
            **options,
        )
        def handler(event: dict[str, Any], context: Any) -> Any:
            runs.append(1)
            return RESULT

        return handler

    return make(0), make(16), runs, infos


def test_a_store_replay_then_serves_the_same_typed_result_from_memory(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    first, second, runs, infos = two_containers(moto_store, clock)
    event = {"order_id": "o-1", "amount": "10.50"}
    assert first(event, None) == RESULT
    trips = RoundTrips(moto_store.client)

    assert second(dict(event), None) == RESULT  # from the table
    assert trips.take() == ["PutItem"]
    assert second(dict(event), None) == RESULT  # from memory: no request at all
    assert trips.take() == []
    assert runs == [1]

    record = moto_store.get(infos[0].key_hash)
    assert record is not None and record.completed_at is not None
    assert [(i.source, i.completed_at) for i in infos] == [
        ("store", record.completed_at),
        ("cache", record.completed_at),
    ]


def test_the_warm_copy_of_a_store_replay_checks_the_payload(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    first, second, runs, _ = two_containers(moto_store, clock)
    event = {"order_id": "o-1", "amount": "10.50"}
    first(event, None)
    second(dict(event), None)  # now warm in the second container
    trips = RoundTrips(moto_store.client)

    with pytest.raises(PayloadMismatchError):
        second({"order_id": "o-1", "amount": "99.00"}, None)
    assert trips.take() == []
    assert runs == [1]


def test_the_warm_copy_of_a_store_replay_expires_with_the_record(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    """The key's TTL is 60 s: past it (and the skew allowance) the call runs again, in the
    container holding the warm copy too."""
    first, second, runs, _ = two_containers(moto_store, clock, ttl_seconds=60)
    event = {"order_id": "o-1", "amount": "10.50"}
    first(event, None)
    clock.advance(30)
    second(dict(event), None)  # warm from here, for what is left of the record's 60 s
    clock.advance(20)
    assert second(dict(event), None) == RESULT
    assert runs == [1]

    clock.advance(13)  # 63 s after the first run: expired even on a clock 2 s behind
    assert second(dict(event), None) == RESULT
    assert runs == [1, 1]


def test_each_replay_logs_where_it_came_from(
    moto_store: DynamoDBStore, clock: FakeClock, caplog: Any
) -> None:
    """At DEBUG, one line per replay, saying whether the table or the warm cache answered."""
    first, second, _, infos = two_containers(moto_store, clock)
    event = {"order_id": "o-1", "amount": "10.50"}
    first(event, None)

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        second(dict(event), None)
        second(dict(event), None)

    replays = [json.loads(r.getMessage()) for r in caplog.records]
    replays = [line for line in replays if line["idempotency"] == "replayed"]
    assert [(line["source"], line["key_hash"]) for line in replays] == [
        ("store", infos[0].key_hash),
        ("cache", infos[0].key_hash),
    ]


def test_the_container_that_ran_the_call_replays_its_typed_result_from_memory(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    _, second, runs, infos = two_containers(moto_store, clock)
    event = {"order_id": "o-1", "amount": "10.50"}
    assert second(event, None) == RESULT  # runs here, and stays warm here
    trips = RoundTrips(moto_store.client)
    assert second(dict(event), None) == RESULT
    assert trips.take() == []
    assert runs == [1]
    assert [i.source for i in infos] == ["cache"]


def test_a_completed_record_says_when_it_was_claimed_and_completed(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    """Operators read a record's age and run time from these (`inspect`, `stuck`)."""
    claimed_at = clock.now_ms()

    @idempotent(store=moto_store, key="order_id", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> str:
        clock.advance(2.5)
        return "charged"

    handler({"order_id": "o-1"}, None)
    pk, _ = handler.idempotency._identify({"order_id": "o-1"})
    record = moto_store.get(pk)
    assert record is not None
    assert (record.claimed_at, record.completed_at) == (claimed_at, claimed_at + 2_500)
