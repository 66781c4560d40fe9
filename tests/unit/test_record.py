"""When a record counts as expired and a lease as lapsed: DynamoDB deletes expired items days
late, and callers' clocks differ by up to the skew allowance, so both are decided on the
slowest clock allowed."""

from __future__ import annotations

from lambda_idempotency._dev.cli.records import describe
from lambda_idempotency._stores.record import Record, Status

EXPIRES_S = 1_000
LEASE_ENDS_MS = 900_000


def completed() -> Record:
    return Record("orders#abc", Status.COMPLETED, expiration=EXPIRES_S)


def held(lease_until: int | None = LEASE_ENDS_MS) -> Record:
    return Record("orders#abc", Status.IN_PROGRESS, EXPIRES_S, lease_until=lease_until)


def test_a_record_is_live_through_its_whole_expiration_second() -> None:
    """`expiration` is epoch seconds, as DynamoDB's TTL reads it: the record still holds
    its key in the last millisecond of that second, and not one after."""
    assert not completed().is_expired(EXPIRES_S * 1000)
    assert not completed().is_expired(EXPIRES_S * 1000 + 999)
    assert completed().is_expired(EXPIRES_S * 1000 + 1000)


def test_a_record_expires_only_once_expired_on_a_clock_the_skew_behind_ours() -> None:
    after = (EXPIRES_S + 1) * 1000
    assert not completed().is_expired(after, skew_ms=2_000)
    assert not completed().is_expired(after + 1_999, skew_ms=2_000)
    assert completed().is_expired(after + 2_000, skew_ms=2_000)


def test_inspect_says_expired_only_once_the_expiration_second_has_passed() -> None:
    assert describe(completed(), EXPIRES_S * 1000 + 999)["expired"] is False
    assert describe(completed(), EXPIRES_S * 1000 + 1000)["expired"] is True


def test_a_lease_lapses_the_millisecond_after_it_ends() -> None:
    assert not held().lease_lapsed(LEASE_ENDS_MS - 1)
    assert not held().lease_lapsed(LEASE_ENDS_MS)
    assert held().lease_lapsed(LEASE_ENDS_MS + 1)


def test_a_lease_lapses_only_once_past_on_a_clock_the_skew_behind_ours() -> None:
    assert not held().lease_lapsed(LEASE_ENDS_MS + 1, skew_ms=2_000)
    assert not held().lease_lapsed(LEASE_ENDS_MS + 2_000, skew_ms=2_000)
    assert held().lease_lapsed(LEASE_ENDS_MS + 2_001, skew_ms=2_000)


def test_a_claim_without_a_lease_never_lapses_it_only_expires() -> None:
    """A Powertools claim made without a Lambda context has no lease: only its expiry frees
    the key."""
    assert not held(lease_until=None).lease_lapsed(10**13, skew_ms=2_000)
