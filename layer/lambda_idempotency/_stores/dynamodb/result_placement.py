"""Where a completed record's result goes: in the record, or in chunk items it points at.

A result stays in the record while it fits the layout's budget (`inline_limit`) and the
whole item fits DynamoDB's 400 KB; otherwise it is written first as immutable chunk items
keyed by the writer's owner token (`{pk}#chunk#{owner}#n`), and the record holds a pointer
naming their count, size and checksum. A replay reads them back whole, or not at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..._base.errors import STORED_RESULT_UNREADABLE, StoreError, unreadable
from ..._base.value import Value
from ..encoding import CHUNKED
from ..record import Record, StoredForm
from .calls import batch_get, batch_write
from .layout import binary
from .layout import text as _text
from .limits import ITEM_BYTES, WIDEST_NUMBER, item_size
from .record_items import completed_item, item_key, pk_of

if TYPE_CHECKING:
    from .store_view import PlacementView, StoreView

CHUNK_BYTES = 350_000
"""The result bytes a chunk item holds, when its key and names leave that much of 400 KB."""
MAX_CHUNKS = 100
"""The most chunks a pointer may name: what one BatchGetItem reads (`load_result` sends
one). A result of at most MAX_STORED_BYTES takes far fewer."""
BATCH_WRITE_ITEMS = 25
"""BatchWriteItem takes at most 25 items a request."""
OVERHEADS_KEPT = 64
"""Record overheads a store remembers (one per length of key: a namespace or a few)."""


def stored_form(
    store: PlacementView,
    pk: str,
    *,
    owner: str,
    payload_hash: str | None,
    result: bytes,
    expiration_s: int,
    claimed_at_ms: int | None = None,
    completed_at_ms: int | None = None,
) -> StoredForm:
    """The completion's writes, decided once: the record as it will be sent, and the
    packed result to write as chunk items first when the record does not keep it.

    The result stays in the record while it fits `inline_limit` (a budget: 1 KB of
    record for the native layout) and the whole item, every attribute counted, fits
    DynamoDB's 400 KB; otherwise the record holds a pointer to chunks, whatever the
    budget. Retrying a completion sends this same form again, never a re-placed one (a
    pointer placed again would be chunked over the chunks it points at)."""
    item = completed_item(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        expiration_s=expiration_s,
        claimed_at_ms=claimed_at_ms,
        completed_at_ms=completed_at_ms,
    )
    size = record_overhead(store, pk, owner, payload_hash)  # the item's, or more
    inline = len(result) <= store.inline_limit(pk, owner=owner, payload_hash=payload_hash)
    for attributes, chunks in placements(store, result, owner, inline=inline, pk=pk):
        if size + item_size(attributes) <= ITEM_BYTES:
            return StoredForm(pk, owner, {**item, **attributes}, chunks)
    raise StoreError(
        f"the completed record cannot hold even a chunk pointer within DynamoDB's "
        f"{ITEM_BYTES:,} bytes ({size:,} without its result)",
        key_hash=pk,
        code="ItemTooLarge",
    )


def placements(
    store: StoreView, blob: bytes, owner: str, *, inline: bool, pk: str = ""
) -> Iterator[tuple[dict[str, Any], bytes | None]]:
    """Where the layout puts a packed result, best first (`Layout.placements`)."""

    def pointer() -> bytes:
        room = chunk_bytes(store, pk, owner=owner, expiration_s=int(WIDEST_NUMBER))
        return _chunk_pointer(owner, blob, -(-len(blob) // room))

    return store.layout.placements(store.names, blob, inline=inline, pointer=pointer)


def inline_limit(store: PlacementView, pk: str, *, owner: str, payload_hash: str | None) -> int:
    """The most result bytes the completed record holds and stays within its layout's
    `record_budget` (RECORD_BYTES natively; DynamoDB's item size, every attribute
    counted, times at their widest)."""
    overhead = record_overhead(store, pk, owner, payload_hash)
    return max(0, store.layout.record_budget - overhead - len(store.names.result.encode()))


def record_overhead(store: PlacementView, pk: str, owner: str, payload_hash: str | None) -> int:
    """The completed record's bytes but its result (times at their widest: at least
    what the record takes), counted on the record itself. Only the lengths of the key,
    the owner and the hash vary, the same for every key of a namespace: counted once per
    such shape."""
    shape = (len(pk.encode()), len(owner), -1 if payload_hash is None else len(payload_hash))
    overhead = store._overheads.get(shape)
    if overhead is None:
        widest = int(WIDEST_NUMBER)
        item = completed_item(
            store,
            pk,
            owner=owner,
            payload_hash=payload_hash,
            expiration_s=widest,
            claimed_at_ms=widest,
            completed_at_ms=widest,
        )
        overhead = item_size(item)
        if len(store._overheads) < OVERHEADS_KEPT:
            store._overheads[shape] = overhead
    return overhead


def pointer_record(
    store: StoreView,
    pk: str,
    *,
    owner: str,
    payload_hash: str | None,
    expiration_s: int,
    chunks: int,
    stored_bytes: int,
) -> dict[str, Any]:
    """The largest completed record of a fixed size: one naming `chunks` chunk items of
    a `stored_bytes` result, times at their widest (for the decoration-time check)."""
    item = completed_item(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        expiration_s=expiration_s,
        claimed_at_ms=int(WIDEST_NUMBER),
        completed_at_ms=int(WIDEST_NUMBER),
    )
    pointer = _pointer_bytes(owner, "0" * 64, chunks, stored_bytes)
    return {**item, store.names.result: {"B": pointer}}


def chunk_bytes(store: StoreView, pk: str, *, owner: str, expiration_s: int) -> int:
    """The result bytes one chunk item of this key holds: CHUNK_BYTES, or what its key
    and names leave of DynamoDB's 400 KB when that is less."""
    item = _chunk_item(store, pk, owner, 10**9, expiration_s, b"")
    return min(CHUNK_BYTES, ITEM_BYTES - item_size(item))


def put_chunks(store: StoreView, pk: str, *, owner: str, result: bytes, expiration_s: int) -> bytes:
    """Write a large result as immutable chunk items keyed by our owner token, before
    the completion names them, and return the pointer the record stores instead. A
    completion that is fenced out leaves them to expire; no other run ever reads them.
    Writing the same result again writes the same items."""
    size = chunk_bytes(store, pk, owner=owner, expiration_s=int(WIDEST_NUMBER))
    starts = range(0, len(result), size)
    for first in range(0, len(starts), BATCH_WRITE_ITEMS):
        requests = [
            {
                "PutRequest": {
                    "Item": _chunk_item(
                        store, pk, owner, index, expiration_s, result[start : start + size]
                    )
                }
            }
            for index, start in enumerate(starts[first : first + BATCH_WRITE_ITEMS], start=first)
        ]
        batch_write(store._send, store.table_name, pk, requests)
    return _chunk_pointer(owner, result, len(starts))


def load_result(store: StoreView, record: Record) -> bytes | None:
    """The record's packed result, reassembled from its chunks when it was split. A
    pointer that does not parse, and chunks missing or not what the pointer names, are
    a StoreError `StoredResultUnreadable`: never a partial result."""
    blob = record.result
    if blob is None or blob[:1] != CHUNKED:
        return blob
    pointer = chunk_pointer(blob, key_hash=record.pk)
    keys = [item_key(store, chunk_pk(record.pk, pointer.owner, i)) for i in range(pointer.chunks)]
    # Chunks are immutable and written before the record names them: an eventually
    # consistent read either finds one whole or misses it, and only misses pay for a
    # strongly consistent read.
    parts = _read_chunks(store, record.pk, keys, consistent=False)
    missing = [key for key in keys if pk_of(store, key) not in parts]
    if missing:
        parts.update(_read_chunks(store, record.pk, missing, consistent=True))
    joined = b"".join(parts.get(pk_of(store, key), b"") for key in keys)
    digest = hashlib.sha256(joined).hexdigest()
    if digest != pointer.sha256 or pointer.size not in (None, len(joined)):
        raise StoreError(
            "a chunked result is incomplete or corrupt",
            key_hash=record.pk,
            record=record,
            code=STORED_RESULT_UNREADABLE,
            step="replay",
        )
    return joined


def _read_chunks(
    store: StoreView, pk: str, keys: list[dict[str, Any]], *, consistent: bool
) -> dict[str, bytes]:
    """The chunks found of `keys`, by their item's key; one not as we write them is left
    out (missing, which the checksum tells)."""
    names = store.names
    parts: dict[str, bytes] = {}
    for item in batch_get(store._send, store.table_name, pk, keys, consistent=consistent):
        try:
            parts[_text(item[store.sort_key_attr or names.pk])] = binary(item[names.result])
        except (KeyError, TypeError, AttributeError):
            continue
    return parts


def _chunk_item(
    store: StoreView, pk: str, owner: str, index: int, expiration_s: int, part: bytes
) -> dict[str, Any]:
    return {
        **item_key(store, chunk_pk(pk, owner, index)),
        store.names.expiration: {"N": str(expiration_s)},
        store.names.result: {"B": part},
    }


def chunk_pk(pk: str, owner: str, index: int) -> str:
    """Chunks are keyed by their writer's owner token, so a later run's chunks never mix in."""
    return f"{pk}#chunk#{owner}#{index}"


class ChunkPointer(Value):
    """What a chunked record's result attribute holds instead of the result."""

    owner: str
    """The owner token of the claim that wrote the chunks: part of their keys."""
    chunks: int
    sha256: str
    """Hex digest of the joined chunks."""
    size: int | None = None
    """The joined chunks' length; None in pointers written before it was recorded."""


def chunk_pointer(blob: bytes, *, key_hash: str | None, step: str = "replay") -> ChunkPointer:
    """The pointer in a CHUNKED blob; StoreError `StoredResultUnreadable` for one that does
    not parse, or lacks its owner, count (1 to MAX_CHUNKS) or checksum."""
    try:
        pointer = json.loads(blob[1:])
    except (ValueError, RecursionError):
        pointer = None
    if type(pointer) is dict:
        owner, count = pointer.get("owner"), pointer.get("count")
        digest, size = pointer.get("sha256"), pointer.get("bytes")
        if (
            type(owner) is str
            and owner
            and type(count) is int
            and 0 < count <= MAX_CHUNKS
            and type(digest) is str
            and (size is None or (type(size) is int and size >= 0))
        ):
            return ChunkPointer(owner, count, digest, size)
    raise unreadable(
        STORED_RESULT_UNREADABLE,
        "its chunk pointer does not parse, or lacks its owner, count or checksum",
        key_hash=key_hash,
        step=step,
    )


def stored_result_bytes(record: Record) -> int:
    """The stored (packed) size of a record's result, chunks included (0 for a pointer
    written before pointers said their size)."""
    if record.result is None:
        return 0
    if record.result[:1] != CHUNKED:
        return len(record.result)
    try:
        size = json.loads(record.result[1:]).get("bytes", 0)
    except (ValueError, RecursionError, AttributeError):
        size = None
    if type(size) is not int or size < 0:
        raise unreadable(
            STORED_RESULT_UNREADABLE,
            "its chunk pointer does not parse, or its size is no count of bytes",
            key_hash=record.pk,
            step="inspect",
        )
    return size


def _chunk_pointer(owner: str, result: bytes, count: int) -> bytes:
    return _pointer_bytes(owner, hashlib.sha256(result).hexdigest(), count, len(result))


def _pointer_bytes(owner: str, sha256: str, count: int, stored_bytes: int) -> bytes:
    pointer = {"owner": owner, "count": count, "bytes": stored_bytes, "sha256": sha256}
    return CHUNKED + json.dumps(pointer).encode()
