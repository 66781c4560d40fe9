"""Every stored byte is untrusted, and a replay is what the first caller got.

Each decoder (a native record, a Powertools record, a result blob, a chunk pointer and its
chunks) is given arbitrary attribute maps and mutations of valid ones: it answers with what
a reference reading of the item says, or with a StoreError carrying a stable code and the
step; never a raw KeyError, ValueError, TypeError, zlib.error, binascii.Error,
UnicodeDecodeError or RecursionError. The encoder is given a rich set of values: each
replays as itself, type for type, or completes its key "not stored"; and every record the
previous version wrote replays as it did then.
"""

from __future__ import annotations

import base64
import collections
import datetime
import enum
import hashlib
import json
import math
import re
import zlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, NamedTuple

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    NewerFormatError,
    ResultNotSerializableError,
    ResultTooLargeError,
    StoreError,
)
from lambda_idempotency._base.errors import UNREADABLE_CODES
from lambda_idempotency._stores.dynamodb.result_placement import (
    MAX_CHUNKS,
    chunk_pk,
    chunk_pointer,
    stored_result_bytes,
)
from lambda_idempotency._stores.encoding import (
    COMPRESS_FROM_BYTES,
    MAX_INT_DIGITS,
    NOT_STORED,
    PLAIN,
    TYPED,
    encode,
    loads,
    not_stored_marker,
    rehydrate,
    unpack,
)
from lambda_idempotency._stores.record import FORMAT_VERSION, Record, Status
from tests.unit import encoding_v1

# -- the records' attributes ----------------------------------------------------------------

NATIVE = DynamoDBStore("t", client=object(), fast_wire=False)
POWERTOOLS = DynamoDBStore("t", client=object(), layout="powertools")
NATIVE_STATUSES = {status.value: status for status in Status}
POWERTOOLS_STATUSES = {"INPROGRESS": Status.IN_PROGRESS, "COMPLETED": Status.COMPLETED}

odd_numbers = st.sampled_from(
    ["", "1.5", "1e3", "abc", "-", "9" * 5000, "NaN", "Infinity", "0x10", "١٢", "1.0"]
)
numbers = st.integers(min_value=-(10**20), max_value=10**20).map(str) | odd_numbers
statuses = st.sampled_from([*NATIVE_STATUSES, *POWERTOOLS_STATUSES, "EXPIRED", "", "completed"])
not_containers = (
    st.none() | st.integers() | st.floats() | st.text(max_size=5) | st.binary(max_size=5)
)
attribute_values = st.one_of(
    st.builds(lambda text: {"S": text}, st.text(max_size=12) | statuses),
    st.builds(lambda text: {"N": text}, numbers),
    st.builds(lambda blob: {"B": blob}, st.binary(max_size=24)),
    st.builds(lambda blob: {"B": bytearray(blob)}, st.binary(max_size=8)),
    st.builds(lambda flag: {"BOOL": flag}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda items: {"L": items}, st.lists(st.just({"S": "x"}), max_size=2)),
    st.builds(
        lambda items: {"M": items}, st.dictionaries(st.text(max_size=3), st.just({"N": "1"}))
    ),
    st.builds(lambda texts: {"SS": texts}, st.lists(st.text(max_size=3), max_size=2)),
    # the right type letter over the wrong Python value, and no AttributeValue at all
    st.builds(lambda kind, value: {kind: value}, st.sampled_from("SNB"), not_containers),
    st.builds(lambda kind: {kind: [1]}, st.sampled_from("SNB")),
    st.just({}),
    st.just({"S": "a", "N": "1"}),
    not_containers,
    st.lists(st.integers(), max_size=2),
)


class Layout(NamedTuple):
    store: DynamoDBStore
    key: str
    statuses: dict[str, Status]
    numbers: tuple[str, ...]
    texts: tuple[str, ...]
    result: str
    data: str | None


NATIVE_LAYOUT = Layout(
    NATIVE,
    "pk",
    NATIVE_STATUSES,
    ("expiration", "lease_until", "claimed_at", "completed_at"),
    ("owner", "payload_hash"),
    "result",
    None,
)
POWERTOOLS_LAYOUT = Layout(
    POWERTOOLS,
    "id",
    POWERTOOLS_STATUSES,
    ("expiration", "in_progress_expiration", "claimed_at", "completed_at"),
    ("owner", "validation"),
    "result",
    "data",
)
LAYOUTS = {"native": NATIVE_LAYOUT, "powertools": POWERTOOLS_LAYOUT}


def names_of(layout: Layout) -> list[str]:
    extra = [layout.data] if layout.data else []
    return [layout.key, "status", *layout.numbers, *layout.texts, layout.result, *extra, "fmt"]


def reference(layout: Layout, item: Mapping[str, Any]) -> Record | None:
    """What an item means, read the slow, obvious way; None when it is no record."""

    def get(name: str, kind: str, kinds: tuple[type, ...]) -> Any:
        value = item.get(name)
        if value is None:
            return None
        if not isinstance(value, dict) or not isinstance(value.get(kind), kinds):
            raise LookupError(name)
        return value[kind]

    try:
        pk, status_text = get(layout.key, "S", (str,)), get("status", "S", (str,))
        if pk is None or status_text not in layout.statuses:
            return None
        version = get("fmt", "N", (str,))  # the format version: absent, or this version's
        if version is not None and int(version) != FORMAT_VERSION:
            return None
        integers: dict[str, int | None] = {}
        for name in layout.numbers:
            text = get(name, "N", (str,))
            integers[name] = None if text is None else int(text)
        if integers[layout.numbers[0]] is None:
            return None
        texts = {name: get(name, "S", (str,)) for name in layout.texts}
        blob = get(layout.result, "B", (bytes, bytearray))
        result = None if blob is None else bytes(blob)
        status = layout.statuses[status_text]
        if layout.data is not None:
            data = get(layout.data, "S", (str,))
            if result is None and status is Status.COMPLETED:
                result = PLAIN + (data.encode() if data else b"null")
    except (LookupError, ValueError):
        return None
    number = [integers[name] for name in layout.numbers]
    return Record(
        pk=pk,
        status=status,
        expiration=number[0],  # type: ignore[arg-type]
        lease_until=number[1],
        owner=texts[layout.texts[0]],
        payload_hash=texts[layout.texts[1]],
        result=result,
        claimed_at=number[2],
        completed_at=number[3],
    )


def check_record(layout: Layout, item: dict[str, Any], step: str = "get") -> Record | None:
    """The decoder agrees with the reference: the same record, or a typed error."""
    expected = reference(layout, item)
    try:
        decoded = layout.store._record(item, step, "asked-pk")
    except NewerFormatError as exc:  # read before all but the key: whatever else it holds
        assert int(item["fmt"]["N"]) > FORMAT_VERSION and exc.step == step
        assert exc.retryable and not exc.maybe_applied
        return None
    except StoreError as exc:
        assert expected is None, f"a valid record refused: {exc}"
        assert exc.code in UNREADABLE_CODES and exc.step == step
        assert not exc.retryable and not exc.maybe_applied
        pk = item.get(layout.key)
        own = pk.get("S") if isinstance(pk, dict) else None
        assert exc.key_hash in ("asked-pk", own)
        return None
    assert expected is not None, f"an invalid item read as {decoded}"
    assert decoded == expected
    assert [type(value) for value in decoded] == [type(value) for value in expected]
    return decoded


def valid_items(layout: Layout) -> st.SearchStrategy[dict[str, Any]]:
    numbers = st.integers(min_value=0, max_value=2**45).map(lambda n: {"N": str(n)})
    texts = st.text(max_size=8).map(lambda text: {"S": text})
    optional: dict[str, st.SearchStrategy[Any]] = {
        **{name: numbers for name in layout.numbers[1:]},
        **{name: texts for name in layout.texts},
        layout.result: st.binary(max_size=16).map(lambda blob: {"B": blob}),
    }
    if layout.data is not None:
        optional[layout.data] = st.text(max_size=8).map(lambda text: {"S": text})
    required = st.fixed_dictionaries(
        {
            layout.key: texts,
            "status": st.sampled_from(sorted(layout.statuses)).map(lambda text: {"S": text}),
            layout.numbers[0]: numbers,
        },
        optional=optional,
    )
    return required


@st.composite
def mutated(draw: st.DrawFn, layout: Layout) -> dict[str, Any]:
    item = dict(draw(valid_items(layout)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        name = draw(st.sampled_from(names_of(layout)) | st.text(max_size=4))
        if name in item and draw(st.booleans()):
            del item[name]
        else:
            item[name] = draw(attribute_values)
    return item


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@given(data=st.data())
@settings(max_examples=200)
def test_any_attribute_map_is_a_record_or_a_typed_error(layout: Layout, data: Any) -> None:
    keys = st.sampled_from(names_of(layout)) | st.text(max_size=6)
    item = data.draw(st.dictionaries(keys, attribute_values, max_size=12))
    check_record(layout, item)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@given(data=st.data())
@settings(max_examples=200)
def test_a_valid_record_mutated_is_still_a_record_or_a_typed_error(
    layout: Layout, data: Any
) -> None:
    check_record(
        layout, data.draw(mutated(layout)), step=data.draw(st.sampled_from(["claim", "scan"]))
    )


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@given(data=st.data())
def test_a_valid_record_reads_as_written(layout: Layout, data: Any) -> None:
    assert check_record(layout, data.draw(valid_items(layout))) is not None


@pytest.mark.parametrize(
    ("item", "code", "what"),
    [
        ({"status": {"S": "COMPLETED"}}, "StoredRecordUnreadable", "'expiration' is missing"),
        (
            {"status": {"S": "COMPLETED"}, "expiration": {"S": "1"}},
            "StoredRecordUnreadable",
            "'expiration' is not an integer",
        ),
        (
            {"status": {"S": "COMPLETED"}, "expiration": {"N": "17.5"}},
            "StoredRecordUnreadable",
            "'expiration' is not an integer",
        ),
        (
            {"status": {"S": "COMPLETED"}, "expiration": {"N": 17}},
            "StoredRecordUnreadable",
            "'expiration' is not an integer",
        ),
        (
            {"status": {"S": "IN_PROGRESS"}, "expiration": {"N": "1"}, "lease_until": {"N": 1.5}},
            "StoredRecordUnreadable",
            "'lease_until' is not an integer",
        ),
        (
            {"status": {"S": "IN_PROGRESS"}, "expiration": {"N": "1"}, "lease_until": {"S": "x"}},
            "StoredRecordUnreadable",
            "'lease_until' is not an integer",
        ),
        (
            {"status": {"S": "COMPLETED"}, "expiration": {"N": "1"}, "result": {"S": "x"}},
            "StoredRecordUnreadable",
            "'result' is not binary",
        ),
        (
            {"status": {"S": "COMPLETED"}, "expiration": {"N": "1"}, "result": {"B": 5}},
            "StoredRecordUnreadable",
            "'result' is not binary",
        ),
        (
            {"status": {"S": "COMPLETED"}, "expiration": {"N": "1"}, "owner": {"N": "1"}},
            "StoredRecordUnreadable",
            "'owner' is not a string",
        ),
        ({"status": {"S": "DONE"}, "expiration": {"N": "1"}}, "UnknownRecordStatus", "'DONE'"),
        ({"status": {"N": "1"}, "expiration": {"N": "1"}}, "UnknownRecordStatus", "'none'"),
        ({"expiration": {"N": "1"}}, "UnknownRecordStatus", "'none'"),
    ],
    ids=[
        "no-expiration",
        "expiration-a-string",
        "expiration-not-an-integer",
        "expiration-a-python-int",
        "lease-a-python-float",
        "lease-a-string",
        "result-a-string",
        "result-a-number-in-B",
        "owner-a-number",
        "unknown-status",
        "status-a-number",
        "no-status",
    ],
)
def test_each_malformed_record_names_its_attribute_never_its_value(
    item: dict[str, Any], code: str, what: str
) -> None:
    item = {"pk": {"S": "k"}, **item}
    with pytest.raises(StoreError) as raised:
        NATIVE._record(item, "claim", "k")
    assert (raised.value.code, raised.value.step, raised.value.key_hash) == (code, "claim", "k")
    assert what in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_powertools_record_replays_what_powertools_would() -> None:
    """Powertools replays a completed record without `data` (or with an empty one) as None;
    its INPROGRESS record carries no result."""
    base = {"id": {"S": "k"}, "expiration": {"N": "9"}}
    completed = POWERTOOLS._record({**base, "status": {"S": "COMPLETED"}}, "get")
    assert completed.result == b"jnull"
    empty = {**base, "status": {"S": "COMPLETED"}, "data": {"S": ""}}
    assert POWERTOOLS._record(empty, "get").result == b"jnull"
    running = {**base, "status": {"S": "INPROGRESS"}, "data": {"S": "1"}}
    assert POWERTOOLS._record(running, "get").result is None
    for bad in ({"data": {"N": "1"}}, {"in_progress_expiration": {"N": "1.5"}}):
        with pytest.raises(StoreError) as raised:
            POWERTOOLS._record({**base, "status": {"S": "COMPLETED"}, **bad}, "claim", "k")
        assert raised.value.code == "StoredRecordUnreadable"


def test_a_won_claim_over_a_record_it_cannot_read_is_still_won() -> None:
    """DynamoDB's condition found the replaced record expired, lapsed or released by its
    own attributes: whatever else it holds is only for the log."""
    assert NATIVE._replaced({"pk": {"S": "k"}, "status": {"S": "??"}}, "k") is None
    assert POWERTOOLS._replaced({"id": {"S": "k"}}, "k") is None
    assert NATIVE._replaced(None, "k") is None


# -- result blobs ------------------------------------------------------------------------------


def read(blob: Any) -> Any:
    document, typed = unpack(blob, key_hash="k")
    return loads(document, typed, key_hash="k")


def check_blob(blob: Any) -> None:
    """A stored blob reads as a value, as the error a "not stored" marker's retries get,
    or as StoreError StoredResultUnreadable with the step and the key hash."""
    try:
        read(blob)
    except StoreError as exc:
        assert (exc.code, exc.step, exc.key_hash) == ("StoredResultUnreadable", "replay", "k")
        assert not exc.retryable
    except (ResultNotSerializableError, ResultTooLargeError) as exc:
        assert exc.key_hash == "k" and blob[:1] == NOT_STORED


tag_names = st.sampled_from(["int", "decimal", "bytes", "bytearray", "dict", "map", "tuple"])
json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=3), children, max_size=3)
        # tagged objects, well formed or not
        | st.builds(
            lambda tag, payload: {"\u0000": tag, "v": payload},
            tag_names | json_leaves,
            children | st.lists(st.lists(children, max_size=3), max_size=3),
        )
        | st.builds(
            lambda tag, extra: {"\u0000": tag, **extra},
            tag_names,
            st.dictionaries(st.text(max_size=2), children, max_size=2),
        )
    ),
    max_leaves=12,
)
formats = st.sampled_from([b"j", b"z", b"t", b"tj", b"tz", b"x", b"c", b"tt", b"tx", b"", b"q"])


@given(formats, st.binary(max_size=64))
def test_any_bytes_read_as_a_value_or_a_typed_error(prefix: bytes, rest: bytes) -> None:
    check_blob(prefix + rest)


@given(st.sampled_from([b"j", b"tj"]), json_values)
def test_any_typed_json_reads_as_a_value_or_a_typed_error(prefix: bytes, data: Any) -> None:
    check_blob(prefix + json.dumps(data).encode())


@given(st.sampled_from([b"z", b"tz"]), json_values, st.integers(min_value=0, max_value=40))
def test_compressed_json_cut_short_is_a_typed_error(prefix: bytes, data: Any, cut: int) -> None:
    compressed = zlib.compress(json.dumps(data).encode())
    check_blob(prefix + compressed[: len(compressed) - cut])


@given(json_values | st.binary(max_size=16).map(lambda blob: blob.decode("latin-1")))
def test_any_not_stored_marker_is_its_error_or_a_typed_error(marker: Any) -> None:
    check_blob(NOT_STORED + json.dumps(marker).encode())


@pytest.mark.parametrize(
    "blob",
    [
        None,
        b"",
        b"j",
        b"j{",
        b"j\xff\xfe",
        b"j[" * 100_000,
        b"z\x00\x01",
        b"tj" + b"[" * 100_000 + b"]" * 100_000,
        b't{"a": 1}',
        b"ttj1",
        b"t" * 10_000 + b"j1",
        b'tj{"\\u0000": "set", "v": []}',
        b'tj{"\\u0000": 5, "v": "1"}',
        b'tj{"\\u0000": "int", "v": "zz"}',
        b'tj{"\\u0000": "int", "v": 7}',
        b'tj{"\\u0000": "decimal", "v": "one"}',
        b'tj{"\\u0000": "bytes", "v": "***"}',
        b'tj{"\\u0000": "dict", "v": [["a"]]}',
        b'tj{"\\u0000": "dict", "v": [[1, 2]]}',
        b'tj{"\\u0000": "map", "v": [[[1], 2]]}',
        b'tj{"\\u0000": "tuple", "v": "ab"}',
        b'tj{"\\u0000": "int"}',
        b'tj{"\\u0000": "int", "v": "1", "w": 2}',
        b"x",
        b"x[]",
        b'x{"reason": 1}',
        b'x{"reason": "too_large", "detail": []}',
        b"c" + json.dumps({"owner": "A"}).encode(),
        b"j" + b"9" * (MAX_INT_DIGITS + 1),
    ],
)
def test_each_unreadable_result_is_a_typed_error(blob: Any) -> None:
    with pytest.raises(StoreError) as raised:
        read(blob)
    assert (raised.value.code, raised.value.step) == ("StoredResultUnreadable", "replay")
    assert raised.value.__cause__ is None


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (None, "the record holds no result"),
        (b"z\x00\x01", "its compressed form does not decompress"),
        (b"q1", "unknown stored result format b'q'"),
        (b"j{", "it is not JSON"),
        (b'j"\xff"', "it is not UTF-8"),
        (b"j" + b"[" * 100_000 + b"]" * 100_000, "its JSON is nested too deep"),
        (b"x[]", 'its "not stored" marker does not parse'),
        (b'x{"reason": "too_large", "detail": []}', 'its "not stored" marker does not parse'),
        (b'tj{"\\u0000": "int"}', "a tagged value in it is malformed"),
        (b'tj{"\\u0000": "set", "v": "1"}', "it holds a tag this version does not know"),
        (b'tj{"\\u0000": "dict", "v": [["a"]]}', "a tagged dict in it is malformed"),
        (b'tj{"\\u0000": "dict", "v": [[1, 2]]}', "a tagged dict in it is malformed"),
        (b'tj{"\\u0000": "decimal", "v": "one"}', "a value in it cannot be read"),
    ],
    ids=[
        "no-result",
        "not-zlib",
        "unknown-format",
        "not-json",
        "not-utf8",
        "too-deep",
        "marker-not-object",
        "marker-detail-not-text",
        "tag-without-value",
        "unknown-tag",
        "dict-pair-short",
        "dict-key-not-text",
        "bad-decimal",
    ],
)
def test_an_unreadable_result_says_what_is_wrong_in_words_of_its_own(
    blob: Any, reason: str
) -> None:
    """The operator reading the error learns what is wrong with the stored result (never
    the bytes themselves), so each kind of damage names itself."""
    with pytest.raises(StoreError) as raised:
        read(blob)
    assert str(raised.value).endswith(f"the stored result cannot be read: {reason}")


@pytest.mark.parametrize(
    ("marker", "error", "said"),
    [
        ({"reason": "too_large"}, ResultTooLargeError, "too large to store ();"),
        ({"reason": "not_serializable"}, ResultNotSerializableError, "could not be stored ();"),
        ({"reason": "too_large", "detail": "9 bytes"}, ResultTooLargeError, "(9 bytes);"),
    ],
    ids=["too-large-no-detail", "not-serializable-no-detail", "too-large-detail"],
)
def test_a_marker_without_its_detail_is_its_error_adding_nothing(
    marker: dict[str, str], error: type[Exception], said: str
) -> None:
    """A marker that gives no detail (another version may write none) repeats no detail:
    the error says what happened and nothing made up."""
    with pytest.raises(error) as raised:
        read(NOT_STORED + json.dumps(marker).encode())
    assert said in str(raised.value)


def test_a_marker_from_a_later_version_is_still_not_stored() -> None:
    """An unknown reason (a version that adds one) still says the result was not stored."""
    with pytest.raises(ResultNotSerializableError, match=r"\(why\)"):
        read(NOT_STORED + json.dumps({"reason": "new_reason", "detail": "why"}).encode())


@given(st.data())
def test_a_valid_blob_mutated_reads_as_a_value_or_a_typed_error(data: Any) -> None:
    blob = bytearray(encode(data.draw(rich_values)).blob)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        at = data.draw(st.integers(min_value=0, max_value=max(0, len(blob) - 1)))
        operation = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if operation == "flip" and blob:
            blob[at] ^= data.draw(st.integers(min_value=1, max_value=255))
        elif operation == "cut":
            del blob[at:]
        else:
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    check_blob(bytes(blob))


# -- chunk pointers and chunks -------------------------------------------------------------------


class ChunkTable:
    """A client answering BatchGetItem from a dict of items by pk (others: absent)."""

    def __init__(self, items: dict[str, Any]) -> None:
        self.items = items
        self.requests = 0

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        self.requests += 1
        (table, request), *_ = RequestItems.items()
        found = [
            self.items[key["pk"]["S"]] for key in request["Keys"] if key["pk"]["S"] in self.items
        ]
        return {"Responses": {table: found}}


def chunked(owner: str, result: bytes, size: int) -> tuple[bytes, dict[str, Any]]:
    parts = [result[start : start + size] for start in range(0, len(result), size)] or [b""]
    items = {
        chunk_pk("k", owner, i): {"pk": {"S": chunk_pk("k", owner, i)}, "result": {"B": part}}
        for i, part in enumerate(parts)
    }
    pointer = {
        "owner": owner,
        "count": len(parts),
        "bytes": len(result),
        "sha256": hashlib.sha256(result).hexdigest(),
    }
    return b"c" + json.dumps(pointer).encode(), items


def load(pointer: bytes, items: dict[str, Any]) -> bytes | None:
    store = DynamoDBStore("t", client=ChunkTable(items), fast_wire=False)  # type: ignore[arg-type]
    record = Record("k", Status.COMPLETED, 2**31, result=pointer)
    return store.load_result(record)


@given(st.binary(max_size=200), st.integers(min_value=1, max_value=64))
def test_chunks_as_written_read_back_whole(result: bytes, size: int) -> None:
    pointer, items = chunked("A", result, size)
    assume(json.loads(pointer[1:])["count"] <= MAX_CHUNKS)
    assert load(pointer, items) == result


@pytest.mark.parametrize(
    "value",
    [{"B": "text"}, {"B": 5}, {"B": [1]}, {"S": "text"}, {"B": None}, "B", None],
    ids=["B-a-str", "B-an-int", "B-a-list", "an-S", "B-none", "no-attribute-value", "none"],
)
def test_a_chunk_whose_result_is_no_binary_is_missing_not_joined(value: Any) -> None:
    pointer, items = chunked("A", b"0123456789", 4)
    items[chunk_pk("k", "A", 1)]["result"] = value
    with pytest.raises(StoreError, match=r"^a chunked result is incomplete or corrupt$") as raised:
        load(pointer, items)
    assert (raised.value.code, raised.value.step) == ("StoredResultUnreadable", "replay")


@given(st.data())
@settings(max_examples=200)
def test_chunks_missing_mutated_or_of_the_wrong_type_are_a_typed_error(data: Any) -> None:
    result = data.draw(st.binary(min_size=1, max_size=120))
    pointer, items = chunked("A", result, data.draw(st.integers(min_value=8, max_value=64)))
    keys = sorted(items)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        key = data.draw(st.sampled_from(keys))
        operation = data.draw(st.sampled_from(["drop", "value", "attribute", "bytes"]))
        if operation == "drop":
            items.pop(key, None)
        elif operation == "value":
            items[key] = {"pk": {"S": key}, "result": data.draw(attribute_values)}
        elif operation == "attribute":
            items[key] = data.draw(
                st.dictionaries(st.sampled_from(["pk", "result", "x"]), attribute_values)
            )
        else:
            items[key] = {"pk": {"S": key}, "result": {"B": data.draw(st.binary(max_size=70))}}
    try:
        loaded = load(pointer, items)
    except StoreError as exc:
        assert (exc.code, exc.step, exc.key_hash) == ("StoredResultUnreadable", "replay", "k")
        return
    assert loaded == result  # a mutation that wrote the same bytes back


pointer_fields = st.fixed_dictionaries(
    {},
    optional={
        "owner": st.text(max_size=4) | json_leaves,
        "count": st.integers(min_value=-2, max_value=MAX_CHUNKS + 2) | json_leaves,
        "bytes": st.integers(min_value=-2, max_value=50) | json_leaves,
        "sha256": st.text(max_size=4) | json_leaves,
    },
)


@given(
    pointer_fields | json_values | st.binary(max_size=8).map(lambda blob: blob.decode("latin-1"))
)
def test_any_chunk_pointer_is_read_or_a_typed_error(pointer: Any) -> None:
    blob = b"c" + json.dumps(pointer).encode()
    try:
        parsed = chunk_pointer(blob, key_hash="k")
    except StoreError as exc:
        assert (exc.code, exc.step, exc.key_hash) == ("StoredResultUnreadable", "replay", "k")
    else:
        assert type(parsed.owner) is str and parsed.owner
        assert type(parsed.chunks) is int and 0 < parsed.chunks <= MAX_CHUNKS
        assert type(parsed.sha256) is str
        assert parsed.size is None or (type(parsed.size) is int and parsed.size >= 0)
    for check in (
        lambda: load(blob, {}),
        lambda: stored_result_bytes(Record("k", Status.COMPLETED, 1, result=blob)),
    ):
        try:
            check()
        except StoreError as exc:
            assert exc.code == "StoredResultUnreadable" and exc.key_hash == "k"


@pytest.mark.parametrize("count", [MAX_CHUNKS + 1, 10**9, 0, -1, True])
def test_a_pointer_that_names_too_many_chunks_asks_for_none(count: int) -> None:
    """A count past what one BatchGetItem reads (or a billion: keys for each, built before
    any request) is refused before a request is sent."""
    blob = b"c" + json.dumps({"owner": "A", "count": count, "sha256": "0"}).encode()
    with pytest.raises(StoreError, match="chunk pointer"):
        chunk_pointer(blob, key_hash="k")
    if count <= MAX_CHUNKS + 1:
        table = ChunkTable({})
        store = DynamoDBStore("t", client=table, fast_wire=False)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="chunk pointer"):
            store.load_result(Record("k", Status.COMPLETED, 2**31, result=blob))
        assert table.requests == 0


# -- a replay is what the first caller got -------------------------------------------------------


class Text(str):
    pass


class Number(int):
    pass


class Real(float):
    pass


class Items(list):  # type: ignore[type-arg]
    pass


class Pair(NamedTuple):
    left: int
    right: int


SUBCLASSED = [
    collections.OrderedDict(a=1),
    collections.defaultdict(list, a=[1]),
    collections.Counter("aab"),
    Text("text"),
    Number(7),
    Real(1.5),
    Items([1]),
    Pair(1, 2),
]
"""Values JSON would store as their base type: the type would be lost, so they are not
stored (an enum, whose value the annotation turns back into it, is not among them)."""
SUBCLASSED_BASES = ["dict", "dict", "dict", "str", "int", "float", "list", "tuple"]

floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([-0.0, 0.0])
decimals = st.decimals(allow_nan=True, allow_infinity=True).filter(lambda d: not d.is_snan())
big_integers = st.integers(min_value=10**700, max_value=10**5000) | st.integers(
    max_value=-(10**4300), min_value=-(10**4400)
)
scalar_keys = (
    st.none()
    | st.booleans()
    | st.integers()
    | big_integers
    | floats
    | st.text(max_size=4)
    | st.sampled_from(["\u0000", "v", "1", "true", "null", "lone \ud800"])
    | st.binary(max_size=4)
    | decimals
)
keys = st.recursive(
    scalar_keys, lambda children: st.lists(children, max_size=3).map(tuple), max_leaves=4
)
leaves = scalar_keys | st.binary(max_size=4).map(bytearray) | st.sampled_from(SUBCLASSED)
rich_values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(keys, children, max_size=3)
        | st.dictionaries(st.text(max_size=3) | st.just("\u0000"), children, max_size=3)
    ),
    max_leaves=16,
)


def exactly(left: Any, right: Any) -> bool:
    """Equal and of the same type all the way down, dict order and keys' types included;
    NaN equal to NaN, -0.0 apart from 0.0, Decimal('1.0') apart from Decimal('1')."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        if math.isnan(left):
            return math.isnan(right)
        return left == right and math.copysign(1, left) == math.copysign(1, right)
    if isinstance(left, Decimal):
        return str(left) == str(right)
    if isinstance(left, dict):
        return len(left) == len(right) and all(
            exactly(lk, rk) and exactly(lv, rv)
            for (lk, lv), (rk, rv) in zip(left.items(), right.items(), strict=True)
        )
    if isinstance(left, list | tuple):
        return len(left) == len(right) and all(map(exactly, left, right))
    return bool(left == right)


def holds_a_subclass(value: Any) -> bool:
    if any(value is instance for instance in SUBCLASSED):
        return True
    if isinstance(value, dict):
        return any(holds_a_subclass(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(holds_a_subclass(item) for item in value)
    return False


@given(rich_values)
@settings(max_examples=300)
def test_every_result_replays_as_itself_type_for_type_or_is_not_stored(result: Any) -> None:
    encoded = encode(result)
    if holds_a_subclass(result):
        assert encoded.problem is not None and "a subclass of" in encoded.problem
        with pytest.raises(ResultNotSerializableError):
            read(encoded.blob)
        return
    assert encoded.problem is None, encoded.problem
    assert exactly(read(encoded.blob), result)


@pytest.mark.parametrize(
    "result",
    [
        {1: "int", "1": "str"},
        {True: "bool", "true": "str", None: "none", "null": "str"},
        {1.5: "float", "1.5": "str"},
        {(1, "a"): "tuple", '[1, "a"]': "str"},
        {b"raw": "bytes", Decimal("1.10"): "decimal", Decimal("1.1"): "other decimal"},
        (1, [2, (3,)]),
        [(), ()],
        {"nested": {2: (b"x", bytearray(b"y"))}},
        {-0.0: "negative zero", "n": float("nan"), "z": -0.0},
        {10**5000: "huge key"},
        {"\u0000": "tag key", 1: 2},
    ],
    ids=[
        "int-and-str-keys",
        "bool-none-keys",
        "float-key",
        "tuple-key",
        "bytes-decimal-keys",
        "tuples",
        "empty-tuples",
        "nested",
        "negative-zero-nan",
        "huge-int-key",
        "tag-key-with-int-key",
    ],
)
def test_each_result_json_would_change_replays_as_itself(result: Any) -> None:
    encoded = encode(result)
    assert encoded.problem is None and encoded.blob[:1] == TYPED
    assert exactly(read(encoded.blob), result)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Paint(enum.Enum):
    RED = "red"
    ONE = 1


@pytest.mark.parametrize(
    ("result", "annotation", "stored"),
    [
        ({Colour.RED: 1}, dict[Colour, int], {"red": 1}),
        ({Level.LOW: "x"}, dict[Level, str], {1: "x"}),
        ({datetime.date(2026, 1, 2): 3}, dict[datetime.date, int], {"2026-01-02": 3}),
        ({(Colour.RED, 1): 2}, None, {("red", 1): 2}),
    ],
    ids=["enum-key", "int-enum-key", "date-key", "enum-in-tuple-key"],
)
def test_keys_the_annotation_turns_back_replay_as_themselves_with_it(
    result: Any, annotation: Any, stored: Any
) -> None:
    replayed = read(encode(result).blob)
    assert exactly(replayed, stored)
    if annotation is not None:
        assert exactly(rehydrate(replayed, annotation), result)


@pytest.mark.parametrize(
    "result",
    [
        {Colour.RED: 1, "red": 2},
        {datetime.date(2026, 1, 2): 1, "2026-01-02": 2},
        {(Colour.RED,): 1, ("red",): 2},
        # every key converted: two enums of one value would merge into one key
        {Colour.RED: 1, Paint.RED: 2},
        {Level.LOW: 1, Paint.ONE: 2},
    ],
    ids=[
        "enum-and-its-value",
        "date-and-its-text",
        "inside-a-tuple",
        "two-enums-one-value",
        "int-enum-and-enum",
    ],
)
def test_keys_that_collide_once_stored_are_not_stored(result: Any) -> None:
    assert encode(result).problem == "not_serializable: a dict whose keys collide once stored"


@pytest.mark.parametrize(
    ("result", "named"),
    [(value, type(value).__qualname__) for value in SUBCLASSED]
    + [
        ({Text("k"): 1}, "a dict with Text keys"),
        ({frozenset(): 1}, "a dict with frozenset keys"),
        (memoryview(b"x"), "memoryview"),
        (Decimal, "type"),
    ],
    ids=[type(value).__name__ for value in SUBCLASSED]
    + ["str-subclass-key", "frozenset-key", "memoryview", "a-class"],
)
def test_a_value_whose_type_json_would_lose_is_not_stored(result: Any, named: str) -> None:
    encoded = encode(result)
    assert encoded.problem is not None and named in encoded.problem
    with pytest.raises(ResultNotSerializableError, match=named):
        read(encoded.blob)


@pytest.mark.parametrize(
    ("result", "base"),
    [(value, base) for value, base in zip(SUBCLASSED, SUBCLASSED_BASES, strict=True)],
    ids=[type(value).__name__ for value in SUBCLASSED],
)
def test_a_subclass_not_stored_is_named_with_the_type_json_would_replay(
    result: Any, base: str
) -> None:
    """The retries' error says why the result was not stored: its type is a subclass of a
    JSON type, which a replay would be instead."""
    named = f"{type(result).__qualname__} (a subclass of {base})"
    assert encode(result).problem == f"not_serializable: {named}"
    with pytest.raises(ResultNotSerializableError, match=re.escape(f"({named})")):
        read(encode(result).blob)


def test_a_serializer_that_raises_completes_the_key_not_stored() -> None:
    """A model whose own serializer fails: the handler has run, so the key completes."""

    class Broken:
        def model_dump(self, mode: str) -> Any:
            raise RuntimeError("boom")

    problem = encode({"model": Broken()}).problem
    assert problem is not None and problem.startswith("not_serializable") and "Broken" in problem


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=6), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_a_json_result_takes_the_plain_path_and_replays_as_itself(result: Any) -> None:
    encoded = encode(result)
    assert not encoded.typed and encoded.blob[:1] in (b"j", b"z")
    assert exactly(read(encoded.blob), result)


def test_integers_are_stored_typed_past_the_figure_the_docs_give() -> None:
    """docs/guide.md and docs/protocol.md: plain JSON up to 4,300 digits, typed past it."""
    assert MAX_INT_DIGITS == 4300
    assert not encode(10 ** (MAX_INT_DIGITS - 1)).typed  # 4,300 digits
    assert encode(10**MAX_INT_DIGITS).typed  # 4,301 digits
    assert read(encode(-(10**MAX_INT_DIGITS)).blob) == -(10**MAX_INT_DIGITS)


# -- records the previous version wrote -----------------------------------------------------------


def previous_replay(result: Any) -> Any:
    encoded = encoding_v1.encode(result)
    document, typed = encoding_v1.unpack(encoded.blob)
    return encoding_v1.loads(document, typed)


old_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**4400, max_value=10**4500)
    | floats
    | st.text(max_size=6)
    | st.binary(max_size=6)
    | decimals,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(max_size=3)
            | st.just("\u0000")
            | st.integers()
            | st.booleans()
            | st.none()
            | floats,
            children,
            max_size=3,
        )
    ),
    max_leaves=12,
)


@given(old_values)
def test_every_record_the_previous_version_wrote_replays_as_it_did(result: Any) -> None:
    blob = encoding_v1.encode(result).blob
    if blob[:1] == NOT_STORED:
        with pytest.raises(ResultNotSerializableError):
            read(blob)
        return
    assert exactly(read(blob), previous_replay(result))


@pytest.mark.parametrize(
    ("blob", "value"),
    [
        (b'j{"1":"a"}', {"1": "a"}),
        (b'tj{"raw":{"\\u0000":"bytes","v":"AP8="}}', {"raw": b"\x00\xff"}),
        (b'tj{"\\u0000":"dict","v":[["\\u0000","x"],["v",1]]}', {"\u0000": "x", "v": 1}),
        (b'tj{"\\u0000":"decimal","v":"NaN"}', Decimal("NaN")),
        (b'tj{"\\u0000":"int","v":"-0x10"}', -16),
        (b'tj"lone \\ud800"', "lone \ud800"),
        (PLAIN + b"1" * 10 + b"", 1111111111),
        (b"z" + zlib.compress(b'{"a":"' + b"x" * COMPRESS_FROM_BYTES + b'"}'), {"a": "x" * 512}),
    ],
    ids=[
        "str-keys",
        "bytes",
        "tag-key-dict",
        "decimal-nan",
        "hex-int",
        "surrogate",
        "plain",
        "zlib",
    ],
)
def test_blobs_of_the_previous_version_replay_as_they_did(blob: bytes, value: Any) -> None:
    assert exactly(read(blob), value)
    assert exactly(read(blob), previous(blob))


def previous(blob: bytes) -> Any:
    document, typed = encoding_v1.unpack(blob)
    return encoding_v1.loads(document, typed)


def test_a_not_stored_marker_of_the_previous_version_is_its_error() -> None:
    with pytest.raises(ResultNotSerializableError, match=r"\(Opaque\)"):
        read(not_stored_marker("not_serializable", "Opaque"))
    with pytest.raises(ResultTooLargeError):
        read(not_stored_marker("too_large", "9000000 bytes stored"))


# -- a few of the errors above, as a caller meets them ---------------------------------------------


def test_bytes_are_base64_checked_not_guessed() -> None:
    """b64decode without validation drops what is not base64: a corrupt blob would read as
    other bytes."""
    corrupt = b'tj{"\\u0000":"bytes","v":"AP8=!!"}'
    with pytest.raises(StoreError):
        read(corrupt)
    assert base64.b64decode("AP8=!!") == b"\x00\xff"  # what a lenient decoder would replay
