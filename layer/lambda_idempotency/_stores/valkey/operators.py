"""What the operators read of a `ValkeyStore`: its stuck claims (`scan_stuck`, an
`OperatorStore` method: SCAN, then each hash read) and the records' keys, for
`lambda-idempotency namespaces` (a DynamoDB table's are read by a Scan of its key attribute;
here by SCAN of the keys under the prefix).

A record's key is `{prefix}{<pk>}` and its pk is `{namespace}#{digest}`, so the namespace is
in the key, in clear: no record is read, only key names. The keys beside a record (a waiter's
set and wake-up lists, `...}:waiters`) do not end in a brace and are not matched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..._base.errors import STORED_RECORD_UNREADABLE, StoreError
from ..record import Record, ScanPage, Status
from .reading import record_of

ValkeyStore = Any
"""The store these read (`store.ValkeyStore`, which imports this module: named, not imported)."""

SCAN_COUNT = 1000
"""SCAN's COUNT hint: keys a node looks at per call."""


def record_pks(store: ValkeyStore, limit: int) -> tuple[list[str], int, bool]:
    """The pks of the records among the first `limit` keys SCAN finds under the store's
    prefix (every primary of a cluster), how many keys that was, and whether it was all.
    A key whose name is not UTF-8 is counted, not listed: this library writes none."""
    from redis.exceptions import RedisError

    match = _glob_escape(store.prefix) + "{*}"
    pks: list[str] = []
    scanned = 0
    try:
        client = store._built("scan", None)
        keys: Iterator[bytes] = client.scan_iter(match=match, count=min(limit, SCAN_COUNT))
        for name in keys:
            if scanned >= limit:
                return pks, scanned, False
            scanned += 1
            try:
                pk = store.pk_of(name)
            except UnicodeDecodeError:
                continue
            if pk is not None:
                pks.append(pk)
    except RedisError as exc:  # as the store's own calls say it: what failed, never a key
        reason = type(exc).__name__
        raise StoreError(f"Valkey scan failed ({reason})", code=reason, step="scan") from exc
    return pks, scanned, True


def _glob_escape(text: str) -> str:
    """`text` matched as itself by SCAN's MATCH (a glob)."""
    return "".join("\\" + c if c in "*?[]\\{}" else c for c in text)


def scan_stuck(
    store: ValkeyStore, claimed_before_ms: int, now_ms: int, size: int
) -> Iterator[ScanPage]:
    """`ValkeyStore.scan_stuck`, `size` keys a page (its docstring says what it judges how)."""
    operator_offset: int | None = None
    match = _glob_escape(store.prefix) + "{*}"
    keys = store._call("scan", None, lambda client: iter(client.scan_iter(match=match, count=size)))
    while True:
        page: list[bytes] = store._call("scan", None, lambda _: _take(keys, size))
        if not page:
            return
        records, unreadable_keys = [], []
        for name in page:
            try:
                pk = store.pk_of(name)
            except UnicodeDecodeError:  # not a name this library writes: listed, not read
                inner = name[len(store.prefix.encode()) + 1 : -1]
                unreadable_keys.append(inner.decode(errors="backslashreplace"))
                continue
            if pk is None:
                continue
            try:
                flat, server_ms = store._call(
                    "scan", pk, lambda _, name=name: store._script("get")(keys=[name])
                )
            except StoreError as exc:
                if exc.code != STORED_RECORD_UNREADABLE:
                    raise  # the server failed: not the record's fault
                unreadable_keys.append(pk)  # a key of another type (WRONGTYPE)
                continue
            try:
                record = record_of(flat, pk, "scan", server_ms)
            except StoreError:
                unreadable_keys.append(pk)
                continue
            if operator_offset is None:
                operator_offset = now_ms - int(server_ms)
            if (
                record is not None
                and record.status is Status.IN_PROGRESS
                and not record.is_expired(record.judged_at(now_ms))
                and _claimed_before(record, claimed_before_ms, operator_offset, server_ms)
            ):
                records.append(record)
        yield ScanPage(records, len(page), 0.0, unreadable_keys)
        if len(page) < size:
            return


def _claimed_before(record: Record, before_ms: int, operator_offset: int, server_ms: int) -> bool:
    """Whether `record` was claimed before the operator's `before_ms`, both mapped to the
    server's clock: its `claimed_at` by its offset (`read_at_ms` less the server's clock at
    the read), `before_ms` by the operator's. As they are where it has no offset; always
    when it has no `claimed_at`."""
    if record.claimed_at is None:
        return True
    if record.read_at_ms is None:
        return record.claimed_at < before_ms
    offset = record.read_at_ms - int(server_ms)
    return record.claimed_at - offset < before_ms - operator_offset


def _take(keys: Iterator[bytes], count: int) -> list[bytes]:
    page: list[bytes] = []
    for found in keys:
        page.append(found)
        if len(page) >= count:
            break
    return page
