"""Attacks on the URL a ValkeyStore is built from (`ValkeyStore(url)`, IDEMPOTENCY_VALKEY_URL):
redis-py's query options (parse_url, URL_QUERY_ARGUMENT_PARSERS: anything it does not know is
passed on to the connection as text), schemes, ports, paths, percent-encoding, duplicated and
nonsense values, `cluster=True` with such URLs. On real servers; effects counted (how many
times the handler body ran) across a call and its retry.

The promises attacked: (1) a side effect runs once per key, a retry gets the same answer;
(2) a bad URL or option is a ConfigurationError when the store is built or a StoreError at
call time (truthful `retryable`, `maybe_applied`), never a raw exception, nothing locked past
its lease, nothing silently re-executed or sent somewhere else; (3) no password in a log line
or an error message; (4) `ValkeyStore(url)` connects to nothing until the first call.

Found failing when written, each fixed since by checking the URL when the store is built
(`_stores/valkey/urls.py`: a ConfigurationError with the reason), a cluster client that cannot
start mapped to a StoreError, and `scan_stuck` decoding in the URL's encoding: raw
LookupError/OverflowError/AttributeError from nonsense options; a handshake that raised skipped
on the retry (records in db 0); a huge max_connections hangs the first call; cluster=True that
cannot start raises redis-py's raw RedisClusterException (an unreachable cluster included);
urllib's ValueError raw at build, with the password in it; the password in a chained error when
it holds '#', '/' or '?', and a ?password= option unmasked in repr and the operator CLI; port 0
read as 6379; a db path that is no number read as db 0 (or 12); options no connection can be
made with reported retryable and maybe applied; the URL's socket_timeout overriding the store's
timeout=; a pool of ?max_connections=1 exhausted by the lean path's kept connection; scan_stuck
under latin-1 with a non-ASCII prefix; a lossy encoding merging two prefixes. Held: building
connects nothing, decode_responses refused however spelled, percent-encoded credentials, db
options, unix sockets, server-refused options, valkeys:// to a plain server."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

from lambda_idempotency import StoreError, ValkeyStore, idempotent
from lambda_idempotency._base.errors import ConfigurationError
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.valkey_local import HOST, ValkeyServer, call, free_port

pytestmark = [
    pytest.mark.valkey,
    pytest.mark.timeout_scale(2),
    # redis-py leaves the socket of a connection whose options fail after the socket was made
    # (settimeout(-1), settimeout(inf), keepalive options) for the garbage collector, which
    # closes it in whichever later test it runs: not this file's subject, and not a test's
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PASSWORD = "hunter2XYZ"
TYPED = (StoreError, ConfigurationError)


# -- helpers ----------------------------------------------------------------------------------


def prefix() -> str:
    return f"ua-{uuid.uuid4().hex[:8]}:"


def now_ms() -> int:
    return int(time.time() * 1000)


def url_of(port: int, query: str = "", scheme: str = "redis") -> str:
    return f"{scheme}://{HOST}:{port}{query}"


def charge_on(store: ValkeyStore, **options: Any) -> tuple[Any, list[str]]:
    """A handler on `store` and the list of the keys its body ran for (its effects)."""
    effects: list[str] = []
    options.setdefault("cache_size", 0)

    @idempotent(key="order_id", store=store, **options)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        if event.get("work"):
            time.sleep(event["work"])
        return {"charged": event["order_id"], "amount": event.get("amount", 1)}

    return charge, effects


def attempt(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except BaseException as exc:  # what the caller would see, whatever it is
        return exc


def shown(outcome: Any) -> str:
    if isinstance(outcome, BaseException):
        flags = ""
        if isinstance(outcome, StoreError):
            flags = f" code={outcome.code} retryable={outcome.retryable}"
            flags += f" maybe_applied={outcome.maybe_applied}"
        return f"{type(outcome).__name__}({outcome}){flags}"
    return repr(outcome)


def call_and_retry(url: str, **store_options: Any) -> tuple[list[Any], list[str]]:
    """A call and its retry on a store built from `url`: (what each answered, effects); the
    store's refusal alone when it refuses the URL as it is built."""
    store = attempt(lambda: ValkeyStore(url, prefix=prefix(), **store_options))
    if isinstance(store, ConfigurationError):
        return [store], []
    charge, effects = charge_on(store)
    outcomes = [attempt(lambda: charge({"order_id": "o-1"}, None)) for _ in range(2)]
    with contextlib.suppress(Exception):
        store.close()
    return outcomes, effects


def keys_by_db(port: int, pattern: str) -> dict[int, int]:
    found = {}
    for db in range(16):
        with redis.Redis(host=HOST, port=port, db=db) as admin:
            count = len(admin.keys(pattern))
        if count:
            found[db] = count
    return found


def whole_text(exc: BaseException) -> str:
    """Everything a log line of this error can carry: its message, every chained cause and
    context, as `logging.exception` or Lambda's runtime would print them."""
    return "".join(traceback.format_exception(exc))


class Listener:
    """A TCP socket that accepts and counts connections, never answers."""

    def __init__(self) -> None:
        self._listener = socket.create_server((HOST, 0))
        self.port = self._listener.getsockname()[1]
        self.accepted = 0
        self._kept: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._kept.append(client)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for kept in self._kept:
            kept.close()


@contextlib.contextmanager
def listening() -> Iterator[Listener]:
    listener = Listener()
    try:
        yield listener
    finally:
        listener.close()


def closed_port() -> int:
    """A loopback port with nothing listening."""
    return free_port()


# -- 1. a URL option redis-py accepts as text, failing as a raw exception at the first call ----


@pytest.mark.parametrize(
    "query",
    [
        "?encoding=nonsense",  # LookupError from the lean path's encode
        "?encoding=rot13",  # LookupError: not a text encoding
        "?socket_timeout=inf",  # OverflowError from settimeout
        "?socket_connect_timeout=inf",  # OverflowError
        "?retry=x",  # AttributeError: 'str' object has no attribute 'call_with_retry'
        "?socket_keepalive_options=x",  # AttributeError: 'str' ... 'items'
        "?credential_provider=x",  # AttributeError: 'str' ... 'get_credentials'
    ],
)
def test_a_nonsense_url_option_is_a_typed_error_not_a_raw_exception(
    valkey_node: ValkeyServer, query: str
) -> None:
    """Attack: a URL option with a value redis-py passes on unchecked. Promise 2: the call and
    its retry each fail with a StoreError (or ConfigurationError), never a raw exception, and
    the body runs at most once."""
    outcomes, effects = call_and_retry(url_of(valkey_node.port, query))
    raw = [shown(o) for o in outcomes if isinstance(o, BaseException) and not isinstance(o, TYPED)]
    assert raw == [], [shown(o) for o in outcomes]
    assert len(effects) <= 1


def test_a_handshake_that_raised_is_not_skipped_on_the_retry(valkey_node: ValkeyServer) -> None:
    """Attack: ?db=1&credential_provider=x. The handshake (AUTH, HELLO, SELECT) raises a
    non-redis error after the socket connected; the retry must not use that socket as if the
    handshake had run. Promise 2: each call a typed error, and no record in a db the URL did
    not name (db 0)."""
    shared = prefix()
    store = attempt(
        lambda: ValkeyStore(url_of(valkey_node.port, "?db=1&credential_provider=x"), prefix=shared)
    )
    if isinstance(store, ConfigurationError):
        return  # refused as it is built: no handshake is ever tried
    charge, effects = charge_on(store)
    outcomes = [attempt(lambda: charge({"order_id": "o-1"}, None)) for _ in range(2)]
    with contextlib.suppress(Exception):
        store.close()
    where = keys_by_db(valkey_node.port, f"{shared}*")
    assert all(isinstance(o, TYPED) for o in outcomes), [shown(o) for o in outcomes]
    assert 0 not in where, (where, effects, [shown(o) for o in outcomes])


def test_a_max_connections_too_large_is_refused_not_a_hang(valkey_node: ValkeyServer) -> None:
    """Attack: ?max_connections=10**12 (a user meaning 'unlimited'). redis-py's blocking pool
    fills a queue with that many slots. Promise 2: the first call answers a typed error (or
    works) promptly; it must not hang or exhaust memory. Run in a child limited to 400 MB
    more than it started with, for at most 20 s."""
    script = textwrap.dedent(
        f"""
        import resource, time
        from lambda_idempotency import StoreError, ValkeyStore, idempotent
        from lambda_idempotency._base.errors import ConfigurationError
        pages = int(open("/proc/self/statm").read().split()[0])
        limit = pages * resource.getpagesize() + 400 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            store = ValkeyStore({url_of(valkey_node.port, "?max_connections=1000000000000")!r})
        except ConfigurationError:
            print("ANSWER typed ConfigurationError")
            raise SystemExit(0)

        @idempotent(store=store, key="order_id", cache_size=0)
        def charge(event, context):
            return 1

        started = time.monotonic()
        try:
            charge({{"order_id": "o-1"}}, None)
            print("ANSWER ok")
        except (StoreError, ConfigurationError) as exc:
            print("ANSWER typed", type(exc).__name__)
        except BaseException as exc:
            print("ANSWER raw", type(exc).__name__)
        print("SECONDS", round(time.monotonic() - started, 1))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
            env=env,
        )
        out = done.stdout
    except subprocess.TimeoutExpired as exc:
        out = f"HUNG past 20 s: {exc.stdout!r}"
    answers = [line for line in out.splitlines() if line.startswith("ANSWER")]
    fine = (["ANSWER ok"], ["ANSWER typed StoreError"], ["ANSWER typed ConfigurationError"])
    assert answers in fine, out[-600:]


# -- 2. cluster=True: the cluster client is built (and connects) at the first call -------------


@pytest.mark.parametrize(
    "shape",
    ["unreachable", "a standalone node", "?db=1", "/1", "unix", "?encoding=nonsense"],
)
def test_a_cluster_store_that_cannot_start_is_a_store_error(
    valkey_node: ValkeyServer, shape: str
) -> None:
    """Attack: cluster=True whose client cannot start: no node reachable (a cold start during
    an outage), a node not in cluster mode, a db other than 0, a unix socket, a nonsense
    encoding. Promise 2: a StoreError (or ConfigurationError), never redis-py's raw
    RedisClusterException; the body never runs."""
    url = {
        "unreachable": url_of(closed_port()),
        "a standalone node": valkey_node.url,
        "?db=1": url_of(closed_port(), "?db=1"),
        "/1": url_of(closed_port(), "/1"),
        "unix": "unix:///tmp/no-such-valkey.sock",
        "?encoding=nonsense": url_of(valkey_node.port, "?encoding=nonsense"),
    }[shape]
    outcomes, effects = call_and_retry(url, cluster=True, timeout=1)
    assert all(isinstance(o, TYPED) for o in outcomes), [shown(o) for o in outcomes]
    assert effects == []


# -- 3. construction: typed errors, nothing connected ------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"redis://app:{PASSWORD}@[::1:6379",  # an unclosed IPv6 bracket
        f"redis://app:{PASSWORD}\u2100@{HOST}:6379",  # NFKC makes a '/' of the password
        f"redis://app:{PASSWORD}@{HOST}:6379\uff03",  # a fullwidth '#'
    ],
)
def test_a_url_urllib_cannot_split_is_a_configuration_error_without_the_password(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: URLs urllib refuses to split, given to ValkeyStore(url) and through
    IDEMPOTENCY_VALKEY_URL. Promise 2: a ConfigurationError when the store is built (not a raw
    ValueError); promise 3: the password nowhere in it."""
    outcomes = [attempt(lambda: ValkeyStore(url))]
    monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", url)
    outcomes.append(attempt(ValkeyStore))
    for outcome in outcomes:
        if isinstance(outcome, ValkeyStore):
            continue  # built: then the first call must say it (not asserted here)
        assert isinstance(outcome, ConfigurationError), shown(outcome)
        assert PASSWORD not in whole_text(outcome), whole_text(outcome)


@pytest.mark.parametrize(
    ("url", "cluster"),
    [
        ("redis://HOST:PORT", False),
        ("valkey://HOST:PORT?protocol=3&db=2", False),
        ("rediss://HOST:PORT?ssl_cert_reqs=none", False),
        ("valkeys://app:pw@HOST:PORT", False),
        ("redis://HOST:PORT?max_connections=1000000000000", False),
        ("redis://HOST:PORT?health_check_interval=1&client_name=x", False),
        ("redis://HOST:PORT", True),
        ("redis://HOST:PORT?protocol=3", True),
    ],
)
def test_building_a_store_from_any_url_connects_to_nothing(url: str, cluster: bool) -> None:
    """Attack: ValkeyStore(url) with options and cluster=True, pointed at a listener counting
    connections; repr() and close() too. Promise 4: no connection until the first call."""
    with listening() as listener:
        built = attempt(
            lambda: ValkeyStore(
                url.replace("HOST", HOST).replace("PORT", str(listener.port)), cluster=cluster
            )
        )
        if isinstance(built, ValkeyStore):
            repr(built)
            built.close()
        else:
            assert isinstance(built, ConfigurationError), shown(built)
        time.sleep(0.2)
        assert listener.accepted == 0


@pytest.mark.parametrize(
    "query",
    ["?decode_responses=true", "?decode%5Fresponses=1", "?x=1&decode_responses=0"],
)
def test_a_url_asking_to_decode_is_refused_however_spelled(
    valkey_node: ValkeyServer, query: str
) -> None:
    """Attack: decode_responses percent-encoded, after another option, as 0. Promise 2: a
    ConfigurationError when built (held)."""
    with pytest.raises(ConfigurationError):
        ValkeyStore(url_of(valkey_node.port, query))


# -- 4. passwords ------------------------------------------------------------------------------


@pytest.mark.parametrize("mark", ["#", "/", "?"])
def test_a_password_with_an_unencoded_delimiter_never_reaches_an_error(mark: str) -> None:
    """Attack: a generated password with '#', '/' or '?' not percent-encoded
    (redis://app:hunter2XYZ#rest@host:6379): urllib ends the netloc there and reads the
    password as the port. Promise 3: no error the caller sees, nor any error chained to it,
    carries the password; promise 2: a typed error."""
    url = f"redis://app:{PASSWORD}{mark}rest@{HOST}:{closed_port()}"
    built = attempt(lambda: ValkeyStore(url, prefix=prefix(), timeout=1))
    if isinstance(built, BaseException):
        failure = built
    else:
        assert PASSWORD not in repr(built)
        charge, effects = charge_on(built)
        failure = attempt(lambda: charge({"order_id": "o-1"}, None))
        assert effects == []
    assert isinstance(failure, TYPED), shown(failure)
    assert PASSWORD not in whole_text(failure), whole_text(failure)


def test_a_password_given_as_a_query_option_is_masked(valkey_node: ValkeyServer) -> None:
    """Attack: ?password=... (redis-py passes any unknown option on: the password is used).
    Promise 3: masked as the URL's own password is, in the store's repr."""
    url = url_of(closed_port(), f"?password={PASSWORD}")
    built = ValkeyStore(url)
    assert PASSWORD not in repr(built), repr(built)


@pytest.mark.parametrize("command", ["namespaces", "stuck", "doctor"])
def test_the_operators_lines_never_show_a_query_password(command: str) -> None:
    """Attack: the operator CLI given a URL whose password is the ?password= option, its
    server unreachable. Promise 3: no line it prints carries the password."""
    url = url_of(closed_port(), f"?password={PASSWORD}")
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        contextlib.suppress(SystemExit),
    ):
        cli.main([command, "--valkey-url", url])
    printed = out.getvalue() + err.getvalue()
    assert PASSWORD not in printed, printed


def test_a_percent_encoded_user_and_password_authenticate(valkey_node: ValkeyServer) -> None:
    """Attack: a user 'a:b@c' and a password 'p@ss/w#?%' percent-encoded in the URL, and the
    same password with '@' left unencoded. Promise 1: the handler runs once, the retry
    replays; promise 3: the password masked in repr (held)."""
    user, password = f"u:{uuid.uuid4().hex[:6]}@c", "p@ss/w#?%"
    with redis.Redis(host=HOST, port=valkey_node.port) as admin:
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    try:
        from urllib.parse import quote

        url = f"redis://{quote(user, safe='')}:{quote(password, safe='')}@{HOST}:{valkey_node.port}"
        store = ValkeyStore(url, prefix=prefix())
        charge, effects = charge_on(store)
        first = charge({"order_id": "o-1"}, None)
        again = charge({"order_id": "o-1"}, None)
        assert "p%40ss" not in repr(store) and "***" in repr(store)
        store.close()
        assert first == again and effects == ["o-1"]
    finally:
        with redis.Redis(host=HOST, port=valkey_node.port) as admin:
            admin.execute_command("ACL", "DELUSER", user)


# -- 5. the URL names one server and db; the records must go nowhere else ----------------------


def test_port_zero_is_refused_not_read_as_6379(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: redis://127.0.0.1:0 (and valkey://). redis-py drops a port of 0 and connects to
    6379, where another server (`lambda-idempotency local --valkey`'s default) may run.
    Promise 2: a typed error, and no connection attempted to a port the URL did not name.
    (Addresses are recorded, nothing on 6379 is reached: the lookup is answered with a
    refused port.)"""
    asked: list[Any] = []
    original = socket.getaddrinfo
    refused = closed_port()

    def recording(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(port)
        return original(host, refused, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    for scheme in ("redis", "valkey"):
        outcomes, effects = call_and_retry(url_of(0, scheme=scheme), timeout=1)
        assert all(isinstance(o, TYPED) for o in outcomes), [shown(o) for o in outcomes]
        assert effects == []
    assert 6379 not in asked and "6379" not in [str(p) for p in asked], asked


@pytest.mark.parametrize(("path", "meant"), [("/abc", None), ("/1/2", None), ("/ 3", 3)])
def test_a_db_path_that_is_not_a_number_is_refused_not_db_0(
    valkey_node: ValkeyServer, path: str, meant: int | None
) -> None:
    """Attack: a URL path that is no db number ('/abc', '/1/2'); '?db=abc' is refused as
    ClientNotBuilt. Promise 2: a typed error, not records silently kept in db 0 (or db 12);
    a path Python reads as a number ('/ 3') keeps its records in that db."""
    shared = prefix()
    store = attempt(lambda: ValkeyStore(url_of(valkey_node.port, path), prefix=shared))
    if isinstance(store, ConfigurationError):
        assert meant is None, shown(store)
        return  # refused as it is built
    charge, effects = charge_on(store)
    outcomes = [attempt(lambda: charge({"order_id": "o-1"}, None)) for _ in range(2)]
    store.close()
    where = keys_by_db(valkey_node.port, f"{shared}*")
    if meant is None:
        assert all(isinstance(o, TYPED) for o in outcomes) and where == {}, (
            where,
            [shown(o) for o in outcomes],
        )
    else:
        assert list(where) == [meant] and effects == ["o-1"]


@pytest.mark.parametrize(("query", "db"), [("?db=1&db=0", 1), ("/2?db=3", 3), ("/4", 4)])
def test_a_url_naming_a_db_keeps_its_records_there(
    valkey_node: ValkeyServer, query: str, db: int
) -> None:
    """Attack: duplicated db options, a path and an option at once. Promise 1: once, the retry
    replays, every record in the db redis-py reads (the first value, the option over the
    path) (held)."""
    shared = prefix()
    store = ValkeyStore(url_of(valkey_node.port, query), prefix=shared)
    charge, effects = charge_on(store)
    first = charge({"order_id": "o-1"}, None)
    assert charge({"order_id": "o-1"}, None) == first
    store.close()
    assert effects == ["o-1"]
    assert list(keys_by_db(valkey_node.port, f"{shared}*")) == [db]


def test_a_unix_socket_url_with_db_and_password() -> None:
    """Attack: unix://:password@/path?db=2 on a server listening on a socket and requiring a
    password. Promise 1: once, replayed; records in db 2; promise 3: masked (held)."""
    path = Path(tempfile.mkdtemp(prefix="vk-")) / "v.sock"
    with ValkeyServer("--unixsocket", str(path), "--unixsocketperm", "700") as node:
        call(node.port, "CONFIG", "SET", "requirepass", PASSWORD)
        url = f"unix://:{PASSWORD}@{path}?db=2"
        store = ValkeyStore(url, prefix=prefix())
        assert PASSWORD not in repr(store)
        charge, effects = charge_on(store)
        first = charge({"order_id": "o-1"}, None)
        assert charge({"order_id": "o-1"}, None) == first
        store.close()
        assert effects == ["o-1"]
        with redis.Redis(unix_socket_path=str(path), password=PASSWORD, db=2) as admin:
            assert len(admin.keys(f"{store.prefix}*")) == 1
        assert node.running


# -- 6. errors that say the truth: nothing was sent, retrying cannot help ----------------------


@pytest.mark.parametrize(
    "query",
    [
        "?single_connection_client=true",  # a Redis.from_url keyword, not a connection's
        "?ssl_cert_reqs=required",  # a TLS option on redis://
        "?protocol=4",
        "?socket_timeout=-1",
        "?timeout=-1",
        "?foo=bar",
    ],
)
def test_an_option_no_connection_can_be_made_with_says_nothing_was_sent(
    valkey_node: ValkeyServer, query: str
) -> None:
    """Attack: options that make every connection fail before a byte is sent. As '?db=abc'
    is (ClientNotBuilt), promise 2: a StoreError that is not retryable and did not apply: the
    claim never left (not 'InvalidResponse, retryable, maybe applied', which sends a queue's
    retries after it for ever and claims a write may have landed); no key claimed."""
    with redis.Redis(host=HOST, port=valkey_node.port) as admin:
        before = admin.dbsize()
        outcomes, effects = call_and_retry(url_of(valkey_node.port, query))
        assert effects == [] and admin.dbsize() == before
    for outcome in outcomes:
        if isinstance(outcome, ConfigurationError):
            continue  # refused as it is built: nothing was ever sent
        assert isinstance(outcome, StoreError), shown(outcome)
        assert (outcome.retryable, outcome.maybe_applied) == (False, False), shown(outcome)


@pytest.mark.parametrize(
    "query", ["?encoding=utf-16", "?encoding=utf-8-sig", "?client_name=my%20app", "?db=99"]
)
def test_an_option_the_server_refuses_fails_every_call_typed(
    valkey_node: ValkeyServer, query: str
) -> None:
    """Attack: an encoding that turns every text into something else (a BOM first), a client
    name with a space, a db out of range. Promise 2: each call a StoreError, the body never
    runs, nothing written (held)."""
    with redis.Redis(host=HOST, port=valkey_node.port) as admin:
        before = admin.dbsize()
        outcomes, effects = call_and_retry(url_of(valkey_node.port, query))
        written = admin.dbsize() - before
    assert all(isinstance(o, StoreError) for o in outcomes), [shown(o) for o in outcomes]
    assert effects == [] and written == 0


def test_valkeys_to_a_plain_server_fails_typed_and_unapplied(valkey_node: ValkeyServer) -> None:
    """Attack: valkeys:// (TLS) to a server without TLS. Promise 2: a StoreError that applied
    nothing, within the store's timeout; the body never runs (held)."""
    started = time.monotonic()
    outcomes, effects = call_and_retry(url_of(valkey_node.port, scheme="valkeys"), timeout=0.5)
    assert time.monotonic() - started < 6
    assert effects == []
    for outcome in outcomes:
        assert isinstance(outcome, StoreError) and outcome.maybe_applied is False, shown(outcome)


# -- 7. the store's timeout and pool, against the URL's own --------------------------------------


def test_the_stores_timeout_bounds_a_call_whatever_the_url_says() -> None:
    """Attack: ValkeyStore(url + '?socket_timeout=30', timeout=1), the server stopped for 5 s
    after a first call. The store's timeout= 'bounds the wait for each answer on a client built
    from a URL' (and may be at most 900 s: '?socket_timeout=100000' is the same wait unchecked).
    Promise 2: the call fails typed within about the timeout, not when the server resumes."""
    with ValkeyServer() as node:
        built = attempt(
            lambda: ValkeyStore(url_of(node.port, "?socket_timeout=30"), prefix=prefix(), timeout=1)
        )
        if isinstance(built, ConfigurationError):
            assert "timeout=" in str(built), shown(built)
            return  # the URL cannot override the store's timeout: refused as it is built
        store = built
        charge, _ = charge_on(store)
        charge({"order_id": "warm"}, None)
        outcome: list[Any] = []

        def call() -> None:
            started = time.monotonic()
            result = attempt(lambda: charge({"order_id": "o-1"}, None))
            outcome.append((result, time.monotonic() - started))

        node.pause()
        try:
            worker = threading.Thread(target=call, daemon=True)
            worker.start()
            worker.join(5)
        finally:
            node.resume()
        worker.join(10)
        store.close()
    assert outcome, "no answer"
    result, seconds = outcome[0]
    assert seconds < 4, (shown(result), round(seconds, 2))
    assert isinstance(result, StoreError), shown(result)


def test_a_small_pool_from_the_url_is_waited_for_not_exhausted(valkey_node: ValkeyServer) -> None:
    """Attack: ?max_connections=1, six threads calling one key at once (on_in_progress=wait),
    the body working 1 s. The docs: a store built from a URL uses a blocking pool, 'a call that
    finds every connection busy waits for one, up to timeout'. Promise 1: the body once, every
    duplicate the same answer; no PoolExhausted while the one connection sits idle in the
    store's own keeping."""
    built = attempt(
        lambda: ValkeyStore(
            url_of(valkey_node.port, "?max_connections=1"), prefix=prefix(), timeout=2
        )
    )
    if isinstance(built, ConfigurationError):
        return  # the URL cannot shrink the store's pool: refused as it is built
    store = built
    charge, effects = charge_on(store, on_in_progress="wait")
    with ThreadPoolExecutor(6) as pool:
        outcomes = list(
            pool.map(
                lambda _: attempt(lambda: charge({"order_id": "k", "work": 1.0}, None)), range(6)
            )
        )
    store.close()
    assert effects == ["k"]
    assert all(o == {"charged": "k", "amount": 1} for o in outcomes), [shown(o) for o in outcomes]


# -- 8. encodings: what is written is what is read --------------------------------------------


def test_scan_stuck_finds_a_claim_under_the_urls_encoding(valkey_node: ValkeyServer) -> None:
    """Attack: ?encoding=latin-1 with a non-ASCII prefix (a shape the lean path's own tests
    keep working): a claim left in progress. Promise 2 (loses nothing): the operator's
    scan_stuck reads it back as the record it is, under its own pk, not as 'unreadable' under
    a mangled pk (which `release --pk` would then aim at)."""
    url = url_of(valkey_node.port, "?encoding=latin-1")
    store = ValkeyStore(url, prefix=f"caf\u00e9-{prefix()}")
    now = now_ms()
    pk = f"ns.{uuid.uuid4().hex[:6]}#abc"
    won, _ = store.claim(
        pk,
        owner="o",
        payload_hash=None,
        now_ms=now - 3_600_000,
        lease_until_ms=now + 600_000,
        expiration_s=now // 1000 + 600,
    )
    assert won
    pages = list(store.scan_stuck(claimed_before_ms=now, now_ms=now))
    store.close()
    found = [r.pk for page in pages for r in page.records]
    unreadable = [u for page in pages for u in page.unreadable]
    assert found == [pk] and unreadable == [], (found, unreadable)


def test_a_lossy_encoding_never_makes_two_prefixes_share_records(
    valkey_node: ValkeyServer,
) -> None:
    """Attack: ?encoding=ascii&encoding_errors=replace, two stores whose prefixes differ in a
    non-ASCII letter ('caf\u00e9-' and 'caf\u00e8-': two apps kept apart by prefix), one
    handler namespace, one key. Promise 1: each store's body runs for its key; neither
    answers the other's result (or: the URL is refused)."""
    tag = uuid.uuid4().hex[:6]
    url = url_of(valkey_node.port, "?encoding=ascii&encoding_errors=replace")
    refused = attempt(lambda: ValkeyStore(url, prefix=f"caf\u00e9-{tag}:"))
    if isinstance(refused, ConfigurationError):
        return  # refused as it is built: fine
    first = refused
    second = ValkeyStore(url, prefix=f"caf\u00e8-{tag}:")
    charge_a, effects_a = charge_on(first, namespace="ua.lossy")
    charge_b, effects_b = charge_on(second, namespace="ua.lossy")
    a = attempt(lambda: charge_a({"order_id": "o-1", "amount": 1}, None))
    b = attempt(lambda: charge_b({"order_id": "o-1", "amount": 1}, None))
    first.close()
    second.close()
    if isinstance(a, TYPED) and isinstance(b, TYPED):
        return  # refused: fine
    assert effects_a == ["o-1"] and effects_b == ["o-1"], (effects_a, effects_b, shown(a), shown(b))
