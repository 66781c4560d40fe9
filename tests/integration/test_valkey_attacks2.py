"""Second-round attacks on ValkeyStore from its promises (docs/valkey.md), on real servers.

Each test states the promise it attacks; each defect these attacks found is fixed, and its
test guards the fix. The rest guard promises these attacks could not break, on ground
tests/integration/test_valkey_attacks.py does not cover."""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import InProgressError, StoreError, SystemClock, ValkeyStore, idempotent
from lambda_idempotency._dev.valkey_local import ValkeyServer
from tests.conftest import call_until_the_key_frees

pytestmark = pytest.mark.valkey

OPENED: list[Any] = []
HOUR = 3_600_000


@pytest.fixture(autouse=True)
def _close_what_the_test_opened() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def fresh(url: str, **options: Any) -> ValkeyStore:
    store = ValkeyStore(url, prefix=f"atk2-{uuid.uuid4().hex[:8]}:", **options)
    OPENED.append(store)
    return store


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class SkewedClock(SystemClock):
    """The real clock, its wall time off by a fixed amount (a caller whose NTP is broken):
    its monotonic reading, as a machine's, is the system's own, which no step moves."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return now_ms() + self.offset_ms


def claim(store: ValkeyStore, pk: str, *, lease_ms: int = 30_000, skew_ms: int = 0) -> bool:
    now = now_ms()
    won, _ = store.claim(
        pk,
        owner=secrets.token_hex(12),
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + lease_ms,
        expiration_s=now // 1000 + 3600,
        skew_ms=skew_ms,
    )
    return won


# -- hostile and foreign values ----------------------------------------------------------------

FUTURE = "9999999999"


@pytest.mark.parametrize(
    "stored",
    [
        {"status": b"\xff\xfe", "owner": "x", "expiration": FUTURE},
        {"status": "COMPLETED", "owner": b"\xff", "expiration": FUTURE, "result": b"j1"},
        {"status": "COMPLETED", "owner": "x", "expiration": FUTURE, "payload_hash": b"\xc3("},
    ],
    ids=["status", "owner", "payload_hash"],
)
def test_a_field_that_is_not_utf8_is_a_typed_error_and_nothing_runs(
    valkey_node: ValkeyServer, stored: dict[str, Any]
) -> None:
    """Promise: non-UTF-8 bytes in the server give a typed StoreError, run nothing and leave
    the value as it was."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    handle = idempotent(key="id", store=store, namespace="u", cache_size=0)(
        lambda event, context: effects.append(event["id"]) or "ran"
    )
    name = store.key_of(store.layout.record_key("u", None, "raw-key-u"))
    store.client.hset(name, mapping=stored)
    try:
        with pytest.raises(StoreError) as caught:
            handle({"id": "raw-key-u"}, None)
        assert "raw-key-u" not in str(caught.value)
    finally:
        assert effects == []
        assert store.client.hgetall(name) == {
            k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in stored.items()
        }


def test_scan_stuck_lists_a_key_whose_name_is_not_utf8_as_unreadable_and_goes_on(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: the operator's scan reads every stuck claim; a foreign key beside them is a
    typed answer (unreadable), not a crash of the whole scan."""
    store = fresh(valkey_node.url)
    stuck = store.layout.record_key("stuck", None, "real")
    assert claim(store, stuck, lease_ms=-60_000)
    store.client.hset(store.prefix.encode() + b"{\xff\xfe}", mapping={"status": "IN_PROGRESS"})
    now = now_ms()
    pages = list(store.scan_stuck(claimed_before_ms=now + 1, now_ms=now))
    assert [record.pk for page in pages for record in page.records] == [stuck]
    assert [pk for page in pages for pk in page.unreadable] == ["\\xff\\xfe"]


@pytest.mark.parametrize(
    "stored",
    [
        {"expiration": "1", "data": "someone else's"},
        {"status": "COMPLETED", "owner": "x", "expiration": "0x1", "result": b"j1"},
        {"status": "COMPLETED", "owner": "x", "expiration": FUTURE, "result": b"j1",
         "offset_ms": "999999999999999999999999"},
        {"status": "IN_PROGRESS", "owner": "x", "expiration": FUTURE,
         "lease_until": "99999999999999"},
    ],
    ids=["no-status", "hex-expiration", "huge-offset", "claim-without-frees_at"],
)  # fmt: skip
def test_a_hash_with_missing_or_garbled_fields_is_refused_not_overwritten(
    valkey_node: ValkeyServer, stored: dict[str, Any]
) -> None:
    """Promise: a hash missing fields, or holding numbers the library never writes, gives a
    typed StoreError and loses nothing: the handler does not run over it and the hash stays
    as it was (as it does for a field that is not a number at all: attacks round one)."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    handle = idempotent(key="id", store=store, namespace="h", cache_size=0)(
        lambda event, context: effects.append(event["id"]) or "ran"
    )
    name = store.key_of(store.layout.record_key("h", None, "raw-key-h"))
    store.client.hset(name, mapping=stored)
    try:
        with pytest.raises(StoreError):
            handle({"id": "raw-key-h"}, None)
    finally:
        assert effects == []
        assert store.client.hgetall(name) == {
            k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in stored.items()
        }


NUMBER_FIELDS = (
    *("fmt", "expiration", "lease_until", "claimed_at"),
    *("completed_at", "offset_ms", "skew_ms", "frees_at"),
)
NUMBER_TEXTS = st.one_of(
    st.integers(-(10**16), 10**16).map(str),
    st.sampled_from(["", "0x1", " 1", "1 ", "+1", "1_0", "1e3", "1.0", "-", "--1", "\u0661"]),
    st.binary(max_size=3),
)
HASHES = st.fixed_dictionaries(
    {},
    optional={
        "status": st.one_of(
            st.sampled_from(["IN_PROGRESS", "COMPLETED", "RELEASED", "DONE", ""]),
            st.binary(max_size=2),
        ),
        "owner": st.sampled_from(["x", "y"]),
        **dict.fromkeys(NUMBER_FIELDS, NUMBER_TEXTS),
    },
).filter(bool)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stored=HASHES)
def test_the_claim_script_never_overwrites_a_hash_the_reader_calls_unreadable(
    valkey_node: ValkeyServer, stored: dict[str, Any]
) -> None:
    """Promise: the claim script and the store's reader agree on what is readable (one
    definition each, from the same constants): whatever hash sits under the key, if the
    reader refuses it, a claim is a typed error and leaves it as it was."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("prop", None, uuid.uuid4().hex)
    name = store.key_of(pk)
    store.client.hset(name, mapping=stored)
    before = store.client.hgetall(name)
    try:
        store.get(pk)
    except StoreError:
        with pytest.raises(StoreError):
            claim(store, pk)
        assert store.client.hgetall(name) == before
    finally:
        OPENED.remove(store)
        store.close()


def test_a_foreign_key_beside_the_record_loses_no_result(valkey_node: ValkeyServer) -> None:
    """Promise: hostile values in the server give a typed error and lose nothing. A string
    sits where the record's waiters' set would be (`<record>:waiters`): the handler runs
    once, answers, and its retry replays that answer."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    handle = idempotent(key="id", store=store, namespace="w", cache_size=0)(
        lambda event, context: effects.append(event["id"]) or f"answer-{len(effects)}"
    )
    name = store.key_of(store.layout.record_key("w", None, "w-1"))
    store.client.set(name + ":waiters", b"someone else's")
    assert handle({"id": "w-1"}, None) == "answer-1"
    assert handle({"id": "w-1"}, None) == "answer-1"
    assert effects == ["w-1"]
    assert store.client.get(name + ":waiters") == b"someone else's"


def test_a_completion_script_failing_after_its_write_keeps_the_result(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: a completion that may have landed is never overwritten by the 'could not be
    stored' marker. The completion script fails after writing the result (a script's writes
    are not undone): the handler answers, and its retry replays that answer."""
    from lambda_idempotency._stores.valkey import scripts

    store = fresh(valkey_node.url)
    failing = scripts.COMPLETE.replace("wake(key)\nreturn 1", "error('after the write')")
    assert failing != scripts.COMPLETE
    store._script("get")
    assert store._scripts is not None
    store._scripts["complete"] = store.client.register_script(failing)
    effects: list[str] = []
    handle = idempotent(key="id", store=store, namespace="f", cache_size=0)(
        lambda event, context: effects.append(event["id"]) or f"answer-{len(effects)}"
    )
    assert handle({"id": "f-1"}, None) == "answer-1"
    assert handle({"id": "f-1"}, None) == "answer-1"
    assert effects == ["f-1"]


def test_a_claim_whose_lease_fields_disagree_does_not_make_a_waiter_hammer_the_server(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: hostile values give a typed error or a measured wait, and waiters never poll
    in a storm. A claim sits under the key whose `lease_until` says it lapsed long ago while
    its `frees_at` (what the server's claim decides by) says it holds for years: a waiter
    (1 s cap) must not run, and must not send more than a poll's pace of commands."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    handle = idempotent(
        key="id",
        store=store,
        namespace="storm",
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=1,
    )(lambda event, context: effects.append(event["id"]) or "ran")
    name = store.key_of(store.layout.record_key("storm", None, "s-1"))
    stored = {"status": "IN_PROGRESS", "owner": "x", "expiration": FUTURE, "lease_until": "1000"}
    store.client.hset(name, mapping={**stored, "frees_at": "9" * 15})
    sent = {"commands": 0}
    original = store.client.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent["commands"] += 1
        return original(*args, **kwargs)

    store.client.execute_command = counting
    with pytest.raises((InProgressError, StoreError)):
        handle({"id": "s-1"}, None)
    assert effects == []
    assert sent["commands"] <= 60, f"{sent['commands']} commands in a 1 s wait"


@pytest.mark.parametrize(
    "offset_ms",
    [
        pytest.param(0, id="true"),
        pytest.param(-HOUR, id="behind"),
        pytest.param(HOUR, id="ahead"),
    ],
)
def test_scan_stuck_does_not_list_a_claim_made_a_second_ago_by_a_holder_whose_clock_is_off(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: callers' clocks stop mattering; the operator's way to find stuck claims on
    Valkey is `scan_stuck` (docs). Asked for claims made more than ten minutes ago, it must
    not list a live claim made a second ago, whatever its holder's clock says."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("scan", None, "s-1")
    sent = now_ms() + offset_ms
    assert store.claim(
        pk,
        owner=secrets.token_hex(12),
        payload_hash=None,
        now_ms=sent,
        lease_until_ms=sent + 900_000,
        expiration_s=sent // 1000 + 3600,
    )[0]
    time.sleep(1.0)
    now = now_ms()
    found = [
        record.pk
        for page in store.scan_stuck(claimed_before_ms=now - 600_000, now_ms=now)
        for record in page.records
    ]
    assert found == []
    older_than_half_a_second = [
        record.pk
        for page in store.scan_stuck(claimed_before_ms=now - 500, now_ms=now)
        for record in page.records
    ]
    assert older_than_half_a_second == [pk]


# -- an operator's clock -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "offset_ms",
    [
        pytest.param(0, id="true"),
        pytest.param(HOUR, id="ahead"),
        pytest.param(-HOUR, id="behind"),
    ],
)
def test_a_completion_after_an_operators_release_lives_its_ttl_whatever_the_operators_clock(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: a record and its result live until their TTL on the server's clock, and the
    effect runs once while it lives. An operator force-releases a running call's key
    (`release_version`, as `release --force` does) from a laptop whose clock is an hour off;
    the call goes on and completes over its own tombstone (docs: its effect is recorded, not
    run again). Its completed record must live its TTL (60 s), no less, no more."""
    store = fresh(valkey_node.url)
    operator = fresh(valkey_node.url)
    operator.prefix = store.prefix
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            shown = operator.get(operator.layout.record_key("op", None, event["id"]))
            assert shown is not None
            assert operator.release_version(shown, now_ms=now_ms() + offset_ms)[0]
        return f"answer-{len(effects)}"

    handle = idempotent(key="id", store=store, namespace="op", ttl_seconds=60, cache_size=0)(body)
    assert handle({"id": "o-1"}, None) == "answer-1"
    name = store.key_of(store.layout.record_key("op", None, "o-1"))
    left_ms = store.client.pttl(name)
    assert handle({"id": "o-1"}, None) == "answer-1"
    assert effects == ["o-1"]
    assert 55_000 <= left_ms <= 65_000, f"the result is kept {left_ms} ms (TTL 60 s)"


def test_an_operators_release_wakes_the_waiters_and_one_runs_at_once(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: waiters are woken when the key is released, by the operator's release too: a
    duplicate waiting on a hung holder's 30 s lease runs right after the operator frees the
    key (well within a poll interval), not when the lease ends."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("wake", None, "w-1")
    assert claim(store, pk, lease_ms=30_000)  # the holder hangs
    effects: list[str] = []
    released_at: list[float] = []
    waiter = idempotent(
        key="id",
        store=store,
        namespace="wake",
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=10,
    )(lambda event, context: effects.append(event["id"]) or time.monotonic())

    def operator() -> None:
        armed = f"{store.key_of(pk)}:waiters"  # the waiter is armed, its block sent or to come
        deadline = time.monotonic() + 10
        while not store.client.scard(armed) and time.monotonic() < deadline:
            time.sleep(0.005)
        shown = store.get(pk)
        assert shown is not None
        released_at.append(time.monotonic())
        assert store.release_version(shown, now_ms=now_ms())[0]

    woken: list[Any] = []
    blocking = store.client.blpop

    def spying(*args: Any, **kwargs: Any) -> Any:
        answer = blocking(*args, **kwargs)
        woken.append(answer)
        return answer

    store.client.blpop = spying
    thread = threading.Thread(target=operator)
    thread.start()
    ran_at = waiter({"id": "w-1"}, None)
    thread.join(10)
    assert effects == ["w-1"]
    assert any(answer is not None for answer in woken), "no wake-up reached the waiter"
    assert released_at and 0 <= ran_at - released_at[0] <= 0.4, ran_at - released_at[0]


# -- a caller's clock, far off -------------------------------------------------------------------


@pytest.mark.parametrize("offset_ms", [10 * HOUR, -10 * HOUR], ids=["ahead", "behind"])
def test_retry_after_for_a_caller_ten_hours_off_is_the_servers_lease_to_the_second(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: a caller whose clock is hours off is told a right Retry-After: the holder's
    30 s lease as the server keeps it (31 s: the first whole second after it), neither 0
    (a caller hammering the server) nor hours."""
    store = fresh(valkey_node.url)
    running, finish = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        running.set()
        finish.wait(10)
        return "done"

    options: dict[str, Any] = {
        "key": "id",
        "store": store,
        "lease_seconds": 30,
        "clock_skew_seconds": 0,
        "cache_size": 0,
    }
    holder = idempotent(**options)(body)
    off = idempotent(clock=SkewedClock(offset_ms), **options)(body)
    thread = threading.Thread(target=lambda: holder({"id": "ra"}, None))
    thread.start()
    try:
        assert running.wait(10)
        time.sleep(1.0)
        with pytest.raises(InProgressError) as caught:
            off({"id": "ra"}, None)
    finally:
        finish.set()
        thread.join(10)
    assert caught.value.retry_after is not None
    assert 29 <= caught.value.retry_after <= 31


class SteppingClock(SkewedClock):
    """The real clock, stepped by `step` (NTP correcting a container's clock mid-call)."""

    def step(self, offset_ms: int) -> None:
        self.offset_ms += offset_ms


@pytest.mark.parametrize(
    "step_ms",
    [
        pytest.param(0, id="none"),
        pytest.param(-HOUR, id="back"),
        pytest.param(HOUR, id="forward"),
    ],
)
def test_a_holders_clock_stepped_mid_call_keeps_its_heartbeat_lease_on_the_servers_clock(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise: leases are kept on the server's clock, so callers' clocks stop mattering,
    heartbeats included: while a holder beats, a duplicate is refused; once it hangs, the key
    frees about one extension later. Here the holder's clock is stepped mid-call."""
    from lambda_idempotency import current_execution

    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []
    beating, hung = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        with current_execution().heartbeat(every=0.2, extend_by=1):
            time.sleep(0.5)
            clock.step(step_ms)
            time.sleep(2.0)  # past its first 1 s lease, beating
            beating.set()
            time.sleep(0.5)
        hung.wait(20)  # hangs without a heartbeat: its last extension runs out
        return "holder"

    options: dict[str, Any] = {
        "key": "id",
        "store": store,
        "namespace": "step",
        "clock_skew_seconds": 0,
        "cache_size": 0,
    }
    holder = idempotent(lease_seconds=1, clock=clock, **options)(body)
    duplicate = idempotent(lease_seconds=5, **options)(
        lambda event, context: effects.append("duplicate") or "duplicate"
    )
    outcome: list[Any] = []

    def run_holder() -> None:
        try:
            outcome.append(holder({"id": "st"}, None))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run_holder, daemon=True)
    thread.start()
    try:
        assert beating.wait(10)
        with pytest.raises(InProgressError):
            duplicate({"id": "st"}, None)
        answer = call_until_the_key_frees(duplicate, {"id": "st"})
        assert answer == "duplicate"
    finally:
        hung.set()
        thread.join(10)
    assert effects == ["st", "duplicate"]


@pytest.mark.parametrize(
    "step_ms",
    [
        pytest.param(0, id="none"),
        pytest.param(-HOUR, id="back"),
        pytest.param(HOUR, id="forward"),
    ],
)
def test_a_result_completed_after_the_holders_clock_stepped_lives_its_ttl(
    valkey_node: ValkeyServer, step_ms: int
) -> None:
    """Promise: a record and its result live until their TTL on the server's clock, and the
    effect runs once while it does. The holder's clock is stepped (by NTP) while it runs:
    its completed result must still live 60 s on the server, so another container replays
    it rather than running the effect again (and it is not kept an hour past its TTL)."""
    store = fresh(valkey_node.url)
    clock = SteppingClock(0)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            clock.step(step_ms)
        return f"answer-{len(effects)}"

    options: dict[str, Any] = {"key": "id", "store": store, "namespace": "ttl", "ttl_seconds": 60}
    holder = idempotent(clock=clock, **options)(body)
    other = idempotent(cache_size=0, **options)(body)
    assert holder({"id": "s-1"}, None) == "answer-1"
    left_ms = store.client.pttl(store.key_of(store.layout.record_key("ttl", None, "s-1")))
    assert other({"id": "s-1"}, None) == "answer-1"
    assert effects == ["s-1"]
    assert 55_000 <= left_ms <= 65_000, f"the result is kept {left_ms} ms (TTL 60 s)"


# -- cluster: a slot moving mid-call -------------------------------------------------------------


def _migrate(ports: dict[str, int], slot: int, source: str, target: str, *, finish: bool) -> None:
    """Move `slot`'s keys from node `source` to `target` (ids), as `valkey-cli --cluster
    reshard` does; `finish` hands the slot over (MOVED), else leaves it migrating (ASK)."""
    import redis

    src = redis.Redis(port=ports[source])
    dst = redis.Redis(port=ports[target])
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target)
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if keys:
            src.execute_command("MIGRATE", "127.0.0.1", ports[target], "", 0, 5000, "KEYS", *keys)
        if finish:
            for port in ports.values():
                redis.Redis(port=port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target)
    finally:
        src.close()
        dst.close()


@pytest.mark.parametrize("finish", [True, False], ids=["moved", "ask"])
def test_a_slot_migrated_mid_call_keeps_one_run_and_its_result(
    valkey_cluster: Any, finish: bool
) -> None:
    """Promise: MOVED or ASK mid-call gives a correct answer or a typed error, never a second
    effect. While the holder runs, its key's slot is resharded to another node (completely:
    MOVED; or its keys moved with the slot still migrating: ASK). Its completion lands on
    the new node; a duplicate during the move and the retry after it replay or are refused."""
    import redis

    store = fresh(valkey_cluster.url, cluster=True)
    ports: dict[str, int] = {}
    for node in valkey_cluster.nodes:
        with redis.Redis(port=node.port) as client:
            ports[client.execute_command("CLUSTER", "MYID").decode()] = node.port
    name = store.key_of(store.layout.record_key("mig", None, "m-1"))
    slot = store.client.keyslot(name)
    source = store.client.get_node_from_key(name).name
    source_id = next(i for i, p in ports.items() if source.endswith(f":{p}"))
    target_id = next(i for i in ports if i != source_id)
    effects: list[str] = []
    answers: list[Any] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            _migrate(ports, slot, source_id, target_id, finish=finish)
            try:
                answers.append(other({"id": "m-1"}, None))
            except (InProgressError, StoreError) as exc:
                answers.append(type(exc).__name__)
        return "done"

    handle = idempotent(key="id", store=store, namespace="mig", cache_size=0)(body)
    other_store = fresh(valkey_cluster.url, cluster=True)
    other_store.prefix = store.prefix
    other = idempotent(key="id", store=other_store, namespace="mig", cache_size=0)(body)
    try:
        assert handle({"id": "m-1"}, None) == "done"
        counts = []
        for node_id in (source_id, target_id):  # the record lives on the new node only
            with redis.Redis(port=ports[node_id]) as node:
                counts.append(node.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
        assert counts[0] == 0 and counts[1] >= 1, counts
        assert other({"id": "m-1"}, None) == "done"
        assert handle({"id": "m-1"}, None) == "done"
    finally:
        if not finish:  # hand the slot over, then back where it was
            _migrate(ports, slot, source_id, target_id, finish=True)
        _migrate(ports, slot, target_id, source_id, finish=True)
    assert effects == ["m-1"]
    assert answers in (["InProgressError"], ["StoreError"]), answers


# -- clocks decades off ----------------------------------------------------------------------------

YEAR = 365 * 86_400_000


@pytest.mark.parametrize(
    "offset_ms", [-100 * YEAR, 100 * YEAR], ids=["reset-to-1970s", "a-century-ahead"]
)
def test_a_holder_whose_clock_is_decades_off_runs_once_and_keeps_its_lease_and_ttl(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: callers' clocks stop mattering, not only by hours: a container whose clock
    was reset (to a few seconds past 1970) or runs a century ahead holds its
    30 s lease as the server keeps it (Retry-After to a true clock about 31 s), its result
    replays and lives its 60 s TTL on the server."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    running, finish = threading.Event(), threading.Event()
    ahead = max(offset_ms, -now_ms() + 5_000)  # never before 1970

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        running.set()
        finish.wait(10)
        return f"answer-{len(effects)}"

    options: dict[str, Any] = {
        "key": "id",
        "store": store,
        "namespace": "dec",
        "lease_seconds": 30,
        "ttl_seconds": 60,
        "clock_skew_seconds": 0,
        "cache_size": 0,
    }
    holder = idempotent(clock=SkewedClock(ahead), **options)(body)
    true = idempotent(**options)(body)
    answers: list[str] = []
    thread = threading.Thread(target=lambda: answers.append(holder({"id": "d-1"}, None)))
    thread.start()
    try:
        assert running.wait(10)
        with pytest.raises(InProgressError) as caught:
            true({"id": "d-1"}, None)
    finally:
        finish.set()
        thread.join(10)
    assert caught.value.retry_after is not None and 29 <= caught.value.retry_after <= 32
    assert answers == ["answer-1"]
    assert true({"id": "d-1"}, None) == "answer-1"
    left_ms = store.client.pttl(store.key_of(store.layout.record_key("dec", None, "d-1")))
    assert 55_000 <= left_ms <= 61_000
    assert effects == ["d-1"]


@pytest.mark.parametrize("offset_ms", [HOUR, -HOUR], ids=["ahead", "behind"])
def test_a_tombstone_released_on_a_clock_an_hour_off_stops_only_its_own_delayed_claim(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: a released key cannot be re-locked by a delayed copy of the released
    request, whatever the releaser's clock: the copy (its owner, its stale times) is
    refused, any other claim takes the key at once."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("tomb", None, "t-1")
    who = secrets.token_hex(12)
    sent = now_ms() + offset_ms
    arguments: dict[str, Any] = {
        "owner": who,
        "payload_hash": None,
        "now_ms": sent,
        "lease_until_ms": sent + 30_000,
        "expiration_s": sent // 1000 + 3600,
        "skew_ms": 0,
    }
    assert store.claim(pk, **arguments)[0]
    assert store.release(pk, owner=who, now_ms=now_ms() + offset_ms)
    won, held = store.claim(pk, **arguments)  # the delayed copy
    assert not won and held is not None and held.owner == who
    assert claim(store, pk)  # anyone else


# -- a durable execution resumed in a container whose clock differs ------------------------------


@pytest.mark.parametrize(
    "offset_ms",
    [
        pytest.param(0, id="same"),
        pytest.param(-HOUR, id="behind"),
        pytest.param(HOUR, id="ahead"),
    ],
)
def test_a_durable_execution_resumed_in_a_container_whose_clock_differs_keeps_its_ttl(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: callers' clocks stop mattering, and a result lives its TTL on the server's
    clock. A durable execution claims the key in one container, suspends, and is resumed
    in another whose clock is an hour off (the case of every pair of callers); it completes
    there. The result must live its 60 s on the server, and replay to the key's next call."""
    from types import SimpleNamespace

    from aws_durable_execution_sdk_python.exceptions import SuspendExecution

    store = fresh(valkey_node.url)
    effects: list[str] = []

    def context(arn: str) -> Any:
        execution = SimpleNamespace(durable_execution_arn=arn)
        return SimpleNamespace(execution_context=execution, state=None, lambda_context=None)

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            raise SuspendExecution("wait for the callback")
        return f"receipt-{len(effects)}"

    options: dict[str, Any] = {
        "key": "id",
        "namespace": "dur",
        "ttl_seconds": 60,
        "clock_skew_seconds": 0,
        "cache_size": 0,
    }
    first = idempotent(store=store, **options)(body)
    resumed_store = fresh(valkey_node.url)
    resumed_store.prefix = store.prefix
    resumed = idempotent(store=resumed_store, clock=SkewedClock(offset_ms), **options)(body)
    execution = context(f"arn:aws:lambda:eu-west-1:1:function:f/durable-execution/{uuid.uuid4()}")
    with pytest.raises(SuspendExecution):
        first({"id": "x-1"}, execution)
    assert resumed({"id": "x-1"}, execution) == "receipt-2"
    left_ms = store.client.pttl(store.key_of(store.layout.record_key("dur", None, "x-1")))
    another = context(f"arn:aws:lambda:eu-west-1:1:function:f/durable-execution/{uuid.uuid4()}")
    assert first({"id": "x-1"}, another) == "receipt-2"
    assert effects == ["x-1", "x-1"]  # the body twice (suspended, resumed), one execution
    assert 55_000 <= left_ms <= 61_000, f"the result is kept {left_ms} ms (TTL 60 s)"


@pytest.mark.parametrize("offset_ms", [HOUR, 10 * HOUR], ids=["an-hour", "ten-hours"])
def test_a_waiter_whose_clock_runs_ahead_takes_over_a_crashed_holder_when_its_lease_ends(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: a waiter whose clock runs ahead neither takes over a live lease (its clock
    says the lease ended hours ago) nor hammers the server: it takes over a crashed
    holder's 1 s lease about when the lease ends on the server, at a poll's pace."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("ahead", None, "k")
    assert claim(store, pk, lease_ms=1_000)  # the holder crashes here
    started = time.monotonic()
    sent = {"commands": 0}
    original = store.client.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent["commands"] += 1
        return original(*args, **kwargs)

    store.client.execute_command = counting
    effects: list[str] = []
    waiter = idempotent(
        key="id",
        store=store,
        namespace="ahead",
        cache_size=0,
        clock_skew_seconds=0,
        on_in_progress="wait",
        max_wait_seconds=5,
        clock=SkewedClock(offset_ms),
    )(lambda event, context: effects.append(event["id"]) or time.monotonic())
    ran_at = waiter({"id": "k"}, None)
    assert effects == ["k"]
    assert 0.9 <= ran_at - started <= 3.0, ran_at - started
    assert sent["commands"] <= 40, f"{sent['commands']} commands"
