"""The decoration-time check that every item a decorator will ever write can be written
(DynamoDB's limits themselves, and its way of counting, are `_stores.dynamodb.item_size`'s).

DynamoDB refuses a partition key over 2,048 bytes, a sort key over 1,024 and an item over
400 KB, names and values counted. A refusal at the claim fails every call; a refusal at the
completion comes after the handler ran, when the effect has happened. So a decorator whose
records or chunk items could never be written is refused where it is applied, with a
`ConfigurationError` that says which limit and by how much; the sizes that vary per call
(the result) are placed within the limits at completion (`DynamoDBStore.stored_form`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._base.errors import ConfigurationError
from .item_size import (
    ITEM_BYTES,
    KEY_NAME_BYTES,
    NAME_BYTES,
    PARTITION_KEY_BYTES,
    SORT_KEY_BYTES,
    WIDEST_NUMBER,
    item_size,
)

if TYPE_CHECKING:
    from .store import DynamoDBStore


def check_decoration(store: DynamoDBStore | None, namespace: str, *, payload: bool) -> None:
    """Refuse, when a decorator is applied, a namespace and store whose items DynamoDB would
    refuse later: the record's key and its chunk items' keys (longer: `{pk}#chunk#{owner}#n`)
    within the key limits, and the largest items of fixed size (the claim, which a release's
    tombstone never outgrows, and the completed record holding a chunk pointer) within
    400 KB. `store=None` is the default store the decorator creates on first use, checked
    as it will be. Chunk items need no check: they hold what their key and names leave."""
    if store is None:
        from .store import DynamoDBStore

        store = DynamoDBStore()
    for problem in problems(store, namespace, payload=payload):
        raise ConfigurationError(problem)


def problems(store: DynamoDBStore, namespace: str, *, payload: bool) -> list[str]:
    """What DynamoDB would refuse of this namespace's items, as sentences (none: fine)."""
    from ..record import OWNER_CHARS
    from .store import _chunk_pk

    found: list[str] = []
    names = store.names
    key_names = [names.pk] if store.sort_key_attr is None else [names.pk, store.sort_key_attr]
    for name in key_names:
        if len(name.encode()) > KEY_NAME_BYTES:
            found.append(
                f"the key attribute name {name[:40]!r}... has {len(name.encode()):,} bytes; "
                f"DynamoDB allows {KEY_NAME_BYTES} for a key attribute's name"
            )
    for name in [*names, *store.extra_attribute_names()]:
        if not name or len(name.encode()) > NAME_BYTES:
            found.append(
                f"an attribute name of {len(name.encode()):,} bytes: DynamoDB takes 1 to "
                f"{NAME_BYTES:,}"
            )
    if found:
        return found

    layout = store.layout
    try:
        pk = layout.record_key(namespace, None, "probe")
        payload_hash = layout.payload_hash("probe") if payload else None
    except Exception as exc:  # a hash function that cannot hash (hashlib's shake_*, ...)
        return [f"the store's key layout cannot key a record: {type(exc).__name__}: {exc}"]
    owner = "0" * OWNER_CHARS
    if store.sort_key_attr is None:
        where, limit = "partition key", PARTITION_KEY_BYTES
    else:
        where, limit = f"sort key ({store.sort_key_attr!r})", SORT_KEY_BYTES
        static = store.static_pk_value.encode()
        if not 1 <= len(static) <= PARTITION_KEY_BYTES:
            found.append(
                f"static_pk_value has {len(static):,} bytes; DynamoDB takes a partition key "
                f"of 1 to {PARTITION_KEY_BYTES:,} bytes"
            )
    record_key = len(pk.encode())
    room = limit - (record_key - len(namespace.encode()))
    if record_key > limit:
        found.append(
            f"namespace {_shown(namespace)} makes record keys of {record_key:,} bytes "
            f"(namespace, '#' and the key's hash), and DynamoDB refuses a {where} over "
            f"{limit:,} bytes: every call would fail at its claim. Use a namespace of at most "
            f"{room:,} bytes"
        )
        return found

    widest = int(WIDEST_NUMBER)
    # A chunk item always has room (names under 64 KB each leave it over 270 KB); its room
    # sets how many chunks the largest result takes, and so the longest chunk key.
    chunk_room = store.chunk_bytes(pk, owner=owner, expiration_s=widest)
    from ..encoding import MAX_STORED_BYTES

    chunks = -(-MAX_STORED_BYTES // chunk_room)
    chunk_key = len(_chunk_pk(pk, owner, chunks - 1).encode())
    if chunk_key > limit:
        room -= chunk_key - record_key
        found.append(
            f"namespace {_shown(namespace)} makes the keys of a large result's chunk items "
            f"({{key}}#chunk#{{owner}}#{{n}}) {chunk_key:,} bytes long, and DynamoDB refuses a "
            f"{where} over {limit:,} bytes: a result past the record's room would fail to be "
            f"stored after the handler ran. Use a namespace of at most {room:,} bytes"
        )
        return found

    pointer = store.pointer_record(
        pk,
        owner=owner,
        payload_hash=payload_hash,
        expiration_s=widest,
        chunks=chunks,
        stored_bytes=MAX_STORED_BYTES,
    )
    claim = store.claim_item(
        pk,
        owner=owner,
        payload_hash=payload_hash,
        now_ms=widest,
        lease_until_ms=widest,
        expiration_s=widest,
    )
    for what, item in (("a claim", claim), ("a completed record naming its chunks", pointer)):
        size = item_size(item)
        if size > ITEM_BYTES:
            found.append(
                f"{what} would take {size:,} bytes (every attribute counted: key, names, "
                f"status, owner, payload hash, times, result) and DynamoDB refuses an item "
                f"over {ITEM_BYTES:,} bytes: shorten the namespace or the attribute names"
            )
    return found


def _shown(namespace: str) -> str:
    encoded = len(namespace.encode())
    return f"{namespace[:40]!r}... ({encoded:,} bytes)" if len(namespace) > 40 else repr(namespace)
