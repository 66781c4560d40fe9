"""When a waiter (`on_in_progress="wait"`) polls the record of the invocation it waits for.

The waiter cannot know when the holder will finish, but the refused claim told it when the
holder started (`claimed_at`) and when its lease lapses (`lease_until`). A holder that has run
for a while is likely to run a while more, in proportion: so the waiter polls at intervals of
a fraction of the holder's age. It answers at most that fraction of the handler's time late
(never less than the floor, never more than the cap), and its reads thin out as the wait
grows. Each interval is jittered, so waiters that arrived together do not poll together, and
the waiter polls the moment the holder's lease lapses on every clock, when the key frees.

A container that has seen this function run (its own runs, and the records it replayed) knows
better: the holder is due when the shortest of those runs would have ended. The waiter polls
then, and densely for a short window around it, until a little past the longest of them: it
answers tens of milliseconds after a holder that takes its usual time, and no later than the
regular schedule after one that does not.

Each poll is a strongly consistent GetItem, 1 read unit for a record under 4 KB.

A store that wakes its waiters (`WakingStore`: ValkeyStore) is not slept through between
polls but blocked on, until the holder's completion or release wakes the waiter (a round
trip after it) or the schedule's interval ends: the schedule stays the fallback for a
wake-up lost with a connection, and the only way to learn of a lease that lapsed (no one
writes then). The dense polls around a holder's due time are left out there: the wake-up
answers sooner. An injected clock keeps the plain schedule: its time moves only when the
waiter sleeps with it, and a block on the server is real time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from .._base.clock import SystemClock
from .._stores.record import Record

if TYPE_CHECKING:
    from .._options import Clock

WAIT_POLL_FRACTION = 0.25
"""Poll interval as a share of the holder's age: a waiter answers at most this share of the
handler's time after it completes (within the floor and cap below)."""
WAIT_MIN_POLL_SECONDS = 0.1
"""The interval while the holder is young: about 13 reads a second (jittered mean 75 ms)."""
WAIT_MAX_POLL_SECONDS = 0.5
"""The interval once the holder has run 2 s or more: about 2.7 reads a second. Longer would
save reads but cost every waiter up to that much more billed Lambda time, and one second of
a 1 GB function costs about as much as a hundred strongly consistent reads."""
WAIT_DUE_POLL_SECONDS = 0.05
"""The interval while the holder is due (jittered, 25-50 ms): a waiter answers at most that
late after a holder that finishes within the recent runs' span."""
WAIT_DUE_LEAD_SECONDS = 0.1
"""The dense polls start this long before the end of the shortest recent run: a holder's
claim may have been answered sooner than the claims of the runs this container saw."""
WAIT_DUE_SLACK_SECONDS = 0.25
"""The dense polls go on this long past the end of the longest recent run: the holder's
completion write takes a round trip after its run ends, more under load."""
WAIT_DUE_WINDOW_SECONDS = 0.5
"""The longest the dense polls go on (at most ~20 reads), however spread the recent runs."""
WAIT_JITTER = (0.5, 1.0)
"""Each interval is drawn from this share of its nominal length: never later than nominal."""
WAIT_THROTTLED_MAX_SECONDS = 4.0
"""A throttled poll doubles the interval (per throttle in a row) up to this."""
THROTTLING_CODES = frozenset(
    {"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"}
)
"""A poll failing with one of these is skipped and the waiter backs off: the key's partition
is asking its callers to slow down, and the holder is still running."""


def wake_ups(store: Any, clock: Clock) -> Callable[..., None] | None:
    """The store's `wait_for_change`, if it has one and time is real; else None (sleep)."""
    if type(clock) is not SystemClock:
        return None
    found: Callable[..., None] | None = getattr(store, "wait_for_change", None)
    return found


class Block(float):
    """A pause spent blocked on the store's wake-up rather than asleep. As a number it is
    0 s, so a driver that only sleeps (the sync one) moves on at once and the step blocks
    in place when it resumes; the async driver calls it in a thread of its own instead
    (a block must not hold one of the executor's few workers, which the holder's own steps
    on the same loop may be queued for), and it is then `done`."""

    done = False
    _wait: Callable[..., None]
    _held: Record
    timeout_s: float

    def __new__(cls, wait: Callable[..., None], held: Record, timeout_s: float) -> Block:
        block = super().__new__(cls, 0.0)
        block._wait, block._held, block.timeout_s = wait, held, timeout_s
        return block

    def __call__(self) -> None:
        self._wait(self._held.pk, seen=self._held, timeout_s=self.timeout_s)
        self.done = True

    def __repr__(self) -> str:
        return f"Block(timeout_s={self.timeout_s})"


def next_poll_ms(
    held: Record,
    *,
    now_ms: int,
    started_ms: int,
    skew_ms: int,
    throttled: int = 0,
    runs_ms: Collection[int] = (),
) -> int:
    """Milliseconds from `now_ms` until the next poll of `held`'s key.

    `started_ms` stands in for `claimed_at` when the record does not carry it (Powertools'
    records): the waiter's own start, a lower bound of the holder's age. `throttled` counts
    the polls in a row that were throttled. `runs_ms`: how long recent runs of the function
    took, claim to completion, as this container saw them."""
    claimed_at = held.claimed_at if held.claimed_at is not None else started_ms
    age = max(0, now_ms - claimed_at)
    nominal = min(
        max(WAIT_POLL_FRACTION * age, WAIT_MIN_POLL_SECONDS * 1000), WAIT_MAX_POLL_SECONDS * 1000
    )
    if throttled:  # the key's partition asks its callers to slow down: nothing sooner
        return _jittered(min(nominal * 2**throttled, WAIT_THROTTLED_MAX_SECONDS * 1000))
    delay = _jittered(nominal)
    due = _due_poll_ms(held.claimed_at, now_ms, runs_ms) if held.claimed_at is not None else None
    if due is not None:
        delay = min(delay, due)
    frees = held.frees_at_ms(skew_ms)
    if frees <= now_ms:
        return 0  # the key is free already (the refused claim came back late): poll now
    return min(delay, frees - now_ms)


def _due_poll_ms(claimed_at: int, now_ms: int, runs_ms: Collection[int]) -> int | None:
    """Until the next poll the holder's expected finish asks for: the moment the window
    opens (the shortest recent run less the lead, counted from the holder's claim), then a
    jittered dense interval until it closes (the longest plus the slack, within the cap).
    None without runs seen, or past the window."""
    if not runs_ms:
        return None
    opens = claimed_at + min(runs_ms) - round(WAIT_DUE_LEAD_SECONDS * 1000)
    slack = WAIT_DUE_SLACK_SECONDS * 1000
    closes = min(claimed_at + max(runs_ms) + slack, opens + WAIT_DUE_WINDOW_SECONDS * 1000)
    if now_ms < opens:
        return opens - now_ms
    if now_ms < closes:
        return _jittered(WAIT_DUE_POLL_SECONDS * 1000)
    return None


def _jittered(nominal_ms: float) -> int:
    """A draw from the jitter's share of `nominal_ms`, in whole milliseconds (at least 1)."""
    return max(1, round(nominal_ms * random.uniform(*WAIT_JITTER)))
