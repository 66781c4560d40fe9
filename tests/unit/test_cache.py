"""The warm cache's bounds, as a container sees them: what it keeps, for how long, and what a
result too large for it does to the others."""

from __future__ import annotations

from lambda_idempotency._protocol.engine import CachedResult, ResultCache, cache_until_ms

NOW_S = 1_800_000_000


def entry(size: int, expiration: int = NOW_S + 3600) -> CachedResult:
    return CachedResult(expiration, None, b"x" * size)


def test_a_result_replays_from_memory_until_its_record_expires() -> None:
    """Within the second the record expires it still counts, as in the store, even a few
    hundred milliseconds into that second."""
    cache = ResultCache()
    cache.put("k", entry(10, expiration=NOW_S))

    assert cache.get("k", NOW_S * 1000 + 999) is not None
    assert cache.get("k", (NOW_S + 1) * 1000) is None


def test_an_expired_result_is_dropped_when_found() -> None:
    cache = ResultCache(max_items=2)
    cache.put("old", entry(10, expiration=NOW_S))
    cache.put("live", entry(10))

    assert cache.get("old", (NOW_S + 1) * 1000) is None
    assert len(cache) == 1
    cache.put("new", entry(10))  # the expired entry's room is free: nothing live is evicted
    assert cache.get("live", NOW_S * 1000) is not None


def test_cache_size_one_keeps_the_latest_result() -> None:
    cache = ResultCache(max_items=1)
    cache.put("a", entry(10))
    assert cache.get("a", NOW_S * 1000) is not None
    cache.put("b", entry(10))
    assert cache.get("a", NOW_S * 1000) is None
    assert cache.get("b", NOW_S * 1000) is not None


def test_the_cache_holds_exactly_its_size_in_entries_and_bytes() -> None:
    cache = ResultCache(max_items=2, max_bytes=100)
    cache.put("a", entry(60))
    cache.put("b", entry(40))  # 2 entries, 100 bytes: both fit

    assert cache.get("a", NOW_S * 1000) is not None
    assert cache.get("b", NOW_S * 1000) is not None
    cache.put("c", entry(1))  # a third entry: the least recently used goes
    assert cache.get("a", NOW_S * 1000) is None
    assert len(cache) == 2


def test_a_result_as_large_as_the_cache_is_kept() -> None:
    cache = ResultCache(max_items=4, max_bytes=100)
    cache.put("k", entry(100))
    assert cache.get("k", NOW_S * 1000) is not None


def test_a_result_too_large_for_the_cache_leaves_the_others_in_place() -> None:
    cache = ResultCache(max_items=4, max_bytes=100)
    cache.put("a", entry(50))
    cache.put("b", entry(50))
    cache.put("huge", entry(101))

    assert cache.get("huge", NOW_S * 1000) is None
    assert cache.get("a", NOW_S * 1000) is not None
    assert cache.get("b", NOW_S * 1000) is not None


def test_an_entry_timed_on_the_monotonic_reading_ends_there_whatever_its_expiration() -> None:
    """A result cached by the protocol ends at `until_ms`, on the clock's monotonic reading:
    the time its record had left when it was read, counted from then (a wall clock that
    steps later moves nothing)."""
    until = cache_until_ms(NOW_S, judged_ms=NOW_S * 1000 + 400, ticks_ms=100)
    assert until == 100 + 600
    cache = ResultCache()
    cache.put("k", CachedResult(NOW_S + 3600, None, b"x", until_ms=until))

    assert cache.get("k", until - 1) is not None
    assert cache.get("k", until) is None
