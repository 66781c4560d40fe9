"""`powertools_json` in a key or payload selector: two bodies that differ only past double
precision are two requests under our layout, and one request only where Powertools' own
hash makes them one (its layout, for byte-equal records)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lambda_idempotency import DynamoDBStore, PayloadMismatchError, idempotent
from lambda_idempotency._base.keys import compile_selector, payload_hash


def body_event(amount_text: str) -> dict[str, Any]:
    return {"order_id": "o-1", "body": '{"amount": ' + amount_text + "}"}


def test_a_body_that_differs_past_double_precision_is_another_request(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent(store=moto_store, key="order_id", payload="powertools_json(body)")
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["body"])
        return "charged"

    assert handler(body_event("0.30000000000000001"), None) == "charged"
    with pytest.raises(PayloadMismatchError):
        handler(body_event("0.3"), None)
    assert handler(body_event("0.30000000000000001"), None) == "charged"  # a replay
    assert handler(body_event("3.0000000000000001e-1"), None) == "charged"  # same value
    assert len(runs) == 1


def test_spellings_of_one_number_are_one_request(moto_store: DynamoDBStore) -> None:
    runs: list[str] = []

    @idempotent(store=moto_store, key="order_id", payload="powertools_json(body)")
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["body"])
        return "charged"

    for text in ("1.5", "1.50", "15e-1", "0.15E1"):
        assert handler(body_event(text), None) == "charged"
    assert len(runs) == 1


def test_under_powertools_layout_the_hash_is_powertools_own() -> None:
    from aws_lambda_powertools.utilities.jmespath_utils import query

    store = DynamoDBStore("t", layout="powertools")
    select = compile_selector("powertools_json(body)", role="payload", exact_numbers=False)
    event = body_event("0.30000000000000001")
    assert select(event) == query(event, "powertools_json(body)")
    assert isinstance(select(event)["amount"], float)
    assert store.layout.payload_hash(select(event)) == store.layout.payload_hash({"amount": 0.3})


decimal_texts = st.decimals(allow_nan=False, allow_infinity=False, places=None).map(str)


@settings(max_examples=200, deadline=None)
@given(decimal_texts, decimal_texts)
@example("0.30000000000000001", "0.3")
@example("9007199254740993.0", "9007199254740992.0")
@example("1e400", "1e401")
@example("1.0", "1")
@example("-0.0", "0.0")
@example("123456789012345678901234567890.5", "123456789012345678901234567890.25")
def test_two_bodies_hash_alike_exactly_when_their_numbers_are_equal(a: str, b: str) -> None:
    select = compile_selector("powertools_json(body)", role="payload")
    same_value = Decimal(a) == Decimal(b)
    same_hash = payload_hash(select(body_event(a))) == payload_hash(select(body_event(b)))
    assert same_hash == same_value
