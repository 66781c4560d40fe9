"""Every result a handler can return is either replayed equal to what the first caller got,
or completes its key with a marker that names why it was not stored: never released to run
again. Properties over generated results, and the hostile ones found by an attacker."""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import typing
import uuid
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    ResultNotSerializableError,
    ResultTooLargeError,
    StoreError,
    idempotent,
)
from lambda_idempotency._stores.encoding import MAX_STORED_BYTES, NOT_STORED, encode, loads, unpack
from tests.conftest import RoundTrips
from tests.unit.models import Shipment


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
        ({frozenset({1}): "frozenset key"}, "frozenset keys"),
        (circular(), "circular"),
        (Opaque(), "Opaque"),
        ({"nested": [object()]}, "object"),
    ],
    ids=["frozenset-keys", "circular", "object", "nested-object"],
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
    [{frozenset({1}): "x"}, Opaque(), circular()],
    ids=["frozenset-keys", "object", "circular"],
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


# -- results that look like the stored format --------------------------------------------------

plain_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


@given(plain_values, st.sampled_from(["int", "bytes", "decimal", "dict"]), st.booleans())
def test_a_plain_result_shaped_like_a_tag_replays_as_itself(
    inner: Any, tag: str, large: bool
) -> None:
    """Plain JSON is never read as typed: a user's dict keyed "\\u0000" stays a dict, small
    or large enough to be stored compressed."""
    result = {"\u0000": tag, "v": "ff" if tag != "dict" else [["k", 1]], "inner": inner}
    if large:
        result["padding"] = "x" * 2048
    assert not encode(result).typed
    assert same(replay(result), result)


def test_a_stored_format_this_version_does_not_know_is_an_error_not_a_replay() -> None:
    with pytest.raises(StoreError, match="unknown stored result format b'q'") as raised:
        unpack(b'q{"a": 1}')
    assert raised.value.code == "StoredResultUnreadable"


# -- what plain JSON does with common types, in both forms ------------------------------------


class Colour(Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


WHEN = datetime.datetime(2026, 11, 23, 14, 0, tzinfo=datetime.UTC)
COMMON = {
    "when": WHEN,
    "day": WHEN.date(),
    "at": WHEN.time(),
    "colour": Colour.RED,
    "point": Point(1, 2),
    "tags": {"b", "a"},
    "mixed": {1, "a"},
}
COMMON_AS_JSON = {
    "when": WHEN.isoformat(),
    "day": WHEN.date().isoformat(),
    "at": WHEN.time().isoformat(),
    "colour": "red",
    "point": {"x": 1, "y": 2},
    "tags": ["a", "b"],
    "mixed": ["a", 1],  # sorted by repr: a set of mixed types is still storable
}
KEYS = {7: "int key", 2.5: "float key", True: "bool key", None: "null key"}
"""Keys JSON would spell as strings: stored typed, they replay as themselves."""


def test_common_types_replay_as_json_spells_them() -> None:
    """The conversions the return annotation undoes (see the rehydration tests)."""
    assert replay(COMMON) == COMMON_AS_JSON
    assert not encode(COMMON).typed


def test_keys_other_than_strings_replay_as_themselves() -> None:
    assert same(replay({**COMMON, **KEYS}), {**COMMON_AS_JSON, **KEYS})
    assert encode(KEYS).typed


def test_common_types_beside_bytes_replay_as_they_do_without_them() -> None:
    """The typed form, taken for the bytes, spells every other value as plain JSON does."""
    expected = {**COMMON_AS_JSON, **KEYS, "raw": b"\x00\xff"}
    assert encode({**COMMON, **KEYS, "raw": b"\x00\xff"}).typed
    assert replay({**COMMON, **KEYS, "raw": b"\x00\xff"}) == expected


def test_a_container_under_a_number_key_replays_in_the_typed_form() -> None:
    assert replay({8: [b"nested"], 9: {"deeper": [Decimal("1.5")]}}) == {
        8: [b"nested"],
        9: {"deeper": [Decimal("1.5")]},
    }


def test_a_cycle_is_named_by_the_container_it_runs_through() -> None:
    assert encode(circular()).problem == "not_serializable: a circular list"
    looped: dict[str, Any] = {"raw": b"x"}
    looped["self"] = looped
    assert encode(looped).problem == "not_serializable: a circular dict"


def test_a_pydantic_result_with_uuid_datetime_and_decimal_fields_replays_equal(
    moto_store: DynamoDBStore,
) -> None:
    shipment = Shipment(id=uuid.UUID(int=7), shipped_at=WHEN, weight_kg=Decimal("2.50"))

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Shipment:
        return shipment

    assert handler({"id": 1}, None) is shipment
    assert handler({"id": 1}, None) == shipment


def test_the_same_list_twice_is_not_a_cycle() -> None:
    shared = [b"bytes", Decimal("1.5")]
    result = {"first": shared, "second": shared, "again": [shared]}
    assert same(replay(result), {"first": shared, "second": shared, "again": [shared]})


def test_a_typed_result_replays_equal_from_the_warm_cache_with_no_request(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return {"raw": b"\x00\xff", "amount": Decimal("12.30")}

    first = handler({"id": 1}, None)
    requests = RoundTrips(moto_store.client)
    assert handler({"id": 1}, None) == first == {"raw": b"\x00\xff", "amount": Decimal("12.30")}
    assert requests.take() == [] and runs == [1]


# -- results too large, or not storable: what their retries are told ---------------------------


def test_a_result_too_large_to_store_completes_the_key_and_retries_say_so(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> bytes:
        runs.append(1)
        return os.urandom(MAX_STORED_BYTES)

    handler({"id": 1}, None)
    with pytest.raises(ResultTooLargeError) as raised:
        handler({"id": 1}, None)
    assert raised.value.key_hash is not None
    assert re.fullmatch(
        r"the first run's result was too large to store \(\d+ bytes stored\); the handler is "
        r"not run again for this key",
        str(raised.value),
    )
    assert runs == [1]
    assert handler.idempotency.stats["result_not_storable"] == 1


def test_an_unstorable_result_names_its_type_to_its_retries() -> None:
    with pytest.raises(ResultNotSerializableError) as raised:
        unpack(encode(Opaque()).blob)
    assert str(raised.value) == (
        "the first run's result could not be stored (Opaque); the handler is not run again "
        "for this key"
    )


def test_too_deep_a_result_is_a_marker_not_a_crash() -> None:
    deep: Any = b"bottom"
    for _ in range(100_000):
        deep = [deep]
    encoded = encode(deep)
    assert encoded.problem == "not_serializable: nesting too deep"
    with pytest.raises(ResultNotSerializableError, match=r"\(nesting too deep\)"):
        unpack(encoded.blob)


def test_compression_starts_at_512_bytes_of_json() -> None:
    """Below that, zlib's header and CPU outweigh what it saves."""
    assert encode("a" * 509).blob[:1] == b"j"  # 511 bytes of JSON with its quotes
    assert encode("a" * 510).blob[:1] == b"z"


@dataclasses.dataclass
class Note:
    text: str


@given(st.text())
@example("naïve 日本 \U0001f600")
@example("\ud800 a lone surrogate")
def test_a_converted_result_is_stored_as_the_json_it_stands_for(text: str) -> None:
    """A dataclass (or an enum, a date, a set) costs what its JSON costs in the table:
    stored byte for byte as the plain dict would be, its text as UTF-8, not as escapes
    three to six times its size."""
    assert encode(Note(text)).blob == encode({"text": text}).blob


# -- replays rebuilt as the return annotation says ---------------------------------------------


@dataclasses.dataclass
class Invoice:
    number: str
    lines: list[Point]
    issued: datetime.date
    total: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.total = sum(line.x * line.y for line in self.lines)


DAY = datetime.date(2026, 11, 23)
ANNOTATED = [
    (tuple[datetime.date, ...], (DAY, DAY, DAY)),
    (tuple[datetime.date, Decimal], (DAY, Decimal("1.5"))),
    (tuple[datetime.date, str], (DAY, "x")),
    (tuple[int, str], (1, "x", "more than it says")),
    (list[datetime.date], [DAY, DAY]),
    (typing.List, [1, "x"]),  # noqa: UP006  (bare typing.List: no item type)
    (list, [1, "x"]),
    (set[datetime.date], {DAY, datetime.date(2026, 1, 1)}),
    (frozenset[str], frozenset({"a", "b"})),
    (dict[str, datetime.datetime], {"at": WHEN}),
    (dict, {"a": 1}),
    (typing.Dict, {"a": 1}),  # noqa: UP006  (bare typing.Dict: no value type)
    (datetime.datetime, WHEN),
    (datetime.date, DAY),
    (datetime.time, WHEN.time()),
    (Colour, Colour.RED),
    (datetime.date | None, DAY),
    (datetime.date | None, None),
    (typing.Optional[datetime.date], DAY),  # noqa: UP045  (typing.Union, not types.UnionType)
    (datetime.date | str, "not a date"),
    (Decimal | str, "n/a"),
    (Any, {"a": [1]}),
    (typing.Annotated[int, {"unit": "cents"}], 1250),  # metadata that cannot be hashed
    (typing.Literal[{"status": "ok"}], {"status": "ok"}),  # an annotation that cannot be hashed
    (Invoice, Invoice("i-1", [Point(2, 3), Point(1, 1)], DAY)),
    (Invoice, ["not", "an", "invoice"]),
    (Point, "not a point"),
]


@pytest.mark.parametrize(
    ("annotation", "result"),
    ANNOTATED,
    ids=[f"{annotation!r}-{type(result).__name__}" for annotation, result in ANNOTATED],
)
def test_a_replay_is_rebuilt_as_the_return_annotation_says(
    moto_store: DynamoDBStore, annotation: Any, result: Any
) -> None:
    """Dataclasses, dates, enums, Decimals and containers of them come back as what the
    first caller got; a value the annotation does not describe replays as it was stored."""
    runs: list[int] = []

    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return result

    handler.__annotations__["return"] = annotation
    protected = idempotent(store=moto_store, key="id", cache_size=0)(handler)

    assert protected({"id": 1}, None) is result
    replayed = protected({"id": 1}, None)
    assert replayed == result and type(replayed) is type(result)
    if isinstance(result, tuple | list):
        assert [type(item) for item in replayed] == [type(item) for item in result]
    assert runs == [1]


def test_a_replay_for_an_unresolvable_annotation_is_the_stored_json(
    moto_store: DynamoDBStore,
) -> None:
    def handler(event: dict[str, Any], context: Any) -> Any:
        return DAY

    handler.__annotations__["return"] = "NoSuchType"
    protected = idempotent(store=moto_store, key="id", cache_size=0)(handler)
    assert protected({"id": 1}, None) == DAY
    assert protected({"id": 1}, None) == DAY.isoformat()


@dataclasses.dataclass
class _AwaitableReceipt:
    """A dataclass that is also an awaitable: asdict would store it; it is still to come."""

    order: str

    def __await__(self) -> Any:
        yield None


def test_results_still_to_come_nested_anywhere_are_found_and_never_drained() -> None:
    """Issue 31, item 6: the encoder reports (never stores, never runs) what a forgotten
    `await` left in a result, however the encoder would have walked it."""
    import pydantic

    class Model(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
        items: Any

    def items() -> Any:
        yield "drained"

    awaitable = _AwaitableReceipt("o-1")
    assert encode({"receipt": [awaitable]}).deferred == (awaitable,)
    generator = items()
    found = encode({"model": Model(items=[generator])})
    assert found.deferred == (generator,) and found.blob == b""
    assert next(generator) == "drained"  # pydantic did not drain it into a list
    plain = encode({"order": "o-1", "lines": [1, 2.5, None, "x"]})
    unstorable = encode({"lock": object()})
    assert plain.deferred == () and unstorable.deferred == ()
    assert unstorable.blob.startswith(NOT_STORED)


class _Slotted:
    __slots__ = ("held", "other")

    def __init__(self, held: Any) -> None:
        self.held, self.other = held, None


def test_a_result_still_to_come_is_found_in_slots_and_cycles_and_no_iterator_is_consumed() -> None:
    """deferred_in looks through `__slots__` and cycles, and takes an iterator for a result
    still to come rather than draining it."""
    from lambda_idempotency._stores.encoding import deferred_in

    iterator = iter([1, 2, 3])
    assert deferred_in([iterator]) == (iterator,)  # in a container: the result's
    assert list(iterator) == [1, 2, 3]

    def charge() -> Any:
        yield "charged"

    pending = charge()
    slotted = _Slotted(pending)
    slotted.other = slotted  # a cycle
    assert deferred_in([slotted]) == (pending,)  # never started: a forgotten call
    next(pending)
    assert deferred_in([_Slotted(pending)]) == ()  # under way: its holder's business
    counter = iter([1, 2, 3])
    assert deferred_in([_Slotted(counter)]) == ()  # an object's iterator is its own


def test_an_event_loop_an_object_holds_is_not_searched_for_its_tasks() -> None:
    """A result that holds the running loop (through an attribute) is not walked into: the
    loop's own tasks are no part of it, and must never be cancelled as if they were."""
    import asyncio
    import types

    from lambda_idempotency._stores.encoding import deferred_in

    async def scenario() -> tuple[Any, ...]:
        sleeper = asyncio.create_task(asyncio.sleep(0.05))
        await asyncio.sleep(0)  # the sleeper's timer is on the loop now
        found = deferred_in(types.SimpleNamespace(loop=asyncio.get_running_loop()))
        await sleeper
        return found

    assert asyncio.run(scenario()) == ()
