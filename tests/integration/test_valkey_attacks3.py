"""Third-round attacks on ValkeyStore's leases, from its promises (docs/valkey.md, "The
server's clock"), with callers' clocks that step (NTP) in the middle of a call, on real servers.

Each test states the promise it attacks and counts the effects. A promise that held is a
plain test guarding it; a defect is a strict xfail whose reason says what a user sees."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    ConfigurationError,
    InProgressError,
    LeaseLostError,
    ValkeyStore,
    current_execution,
    idempotent,
)
from lambda_idempotency._dev.valkey_local import ValkeyServer
from tests.conftest import call_until_the_key_frees
from tests.integration.test_valkey_attacks2 import HOUR, SteppingClock

pytestmark = pytest.mark.valkey

OPENED: list[Any] = []
YEAR = 365 * 86_400_000


@pytest.fixture(autouse=True)
def _close_what_the_test_opened() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def fresh(url: str, **options: Any) -> ValkeyStore:
    store = ValkeyStore(url, prefix=f"atk3-{uuid.uuid4().hex[:8]}:", **options)
    OPENED.append(store)
    return store


@pytest.fixture(params=["node", "cluster"])
def url_and_options(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """One node, or a cluster of three primaries (its fixture started only when asked)."""
    if request.param == "node":
        node: ValkeyServer = request.getfixturevalue("valkey_node")
        return node.url, {}
    return request.getfixturevalue("valkey_cluster").url, {"cluster": True}


class Holder:
    """A decorated call running in a thread of its own: its answer, or what it raised."""

    def __init__(self, call: Callable[[dict[str, Any], Any], Any], event: dict[str, Any]):
        self.outcome: list[Any] = []
        self.thread = threading.Thread(target=self._run, args=(call, event), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[dict[str, Any], Any], Any], event: dict[str, Any]) -> None:
        try:
            self.outcome.append(call(event, None))
        except Exception as exc:
            self.outcome.append(exc)

    def join(self) -> Any:
        self.thread.join(20)
        assert not self.thread.is_alive(), "the holder never returned"
        return self.outcome[0]


def refused(call: Callable[[dict[str, Any], Any], Any], event: dict[str, Any]) -> int:
    """The Retry-After a duplicate is told; a failed test if it ran or replayed."""
    with pytest.raises(InProgressError) as caught:
        call(event, None)
    assert caught.value.retry_after is not None
    return caught.value.retry_after


def options(store: ValkeyStore, namespace: str, **more: Any) -> dict[str, Any]:
    return {
        "key": "id",
        "store": store,
        "namespace": namespace,
        "clock_skew_seconds": 0,
        "cache_size": 0,
        **more,
    }


# -- a holder that beats while its clock steps ---------------------------------------------------

SCHEDULES = [
    # (seconds to sleep, then ms to step the holder's clock by), while it beats every 0.2 s
    pytest.param([(0.5, -HOUR)], id="back-an-hour"),
    pytest.param([(0.5, HOUR)], id="forward-an-hour"),
    pytest.param([(0.5, -1_100)], id="back-1.1s"),
    pytest.param([(0.5, 1_100)], id="forward-1.1s"),
    pytest.param([(0.5, -900)], id="back-0.9s"),
    pytest.param([(0.5, 900)], id="forward-0.9s"),
    pytest.param([(0.5, -HOUR), (0.5, HOUR)], id="back-then-forward"),
    pytest.param([(0.5, HOUR), (0.5, -HOUR)], id="forward-then-back"),
    pytest.param([(0.05, -HOUR)], id="before-the-first-beat"),
    pytest.param([(0.25, -900)] * 12, id="drift-back-by-0.9s-steps"),
    pytest.param([(0.25, 900)] * 12, id="drift-forward-by-0.9s-steps"),
    pytest.param([(0.15, -500)] * 16, id="drift-back-by-0.5s-steps"),
]


def beating_holder(
    store: ValkeyStore,
    schedule: list[tuple[float, int]],
    effects: list[str],
    *,
    hang: bool,
    namespace: str = "beat",
    extend_by: float = 1,
    skew: float = 0,
) -> tuple[Callable[..., Any], threading.Event, threading.Event, threading.Event]:
    """A holder leasing 1 s and beating (every 0.2 s, `extend_by`) while its clock steps by
    `schedule`; then it beats on until told to stop, and answers, or hangs without beats
    until `hung` is set (its last extension runs out)."""
    clock = SteppingClock(0)
    beating, stop, hung = threading.Event(), threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        with current_execution().heartbeat(every=0.2, extend_by=extend_by):
            for pause, step_ms in schedule:
                time.sleep(pause)
                clock.step(step_ms)
            time.sleep(1.5)  # past its first 1 s lease and at least one more beat
            beating.set()
            stop.wait(20)
        if hang:
            hung.wait(20)
        return "holder"

    common = {**options(store, namespace), "clock_skew_seconds": skew}
    holder = idempotent(lease_seconds=1, clock=clock, **common)(body)
    return holder, beating, stop, hung


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_holder_beating_while_its_clock_steps_keeps_its_key_and_completes(
    valkey_node: ValkeyServer, schedule: list[tuple[float, int]]
) -> None:
    """Promise 1 and 2: a holder whose clock is stepped mid-call, by any amount, any number of
    times, neither loses its key while it beats (duplicates refused, told to come back about
    one extension later) nor fails: it answers, and its result replays once, effect once."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    holder, beating, stop, _ = beating_holder(store, schedule, effects, hang=False)
    duplicate = idempotent(lease_seconds=5, **options(store, "beat"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    running = Holder(holder, {"id": "b-1"})
    try:
        assert beating.wait(20)
        waits = []
        for _ in range(5):  # across several beats
            waits.append(refused(duplicate, {"id": "b-1"}))
            time.sleep(0.11)
    finally:
        stop.set()
        answer = running.join()
    assert answer == "holder"
    assert duplicate({"id": "b-1"}, None) == "holder"
    assert effects == ["b-1"]
    assert all(1 <= wait <= 3 for wait in waits), f"Retry-After {waits} (extensions of 1 s)"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_holder_whose_clock_stepped_frees_its_key_about_one_extension_after_it_hangs(
    valkey_node: ValkeyServer, schedule: list[tuple[float, int]]
) -> None:
    """Promise 2 and 3: once a holder whose clock stepped stops beating (hangs), its key frees
    about one extension (1 s) later on the server's clock, never an hour later; the duplicate
    runs then, and the hung holder's late completion does not overwrite the duplicate's."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    holder, beating, stop, hung = beating_holder(store, schedule, effects, hang=True)
    duplicate = idempotent(lease_seconds=5, **options(store, "beat"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    running = Holder(holder, {"id": "h-1"})
    try:
        assert beating.wait(20)
        refused(duplicate, {"id": "h-1"})
        stop.set()
        stopped = time.monotonic()
        assert call_until_the_key_frees(duplicate, {"id": "h-1"}, within_s=5) == "duplicate"
        freed_after = time.monotonic() - stopped
    finally:
        stop.set()
        hung.set()
        running.join()  # its late completion is refused (logged lease_lost)
    assert duplicate({"id": "h-1"}, None) == "duplicate"
    assert effects == ["h-1", "duplicate"]
    assert freed_after <= 2.5, f"the key freed {freed_after:.1f} s after the last beat"


def test_holders_of_two_keys_on_one_store_with_opposite_steps_both_keep_and_free_their_keys(
    url_and_options: tuple[str, dict[str, Any]],
) -> None:
    """Promise 1 and 2, one store shared by two holders of different keys whose clocks step
    an hour in opposite directions (on one node and on a cluster): while both beat, both keys
    are held; once both hang, both free about one extension later. Effects counted."""
    url, more = url_and_options
    store = fresh(url, **more)
    effects: list[str] = []
    ahead = beating_holder(store, [(0.3, HOUR)], effects, hang=True, namespace="two")
    behind = beating_holder(store, [(0.3, -HOUR)], effects, hang=True, namespace="two")
    duplicate = idempotent(lease_seconds=5, **options(store, "two"))(
        lambda event, context: effects.append(f"duplicate-{event['id']}") or "duplicate"
    )
    holders = [Holder(ahead[0], {"id": "ahead"}), Holder(behind[0], {"id": "behind"})]
    try:
        assert ahead[1].wait(20) and behind[1].wait(20)
        for key in ("ahead", "behind"):
            assert 1 <= refused(duplicate, {"id": key}) <= 3
        ahead[2].set()
        behind[2].set()
        stopped = time.monotonic()
        for key in ("ahead", "behind"):
            assert call_until_the_key_frees(duplicate, {"id": key}, within_s=5) == "duplicate"
        freed_after = time.monotonic() - stopped
    finally:
        for _, _, stop, hung in (ahead, behind):
            stop.set()
            hung.set()
        for holder in holders:
            holder.join()
    assert [duplicate({"id": key}, None) for key in ("ahead", "behind")] == ["duplicate"] * 2
    assert sorted(effects) == ["ahead", "behind", "duplicate-ahead", "duplicate-behind"]
    assert freed_after <= 3.0, f"the keys freed {freed_after:.1f} s after the last beats"


# -- extend_lease by hand, with a stepped clock ----------------------------------------------------


@pytest.mark.parametrize("seconds", [30, 300], ids=["as-long", "longer"])
@pytest.mark.parametrize(
    "step_ms", [-HOUR, HOUR, -1_500, 1_500], ids=["back", "forward", "back-1.5s", "forward-1.5s"]
)
def test_retry_after_follows_an_extension_made_after_the_holders_clock_stepped(
    valkey_node: ValkeyServer, step_ms: int, seconds: int
) -> None:
    """Promise 2: while a holder extends its lease, a duplicate is refused with a sane
    Retry-After. The holder (lease 30 s) is stepped, then extends by 30 s: a duplicate is
    told about that long (30 s, or 300 s when it asked for more than it held), neither 0 nor
    an hour, and the holder then completes once."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []
    extended, finish = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        clock.step(step_ms)
        current_execution().extend_lease(seconds)
        extended.set()
        finish.wait(20)
        return "holder"

    holder = idempotent(lease_seconds=30, clock=clock, **options(store, "ext"))(body)
    duplicate = idempotent(**options(store, "ext"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    running = Holder(holder, {"id": "e-1"})
    try:
        assert extended.wait(10)
        wait = refused(duplicate, {"id": "e-1"})
    finally:
        finish.set()
        answer = running.join()
    assert answer == "holder"
    assert duplicate({"id": "e-1"}, None) == "holder"
    assert effects == ["e-1"]
    assert seconds - 1 <= wait <= seconds + 2, f"Retry-After {wait} s, asked {seconds} s"


NODE, CLUSTER = "valkey_node", "valkey_cluster"


@pytest.mark.parametrize(
    ("step_ms", "seconds", "where"),
    [
        pytest.param(0, 1e-3, NODE, id="no-step"),
        pytest.param(-HOUR, 1e-3, NODE, id="back-an-hour"),
        pytest.param(HOUR, 1e-3, NODE, id="forward-an-hour-a-millisecond"),
        pytest.param(HOUR, 0.5, NODE, id="forward-an-hour-half-a-second"),
        pytest.param(1_500, 5, NODE, id="forward-1.5s-five-seconds"),
        pytest.param(60_000, 5, NODE, id="forward-a-minute-five-seconds"),
        pytest.param(0, 1e-3, CLUSTER, id="cluster-no-step"),
        pytest.param(HOUR, 0.5, CLUSTER, id="cluster-forward-an-hour"),
    ],
)  # fmt: skip
def test_a_short_extension_never_shortens_the_lease_whatever_the_step(
    request: pytest.FixtureRequest, step_ms: int, seconds: float, where: str
) -> None:
    """Promise 3: an extension never shortens a lease. A holder leasing 30 s has its clock
    stepped, then extends by less than it holds: 1 s later a duplicate is still refused,
    told about 29 s (the lease it held), and never runs (on one node and on a cluster)."""
    server = request.getfixturevalue(where)
    store = fresh(server.url, **({"cluster": True} if where == CLUSTER else {}))
    clock = SteppingClock(0)
    effects: list[str] = []
    extended, finish = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        clock.step(step_ms)
        current_execution().extend_lease(seconds)
        extended.set()
        finish.wait(20)
        return "holder"

    holder = idempotent(lease_seconds=30, clock=clock, **options(store, "short"))(body)
    duplicate = idempotent(**options(store, "short"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    running = Holder(holder, {"id": "s-1"})
    try:
        assert extended.wait(10)
        time.sleep(1.0 if seconds < 1 else 6.0)
        try:
            wait: Any = duplicate({"id": "s-1"}, None)
        except InProgressError as exc:
            wait = exc.retry_after
    finally:
        finish.set()
        answer = running.join()
    assert answer == "holder"
    assert effects == ["s-1"], f"the duplicate ran beside the holder: {effects}"
    assert isinstance(wait, int) and 23 <= wait <= 31, f"Retry-After {wait} s in a 30 s lease"


@pytest.mark.parametrize(
    "seconds", [0, -1, math.nan, math.inf, -math.inf, 31_622_401, True, "30"],
    ids=["zero", "negative", "nan", "inf", "-inf", "past-366-days", "bool", "str"],
)  # fmt: skip
def test_an_extension_by_a_bad_number_is_refused_and_leaves_the_lease(
    valkey_node: ValkeyServer, seconds: Any
) -> None:
    """Promise 3 (and bad input gets a typed error): zero, negative, NaN, infinite, too long,
    or not a number of seconds is a ConfigurationError at the call; the 30 s lease stands,
    so the duplicate is refused and the effect runs once."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    caught: list[BaseException] = []
    extended, finish = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        try:
            current_execution().extend_lease(seconds)
        except ConfigurationError as exc:
            caught.append(exc)
        extended.set()
        finish.wait(20)
        return "holder"

    holder = idempotent(lease_seconds=30, **options(store, "bad"))(body)
    duplicate = idempotent(**options(store, "bad"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    running = Holder(holder, {"id": "x-1"})
    try:
        assert extended.wait(10)
        wait = refused(duplicate, {"id": "x-1"})
    finally:
        finish.set()
        answer = running.join()
    assert len(caught) == 1, "the bad extension was accepted"
    assert answer == "holder"
    assert effects == ["x-1"]
    assert 29 <= wait <= 31


def test_the_longest_extension_then_completion_keeps_the_result_its_ttl_not_a_year(
    valkey_node: ValkeyServer,
) -> None:
    """Promise 4: a completed result replays for its TTL on the server. A holder extends by
    the longest lease allowed (366 days), with its clock stepped an hour back in between, and
    completes: the result lives its 60 s TTL on the server, not a year."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        current_execution().extend_lease(31_622_400)
        clock.step(-HOUR)
        current_execution().extend_lease(31_622_400)
        return f"answer-{len(effects)}"

    holder = idempotent(ttl_seconds=60, clock=clock, **options(store, "long"))(body)
    other = idempotent(ttl_seconds=60, **options(store, "long"))(body)
    assert holder({"id": "l-1"}, None) == "answer-1"
    left_ms = store.client.pttl(store.key_of(store.layout.record_key("long", None, "l-1")))
    assert other({"id": "l-1"}, None) == "answer-1"
    assert effects == ["l-1"]
    assert 55_000 <= left_ms <= 61_000, f"the result is kept {left_ms} ms (TTL 60 s)"


@pytest.mark.parametrize(
    "steps", [(HOUR, -HOUR), (-HOUR, HOUR), (HOUR, 0), (-HOUR, 0)],
    ids=["forward-extend-back", "back-extend-forward", "forward-extend", "back-extend"],
)  # fmt: skip
def test_a_result_completed_after_a_step_an_extension_and_a_step_back_lives_its_ttl(
    valkey_node: ValkeyServer, steps: tuple[int, int]
) -> None:
    """Promise 4: whatever the completing caller's clock did, its result lives its TTL on the
    server and replays: stepped, then extending (the offset measured anew), then stepped
    again before completing. The record must live 60 s; the effect runs once."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        clock.step(steps[0])
        current_execution().extend_lease(30)
        clock.step(steps[1])
        return f"answer-{len(effects)}"

    holder = idempotent(ttl_seconds=60, clock=clock, **options(store, "ttl"))(body)
    other = idempotent(ttl_seconds=60, **options(store, "ttl"))(body)
    assert holder({"id": "t-1"}, None) == "answer-1"
    left_ms = store.client.pttl(store.key_of(store.layout.record_key("ttl", None, "t-1")))
    assert other({"id": "t-1"}, None) == "answer-1"
    time.sleep(1.0)
    assert other({"id": "t-1"}, None) == "answer-1"
    assert effects == ["t-1"]
    assert 55_000 <= left_ms <= 61_000, f"the result is kept {left_ms} ms (TTL 60 s)"


@pytest.mark.parametrize(
    "offset_ms", [100 * YEAR, -100 * YEAR], ids=["a-century-ahead", "reset-to-1970s"]
)
def test_a_holder_decades_off_at_its_claim_extends_and_is_waited_for_by_the_servers_clock(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise 1 and 2: a clock far off at the claim, then stepped right mid-call (NTP
    finally answering), extending by 30 s: a duplicate is told about 30 s; the holder
    completes once and its result replays."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(max(offset_ms, -(time.time_ns() // 1_000_000) + 5_000))
    effects: list[str] = []
    extended, finish = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        current_execution().extend_lease(30)
        clock.offset_ms = 0  # the true time at last
        current_execution().extend_lease(30)
        extended.set()
        finish.wait(20)
        return "holder"

    holder = idempotent(lease_seconds=30, clock=clock, **options(store, "far"))(body)
    duplicate = idempotent(**options(store, "far"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    running = Holder(holder, {"id": "f-1"})
    try:
        assert extended.wait(10)
        wait = refused(duplicate, {"id": "f-1"})
    finally:
        finish.set()
        answer = running.join()
    assert answer == "holder"
    assert duplicate({"id": "f-1"}, None) == "holder"
    assert effects == ["f-1"]
    assert 29 <= wait <= 32, f"Retry-After {wait} s for a 30 s lease"


# -- takeovers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zombie_step", "taker_step"),
    [(-HOUR, 0), (HOUR, 0), (0, -HOUR), (0, HOUR), (-HOUR, HOUR)],
    ids=["zombie-back", "zombie-forward", "taker-back", "taker-forward", "opposite"],
)
def test_a_zombie_whose_key_was_taken_over_cannot_extend_or_complete_whatever_the_clocks(
    url_and_options: tuple[str, dict[str, Any]], zombie_step: int, taker_step: int
) -> None:
    """Promise 3 and 4: a holder whose 1 s lease lapsed (no beats) and whose key was taken
    over cannot extend (LeaseLostError) and cannot complete over the new holder, even with
    its clock stepped mid-call (an extension measures the offset anew); the new holder,
    stepped too, completes, and its result replays for its TTL. Two effects, one answer."""
    url, more = url_and_options
    store = fresh(url, **more)
    zombie_clock, taker_clock = SteppingClock(0), SteppingClock(0)
    effects: list[str] = []
    lapsed, taken = threading.Event(), threading.Event()
    lost: list[BaseException] = []

    def zombie_body(event: dict[str, Any], context: Any) -> str:
        effects.append("zombie")
        zombie_clock.step(zombie_step)
        lapsed.set()
        taken.wait(20)
        try:
            current_execution().extend_lease(30)
        except LeaseLostError as exc:
            lost.append(exc)
        return "zombie"

    def taker_body(event: dict[str, Any], context: Any) -> str:
        effects.append("taker")
        taker_clock.step(taker_step)
        taken.set()
        time.sleep(0.3)  # the zombie tries to extend and complete while the taker runs
        return "taker"

    common = options(store, "zombie", ttl_seconds=60)
    zombie = idempotent(lease_seconds=1, clock=zombie_clock, **common)(zombie_body)
    taker = idempotent(lease_seconds=30, clock=taker_clock, **common)(taker_body)
    running = Holder(zombie, {"id": "z-1"})
    try:
        assert lapsed.wait(10)
        assert call_until_the_key_frees(taker, {"id": "z-1"}, within_s=5) == "taker"
    finally:
        taken.set()
        running.join()  # its completion is refused (logged lease_lost)
    assert len(lost) == 1, "the zombie extended a lease it had lost"
    left_ms = store.client.pttl(store.key_of(store.layout.record_key("zombie", None, "z-1")))
    assert idempotent(**common)(lambda event, context: "third")({"id": "z-1"}, None) == "taker"
    assert effects == ["zombie", "taker"]
    assert 55_000 <= left_ms <= 61_000, f"the result is kept {left_ms} ms (TTL 60 s)"


# -- a waiter whose clock steps --------------------------------------------------------------------


@pytest.mark.parametrize(
    "step_ms",
    [
        pytest.param(-HOUR, id="back"),
        pytest.param(HOUR, id="forward"),
    ],
)
def test_a_waiter_whose_clock_steps_neither_runs_over_a_beating_holder_nor_waits_unbounded(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise 2: while the holder beats, a duplicate waits (or is refused), never runs. A
    waiter (max 2 s) whose clock steps an hour mid-wait must not take over a beating
    holder's key, and must give up about when its max wait says, not an hour later."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    holder, beating, stop, _ = beating_holder(store, [], effects, hang=False, namespace="wait")
    clock = SteppingClock(0)
    waiter = idempotent(
        lease_seconds=5,
        on_in_progress="wait",
        max_wait_seconds=2,
        clock=clock,
        **options(store, "wait"),
    )(lambda event, context: effects.append("waiter") or "waiter")
    running = Holder(holder, {"id": "w-1"})
    try:
        assert beating.wait(20)
        stepper = threading.Timer(0.5, clock.step, args=(step_ms,))
        stepper.start()
        started = time.monotonic()
        waiting = Holder(waiter, {"id": "w-1"})
        waiting.thread.join(5)
        waited = time.monotonic() - started
        stepper.cancel()
    finally:
        stop.set()
        answer = running.join()
    assert answer == "holder"
    gave_up = waiting.join()
    assert isinstance(gave_up, InProgressError), waiting.outcome
    assert effects == ["w-1"]
    assert waited <= 4.0, f"a 2 s wait lasted {waited:.1f} s"
    assert 1 <= gave_up.retry_after <= 3, f"Retry-After {gave_up.retry_after} s (beats of 1 s)"


# -- a warm container's cache, on a clock that steps -----------------------------------------------


@pytest.mark.parametrize(
    "step_ms",
    [
        pytest.param(0, id="none"),
        pytest.param(HOUR, id="forward"),
        pytest.param(-HOUR, id="back"),
    ],
)
@pytest.mark.parametrize("cached_by", ["completion", "replay"])
def test_a_warm_containers_cache_keeps_a_result_no_longer_than_the_server_when_its_clock_steps(
    valkey_node: ValkeyServer, step_ms: int, cached_by: str
) -> None:
    """Promise 4: a completed result replays for its TTL on the server's clock, and a warm
    container keeps it in its cache no longer than the server keeps the record (docs). A
    container caches a 1 s TTL's result (by completing it, or by replaying it), then its
    clock steps; once the record expired on the server and another container ran the key
    again, this container answers the new result, not its cached old one."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return f"answer-{len(effects)}"

    common = options(store, "cache", ttl_seconds=1)
    warm = idempotent(clock=clock, **{**common, "cache_size": 16})(body)
    other = idempotent(**common)(body)
    if cached_by == "completion":
        assert warm({"id": "c-1"}, None) == "answer-1"
    else:
        assert other({"id": "c-1"}, None) == "answer-1"
        assert warm({"id": "c-1"}, None) == "answer-1"
    clock.step(step_ms)
    assert warm({"id": "c-1"}, None) == "answer-1"
    time.sleep(3.2)  # past the TTL and its whole second, on the server
    assert other({"id": "c-1"}, None) == "answer-2"
    assert effects == ["c-1", "c-1"]
    assert warm({"id": "c-1"}, None) == "answer-2"


# -- a property: any steps, any extensions -----------------------------------------------------

STEPS = st.one_of(
    st.integers(-1_500, 1_500),
    st.sampled_from([-HOUR, HOUR, -60_000, 60_000, -10 * YEAR, 10 * YEAR]),
)
EXTENSIONS = st.lists(st.tuples(STEPS, st.integers(1, 120)), min_size=1, max_size=6)


def extend_through_steps(
    store: ValkeyStore, extensions: list[tuple[int, int]]
) -> list[tuple[int, int, int, int, int]]:
    """One call leasing 30 s that, for each (step, seconds), steps its clock and extends its
    lease: (lease end before, server time before, seconds, server time after, lease end
    after) each time, the lease's ends as the server frees the key (no skew allowance)."""
    clock = SteppingClock(0)
    key = uuid.uuid4().hex
    name = store.key_of(store.layout.record_key("prop", None, key))
    seen: list[tuple[int, int, int, int, int]] = []

    def server_ms() -> int:
        seconds, micros = store.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def lease_end() -> int:
        return int(store.client.hget(name, "frees_at")) - 1

    def body(event: dict[str, Any], context: Any) -> str:
        for step_ms, seconds in extensions:
            before = lease_end()
            clock.step(step_ms)
            sent = server_ms()
            current_execution().extend_lease(seconds)
            seen.append((before, sent, seconds, server_ms(), lease_end()))
        return "done"

    holder = idempotent(lease_seconds=30, clock=clock, **options(store, "prop"))(body)
    assert holder({"id": key}, None) == "done"
    return seen


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(extensions=EXTENSIONS)
def test_no_extension_holds_a_key_past_the_later_of_the_lease_held_and_the_one_asked(
    valkey_node: ValkeyServer, extensions: list[tuple[int, int]]
) -> None:
    """Promise 1: a holder whose clock steps, by any amount, any number of times, never holds
    its key longer than its lease says: each extension ends at most at the later of the lease
    it held and the one it asked for, on the server's clock (the documented second's
    leeway, and a little for the round trip)."""
    store = fresh(valkey_node.url)
    try:
        for before, _, seconds, after_ms, end in extend_through_steps(store, extensions):
            assert end <= max(before, after_ms + seconds * 1000) + 1_000 + 50, (before, end)
    finally:
        OPENED.remove(store)
        store.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(extensions=EXTENSIONS)
def test_every_extension_keeps_the_lease_held_and_covers_the_one_asked(
    valkey_node: ValkeyServer, extensions: list[tuple[int, int]]
) -> None:
    """Promise 1 and 3: an extension never shortens a lease, and a holder whose clock
    stepped still gets the lease it asked for: each extension ends no earlier than the lease
    it held, nor than `seconds` after it was sent (on the server's clock)."""
    store = fresh(valkey_node.url)
    try:
        for before, sent, seconds, _, end in extend_through_steps(store, extensions):
            assert end >= before, f"the lease was shortened by {before - end} ms"
            assert end >= sent + seconds * 1000 - 100, f"{sent + seconds * 1000 - end} ms short"
    finally:
        OPENED.remove(store)
        store.close()


# -- the operator's view of a holder whose clock stepped ---------------------------------------


@pytest.mark.parametrize(
    "step_ms",
    [
        pytest.param(0, id="none"),
        pytest.param(-HOUR, id="back"),
        pytest.param(HOUR, id="forward"),
    ],
)
def test_scan_stuck_does_not_list_a_beating_holder_claimed_seconds_ago_after_its_clock_stepped(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise 1, as the operator sees it (`scan_stuck`, the Valkey way to find stuck
    claims): a holder claimed a few seconds ago and beating after its clock stepped (an
    extension measures its offset anew) is not listed among claims made ten minutes ago,
    and is listed among claims made before now."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    schedule = [(0.3, step_ms)]
    holder, beating, stop, _ = beating_holder(store, schedule, effects, hang=False, namespace="op")
    running = Holder(holder, {"id": "o-1"})
    try:
        assert beating.wait(20)
        now = time.time_ns() // 1_000_000
        old = [r.pk for page in store.scan_stuck(claimed_before_ms=now - 600_000, now_ms=now)
               for r in page.records]  # fmt: skip
        recent = [r.pk for page in store.scan_stuck(claimed_before_ms=now, now_ms=now)
                  for r in page.records]  # fmt: skip
    finally:
        stop.set()
        answer = running.join()
    assert answer == "holder"
    assert effects == ["o-1"]
    assert old == [], "a live holder claimed seconds ago is listed as stuck for ten minutes"
    assert recent == [store.layout.record_key("op", None, "o-1")]


# -- a release after a step --------------------------------------------------------------------


@pytest.mark.parametrize(
    "step_ms", [-HOUR, HOUR, -900, 900], ids=["back", "forward", "back-0.9s", "forward-0.9s"]
)
def test_a_holder_that_fails_after_its_clock_stepped_frees_its_key_at_once(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise 2: a key frees when its holder stops, never an hour later. A holder leasing
    30 s, its clock stepped and its lease extended, then fails: its release frees the key at
    once, so the retry (from a caller with a true clock) runs; two effects, one result."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []

    def failing(event: dict[str, Any], context: Any) -> str:
        effects.append("failed")
        clock.step(step_ms)
        current_execution().extend_lease(30)
        raise RuntimeError("the downstream call failed")

    common = options(store, "rel", lease_seconds=30)
    holder = idempotent(clock=clock, **common)(failing)
    retry = idempotent(**common)(lambda event, context: effects.append("retry") or "retry")
    with pytest.raises(RuntimeError):
        holder({"id": "r-1"}, None)
    assert retry({"id": "r-1"}, None) == "retry"
    assert holder({"id": "r-1"}, None) == "retry"
    assert effects == ["failed", "retry"]


# -- a step just before a heartbeat block ends ---------------------------------------------------


@pytest.mark.parametrize(
    "step_ms",
    [
        pytest.param(0, id="none"),
        pytest.param(-HOUR, id="back"),
        pytest.param(HOUR, id="forward"),
    ],
)
def test_a_step_forward_just_before_a_heartbeat_block_ends_loses_nothing(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise 1: a holder whose clock is stepped mid-call does not lose its key while it
    holds it. It beats (every 0.2 s, 5 s each) and its clock steps an hour just before the
    block ends: the server holds its lease 5 s more, so the call completes, and the retry
    replays its answer. Effects counted."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        with current_execution().heartbeat(every=0.2, extend_by=5):
            time.sleep(0.5)
            clock.step(step_ms)
        return f"answer-{len(effects)}"

    common = options(store, "exit", lease_seconds=5)
    holder = idempotent(clock=clock, **common)(body)
    retry = idempotent(**common)(body)
    try:
        first: Any = holder({"id": "x-1"}, None)
    except LeaseLostError as exc:
        first = exc
    assert retry({"id": "x-1"}, None) == "answer-1"
    assert effects == ["x-1"]
    assert first == "answer-1"


# -- a coroutine holder ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "step_ms", [-HOUR, HOUR, -1_100, 1_100], ids=["back", "forward", "back-1.1s", "forward-1.1s"]
)
def test_a_coroutine_beating_while_its_clock_steps_keeps_its_key_and_completes(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise 1 and 2 for an async handler: it beats (every 0.2 s, 1 s each) from its
    heartbeat's thread while its clock steps; past its first lease, a duplicate is refused
    and told about a second; the coroutine answers and its result replays. Effect once."""
    import asyncio

    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []
    waits: list[int] = []
    duplicate = idempotent(lease_seconds=5, **options(store, "async"))(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )

    async def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        with current_execution().heartbeat(every=0.2, extend_by=1):
            await asyncio.sleep(0.5)
            clock.step(step_ms)
            await asyncio.sleep(1.5)
            for _ in range(3):
                waits.append(await asyncio.to_thread(refused, duplicate, {"id": "a-1"}))
                await asyncio.sleep(0.15)
        return "holder"

    holder = idempotent(lease_seconds=1, clock=clock, **options(store, "async"))(body)
    assert asyncio.run(holder({"id": "a-1"}, None)) == "holder"
    assert duplicate({"id": "a-1"}, None) == "holder"
    assert effects == ["a-1"]
    assert all(1 <= wait <= 3 for wait in waits), waits


@pytest.mark.parametrize(
    ("extend_by", "skew"), [(1, 2), (2, 0)], ids=["default-allowance", "extensions-of-2s"]
)
def test_a_sub_second_step_back_is_covered_by_the_allowance_or_a_longer_extension(
    valkey_node: ValkeyServer, extend_by: float, skew: float
) -> None:
    """A holder stepped back 0.9 s keeps its key while it beats with the default allowance
    (2 s) on both callers, or with extensions longer than a step plus a beat (as it does
    with neither, above); it answers and its result replays. Effect once."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    holder, beating, stop, _ = beating_holder(
        store, [(0.5, -900)], effects, hang=False, extend_by=extend_by, skew=skew
    )
    duplicate = idempotent(
        lease_seconds=5, **{**options(store, "beat"), "clock_skew_seconds": skew}
    )(lambda event, context: effects.append("duplicate") or "duplicate")
    running = Holder(holder, {"id": "c-1"})
    try:
        assert beating.wait(20)
        for _ in range(8):
            refused(duplicate, {"id": "c-1"})
            time.sleep(0.07)
    finally:
        stop.set()
        answer = running.join()
    assert answer == "holder"
    assert duplicate({"id": "c-1"}, None) == "holder"
    assert effects == ["c-1"]


@pytest.mark.parametrize("step_ms", [-HOUR, HOUR, -1_100], ids=["back", "forward", "back-1.1s"])
def test_a_waiter_whose_clock_steps_takes_over_a_crashed_holder_when_its_lease_ends(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise 2: once a holder dies, its key frees about one lease later on the server's
    clock. A holder leasing 1 s crashes; a waiter (max 5 s) whose clock steps mid-wait
    takes the key over about a second after the claim (or, stepped forward past its max
    wait, is refused), never an hour later, and runs once."""
    store = fresh(valkey_node.url)
    crashed = threading.Event()

    def dies(event: dict[str, Any], context: Any) -> str:
        crashed.set()
        raise SystemExit  # a dying process: no release reaches the server

    effects: list[str] = []
    common = options(store, "crash", lease_seconds=1)
    holder = idempotent(**common)(dies)
    clock = SteppingClock(0)
    waiter = idempotent(on_in_progress="wait", max_wait_seconds=5, clock=clock, **common)(
        lambda event, context: effects.append("waiter") or time.monotonic()
    )
    store.release = lambda *args, **kwargs: True  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        holder({"id": "k-1"}, None)
    claimed = time.monotonic()
    threading.Timer(0.3, clock.step, args=(step_ms,)).start()
    try:
        ran_at: Any = waiter({"id": "k-1"}, None)
    except InProgressError as exc:
        ran_at = exc
    if isinstance(ran_at, InProgressError):
        assert step_ms > 5_000 and 0 <= ran_at.retry_after <= 2, ran_at.retry_after
        assert effects == []
    else:
        assert effects == ["waiter"]
        assert 0.8 <= ran_at - claimed <= 3.0, ran_at - claimed
