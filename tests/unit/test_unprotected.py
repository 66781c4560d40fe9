"""Calls that run without the protocol: a missing optional key, and IDEMPOTENCY_DISABLED.
What the user asked for must still happen (enlisted writes commit), and the warning is said
once."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, current_execution, idempotent


def enlisting_handler(store: DynamoDBStore) -> Any:
    @idempotent(store=store, key="order_id", key_required=False)
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {"Put": {"TableName": store.table_name, "Item": {"pk": {"S": event["charge"]}}}}
        )
        return "charged"

    return handler


def charged(store: DynamoDBStore, charge: str) -> bool:
    found = store.client.get_item(TableName=store.table_name, Key={"pk": {"S": charge}})
    return "Item" in found


def test_an_unprotected_call_still_commits_its_enlisted_writes(
    moto_store: DynamoDBStore,
) -> None:
    handler = enlisting_handler(moto_store)
    assert handler({"charge": "charge#1"}, None) == "charged"  # no order_id: unprotected
    assert charged(moto_store, "charge#1")


def test_disabled_calls_commit_their_writes_and_warn_once(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    handler = enlisting_handler(moto_store)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handler({"order_id": "o-1", "charge": "charge#1"}, None)
        handler({"order_id": "o-1", "charge": "charge#2"}, None)

    assert charged(moto_store, "charge#1") and charged(moto_store, "charge#2")
    assert [w.category for w in caught] == [RuntimeWarning]
    assert "without protection" in str(caught[0].message)


@pytest.mark.parametrize(
    ("value", "disabled"),
    [
        *[(value, True) for value in ("1", "true", "True", "yes", "YES")],
        *[(value, False) for value in ("0", "false", "on", "")],
    ],
)
def test_idempotency_disabled_takes_1_true_or_yes_in_any_case(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch, value: str, disabled: bool
) -> None:
    """Anything else keeps the protection: a typo must not turn it off in production."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", value)
    runs: list[int] = []

    @idempotent(store=moto_store, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handler({"order_id": "o-1"}, None)
        handler({"order_id": "o-1"}, None)

    assert runs == ([1, 1] if disabled else [1])
    assert len(caught) == (1 if disabled else 0)
