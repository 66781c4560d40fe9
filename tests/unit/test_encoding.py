"""Every result a handler can return is either replayed equal to what the first caller got,
or completes its key with a marker that names why it was not stored: never released to run
again. Properties over generated results, and the hostile ones found by an attacker."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    ResultNotSerializableError,
    ResultTooLargeError,
    idempotent,
)
from lambda_idempotency._encoding import MAX_STORED_BYTES, NOT_STORED, encode, loads, unpack


def replay(result: Any) -> Any:
    encoded = encode(result)
    assert encoded.problem is None
    document, typed = unpack(encoded.blob)
    return loads(document, typed)


def same(left: Any, right: Any) -> bool:
    """Equality that counts NaN equal to NaN (JSON keeps it; Python says nan != nan)."""
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, Decimal) and isinstance(right, Decimal) and left.is_nan():
        return right.is_nan() and left.is_signed() == right.is_signed()
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same, left, right))
    return type(left) is type(right) and left == right


# JSON-shaped results plus the values plain JSON has no room for.
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**4400, max_value=10**4500)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.binary(max_size=64)
    | st.decimals(allow_nan=True, allow_infinity=True).filter(lambda d: not d.is_snan())
)
results = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _needs_types(value: Any) -> bool:
    """A Decimal replays as a Decimal only in the typed form; plain JSON makes it a number."""
    if isinstance(value, Decimal):
        return True
    if isinstance(value, dict):
        return any(_needs_types(item) for item in value.values())
    if isinstance(value, list):
        return any(_needs_types(item) for item in value)
    return False


@given(results)
def test_every_storable_result_replays_equal(result: Any) -> None:
    replayed = replay(result)
    if (_needs_types(result) and encode(result).typed) or not _needs_types(result):
        assert same(replayed, result)


@given(st.dictionaries(st.text(max_size=4), st.binary(max_size=8), min_size=1, max_size=3))
def test_a_dict_that_looks_like_a_tag_stays_a_dict(values: dict[str, bytes]) -> None:
    """A user's own dict with the tag key must not be read back as a tagged value."""
    result = {"\u0000": "bytes", "v": "AAAA", "data": values}
    assert replay(result) == result


@pytest.mark.parametrize(
    "result",
    [
        b"\x00\xff raw bytes",
        Decimal("NaN"),
        Decimal("-Infinity"),
        10**5000,
        -(10**5000),
        Decimal("1e5000"),
        Decimal("1e1000000"),
        Decimal("-1e-999999"),
        {"text": "lone \ud800 surrogate"},
        [float("nan"), float("inf")],
    ],
    ids=[
        "bytes",
        "decimal-nan",
        "decimal-inf",
        "int-5000-digits",
        "negative-int-5000-digits",
        "decimal-1e5000",
        "decimal-1e1000000",
        "decimal-tiny",
        "lone-surrogate",
        "float-nan-inf",
    ],
)
def test_values_plain_json_cannot_hold_are_stored_typed(result: Any) -> None:
    assert same(replay(result), result)


def test_a_huge_exponent_costs_nothing_to_store() -> None:
    """Decimal('1e1000000') was once expanded into a million digits: seconds of CPU."""
    encoded = encode({"amount": Decimal("1e1000000")})
    assert encoded.problem is None and len(encoded.blob) < 64


class Opaque:
    pass


def circular() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


@pytest.mark.parametrize(
    ("result", "named"),
    [
        ({(1, 2): "tuple key"}, "tuple keys"),
        (circular(), "circular"),
        (Opaque(), "Opaque"),
        ({"nested": [object()]}, "object"),
    ],
    ids=["tuple-keys", "circular", "object", "nested-object"],
)
def test_an_unstorable_result_is_a_marker_naming_its_type(result: Any, named: str) -> None:
    encoded = encode(result)
    assert encoded.blob.startswith(NOT_STORED) and encoded.document is None
    assert encoded.problem is not None and named in encoded.problem
    with pytest.raises(ResultNotSerializableError, match=named):
        unpack(encoded.blob)


def test_a_result_past_the_store_limit_is_a_marker() -> None:
    big = __import__("os").urandom(MAX_STORED_BYTES)
    encoded = encode(big)
    assert encoded.blob.startswith(NOT_STORED)
    with pytest.raises(ResultTooLargeError):
        unpack(encoded.blob)


@pytest.mark.parametrize(
    "result",
    [{(1, 2): "x"}, Opaque(), circular()],
    ids=["tuple-keys", "object", "circular"],
)
def test_unstorable_result_runs_once_and_its_retries_get_a_typed_error(
    moto_store: DynamoDBStore, result: Any
) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    assert handler({"id": 1}, None) is result  # the first caller gets what the handler returned
    for _ in range(2):
        with pytest.raises(ResultNotSerializableError) as raised:
            handler({"id": 1}, None)
        assert raised.value.key_hash is not None
    assert runs == [1]
    assert handler.idempotency.stats["result_not_storable"] == 1


@pytest.mark.parametrize(
    "result",
    [b"bytes", Decimal("NaN"), 10**5000, Decimal("1e5000")],
    ids=["bytes", "decimal-nan", "big-int", "big-decimal"],
)
def test_storable_oddities_replay_what_the_first_caller_got(
    moto_store: DynamoDBStore, result: Any
) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return {"value": result}

    first = handler({"id": 1}, None)
    assert same(handler({"id": 1}, None), first)
    assert runs == [1]
