"""When a record counts as expired and a lease as lapsed: DynamoDB deletes expired items days
late, and callers' clocks differ by up to the skew allowance, so both are decided on the
slowest clock allowed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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


MS = st.integers(0, 4_000_000_000_000)


@given(now=MS, elapsed=st.integers(0, 900_000))
def test_a_record_read_without_a_server_clock_is_judged_by_the_callers(
    now: int, elapsed: int
) -> None:
    """DynamoDB's records carry no `read_at_ms`: the caller's clock judges them, as it is."""
    assert held().judged_at(now) == now
    assert held().judged_at(now + elapsed, now) == now + elapsed


@given(read_at=MS, caller_off=st.integers(-86_400_000, 86_400_000), elapsed=MS)
def test_a_record_read_on_a_server_clock_is_judged_alike_whatever_the_callers_clock(
    read_at: int, caller_off: int, elapsed: int
) -> None:
    """A record a SERVER_CLOCK store read is judged at the server's moment of the read, moved
    on by what the caller's clock measured since: how far off the caller's clock is, either
    way, changes nothing, and a caller's clock stepping back never moves it before the read."""
    record = held()._replace(read_at_ms=read_at)
    read = 1_800_000_000_000 + caller_off  # the caller's clock just after the read
    assert record.judged_at(read + elapsed, read) == read_at + elapsed
    assert record.judged_at(read - elapsed, read) == read_at
    assert record.judged_at(read + elapsed) == read_at  # no read time: the read itself
