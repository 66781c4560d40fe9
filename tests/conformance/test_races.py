"""Races on one key, effects counted over many rounds: a claim is one atomic step, and every
write after it is fenced by its own condition, not by a read made before it.

Each test races `RACERS` callers at a barrier, on a fresh key each round, and counts the
winners (the callers that would run the effect, or whose completion stands): exactly one per
key, every round. A store that checks, then writes, passes every test that calls it one
caller at a time, and fails these in a few rounds (`racy_stores`, and
tests/integration/test_conformance_catches_races.py, which shows each such store failing).
Leases lapse and records expire as in `test_store_contract`: by the times passed in, or, on a
SERVER_CLOCK store, for real (`Moments`), once for all of a test's keys."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import pytest

from lambda_idempotency import Status
from lambda_idempotency._stores.contract import IdempotencyStore
from lambda_idempotency._stores.encoding import encode
from tests.conformance.conftest import SERVER_CLOCK, StoreFactory

T = 1_800_000_000_000
"""The holders' `now`, epoch milliseconds (a whole second)."""
LEASE = 10_000
SKEW = 2_000
TTL = 3_600
RACERS = 8
ROUNDS = 24
"""Enough that a store atomic only most of the time fails every run (claims that check, then
write, let two or more win in nearly every round); few enough that a test takes seconds on a
busy machine."""
FENCED_ROUNDS = 40
"""For a fenced write (a completion, a release) racing claims: one write that checks, then
writes, is overtaken in its gap in a quarter to a half of the rounds only."""
SMALL = encode({"order": "o-1", "total": 42}).blob
R = TypeVar("R")


RACES = True
"""Run on every store whose backend serves concurrent callers (conftest, `NOT_CONCURRENT`)."""


def owner() -> str:
    return secrets.token_hex(12)


def fresh_key(store: IdempotencyStore) -> str:
    return store.layout.record_key("races", None, secrets.token_hex(8))


class Racers:
    """`RACERS` threads kept for a test: `race(calls)` starts the calls together at a barrier
    and returns their answers, in order."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(RACERS, thread_name_prefix="racer")

    def race(self, calls: list[Callable[[], R]]) -> list[R]:
        assert len(calls) <= RACERS
        barrier = threading.Barrier(len(calls), timeout=10)

        def run(call: Callable[[], R]) -> R:
            barrier.wait()
            return call()

        futures = [self.pool.submit(run, call) for call in calls]
        return [future.result(timeout=30) for future in futures]


@pytest.fixture
def racers() -> Iterator[Racers]:
    racing = Racers()
    yield racing
    racing.pool.shutdown(wait=True, cancel_futures=True)


class Moments:
    """The times of a test. Its holders claim at T with `lease` and `expiration_s`; `lapsed()`
    and `expired()` return a time past the edge for every key prepared so far. On a store
    deciding by the times it is given, that is just a later time; on a SERVER_CLOCK store
    the durations are short and each also waits for real, `margin` ms past the edge counted
    from the last answer of the preparation (`prepared()`)."""

    def __init__(self, store_factory: StoreFactory) -> None:
        self.real = store_factory.has(SERVER_CLOCK)
        self.lease, self.skew, self.margin = (300, 100, 250) if self.real else (LEASE, SKEW, 0)
        self.expiration_s = T // 1000 + (0 if self.real else 5)
        self.last = time.monotonic()

    def prepared(self) -> None:
        self.last = time.monotonic()

    def lapsed(self) -> int:
        return self._past(self.lease + self.skew + 1)

    def expired(self) -> int:
        return self._past((self.expiration_s + 1) * 1000 + self.skew - T)

    def _past(self, edge: int) -> int:
        if self.real:
            time.sleep(max(0.0, self.last + (edge + self.margin) / 1000 - time.monotonic()))
        return T + edge


def claim(
    store: IdempotencyStore, pk: str, who: str, now: int, moments: Moments, **given: Any
) -> Any:
    arguments: dict[str, Any] = {
        "payload_hash": "p" * 64,
        "now_ms": now,
        "lease_until_ms": now + LEASE,
        "expiration_s": now // 1000 + TTL,
        "skew_ms": moments.skew,
        **given,
    }
    return store.claim(pk, owner=who, **arguments)


def complete(
    store: IdempotencyStore, pk: str, who: str, expiration_s: int = T // 1000 + TTL
) -> bool:
    form = store.stored_form(
        pk, owner=who, payload_hash="p" * 64, result=SMALL, expiration_s=expiration_s
    )
    return store.write_completion(form)


def hold(store: IdempotencyStore, moments: Moments) -> tuple[str, str]:
    """A fresh key claimed at T by a holder whose lease lapses with `moments.lapsed()`."""
    pk, holder = fresh_key(store), owner()
    won, _ = claim(store, pk, holder, T, moments, lease_until_ms=T + moments.lease)
    assert won
    return pk, holder


def prepare(store: IdempotencyStore, moments: Moments, state: str) -> str:
    """A key in `state`, free for a claim at the time `free_at(moments, state)` returns."""
    if state == "fresh":
        return fresh_key(store)
    pk, holder = hold(store, moments)
    if state == "expired":
        assert complete(store, pk, holder, expiration_s=moments.expiration_s)
    elif state == "released":
        assert store.release(pk, owner=holder, now_ms=T + 1)
    return pk


def free_at(moments: Moments, state: str) -> int:
    if state == "expired":
        return moments.expired()
    if state == "lapsed":
        return moments.lapsed()
    return T + 2  # fresh, or released at T + 1


def answered(call: Callable[..., bool], *args: Any, **kwargs: Any) -> tuple[bool, None]:
    """A fenced write's answer, shaped as a claim's: it races beside the claims."""
    return call(*args, **kwargs), None


def check(rounds: Counter[int], wrong: list[str]) -> None:
    """Exactly one winner per key in every round, and nothing else amiss."""
    played = rounds.total()
    assert rounds == Counter({1: played}), (
        f"winners per key over {played} rounds of {RACERS} callers (winners: rounds): "
        f"{dict(sorted(rounds.items()))}"
    )
    assert not wrong, f"{len(wrong)} faults in {played} rounds, first: {wrong[:3]}"


@pytest.mark.parametrize("state", ["fresh", "expired", "lapsed", "released"])
def test_claims_racing_for_a_free_key_have_exactly_one_winner(
    store_factory: StoreFactory, store: IdempotencyStore, racers: Racers, state: str
) -> None:
    """A key free because it was never claimed, its record expired, its lease lapsed or its
    claim was released: of `RACERS` claims sent at once one wins, the others are told the
    winner's claim holds the key, and the winner's completion lands."""
    moments = Moments(store_factory)
    keys = [prepare(store, moments, state) for _ in range(ROUNDS)]
    moments.prepared()
    now = free_at(moments, state)
    rounds: Counter[int] = Counter()
    wrong: list[str] = []

    for pk in keys:
        callers = [owner() for _ in range(RACERS)]
        answers = racers.race([partial(claim, store, pk, who, now, moments) for who in callers])
        winners = [who for who, (won, _) in zip(callers, answers, strict=True) if won]
        rounds[len(winners)] += 1
        if len(winners) != 1:
            continue
        told = {held.owner for won, held in answers if not won and held is not None}
        if told - set(winners):
            wrong.append(f"a loser was told another record held the key: {told}")
        if not complete(store, pk, winners[0]):
            wrong.append("the winner's completion was refused")

    check(rounds, wrong)


def test_a_takeover_racing_the_late_holders_completion_has_exactly_one_owner(
    store_factory: StoreFactory, store: IdempotencyStore, racers: Racers
) -> None:
    """A holder whose lease lapsed completes while others claim its key: either its
    completion lands first and every claim is told of the COMPLETED record, or one claim takes
    the key over first and the holder's completion is refused. Never both: the effect would
    run twice, and the late holder's result would overwrite the new owner's record."""
    moments = Moments(store_factory)
    keys = [hold(store, moments) for _ in range(FENCED_ROUNDS)]
    moments.prepared()
    now = moments.lapsed()
    rounds: Counter[int] = Counter()
    wrong: list[str] = []

    for pk, holder in keys:
        takers = [owner() for _ in range(RACERS - 1)]
        completed, *claims = racers.race(
            [partial(answered, complete, store, pk, holder)]
            + [partial(claim, store, pk, who, now, moments) for who in takers]
        )
        winners = [who for who, (won, _) in zip(takers, claims, strict=True) if won]
        rounds[len(winners) + bool(completed[0])] += 1
        record = store.get(pk)
        if record is None:
            wrong.append("the record is gone")
        elif completed[0] and not winners:
            told = {(held.status, held.owner) for _, held in claims if held is not None}
            if told - {(Status.COMPLETED, holder)}:
                wrong.append(f"a claim after the completion was told {told}")
            if (record.status, record.owner) != (Status.COMPLETED, holder):
                wrong.append(f"completed, yet the record is {record.status} of another")
        elif len(winners) == 1 and not completed[0]:
            if (record.status, record.owner) != (Status.IN_PROGRESS, winners[0]):
                wrong.append(f"taken over, yet the record is {record.status} of another")
            if not complete(store, pk, winners[0]):
                wrong.append("the new owner's completion was refused")

    check(rounds, wrong)


def test_a_release_racing_a_takeover_leaves_one_owner(
    store_factory: StoreFactory, store: IdempotencyStore, racers: Racers
) -> None:
    """A holder whose lease lapsed releases its claim while others claim the key: the key is
    free either way, so exactly one claim wins; and the release, landing before it or refused
    after it, never removes the winner's claim: no second claim wins, the released holder's
    completion is refused and the winner's lands."""
    moments = Moments(store_factory)
    keys = [hold(store, moments) for _ in range(FENCED_ROUNDS)]
    moments.prepared()
    now = moments.lapsed()
    rounds: Counter[int] = Counter()
    wrong: list[str] = []

    for pk, holder in keys:
        takers = [owner() for _ in range(RACERS - 1)]
        _, *claims = racers.race(
            [partial(answered, store.release, pk, owner=holder, now_ms=now)]
            + [partial(claim, store, pk, who, now, moments) for who in takers]
        )
        winners = [who for who, (won, _) in zip(takers, claims, strict=True) if won]
        late, _ = claim(store, pk, owner(), now + 1, moments)  # the key is held: no winner
        rounds[len(winners) + late] += 1
        if complete(store, pk, holder):
            wrong.append("the released holder's completion landed")
        if len(winners) == 1 and not late and not complete(store, pk, winners[0]):
            wrong.append("the winner's completion was refused")

    check(rounds, wrong)
