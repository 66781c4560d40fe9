"""Attacks on how a ValkeyStore built from a URL sends its scripts (the lean path's own send:
it writes the packed EVALSHA to a kept connection's socket itself, except when the URL sets
`health_check_interval` or a wrapper replaced `send_packed_command`; its first attempt runs
outside the retry/error-mapping wrapper, which gets the failure afterwards). On real Valkey
servers, with faults put into the calling thread's socket sends and reads (an OSError of any
shape, a timeout, an interruption, half a command or half a reply gone), real stalls, kills,
restarts, signals, forks, threads and close() from another thread; effects counted where a
handler runs, and the server's own count of EVALSHA calls where a hidden resend would hide.

The promises attacked:
1. every failure of a send or a read reaches the caller as a typed StoreError (code,
   retryable, maybe_applied), a BaseException interruption as itself; a write's failure
   after anything may have left says maybe_applied;
2. a connection that failed mid-send or mid-read is never used again as it is: no call reads
   a stale or half answer, no body runs twice for one key, no key stays claimed past its lease;
3. the errors are those of a store given a client (redis-py's own command path);
4. a wrapper of `send_packed_command` (on redis-py's AbstractConnection or on the connection's
   class), installed before or after the first call, sees every command; removed, it is no
   longer called; a URL's health_check_interval sends its PING;
5. close() from another thread, fork, more than 4 threads, a full pool, a server closing
   connections between calls keep promises 1-2;
6. keys and values (non-ASCII, `%`, long, bytes, ints, empty) and the URL's `encoding` are
   written exactly as a store given a client reads them, and the other way round.

Written by an attacker who had not seen the code: 37 attacks, 9 of them failing first, from
four defects. Three are fixed, each attack failing before its fix: a wrapper set on
AbstractConnection before the store's lean sender was built was taken for redis-py's own
and bypassed; an OSError without args in a send through redis-py's send_packed_command
(health check, wrapper) escaped as IndexError; a claim cut by another thread's close() said
ConnectionError, not ClosedMidCall. The fourth is not one: an owner written under a
non-UTF-8 URL encoding is read as an unreadable record by both paths alike (a record's texts
are UTF-8 by its format; the owners the library makes are ASCII tokens).
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.connection

from lambda_idempotency import StoreError, ValkeyStore, idempotent
from lambda_idempotency._dev.valkey_local import ValkeyServer

pytestmark = [pytest.mark.valkey, pytest.mark.timeout_scale(4)]


# -- helpers ----------------------------------------------------------------------------------


def prefix() -> str:
    return f"sd-{uuid.uuid4().hex[:8]}:"


def now_ms() -> int:
    return int(time.time() * 1000)


def claim(store: ValkeyStore, pk: str, owner: str, lease_ms: int = 60_000) -> tuple[bool, Any]:
    now = now_ms()
    return store.claim(
        pk,
        owner=owner,
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + lease_ms,
        expiration_s=now // 1000 + 600,
    )


def complete(store: ValkeyStore, pk: str, owner: str, result: bytes) -> bool:
    return store.complete(
        pk, owner=owner, payload_hash=None, result=result, expiration_s=now_ms() // 1000 + 600
    )


def flags(exc: BaseException) -> tuple[Any, ...]:
    assert isinstance(exc, StoreError), repr(exc)
    return (exc.code, exc.retryable, exc.maybe_applied)


def attempt(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except BaseException as exc:  # what the caller sees, whatever it is
        return exc


def outcome(call: Callable[[], Any]) -> Any:
    got = attempt(call)
    if isinstance(got, StoreError):
        return ("StoreError", got.code, got.retryable, got.maybe_applied)
    if isinstance(got, BaseException):
        return ("raw", type(got).__name__)
    return ("answer", got)


def charge_on(store: ValkeyStore, **options: Any) -> tuple[Any, list[str]]:
    """A handler on `store` and the keys its body ran for (its effects)."""
    effects: list[str] = []
    options.setdefault("cache_size", 0)

    @idempotent(key="order_id", store=store, **options)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        if event.get("work"):
            time.sleep(event["work"])
        return {"charged": event["order_id"], "amount": event.get("amount", 1)}

    return charge, effects


BUILT: list[ValkeyStore] = []


def lean_store(url: str, **options: Any) -> ValkeyStore:
    store = ValkeyStore(url, prefix=options.pop("prefix", prefix()), **options)
    BUILT.append(store)
    return store


def given_store(url: str, **options: Any) -> ValkeyStore:
    client = redis.Redis.from_url(url, socket_timeout=options.pop("timeout", 5.0))
    store = ValkeyStore(client=client, prefix=options.pop("prefix", prefix()), **options)
    BUILT.append(store)
    return store


@pytest.fixture(autouse=True)
def closes_what_it_built() -> Iterator[None]:
    yield
    while BUILT:
        store = BUILT.pop()
        if store._url is None:
            store.client.connection_pool.disconnect()
            store.client.close()
        else:
            store.close()


BUILDERS = {"lean": lean_store, "client": given_store}


def served_lean(store: ValkeyStore) -> bool:
    return store._lean is not None and store._lean._taken > 0


def evalsha_calls(admin: redis.Redis) -> int:
    return int(admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def ping_calls(admin: redis.Redis) -> int:
    return int(admin.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))


def held_by(store: ValkeyStore, pk: str, owner: str) -> None:
    """Another owner's claim on `pk` is refused, and names `owner` as the holder."""
    won, held = claim(store, pk, f"other-{uuid.uuid4().hex[:6]}")
    assert not won and held is not None and held.owner == owner, (won, held)


def answers_its_own(store: ValkeyStore, n: int = 6) -> None:
    """Fresh claims, each answered as its own: won, then refused for another owner."""
    for i in range(n):
        pk = f"own-{uuid.uuid4().hex[:8]}"
        assert claim(store, pk, f"o{i}") == (True, None), i
        held_by(store, pk, f"o{i}")


# -- faults in the calling thread's socket I/O -------------------------------------------------

REAL = {name: getattr(socket.socket, name) for name in ("sendall", "send", "recv", "recv_into")}


class Rule:
    def __init__(
        self,
        *,
        send: Callable[[], BaseException] | None = None,
        after: int = 0,
        read: Callable[[], BaseException] | None = None,
        first: int = 0,
        hook: Callable[[], None] | None = None,
        on: str = "send",
        persistent: bool = False,
    ) -> None:
        self.send, self.after, self.read, self.first = send, after, read, first
        self.hook, self.on, self.persistent = hook, on, persistent
        self.fired = 0
        self.sent: int | None = None  # bytes of the current EVALSHA let through
        self.reading = False  # an EVALSHA went out: its reply is next
        self.partial_given = False

    @property
    def live(self) -> bool:
        return self.persistent or self.fired == 0


class Faults:
    """Patches socket.socket's sendall/send/recv/recv_into, acting only in threads armed with
    a Rule and only on a command that starts with EVALSHA (or on the reply read after it):
    `send` is raised once `after` bytes of the command went out; `read` is raised at the
    reply's read, after `first` of its bytes were handed over (the rest stays unread in the
    socket); `hook` runs at the send (on="send") or the read (on="read") instead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rules: dict[int, Rule] = {}
        self.evalsha_sends = 0
        faults = self

        def sendall(sock: socket.socket, data: Any, *flags: Any) -> None:
            n = faults._sending(data)
            if n is None:
                REAL["sendall"](sock, data, *flags)
                return
            if n > 0:
                REAL["sendall"](sock, memoryview(data)[:n], *flags)
            faults._raise_send()

        def send(sock: socket.socket, data: Any, *flags: Any) -> int:
            n = faults._sending(data)
            if n is None:
                return REAL["send"](sock, data, *flags)
            if n > 0:
                return REAL["send"](sock, memoryview(data)[:n], *flags)
            faults._raise_send()
            return 0

        def recv(sock: socket.socket, size: int, *flags: Any) -> bytes:
            n = faults._reading()
            if n is None:
                return REAL["recv"](sock, size, *flags)
            return REAL["recv"](sock, min(size, n), *flags)

        def recv_into(sock: socket.socket, buffer: Any, size: int = 0, *flags: Any) -> int:
            n = faults._reading()
            if n is None:
                return REAL["recv_into"](sock, buffer, size, *flags)
            return REAL["recv_into"](sock, buffer, n, *flags)

        for name, patched in [
            ("sendall", sendall),
            ("send", send),
            ("recv", recv),
            ("recv_into", recv_into),
        ]:
            monkeypatch.setattr(socket.socket, name, patched)

    def arm(self, rule: Rule, thread: int | None = None) -> Rule:
        self.rules[thread or threading.get_ident()] = rule
        return rule

    def disarm(self, thread: int | None = None) -> None:
        self.rules.pop(thread or threading.get_ident(), None)

    def _rule(self) -> Rule | None:
        return self.rules.get(threading.get_ident())

    def _sending(self, data: Any) -> int | None:
        """None: send it all; else send that many bytes, then the rule's fault."""
        rule = self._rule()
        head = bytes(memoryview(data)[:64]).upper()
        if b"EVALSHA" in head:
            self.evalsha_sends += 1
        if rule is None:
            return None
        if b"EVALSHA" in head:
            rule.sent, rule.reading, rule.partial_given = 0, True, False
        if rule.sent is None or not rule.live:
            return None
        if rule.on == "send" and rule.hook is not None:
            rule.fired += 1
            rule.hook()
            return None
        if rule.send is None:
            return None
        left = rule.after - rule.sent
        if len(memoryview(data)) <= left:
            rule.sent += len(memoryview(data))
            return None
        return max(left, 0)

    def _raise_send(self) -> None:
        rule = self._rule()
        assert rule is not None and rule.send is not None
        rule.fired += 1
        rule.sent, rule.reading = None, False
        raise rule.send()

    def _reading(self) -> int | None:
        """None: read as asked; else read at most that many bytes (or raise the fault)."""
        rule = self._rule()
        if rule is None or not rule.reading or not rule.live:
            return None
        if rule.on == "read" and rule.hook is not None:
            rule.fired += 1
            rule.reading = False
            rule.hook()
            return None
        if rule.read is None:
            return None
        if rule.first and not rule.partial_given:
            rule.partial_given = True
            return rule.first
        rule.fired += 1
        rule.reading, rule.sent = False, None
        time.sleep(0.05)  # the (rest of the) reply is in the socket, unread
        raise rule.read()


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Faults:
    return Faults(monkeypatch)


@pytest.fixture
def node() -> Iterator[ValkeyServer]:
    """A server of the test's own (its command counts are the test's)."""
    with ValkeyServer() as server:
        yield server


@pytest.fixture
def admin(node: ValkeyServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(node.url) as client:
        yield client


class Interrupted(BaseException):
    """What a signal handler (or the runtime) may raise anywhere: not an Exception."""


OS_FAULTS: dict[str, Callable[[], BaseException]] = {
    "broken pipe": lambda: BrokenPipeError(errno.EPIPE, "Broken pipe"),
    "reset": lambda: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    "timeout": lambda: TimeoutError("timed out"),
    "oserror one arg": lambda: OSError("something odd"),
    "oserror no args": OSError,
    "oserror three args": lambda: OSError(errno.EIO, "I/O error", "extra"),
    "bad file descriptor": lambda: OSError(errno.EBADF, "Bad file descriptor"),
}
SANE = ["broken pipe", "reset", "timeout", "oserror one arg", "bad file descriptor"]


# -- 1. a send that fails --------------------------------------------------------------------


@pytest.mark.parametrize("fault", sorted(OS_FAULTS))
@pytest.mark.parametrize("after", [0, 20])
def test_a_send_failing_is_a_store_error_and_the_connection_is_not_reused(
    node: ValkeyServer, faults: Faults, fault: str, after: int
) -> None:
    """Attack: a claim's EVALSHA fails in the socket's send after `after` bytes left (half a
    command on the wire). Promises 1-2: a StoreError (maybe applied once bytes left); the
    half command is never completed by the next call's bytes: every next answer is its own
    and the key was never claimed."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    rule = faults.arm(Rule(send=OS_FAULTS[fault], after=after))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert rule.fired == 1
    assert isinstance(caught, StoreError), repr(caught)
    if after:
        assert caught.maybe_applied, flags(caught)
    answers_its_own(store)
    assert claim(store, "k-1", "b") == (True, None)
    store.close()


@pytest.mark.parametrize("fault", SANE)
def test_a_send_failing_is_answered_as_a_store_given_a_client_answers_it(
    node: ValkeyServer, faults: Faults, fault: str
) -> None:
    """Attack: every EVALSHA fails 20 bytes in (so the client's retries fail too). Promise 3:
    the same code, retryable and maybe_applied on both paths."""
    got = {}
    for path, build in BUILDERS.items():
        store = build(node.url, timeout=2.0)
        answers_its_own(store, 1)
        faults.arm(Rule(send=OS_FAULTS[fault], after=20, persistent=True))
        got[path] = outcome(lambda: claim(store, "k-1", "a"))  # noqa: B023
        faults.disarm()
        answers_its_own(store, 2)
    assert got["lean"][0] == "StoreError", got
    assert got["lean"] == got["client"], got


@pytest.mark.usefixtures("restore_send")
@pytest.mark.parametrize("through", ["health check", "wrapper"])
def test_an_oserror_without_args_mid_send_through_redis_pys_send_is_a_store_error(
    node: ValkeyServer, faults: Faults, through: str
) -> None:
    """Attack: OSError() (no errno, no message) raised by the socket's send, on a lean store
    that sends through redis-py's `send_packed_command` (a URL with health_check_interval,
    or a counting wrapper installed). Promise 1: a StoreError, never raw; promise 2: the next
    answers are their own."""
    query = "?health_check_interval=30" if through == "health check" else ""
    store = lean_store(node.url + query)
    answers_its_own(store, 1)
    if through == "wrapper":
        Counter(redis.connection.AbstractConnection).install()
    faults.arm(Rule(send=OS_FAULTS["oserror no args"], after=20))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert isinstance(caught, StoreError), repr(caught)
    answers_its_own(store)


@pytest.mark.parametrize("after", [0, 20])
def test_an_interruption_mid_send_propagates_and_leaves_no_half_command(
    node: ValkeyServer, faults: Faults, after: int
) -> None:
    """Attack: a BaseException (an interruption) raised inside the send, after `after` bytes.
    Promise 1: it propagates as itself; promise 2: the next calls are answered as their own,
    and the interrupted claim never applied."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    faults.arm(Rule(send=Interrupted, after=after))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert isinstance(caught, Interrupted), repr(caught)
    answers_its_own(store)
    assert claim(store, "k-1", "b") == (True, None)
    store.close()


def test_a_keyboard_interrupt_mid_send_propagates_as_itself(
    node: ValkeyServer, faults: Faults
) -> None:
    store = lean_store(node.url)
    answers_its_own(store, 1)
    faults.arm(Rule(send=KeyboardInterrupt, after=30))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert isinstance(caught, KeyboardInterrupt), repr(caught)
    answers_its_own(store)
    store.close()


def test_a_claim_whose_send_failed_half_way_frees_its_key_at_once_and_runs_once(
    node: ValkeyServer, faults: Faults
) -> None:
    """Attack: the handler's claim fails mid-send (reset). Promise 2: the caller gets a
    StoreError and the body did not run; the retry runs it once, replays after that."""
    store = lean_store(node.url)
    charge, effects = charge_on(store)
    charge({"order_id": "warm"}, None)
    faults.arm(Rule(send=OS_FAULTS["reset"], after=25))
    first = attempt(lambda: charge({"order_id": "o-1", "amount": 3}, None))
    faults.disarm()
    assert isinstance(first, StoreError), repr(first)
    assert effects == ["warm"]
    assert charge({"order_id": "o-1", "amount": 3}, None)["amount"] == 3
    assert charge({"order_id": "o-1", "amount": 3}, None)["amount"] == 3
    assert effects == ["warm", "o-1"]
    store.close()


def test_a_completion_whose_send_fails_once_is_retried_and_the_body_runs_once(
    node: ValkeyServer, faults: Faults
) -> None:
    """Attack: the completion's EVALSHA fails 40 bytes in, once (the protocol retries
    completions). Promise 2: the caller gets its result, replays answer it, one effect."""
    store = lean_store(node.url)
    effects: list[str] = []

    @idempotent(key="order_id", store=store, cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        faults.arm(Rule(send=OS_FAULTS["broken pipe"], after=40))
        return {"charged": event["order_id"]}

    first = attempt(lambda: charge({"order_id": "o-1"}, None))
    faults.disarm()
    assert first == {"charged": "o-1"} or isinstance(first, StoreError), repr(first)
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1"}
    assert effects == ["o-1"]
    store.close()


# -- 2. a read that fails --------------------------------------------------------------------


@pytest.mark.parametrize("fault", sorted(OS_FAULTS))
@pytest.mark.parametrize("first", [0, 3])
def test_a_read_failing_leaves_no_stale_answer_and_resends_nothing(
    node: ValkeyServer, admin: redis.Redis, faults: Faults, fault: str, first: int
) -> None:
    """Attack: a claim's reply is in the socket, and the read fails (after `first` bytes of
    it). Promise 1: a StoreError that may have applied (the claim ran); promise 2: the server
    ran that claim once (no hidden resend), the next claim of that key is refused (not
    answered by the stale "won"), and every next answer is its own."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    before = evalsha_calls(admin)
    rule = faults.arm(Rule(read=OS_FAULTS[fault], first=first))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    ran = evalsha_calls(admin) - before
    assert rule.fired == 1
    assert flags(caught)[1:] == (True, True)
    assert ran == 1  # no hidden second attempt
    held_by(store, "k-1", "a")
    answers_its_own(store)
    store.close()


@pytest.mark.parametrize("fault", SANE)
def test_a_read_failing_is_answered_as_a_store_given_a_client_answers_it(
    node: ValkeyServer, faults: Faults, fault: str
) -> None:
    """Attack: every EVALSHA's reply read fails (so the client's retries fail too).
    Promise 3: the same code, retryable and maybe_applied on both paths."""
    got = {}
    for path, build in BUILDERS.items():
        store = build(node.url, timeout=2.0)
        answers_its_own(store, 1)
        faults.arm(Rule(read=OS_FAULTS[fault], persistent=True))
        got[path] = outcome(lambda: claim(store, f"k-{path}", "a"))  # noqa: B023
        faults.disarm()
        answers_its_own(store, 2)
    assert got["lean"][0] == "StoreError", got
    assert got["lean"] == got["client"], got


@pytest.mark.parametrize("raised", [Interrupted, KeyboardInterrupt])
def test_an_interruption_between_send_and_read_propagates_and_the_reply_is_never_read(
    node: ValkeyServer, faults: Faults, raised: type[BaseException]
) -> None:
    """Attack: the claim went out, its "won" reply waits in the socket, and an interruption
    is raised at the read. Promise 1: it propagates as itself; promise 2: the waiting reply
    is nobody's answer."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    faults.arm(Rule(read=raised))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert isinstance(caught, raised), repr(caught)
    held_by(store, "k-1", "a")
    answers_its_own(store)
    store.close()


def test_a_signal_handlers_exception_between_send_and_read_leaves_no_stale_answer(
    node: ValkeyServer, faults: Faults
) -> None:
    """Attack: an Exception that is no OSError (a signal handler's) raised at the read.
    Promise 1: the caller sees it or a StoreError; promise 2: the next answers are their own."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    faults.arm(Rule(read=lambda: RuntimeError("alarm")))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert isinstance(caught, (RuntimeError, StoreError)), repr(caught)
    held_by(store, "k-1", "a")
    answers_its_own(store)
    store.close()


def test_a_completion_whose_reply_read_fails_never_runs_the_body_twice(
    node: ValkeyServer, admin: redis.Redis, faults: Faults
) -> None:
    """Attack: the handler ran; its completion applied but the reply's read is reset.
    Promise 2: the result or a StoreError, a replay answers the result, the body ran once."""
    store = lean_store(node.url)
    effects: list[str] = []

    @idempotent(key="order_id", store=store, cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        faults.arm(Rule(read=OS_FAULTS["reset"]))
        return {"charged": event["order_id"]}

    first = attempt(lambda: charge({"order_id": "o-1"}, None))
    faults.disarm()
    assert first == {"charged": "o-1"} or isinstance(first, StoreError), repr(first)
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1"}
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1"}
    assert effects == ["o-1"]
    store.close()


def test_twelve_threads_some_with_failing_reads_each_get_their_own_answer(
    node: ValkeyServer, faults: Faults
) -> None:
    """Attack: twelve threads (more than the 4 kept connections) claim at once; every third
    one's reply read is reset with its reply left in the socket. Promises 1-2, 5: those get
    StoreErrors, the others their own answers, and all answers afterwards are their own."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    start = threading.Barrier(12)

    def run(i: int) -> Any:
        if i % 3 == 0:
            faults.arm(Rule(read=OS_FAULTS["reset"]))
        start.wait()
        try:
            return outcome(lambda: claim(store, f"t-{i}", f"o{i}"))
        finally:
            faults.disarm()

    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(run, range(12)))
    for i, answer in enumerate(got):
        if i % 3 == 0:
            assert answer[0] == "StoreError" and answer[3], (i, answer)
        else:
            assert answer == ("answer", (True, None)), (i, answer)
        held_by(store, f"t-{i}", f"o{i}")
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda _: answers_its_own(store, 3), range(12)))
    store.close()


# -- 3. real stalls, signals and closes -------------------------------------------------------


@functools.cache
def big() -> bytes:
    """64 MB: more than loopback's socket buffers hold, so its send blocks on a stopped server."""
    return b"\x00%s\xff" * (16 * 1024 * 1024)


def test_a_send_that_times_out_mid_value_is_answered_as_the_clients_and_never_completed(
    node: ValkeyServer,
) -> None:
    """Attack: the server stops (SIGSTOP) before a 64 MB completion; the send blocks and
    times out half-way. Promises 1, 3: TimeoutError, retryable, may have applied, on both
    paths; promise 2: after the server resumes, the half command was never completed by
    anything: the key is still the claimer's, in progress, and the next answers are own."""
    got = {}
    for path, build in BUILDERS.items():
        store = build(node.url, timeout=0.5)
        assert claim(store, f"k-{path}", "a") == (True, None)
        node.pause()
        try:
            got[path] = outcome(lambda: complete(store, f"k-{path}", "a", big()))  # noqa: B023
        finally:
            node.resume()
        record = store.get(f"k-{path}")
        assert record is not None and record.result is None and record.owner == "a"
        answers_its_own(store)
    assert got["lean"] == ("StoreError", "TimeoutError", True, True), got
    assert got["lean"] == got["client"], got


def test_a_signal_mid_send_of_a_huge_value_propagates_and_the_next_calls_are_their_own(
    node: ValkeyServer,
) -> None:
    """Attack: a real SIGALRM whose handler raises a BaseException while a 64 MB completion's
    send blocks on a stopped server. Promises 1-2: it propagates as itself; the rest of the
    value is never taken from the next call's command; the completion applies when sent anew."""

    def ring(signum: int, frame: Any) -> None:
        raise Interrupted

    store = lean_store(node.url, timeout=5.0)
    assert claim(store, "k-1", "a") == (True, None)
    previous = signal.signal(signal.SIGALRM, ring)
    node.pause()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        caught = attempt(lambda: complete(store, "k-1", "a", big()))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        node.resume()
        signal.signal(signal.SIGALRM, previous)
    assert isinstance(caught, Interrupted), repr(caught)
    answers_its_own(store)
    assert complete(store, "k-1", "a", b"small") is True
    record = store.get("k-1")
    assert record is not None and record.result == b"small"
    store.close()


def closing_from_another_thread(store: ValkeyStore) -> threading.Thread:
    closer = threading.Thread(target=store.close)
    closer.start()
    return closer


def test_close_from_another_thread_while_a_huge_send_blocks_is_a_store_error(
    node: ValkeyServer,
) -> None:
    """Attack: a 64 MB completion's send blocks on a stopped server; another thread closes
    the store. Promise 5 (1-2): a StoreError, never raw; after the server resumes the store
    answers each call as its own."""
    store = lean_store(node.url, timeout=3.0)
    assert claim(store, "k-1", "a") == (True, None)
    node.pause()
    caught: list[Any] = []
    try:
        worker = threading.Thread(
            target=lambda: caught.append(attempt(lambda: complete(store, "k-1", "a", big())))
        )
        worker.start()
        time.sleep(0.4)
        closing_from_another_thread(store).join(5)
        worker.join(10)
    finally:
        node.resume()
    assert len(caught) == 1 and isinstance(caught[0], StoreError), caught
    assert caught[0].maybe_applied, flags(caught[0])
    answers_its_own(store)
    store.close()


@pytest.mark.parametrize("on", ["send", "read"])
def test_close_from_another_thread_inside_the_send_or_read_is_a_store_error(
    node: ValkeyServer, faults: Faults, on: str
) -> None:
    """Attack: exactly as the claim's EVALSHA is sent (or its reply read), another thread
    closes the store, and the call goes on with the socket it had. Promise 5 (1-2): a
    StoreError (ClosedMidCall or what the socket says), never raw; the next calls work."""
    store = lean_store(node.url)
    answers_its_own(store, 1)

    def hook() -> None:
        closing_from_another_thread(store).join(2)

    rule = faults.arm(Rule(hook=hook, on=on))
    caught = attempt(lambda: claim(store, "k-1", "a"))
    faults.disarm()
    assert rule.fired == 1
    assert isinstance(caught, (StoreError, tuple)), repr(caught)
    if isinstance(caught, StoreError):
        assert caught.retryable, flags(caught)
    answers_its_own(store)
    store.close()


def test_close_from_another_thread_while_the_reply_is_awaited_is_closed_mid_call(
    node: ValkeyServer,
) -> None:
    """Attack: a claim waits on a stopped server; another thread closes the store.
    docs/valkey.md, Errors: a StoreError ClosedMidCall, retryable, maybe applied; the
    claim held afterwards is the claimer's (it ran once the server resumed) or free."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    node.pause()
    caught: list[Any] = []
    try:
        worker = threading.Thread(
            target=lambda: caught.append(attempt(lambda: claim(store, "k-1", "a")))
        )
        worker.start()
        time.sleep(0.3)
        closing_from_another_thread(store).join(5)
        worker.join(10)
    finally:
        node.resume()
    assert len(caught) == 1
    assert flags(caught[0]) == ("ClosedMidCall", True, True)
    answers_its_own(store)
    store.close()


def test_a_child_forked_while_a_claim_waits_reads_only_its_own_answers(
    node: ValkeyServer,
) -> None:
    """Attack: the parent's claim waits on a stopped server (its kept connection holds the
    reply to come); the process forks; the server resumes. Promise 5: the child never reads
    the parent's reply (its connections are its own), the parent gets its own answer."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    node.pause()
    parent: list[Any] = []
    worker = threading.Thread(target=lambda: parent.append(attempt(lambda: claim(store, "p", "a"))))
    worker.start()
    time.sleep(0.2)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = b"0"
        try:
            time.sleep(0.3)  # the parent resumes the server meanwhile
            got = [claim(store, f"c-{i}", "child") for i in range(5)]
            refused = claim(store, "c-0", "x")
            if got == [(True, None)] * 5 and not refused[0] and refused[1].owner == "child":
                ok = b"1"
        finally:
            os.write(write, ok)
            os._exit(0)
    os.close(write)
    time.sleep(0.1)
    node.resume()
    worker.join(10)
    os.waitpid(pid, 0)
    child = os.read(read, 1)
    os.close(read)
    assert parent == [(True, None)], parent
    assert child == b"1"
    held_by(store, "p", "a")
    store.close()


@pytest.mark.parametrize("query", ["", "?health_check_interval=1"])
def test_connections_the_server_killed_between_calls_are_never_sent_on(
    node: ValkeyServer, admin: redis.Redis, query: str
) -> None:
    """Attack: four kept connections warm; CLIENT KILL of every one between calls (with and
    without a health check). Promise 5: every next call answers its own, without an error."""
    store = lean_store(node.url + query)
    charge, effects = charge_on(store)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: charge({"order_id": f"w-{i}", "work": 0.05}, None), range(8)))
    for round_ in range(3):
        admin.client_kill_filter(_type="normal", skip_me=True)
        with ThreadPoolExecutor(4) as pool:
            got = list(
                pool.map(
                    lambda i: outcome(
                        lambda: charge({"order_id": f"r{round_}-{i}", "amount": i}, None)  # noqa: B023
                    ),
                    range(8),
                )
            )
        assert got == [("answer", {"charged": f"r{round_}-{i}", "amount": i}) for i in range(8)]
    assert len(effects) == len(set(effects)) == 32
    store.close()


def test_connections_the_servers_idle_timeout_closed_are_never_sent_on(
    node: ValkeyServer, admin: redis.Redis
) -> None:
    """Attack: `timeout 1` on the server; four kept connections idle 2.5 s. Promise 5."""
    store = lean_store(node.url)
    charge, _ = charge_on(store)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: charge({"order_id": f"w-{i}", "work": 0.05}, None), range(8)))
    admin.config_set("timeout", "1")
    try:
        time.sleep(2.5)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda i: outcome(lambda: claim(store, f"k-{i}", "a")), range(8)))
    finally:
        admin.config_set("timeout", "0")
    assert got == [("answer", (True, None))] * 8, got
    store.close()


def test_a_server_restarted_between_calls_with_a_health_check_serves_the_next_call() -> None:
    """Attack: a health-checked URL, four kept connections, the server restarted on its port.
    Promise 5: the next calls answer their own, without errors."""
    with ValkeyServer() as first:
        port, url = first.port, first.url
        store = lean_store(url + "?health_check_interval=1")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: claim(store, f"a-{i}", "a"), range(8)))
    time.sleep(1.2)
    with ValkeyServer(port=port):
        got = [outcome(lambda: claim(store, f"b-{i}", "b")) for i in range(8)]  # noqa: B023
    store.close()
    assert got == [("answer", (True, None))] * 8, got


def drained(pool: Any) -> list[Any]:
    """Every connection `pool` will lend, taken: the pool is full until they are released."""
    held = []
    while True:
        try:
            held.append(pool.get_connection())
        except redis.ConnectionError:
            return held


def test_a_full_pool_is_waited_for_or_a_store_error_never_raw(
    node: ValkeyServer, faults: Faults
) -> None:
    """Attack: the store's pool lent out to its last connection; a kept connection fails
    mid-send (so a call needs a new one); the pool frees a connection 0.5 s later.
    Promise 5: the waiting call answers (or fails with a StoreError), never raw; afterwards
    every call answers its own."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    pool = store.client.connection_pool
    held = drained(pool)
    faults.arm(Rule(send=OS_FAULTS["reset"], after=20))
    assert isinstance(attempt(lambda: claim(store, "k-0", "a")), StoreError)
    faults.disarm()
    threading.Timer(0.5, lambda: pool.release(held.pop())).start()
    got = attempt(lambda: claim(store, "k-1", "a"))
    time.sleep(0.6)
    for connection in held:
        pool.release(connection)
    assert got == (True, None) or isinstance(got, StoreError), repr(got)
    answers_its_own(store)
    store.close()


def test_a_full_pool_that_stays_full_is_a_store_error(node: ValkeyServer, faults: Faults) -> None:
    """Attack: as above, the pool never frees one. Promise 1: a StoreError, not a raw
    redis-py MaxConnectionsError, and within a bounded time."""
    store = lean_store(node.url, timeout=1.0)
    answers_its_own(store, 1)
    pool = store.client.connection_pool
    held = drained(pool)
    for _ in range(4):  # every kept connection fails, one at a time
        faults.arm(Rule(send=OS_FAULTS["reset"], after=20))
        attempt(lambda: claim(store, f"k-{uuid.uuid4().hex}", "a"))
        faults.disarm()
    started = time.monotonic()
    got = attempt(lambda: claim(store, "k-1", "a"))
    took = time.monotonic() - started
    for connection in held:
        pool.release(connection)
    assert isinstance(got, StoreError) or got == (True, None), repr(got)
    assert took < 30
    answers_its_own(store)
    store.close()


# -- 4. a wrapper of send_packed_command ------------------------------------------------------

ORIGINAL_SEND = redis.connection.AbstractConnection.__dict__["send_packed_command"]


def commands_of(packed: Any) -> str:
    items = [packed] if isinstance(packed, (bytes, str)) else list(packed)
    head = items[0] if items else b""
    head = head.encode() if isinstance(head, str) else bytes(head)
    parts = head.split(b"\r\n")
    return parts[2].decode().upper() if len(parts) > 2 else "?"


class Counter:
    """A plain wrapper function (no __wrapped__), counting the commands it sees."""

    def __init__(self, owner: type, style: str = "plain") -> None:
        self.owner, self.seen = owner, []
        self.had = owner.__dict__.get("send_packed_command")
        original = owner.send_packed_command
        counter = self

        def wrapper(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            counter.seen.append(commands_of(command))
            return original(conn, command, *args, **kwargs)

        if style == "wraps":
            wrapper = functools.wraps(original)(wrapper)
        self.wrapper = wrapper

    def install(self) -> Counter:
        self.owner.send_packed_command = self.wrapper  # type: ignore[attr-defined]
        return self

    def remove(self) -> None:
        if self.had is None:
            delattr(self.owner, "send_packed_command")
        else:
            self.owner.send_packed_command = self.had  # type: ignore[attr-defined]

    def count(self, name: str) -> int:
        return self.seen.count(name)


@pytest.fixture
def restore_send() -> Iterator[None]:
    yield
    redis.connection.AbstractConnection.send_packed_command = ORIGINAL_SEND
    if "send_packed_command" in redis.connection.Connection.__dict__:
        del redis.connection.Connection.send_packed_command


WHERE = {
    "AbstractConnection": redis.connection.AbstractConnection,
    "Connection": redis.connection.Connection,
}


@pytest.mark.usefixtures("restore_send")
@pytest.mark.parametrize("where", sorted(WHERE))
@pytest.mark.parametrize("style", ["plain", "wraps"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_wrapper_of_send_packed_command_sees_every_evalsha(
    node: ValkeyServer, admin: redis.Redis, where: str, style: str, when: str
) -> None:
    """Attack: a counter wrapping `send_packed_command` on redis-py's AbstractConnection or
    on Connection (the class of a redis:// URL's connections), a plain function or one with
    `__wrapped__` (functools.wraps), installed before or after the store's first call.
    Promise 4: it sees exactly the EVALSHA calls the server counts."""
    store = lean_store(node.url)
    counter = Counter(WHERE[where], style)
    if when == "before":
        counter.install()
    charge, effects = charge_on(store)
    charge({"order_id": "warm"}, None)
    if when == "after":
        counter.install()
    admin.config_resetstat()
    counter.seen.clear()
    for i in range(6):
        assert charge({"order_id": f"o-{i % 3}", "amount": i % 3}, None)["amount"] == i % 3
    server = evalsha_calls(admin)
    assert served_lean(store)
    store.close()
    assert effects == ["warm", "o-0", "o-1", "o-2"]
    assert server == 9  # three claims and completions, three replays
    assert counter.count("EVALSHA") == server, counter.seen


@pytest.mark.usefixtures("restore_send")
def test_a_wrapt_wrapper_of_send_packed_command_sees_every_evalsha(
    node: ValkeyServer, admin: redis.Redis
) -> None:
    import wrapt

    seen: list[str] = []

    def tracer(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(commands_of(args[0] if args else kwargs["command"]))
        return wrapped(*args, **kwargs)

    store = lean_store(node.url)
    answers_its_own(store, 1)
    wrapt.wrap_function_wrapper(redis.connection.AbstractConnection, "send_packed_command", tracer)
    admin.config_resetstat()
    answers_its_own(store, 4)
    server = evalsha_calls(admin)
    store.close()
    assert server == 8
    assert seen.count("EVALSHA") == server, seen


@pytest.mark.usefixtures("restore_send")
def test_a_removed_wrapper_is_no_longer_called_at_once(
    node: ValkeyServer, admin: redis.Redis
) -> None:
    """Attack: installed after the first call, then removed. Promise 4: nothing after the
    removal reaches it; the store's answers stay its own."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    counter = Counter(redis.connection.AbstractConnection).install()
    answers_its_own(store, 2)
    assert counter.count("EVALSHA") == 4
    counter.remove()
    answers_its_own(store, 3)
    assert counter.count("EVALSHA") == 4
    store.close()


@pytest.mark.usefixtures("restore_send")
def test_a_wrapper_sees_every_evalsha_of_twelve_threads(
    node: ValkeyServer, admin: redis.Redis
) -> None:
    """Attack: twelve threads at once (kept connections and the pool's beside them), a
    wrapper installed after the first call. Promise 4: it counts what the server counts."""
    store = lean_store(node.url)
    answers_its_own(store, 1)
    counter = Counter(redis.connection.AbstractConnection).install()
    admin.config_resetstat()
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda _: answers_its_own(store, 4), range(12)))
    server = evalsha_calls(admin)
    store.close()
    assert server == 96
    assert counter.count("EVALSHA") == server


@pytest.mark.usefixtures("restore_send")
@pytest.mark.parametrize("raised", ["OSError", "redis ConnectionError"])
def test_a_wrapper_that_fails_is_answered_as_on_the_clients_path(
    node: ValkeyServer, raised: str
) -> None:
    """Attack: a wrapper (a tracer gone wrong) raising instead of sending. Promise 3: the
    lean path answers as a store given a client does (a redis-py error is a StoreError);
    promise 2: once it is removed, the next calls answer their own."""

    def failing(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        if raised == "OSError":
            raise OSError(errno.ECONNRESET, "tracer")
        raise redis.ConnectionError("tracer")

    got = {}
    for path, build in BUILDERS.items():
        store = build(node.url)
        answers_its_own(store, 1)
        redis.connection.AbstractConnection.send_packed_command = failing  # type: ignore[method-assign]
        got[path] = outcome(lambda: claim(store, "k-1", "a"))  # noqa: B023
        redis.connection.AbstractConnection.send_packed_command = ORIGINAL_SEND
        answers_its_own(store)
    assert got["lean"] == got["client"], got
    if raised != "OSError":
        assert got["lean"][0] == "StoreError", got


@pytest.mark.usefixtures("restore_send")
def test_a_health_checked_url_pings_through_a_wrapper_when_idle_past_the_interval(
    node: ValkeyServer, admin: redis.Redis
) -> None:
    """Attack: ?health_check_interval=1 and a wrapper; 1.5 s idle between calls. Promise 4:
    the server counts a PING before each idle call's script, and the wrapper the scripts."""
    store = lean_store(node.url + "?health_check_interval=1")
    answers_its_own(store, 1)
    counter = Counter(redis.connection.Connection).install()
    admin.config_resetstat()
    for _ in range(2):
        time.sleep(1.5)
        assert claim(store, f"k-{uuid.uuid4().hex}", "a")[0]
    pings, scripts = ping_calls(admin), evalsha_calls(admin)
    store.close()
    assert pings >= 2 and scripts == 2
    assert counter.count("EVALSHA") == 2


def test_a_health_checked_url_pings_without_a_wrapper(
    node: ValkeyServer, admin: redis.Redis
) -> None:
    """Attack: ?health_check_interval=1, no wrapper, four kept connections each idle past
    it. Promise 4: a PING before each idle connection's script."""
    store = lean_store(node.url + "?health_check_interval=1")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: answers_its_own(store, 2), range(4)))
    time.sleep(1.5)
    admin.config_resetstat()
    start = threading.Barrier(4)

    def run(i: int) -> Any:
        start.wait()
        return claim(store, f"k-{i}", "a")

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(run, range(4))) == [(True, None)] * 4
    pings = ping_calls(admin)
    store.close()
    assert pings >= 1, pings


# -- 5. what is written is what the other path reads -----------------------------------------

TEXTS = [
    "",
    "%s",
    "%%",
    "%(x)s %d %r %",
    "{0}{}{x}",
    "caf\u00e9 \u00fc \u20ac",
    "\U0001f600\u0000",
    "\r\n*1\r\n$3\r\nGET\r\n",
    "x" * 200_000,
]
RESULTS = [
    b"",
    bytes(range(256)) * 3,
    b"%s%d%%\r\n$-1\r\n",
    "caf\u00e9".encode(),
    os.urandom(3 * 1024 * 1024),
]


def shared_pair(url: str) -> tuple[ValkeyStore, ValkeyStore]:
    shared = prefix()
    return lean_store(url, prefix=shared), given_store(url, prefix=shared)


@pytest.mark.parametrize("text", TEXTS, ids=lambda t: repr(t[:12]))
@pytest.mark.parametrize("direction", ["lean writes", "client writes"])
def test_odd_texts_as_key_owner_and_hash_are_written_as_the_other_path_reads(
    node: ValkeyServer, text: str, direction: str
) -> None:
    """Attack: a text (empty, `%` formats, braces, non-ASCII, NUL, RESP-looking, 200 kB) as
    the key, the owner and the payload hash, claimed and completed on one path, read on the
    other. Promise 6: the same record, to the byte; the outcome the same on both paths."""
    lean, given = shared_pair(node.url)
    writer, reader = (lean, given) if direction == "lean writes" else (given, lean)
    pk, owner = f"k{text}", f"o{text}"
    now = now_ms()
    wrote = outcome(
        lambda: writer.claim(
            pk,
            owner=owner,
            payload_hash=text or None,
            now_ms=now,
            lease_until_ms=now + 60_000,
            expiration_s=now // 1000 + 600,
        )
    )
    assert wrote == ("answer", (True, None)), wrote
    assert writer.complete(
        pk,
        owner=owner,
        payload_hash=text or None,
        result=text.encode(),
        expiration_s=now // 1000 + 600,
    )
    record = reader.get(pk)
    assert record is not None
    assert (record.owner, record.payload_hash, record.result) == (
        owner,
        text or None,
        text.encode(),
    )
    assert reader.get(f"k{text}x") is None
    lean.close()
    given.client.close()


@pytest.mark.parametrize("index", range(len(RESULTS)))
def test_results_of_any_bytes_are_written_as_the_other_path_reads(
    node: ValkeyServer, index: int
) -> None:
    lean, given = shared_pair(node.url)
    result = RESULTS[index]
    for writer, reader, pk in [(lean, given, "a"), (given, lean, "b")]:
        assert claim(writer, pk, "w") == (True, None)
        assert complete(writer, pk, "w", result)
        record = reader.get(pk)
        assert record is not None and record.result == result
    lean.close()
    given.client.close()


NUMBERS = [0, -1, -(2**40), 2**53 + 1, 2**63 - 1, 2**64 + 7, 10**30]


@pytest.mark.parametrize("number", NUMBERS)
def test_odd_integers_give_the_same_outcome_and_record_on_both_paths(
    node: ValkeyServer, number: int
) -> None:
    """Attack: a negative or huge integer as the claim's times (now, lease, expiration).
    Promise 6: both paths answer alike (or fail alike), and store the same numbers."""
    lean, given = shared_pair(node.url)
    got, records = {}, {}
    for name, store in [("lean", lean), ("client", given)]:
        pk = f"n-{name}"
        got[name] = outcome(
            lambda: store.claim(  # noqa: B023
                pk,  # noqa: B023
                owner="o",
                payload_hash=None,
                now_ms=now_ms(),
                lease_until_ms=number,
                expiration_s=number,
            )
        )
        read = attempt(lambda: given.get(pk))  # noqa: B023
        records[name] = (
            type(read).__name__
            if not hasattr(read, "lease_until")
            else (read.lease_until, read.expiration, read.owner)
        )
    lean.close()
    given.client.close()
    assert got["lean"] == got["client"], got
    assert records["lean"] == records["client"], records


ENCODED = [
    ("latin-1", "caf\u00e9"),
    ("cp1252", "\u20ac caf\u00e9"),
    ("utf-8", "caf\u00e9 \U0001f600"),
    ("latin-1", "\u20ac"),  # outside it
    ("ascii", "caf\u00e9"),  # outside it
    ("utf-8", "a\ud800b"),  # a lone surrogate
]


@pytest.mark.parametrize(("encoding", "text"), ENCODED)
def test_the_urls_encoding_writes_the_same_bytes_on_both_paths(
    node: ValkeyServer, admin: redis.Redis, encoding: str, text: str
) -> None:
    """Attack: a URL's `encoding`, a text inside or outside it as key and owner, claimed on
    the lean path and on a store given a client. Promise 6: the same outcome on both paths,
    and the same bytes in Valkey: the key and the owner as the encoding writes them."""
    shared = prefix()
    url = f"{node.url}?encoding={encoding}"
    lean, given = lean_store(url, prefix=shared), given_store(url, prefix=shared)
    got = {
        "lean": outcome(lambda: claim(lean, f"k{text}", f"o{text}")),
        "client": outcome(lambda: claim(given, f"k{text}x", f"o{text}")),
    }
    kinds = {path: (o[0], o[1] if o[0] == "raw" else o[1:]) for path, o in got.items()}
    assert kinds["lean"] == kinds["client"], got
    if got["lean"][0] == "answer":
        for store, pk in [(lean, f"k{text}"), (given, f"k{text}x")]:
            raw = admin.hgetall(store.key_of(pk).encode(encoding))
            assert f"o{text}".encode(encoding) in raw.values(), raw


@pytest.mark.parametrize(("encoding", "text"), ENCODED[:2])
@pytest.mark.parametrize("direction", ["lean writes", "client writes"])
def test_a_non_ascii_owner_under_the_urls_encoding_is_read_back_by_the_other_path(
    node: ValkeyServer, encoding: str, text: str, direction: str
) -> None:
    """Attack: as above, then the record read by the other path and by the writer. Promise
    6: what one path writes, the other reads as the writer does. (A record's texts are UTF-8
    by its format; the owners the library makes are ASCII tokens, so a non-ASCII owner under
    another encoding is read by both paths alike as an unreadable record, a typed error.)"""
    shared = prefix()
    url = f"{node.url}?encoding={encoding}"
    lean, given = lean_store(url, prefix=shared), given_store(url, prefix=shared)
    writer, reader = (lean, given) if direction == "lean writes" else (given, lean)
    assert claim(writer, "k-1", f"o{text}") == (True, None)
    read_back = attempt(lambda: reader.get("k-1"))
    read_by_writer = attempt(lambda: writer.get("k-1"))
    if isinstance(read_by_writer, StoreError):
        assert isinstance(read_back, StoreError), repr(read_back)
        assert flags(read_back) == flags(read_by_writer)
    else:
        assert read_back.owner == read_by_writer.owner == f"o{text}", repr(read_back)


def test_a_bool_as_an_integer_is_answered_as_the_client_answers_it(node: ValkeyServer) -> None:
    """Attack: True as a time (an int to Python, refused by redis-py's encoder). Promise 6:
    the lean path writes nothing the client would not."""
    lean, given = shared_pair(node.url)
    got = {}
    for name, store in [("lean", lean), ("client", given)]:
        got[name] = outcome(
            lambda: store.release(f"b-{name}", owner="o", now_ms=True)  # noqa: B023
        )
    lean.close()
    given.client.close()
    assert got["lean"] == got["client"], got
