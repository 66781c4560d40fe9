"""A bounded cache of completed results, per decorator, for replays with no round trip."""

from __future__ import annotations

import threading
from collections import OrderedDict

from .._base.value import Value


class CachedResult(Value):
    expiration: int
    """Epoch seconds, as stored: the cache never outlives the record."""
    payload_hash: str | None
    document: bytes
    """The result's JSON, decoded afresh on every replay so callers cannot mutate the cache."""
    typed: bool = False
    """The document is typed JSON (see _encoding)."""
    completed_at: int | None = None
    """Epoch milliseconds of the completion, when the record says (for `on_replay`)."""


class ResultCache:
    """Least-recently-used, bounded by entries and by bytes held. Locked: a decorated
    function may be called from several threads of one container (a thread pool)."""

    def __init__(self, max_items: int = 256, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, CachedResult] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, pk: str, now_ms: int) -> CachedResult | None:
        with self._lock:
            entry = self._entries.get(pk)
            if entry is None:
                return None
            if entry.expiration < now_ms // 1000:
                self._remove(pk)
                return None
            self._entries.move_to_end(pk)
            return entry

    def put(self, pk: str, entry: CachedResult) -> None:
        if len(entry.document) > self.max_bytes or self.max_items <= 0:
            return
        with self._lock:
            self._remove(pk)
            self._entries[pk] = entry
            self._bytes += len(entry.document)
            while len(self._entries) > self.max_items or self._bytes > self.max_bytes:
                self._remove(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    def _remove(self, pk: str) -> None:
        entry = self._entries.pop(pk, None)
        if entry is not None:
            self._bytes -= len(entry.document)
