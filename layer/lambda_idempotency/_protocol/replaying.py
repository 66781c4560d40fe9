"""Replay: a completed key's result, as the caller gets it.

From the warm cache (no round trip) or from the completed record a refused claim returned;
decoded as the function's return annotation says, and passed through `on_replay`. A result
that cannot be read is a typed `StoreError` (`StoredResultUnreadable`), logged with the key
hash only, and the handler never runs for it.
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING, Any

from .._base.clock import monotonic_ms
from .._base.errors import STORED_RESULT_UNREADABLE, StoreError, unreadable
from .._stores import encoding as _encoding
from .._stores.record import Record, ReplayInfo
from .engine import CachedResult, Engine, cache_until_ms

if TYPE_CHECKING:
    from .._stores.contract import IdempotencyStore

MISS: Any = object()
"""What `from_cache` returns when the cache has no result for the key."""

on_replay_later: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "lambda_idempotency_on_replay_later", default=False
)
"""Set by the async driver while its steps run in worker threads: `on_replay` is the caller's
code (it may use the caller's loop), so a replay comes back as `Replayed` and the driver
applies `on_replay` on the loop."""


class Replayed:
    """A replayed result whose `on_replay` is still to be applied, where the caller runs."""

    __slots__ = ("info", "result")

    def __init__(self, result: Any, info: ReplayInfo) -> None:
        self.result = result
        self.info = info


def from_cache(engine: Engine, pk: str, payload_hash: str | None) -> Any:
    """The cached result of `pk`, replayed, or MISS."""
    cached = None
    if engine.cache is not None:
        cached = engine.cache.get(pk, monotonic_ms(engine.settings.clock))
    if cached is None:
        return MISS
    engine._check_payload(pk, cached.payload_hash, payload_hash)
    engine._count("replayed", logging.DEBUG, pk, source="cache")
    info = ReplayInfo(pk, cached.completed_at, "cache")
    return replayed(engine, decode(engine, cached.document, cached.typed, pk), info)


def replay(engine: Engine, store: IdempotencyStore, record: Record) -> Any:
    """The completed record's result, decoded before it is cached; a result that cannot
    be read (`StoredResultUnreadable`, logged with the key hash) never runs the handler."""
    try:
        blob = store.load_result(record)
        if blob is not None and blob.startswith(_encoding.NOT_STORED):
            not_stored = _encoding.not_stored_error(blob, record.pk)
            if not isinstance(not_stored, StoreError):  # else a marker that does not parse
                engine._count("replayed_not_stored", logging.WARNING, record.pk)
            raise not_stored
        document, typed = _encoding.unpack(blob, key_hash=record.pk)
    except StoreError as exc:
        engine._count("store_error", logging.ERROR, record.pk, step="replay", code=exc.code)
        raise
    result = decode(engine, document, typed, record.pk)
    if engine.cache is not None:
        # Judged at the read on the store's clock where it keeps one (else ours), then timed
        # on our monotonic reading: the cache keeps the result no longer than the store keeps
        # the record, however far off our clock is, or however it steps later.
        clock = engine.settings.clock
        judged = record.judged_at(clock.now_ms())
        until = cache_until_ms(record.expiration, judged, monotonic_ms(clock))
        entry = CachedResult(
            record.expiration, record.payload_hash, document, typed, record.completed_at, until
        )
        engine.cache.put(record.pk, entry)
    engine._note_run(record.claimed_at, record.completed_at)
    engine._count("replayed", logging.DEBUG, record.pk, source="store")
    info = ReplayInfo(record.pk, record.completed_at, "store")
    return replayed(engine, result, info)


def decode(engine: Engine, document: bytes, typed: bool, pk: str) -> Any:
    """The result a stored (or cached) document holds, as the return annotation says;
    StoreError `StoredResultUnreadable`, logged, for one that cannot be read."""
    try:
        value = _encoding.loads(document, typed, key_hash=pk)
        try:
            return _encoding.rehydrate(value, engine._return_type())
        except Exception:  # data the annotation's types refuse (one changed since?)
            raise unreadable(
                STORED_RESULT_UNREADABLE,
                "it does not fit the function's return annotation",
                key_hash=pk,
                step="replay",
            ) from None
    except StoreError as exc:
        engine._count("store_error", logging.ERROR, pk, step="replay", code=exc.code)
        raise


def replayed(engine: Engine, result: Any, info: ReplayInfo) -> Any:
    on_replay = engine.settings.on_replay
    if on_replay is None:
        return result
    if on_replay_later.get():
        return Replayed(result, info)
    return on_replay(result, info)
