"""The check a decorator runs once, where it is applied: would DynamoDB ever refuse this
namespace's items? Its keys (the record's, and its chunk items' longer ones) within the key
limits, its attribute names within the name limits, and its largest items of fixed size (the
claim, which a release's tombstone never outgrows, and the completed record naming the most
chunks) within 400 KB, each built as the store builds it and counted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..encoding import MAX_STORED_BYTES
from ..record import OWNER_CHARS
from .limits import (
    ITEM_BYTES,
    KEY_NAME_BYTES,
    NAME_BYTES,
    PARTITION_KEY_BYTES,
    SORT_KEY_BYTES,
    WIDEST_NUMBER,
    item_size,
)
from .record_items import in_progress_item
from .result_placement import chunk_bytes, chunk_pk, pointer_record

if TYPE_CHECKING:
    from .store_view import StoreView


def decoration_problems(store: StoreView, namespace: str, *, payload: bool) -> list[str]:
    """What DynamoDB would refuse of this namespace's items, as sentences (none: fine)."""
    found: list[str] = []
    names = store.names
    key_names = [names.pk] if store.sort_key_attr is None else [names.pk, store.sort_key_attr]
    for name in key_names:
        if len(name.encode()) > KEY_NAME_BYTES:
            found.append(
                f"the key attribute name {name[:40]!r}... has {len(name.encode()):,} bytes; "
                f"DynamoDB allows {KEY_NAME_BYTES} for a key attribute's name"
            )
    for name in [*names, *store.layout.extra_attribute_names()]:
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
    chunk_room = chunk_bytes(store, pk, owner=owner, expiration_s=widest)
    chunks = -(-MAX_STORED_BYTES // chunk_room)
    chunk_key = len(chunk_pk(pk, owner, chunks - 1).encode())
    if chunk_key > limit:
        room -= chunk_key - record_key
        found.append(
            f"namespace {_shown(namespace)} makes the keys of a large result's chunk items "
            f"({{key}}#chunk#{{owner}}#{{n}}) {chunk_key:,} bytes long, and DynamoDB refuses a "
            f"{where} over {limit:,} bytes: a result past the record's room would fail to be "
            f"stored after the handler ran. Use a namespace of at most {room:,} bytes"
        )
        return found

    pointer = pointer_record(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        expiration_s=widest,
        chunks=chunks,
        stored_bytes=MAX_STORED_BYTES,
    )
    claim = in_progress_item(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        claimed_at_ms=widest,
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
