"""The engine's `on_replay` hook: how a front end tells a replay from a first run."""

from __future__ import annotations

from typing import Any

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._decorators import build_engine
from tests.conftest import RoundTrips


def marking_engine(store: DynamoDBStore, **options: Any) -> Any:
    def charge(event: dict[str, Any]) -> dict[str, Any]:
        return {"charged": event["amount"]}

    return build_engine(
        charge,
        key="id",
        store=store,
        on_replay=lambda result, info: ("replayed", result),
        **options,
    )


def test_first_run_is_returned_as_is_and_replays_go_through_the_hook(
    moto_store: DynamoDBStore,
) -> None:
    engine = marking_engine(moto_store, cache_size=0)
    event = {"id": "o-1", "amount": 5}

    first = engine.run(event, None, lambda: {"charged": 5})
    retry = engine.run(event, None, lambda: {"charged": 999})

    assert first == {"charged": 5}
    assert retry == ("replayed", {"charged": 5})


def test_replays_from_the_warm_cache_go_through_the_hook_too(moto_store: DynamoDBStore) -> None:
    engine = marking_engine(moto_store)
    event = {"id": "o-1", "amount": 5}
    engine.run(event, None, lambda: {"charged": 5})
    round_trips = RoundTrips(moto_store.client)

    assert engine.run(event, None, lambda: {"charged": 999}) == ("replayed", {"charged": 5})
    assert round_trips.take() == []  # answered from memory


def test_without_a_hook_replays_are_the_plain_result(moto_store: DynamoDBStore) -> None:
    engine = build_engine(lambda event: None, key="id", store=moto_store, cache_size=0)
    engine.run({"id": "o-1"}, None, lambda: 0)

    assert engine.run({"id": "o-1"}, None, lambda: 1) == 0
