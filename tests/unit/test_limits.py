"""DynamoDB's limits, derived from the items the store writes (issue 24, item 2).

Decoration refuses what DynamoDB would refuse later (the record's key and its chunk items'
keys, the largest fixed-size item); completion places each result within 400 KB, every
attribute counted, and decides once where it goes. No DynamoDB here: placement is pure, and
tests/integration/test_limits_local.py checks the same figures against DynamoDB Local.
"""

from __future__ import annotations

import decimal
import json
import os
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.storage import item_size as billed_size
from lambda_idempotency import (
    AttributeNames,
    ConfigurationError,
    DynamoDBStore,
    idempotent,
    idempotent_function,
)
from lambda_idempotency._batch import idempotent_record, process_batch
from lambda_idempotency._http import idempotent_http
from lambda_idempotency._stores import encoding as _encoding
from lambda_idempotency._stores.dynamodb.decoration_check import decoration_problems as problems
from lambda_idempotency._stores.dynamodb.layout import RECORD_BYTES
from lambda_idempotency._stores.dynamodb.limits import ITEM_BYTES, item_size
from lambda_idempotency._stores.dynamodb.result_placement import CHUNK_BYTES
from lambda_idempotency._stores.record import StoredForm
from tests.batch_events import batch, sqs_record
from tests.conftest import FakeContext

OWNER = "0123456789abcdef01234567"
NOW_MS = 1_800_000_000_123
HOUR_S = 1_800_003_600

NATIVE_ROOM = 2048 - len("#" + "0" * 64 + "#chunk#" + OWNER + "#23")
"""The longest namespace whose chunk keys fit DynamoDB's 2,048-byte partition key: an 8 MB
result (the most stored) takes 24 chunks of 350 KB, indexed 0..23."""
SORT_KEY_ROOM = 1024 - len("#" + "0" * 64 + "#chunk#" + OWNER + "#23")
POWERTOOLS_ROOM = 2048 - len("#" + "0" * 32 + "#chunk#" + OWNER + "#23")
"""md5: 32 hex digits."""


def store(**options: Any) -> DynamoDBStore:
    return DynamoDBStore("t", **options)


def form(target: DynamoDBStore, pk: str, blob: bytes, payload_hash: str | None = "f" * 64) -> Any:
    return target.stored_form(
        pk,
        owner=OWNER,
        payload_hash=payload_hash,
        result=blob,
        expiration_s=HOUR_S,
        claimed_at_ms=NOW_MS - 5,
        completed_at_ms=NOW_MS,
    )


# -- decoration: what DynamoDB would refuse later -----------------------------------------


def handler(event: Any, context: Any) -> Any:
    return event


FRONT_ENDS: dict[str, Callable[[DynamoDBStore, str], Any]] = {
    "idempotent": lambda s, n: idempotent(key="id", store=s, namespace=n)(handler),
    "idempotent_function": lambda s, n: idempotent_function(key="id", store=s, namespace=n)(
        lambda id: id
    ),
    "idempotent_http": lambda s, n: idempotent_http(store=s, namespace=n, scope=None)(handler),
    "idempotent_record": lambda s, n: idempotent_record(store=s, namespace=n)(handler),
}


@pytest.mark.parametrize("front_end", sorted(FRONT_ENDS))
@pytest.mark.parametrize(
    ("options", "room"),
    [
        ({}, NATIVE_ROOM),
        ({"sort_key_attr": "sk"}, SORT_KEY_ROOM),
        ({"layout": "powertools"}, POWERTOOLS_ROOM),
        ({"layout": "powertools", "sort_key_attr": "sk"}, 1024 - 34 - 33),
        ({"layout": "powertools", "hash_function": "sha512"}, 2048 - 34 - 129),
    ],
    ids=["native", "sort-key", "powertools", "powertools-sort-key", "powertools-sha512"],
)
def test_every_front_end_is_refused_a_namespace_one_byte_past_what_dynamodb_takes(
    front_end: str, options: dict[str, Any], room: int
) -> None:
    """At the longest namespace the chunk keys fit, the decorator is applied; one byte more
    and it is refused when applied, saying which key, how long, and the longest that fits."""
    decorate = FRONT_ENDS[front_end]
    decorate(store(**options), "n" * room)

    with pytest.raises(ConfigurationError) as refused:
        decorate(store(**options), "n" * (room + 1))

    message = str(refused.value)
    assert "chunk" in message and f"at most {room:,} bytes" in message
    assert ("sort key" in message) == ("sort_key_attr" in options)


def test_a_namespace_past_the_record_key_itself_says_every_call_would_fail() -> None:
    with pytest.raises(ConfigurationError, match=r"fail at its claim.*at most 1,983 bytes"):
        idempotent(key="id", store=store(), namespace="n" * 1984)(handler)


def test_multibyte_namespaces_are_counted_in_utf8_bytes() -> None:
    """DynamoDB counts a key's UTF-8 bytes, not its characters."""
    idempotent(key="id", store=store(), namespace="é" * (NATIVE_ROOM // 2))(handler)
    with pytest.raises(ConfigurationError, match="bytes"):
        idempotent(key="id", store=store(), namespace="é" * (NATIVE_ROOM // 2 + 1))(handler)


def test_the_default_store_is_checked_as_it_will_be_created() -> None:
    """`store=None` creates the store on first use, with the defaults: checked as those."""
    idempotent(key="id", namespace="n" * NATIVE_ROOM)(handler)
    with pytest.raises(ConfigurationError, match="chunk"):
        idempotent(key="id", namespace="n" * (NATIVE_ROOM + 1))(handler)


def test_the_powertools_key_prefix_and_default_prefix_are_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Powertools' `id` is `{key_prefix}#{md5}`, or `{function}.{module}.{qualname}#{md5}`:
    the store's prefix and the default one are namespaces like any other."""
    with pytest.raises(ConfigurationError, match="chunk"):
        idempotent(key="id", store=store(layout="powertools", key_prefix="p" * 2000))(handler)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "f" * 1960)
    with pytest.raises(ConfigurationError, match="chunk"):
        idempotent(key="id", store=store(layout="powertools"))(handler)


def test_a_static_partition_value_past_2048_bytes_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="static_pk_value"):
        idempotent(key="id", store=store(sort_key_attr="sk", static_pk_value="s" * 2049))(handler)


def test_a_key_attribute_name_past_255_bytes_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="key attribute"):
        idempotent(key="id", store=store(attribute_names=AttributeNames(pk="p" * 256)))(handler)


def test_attribute_names_that_leave_no_room_for_a_pointer_record_are_refused() -> None:
    """Every attribute counts: with names of 60 KB (DynamoDB takes up to 64 KB), a completed
    record naming its chunks would pass 400 KB, however short the key."""
    long = AttributeNames(
        **{
            name: f"{name}{'_' * 60_000}"
            for name in AttributeNames._fields
            if name not in ("pk", "format_version")
        }
    )
    with pytest.raises(ConfigurationError, match="naming its chunks would take 42"):
        idempotent(key="id", store=store(attribute_names=long), namespace="n")(handler)
    # Without a payload hash the record is one attribute smaller, and fits.
    idempotent(key="id", store=store(attribute_names=long), namespace="n", payload=None)(handler)


def test_an_attribute_name_of_64_kb_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="attribute name of 65,536 bytes"):
        idempotent(key="id", store=store(attribute_names=AttributeNames(result="r" * 65_536)))(
            handler
        )


def test_a_hash_function_that_cannot_hash_is_refused_at_decoration() -> None:
    """hashlib's shake_* need a length: every call would raise a TypeError."""
    with pytest.raises(ConfigurationError, match="cannot key a record"):
        idempotent(key="id", store=store(layout="powertools", hash_function="shake_128"))(handler)


def test_process_batch_with_a_plain_handler_is_checked_at_its_first_batch() -> None:
    """A plain record handler gets its engine, and so its namespace, at the first batch:
    refused there, before any record runs (nothing to redeliver: the whole batch fails)."""
    runs: list[Any] = []

    def plain(record: Any) -> None:
        runs.append(record)

    plain.__qualname__ = "q" * 2100
    with pytest.raises(ConfigurationError, match="claim"):
        process_batch(batch(sqs_record("m1", {"id": 1})), FakeContext(), plain)
    assert runs == []


def test_problems_lists_nothing_for_the_defaults() -> None:
    for options in ({}, {"layout": "powertools"}, {"sort_key_attr": "sk"}):
        assert problems(store(**options), "svc.app.handler", payload=True) == []
    DynamoDBStore().check_decoration("svc.app.handler", payload=False)


# -- sizes as DynamoDB counts them --------------------------------------------------------

values = st.one_of(
    st.builds(lambda text: {"S": text}, st.text(max_size=50)),
    st.builds(lambda data: {"B": data}, st.binary(max_size=50)),
    st.builds(lambda n: {"N": str(n)}, st.integers(min_value=-(10**20), max_value=10**20)),
)


@given(st.dictionaries(st.text(min_size=1, max_size=20), values, max_size=8))
def test_item_size_is_never_less_than_what_dynamodb_bills(item: dict[str, Any]) -> None:
    """Strings and binaries exactly; numbers with every digit (DynamoDB trims zeros): an
    upper bound, so an item we size within 400 KB is within it."""
    assert (
        billed_size(item)
        <= item_size(item)
        <= billed_size(item) + sum(len(value["N"]) for value in item.values() if "N" in value)
    )


def test_the_inline_limit_counts_every_attribute_of_the_record() -> None:
    """A 1 KB record: whatever the key, result and the rest add up to RECORD_BYTES at most
    (times at their widest), and a key that leaves no room leaves a limit of 0."""
    target = store()
    for namespace in ("fn", "n" * 300, "n" * 900):
        pk = f"{namespace}#{'0' * 64}"
        limit = target.inline_limit(pk, owner=OWNER, payload_hash="f" * 64)
        placed = form(target, pk, b"j" + b"x" * max(0, limit - 1))
        if limit > 0:
            assert placed.chunks is None
            assert RECORD_BYTES - 24 < item_size(placed.item) <= RECORD_BYTES
        else:
            assert placed.chunks is not None


# -- placement: once, within 400 KB -------------------------------------------------------


def test_a_pointer_is_never_placed_again_when_the_record_has_no_room() -> None:
    """The issue's case: a namespace of a few hundred characters leaves the record less room
    than a pointer takes. The pointer still goes in the record (past the 1 KB budget), and
    the form says exactly what to write: the chunks, then that record."""
    target = store()
    pk = f"{'n' * 700}#{'0' * 64}"
    assert target.inline_limit(pk, owner=OWNER, payload_hash="f" * 64) < 150
    blob = _encoding.encode({"ok": "x" * 200}).blob

    placed = form(target, pk, blob)

    assert placed.chunks == blob
    pointer = placed.item["result"]["B"]
    assert pointer.startswith(_encoding.CHUNKED)
    assert json.loads(pointer[1:])["bytes"] == len(blob)
    assert form(target, pk, blob) == placed  # decided by what is written, nothing else


def test_put_chunks_writes_the_items_the_pointer_counts(moto_store: DynamoDBStore) -> None:
    blob = os.urandom(CHUNK_BYTES * 2 + 10)
    pk = f"fn#{'0' * 64}"
    placed = form(moto_store, pk, blob)
    assert (
        moto_store.put_chunks(pk, owner=OWNER, result=blob, expiration_s=HOUR_S)
        == (placed.item["result"]["B"])
    )
    assert json.loads(placed.item["result"]["B"][1:])["count"] == 3


def decimals(count: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "prices": [
            decimal.Decimal(f"{rng.randrange(10**12)}.{rng.randrange(10**6):06d}")
            for _ in range(count)
        ]
    }


def test_a_345_kb_decimal_result_keeps_data_and_moves_ours_to_chunks() -> None:
    """Powertools' `data` (Decimal as text, ~343 KB) and our typed blob (~170 KB) would pass
    400 KB together: `data` stays for a rolled-back Powertools, ours goes to chunks."""
    target = store(layout="powertools")
    pk = f"fn#{'0' * 32}"
    blob = _encoding.encode(decimals(15_000)).blob

    placed = form(target, pk, blob, payload_hash="0" * 32)

    assert isinstance(placed, StoredForm) and placed.chunks == blob
    assert item_size(placed.item) <= ITEM_BYTES
    assert 340_000 < len(placed.item["data"]["S"]) <= 350_000
    assert placed.item["result"]["B"].startswith(_encoding.CHUNKED)


def test_a_typed_result_that_fits_with_its_data_stays_in_the_record() -> None:
    target = store(layout="powertools")
    blob = _encoding.encode(decimals(100)).blob
    placed = form(target, f"fn#{'0' * 32}", blob, payload_hash=None)
    assert placed.chunks is None
    assert placed.item["result"]["B"] == blob and "data" in placed.item


def test_a_plain_result_under_350_kb_is_data_only() -> None:
    target = store(layout="powertools")
    blob = _encoding.encode({"text": "a" * 340_000}).blob
    placed = form(target, f"fn#{'0' * 32}", blob)
    assert placed.chunks is None and set(placed.item) >= {"data"} and "result" not in placed.item


@given(
    layout=st.sampled_from(["native", "powertools"]),
    sort_key=st.booleans(),
    namespace=st.integers(min_value=1, max_value=POWERTOOLS_ROOM),
    size=st.one_of(
        st.integers(min_value=0, max_value=2_000),
        st.integers(min_value=340_000, max_value=420_000),
        st.sampled_from([CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 2 * CHUNK_BYTES + 1]),
    ),
    typed=st.booleans(),
)
def test_every_placement_fits_400_kb_and_keeps_the_result(
    layout: str, sort_key: bool, namespace: int, size: int, typed: bool
) -> None:
    """For any namespace the decorator accepts and any result, the form's record fits
    DynamoDB's item, and holds the result itself or a pointer to chunks holding it."""
    options: dict[str, Any] = {"layout": layout}
    if sort_key:
        options["sort_key_attr"] = "sk"
    target = store(**options)
    try:
        target.check_decoration("n" * namespace, payload=True)
    except ConfigurationError:
        return  # refused where it was applied
    pk = target.layout.record_key("n" * namespace, None, "k")
    payload_hash = target.layout.payload_hash("p")
    text = os.urandom(size // 2).hex()
    blob = _encoding.encode([decimal.Decimal("1.5"), text] if typed else text).blob

    placed = form(target, pk, blob, payload_hash=payload_hash)

    assert item_size(placed.item) <= ITEM_BYTES
    stored = placed.item.get("result", {}).get("B")
    if placed.chunks is None:
        assert stored == blob or placed.item["data"]["S"].encode() == _encoding.unpack(blob)[0]
    else:
        assert placed.chunks == blob and stored.startswith(_encoding.CHUNKED)
        assert json.loads(stored[1:])["bytes"] == len(blob)


@pytest.mark.parametrize("digits", range(1, 39))
def test_a_number_is_sized_by_its_significant_digits(digits: int) -> None:
    """DynamoDB: 1 byte per two significant digits, plus 1 (here the name's byte besides)."""
    assert item_size({"n": {"N": "7" * digits}}) == 1 + (digits + 1) // 2 + 1


def test_a_sort_key_attribute_name_past_255_bytes_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="key attribute"):
        idempotent(key="id", store=store(sort_key_attr="s" * 256))(handler)


def test_a_static_partition_value_of_2048_bytes_is_taken() -> None:
    idempotent(key="id", store=store(sort_key_attr="sk", static_pk_value="s" * 2048))(handler)
