"""What the operator commands read of a `ValkeyStore` beyond its `OperatorStore` methods: the
records' keys, for `lambda-idempotency namespaces` (a DynamoDB table's are read by a Scan of
its key attribute; here by SCAN of the keys under the prefix).

A record's key is `{prefix}{<pk>}` and its pk is `{namespace}#{digest}`, so the namespace is
in the key, in clear: no record is read, only key names. The keys beside a record (a waiter's
set and wake-up lists, `...}:waiters`) do not end in a brace and are not matched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..._base.errors import StoreError

if TYPE_CHECKING:
    from .store import ValkeyStore

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
        keys: Iterator[bytes] = store.client.scan_iter(match=match, count=min(limit, SCAN_COUNT))
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
