"""The lean path of a ValkeyStore built from a URL: a protocol step's script sent as one packed
EVALSHA on a connection the store keeps, written to its socket as redis-py's own
`send_packed_command` writes it (that method sends it where a health check is due or another
library wrapped it), its answer read off the socket by `replies` (or
by the connection's own parser, where that is not redis-py's pure-Python one), without
redis-py's per-command machinery (a pool checkout and return, each with its
observability bookkeeping, the retry wrapper, the command's packing arg by arg, the
response callbacks): about half the client CPU of a call (docs/valkey.md, "Speed").

**Only where nothing is lost by it.** The store built the client (standalone, no retries, no
subclass of a user's); `redis.Redis.execute_command` is still redis-py's own (a tracer that
wraps it, OpenTelemetry's or Datadog's instrumentation, then sees every command through the
client instead: the check is made on each call, so one installed later is honoured at once);
and redis-py's own metrics (`redis.observability`) are off. Otherwise, and for everything but
a script without WAIT (pipelines, blocks, scans), the client sends.

**Connections.** At most `KEPT` connections are taken from the client's pool and kept by the
store, in a list any thread pops one from and puts it back to (atomic under the GIL): a call
that finds none free, with `KEPT` already taken, is sent by the client, through the pool. A
few connections serve a Lambda function's one thread, or a web app's busiest, and the pool
keeps the rest for waiters' blocks and for every other thread (`waking`). A kept connection
is checked as the pool checks one on its way out: one the server closed while the function
was frozen (or with bytes unread) is reconnected before anything is sent on it. One that
failed mid-call is disconnected, and reconnects on its next use. A forked child never uses
its parent's: the store renews (`_base.lifecycle`), and each checkout compares the pid.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any

from .connection import redis_module

KEPT = 4
"""The most connections the lean path keeps out of a pool of `connection.POOL_CONNECTIONS`."""


class LeanSender:
    """Sends one script call on a kept connection of `client`'s pool (the module docstring)."""

    def __init__(self, client: Any) -> None:
        redis = redis_module()
        from . import replies

        self._replies = replies
        self._redis = redis
        self._pool = client.connection_pool
        self._errors = redis.exceptions
        own = redis.Redis.execute_command
        self._genuine = own if _redis_pys_own(own, "client", "Redis.execute_command") else None
        options = self._pool.connection_kwargs
        self._encoding = options.get("encoding", "utf-8"), options.get("encoding_errors", "strict")
        self._free: list[Any] = []
        self._taken = 0
        self._taking = threading.Lock()
        self._pid = os.getpid()
        self._kept: dict[Any, _Kept] = {}
        """What is known of each kept connection's socket, made once per socket."""
        self._templates: dict[tuple[str, int], bytes] = {}
        """EVALSHA packed, by sha and value count: its head (count, name, sha, one key) in
        full, then a `%d`/`%b` slot for each argument's length and bytes."""
        send = redis.connection.AbstractConnection.send_packed_command
        own_send = _redis_pys_own(send, "connection", "AbstractConnection.send_packed_command")
        self._send_packed = send if own_send else None
        """redis-py's own, which `_sendall` writes out: a connection class that has another
        (a subclass's, or a wrapper another library installed, before this store or after)
        is sent through it."""

    def serves(self) -> bool:
        """Whether the lean path may send now: nothing of the client's would be skipped."""
        return (
            self._genuine is not None
            and self._redis.Redis.execute_command is self._genuine
            # asked on each call, not kept by an at-fork hook: a copy made by libc's fork()
            # (a snapshot's restore, a C extension) runs no Python hook
            and self._pid == os.getpid()
            and not _metrics_on()
        )

    def evalsha(self, script: Any, key: str, values: list[Any]) -> Any:
        """EVALSHA of `script` (a redis-py Script: `.sha`, `.script`) on `key` with `values`,
        loading the script once on NOSCRIPT, as redis-py's Script does. When no kept
        connection is free, nothing is sent and the answer is `UNSENT`: the caller sends
        through the client. One call's every step is written out here, not in helpers: on a
        Lambda function's hot path each Python call saved is CPU saved (docs/valkey.md,
        "Speed")."""
        try:
            connection = self._free.pop()
        except IndexError:
            connection = self._take()
            if connection is None:
                return UNSENT
        try:
            kept = self._kept.get(connection)
            if kept is None or kept.sock is not connection._sock or _readable(kept.poller):
                kept = self._fresh(connection)
            try:
                return self._exchange(connection, kept, self._packed(script.sha, key, values))
            except self._errors.NoScriptError:
                loading = _resp([b"SCRIPT", b"LOAD", self._encoded(script.script)])
                script.sha = _text(self._exchange(connection, kept, loading))
                return self._exchange(connection, kept, self._packed(script.sha, key, values))
        finally:
            self._free.append(connection)

    def _fresh(self, connection: Any) -> _Kept:
        """A kept connection as it must be before a send: connected, and nothing to read on
        it. Never connected, closed by the server while the function was frozen, or with
        bytes nobody asked for, it is made anew before anything is sent on it."""
        sock = connection._sock
        if sock is not None:
            kept = self._kept.get(connection)
            if kept is None or kept.sock is not sock:  # connected by someone else since
                kept = self._learn(connection)
            if not _readable(kept.poller):
                return kept
        connection.disconnect()
        connection.connect()
        return self._learn(connection)

    def _packed(self, sha: str, key: str, values: list[Any]) -> bytes:
        """EVALSHA sha 1 key values... as RESP, each text encoded as the client would (its
        URL's `encoding`): the key the lean path writes is the key the client reads."""
        template = self._templates.get((sha, len(values)))
        if template is None:
            whole = _resp([b"EVALSHA", self._encoded(sha), b"1"])
            head = b"*%d" % (len(values) + 4) + whole[whole.index(b"\r\n") :]
            template = head.replace(b"%", b"%%") + b"$%d\r\n%b\r\n" * (len(values) + 1)
            self._templates[sha, len(values)] = template
        encoding = self._encoding
        part = key.encode(*encoding)
        filling = [len(part), part]
        for value in values:
            if type(value) is int:
                part = b"%d" % value
            elif type(value) is bytes:
                part = value
            else:
                part = str(value).encode(*encoding)
            filling += (len(part), part)
        return template % tuple(filling)

    def _encoded(self, text: str) -> bytes:
        return text.encode(*self._encoding)

    def _exchange(self, connection: Any, kept: _Kept, packed: bytes) -> Any:
        try:
            if connection.health_check_interval or type(connection).send_packed_command is not (
                self._send_packed
            ):
                # a URL's health_check_interval honoured (PING first when idle past it: a
                # failed PING reconnects), and a send_packed_command another library wraps
                # (a counter, a tracer) called
                connection.send_packed_command([packed], check_health=True)
                if kept.reads_itself and kept.sock is connection._sock:
                    return self._replies.read(connection)
                return connection.read_response()
            _sendall(self._errors, kept.sock, packed)  # redis-py's own, written out
            if kept.reads_itself:
                return self._replies.read(connection)
            return connection.read_response()
        except self._errors.ResponseError:
            raise  # the server answered: the connection is in step
        except BaseException:
            connection.disconnect()  # a half-read answer must not be the next call's
            raise

    def _learn(self, connection: Any) -> _Kept:
        """What the lean path keeps of a connection's socket, made once per socket."""
        sock = connection._sock
        kept = _Kept(sock, _poller(sock), self._replies.reads_itself(connection))
        self._kept[connection] = kept
        return kept

    def _take(self) -> Any:
        """A connection from the pool, kept from now on; None when `KEPT` are taken."""
        with self._taking:
            if self._taken >= KEPT:
                return None
            self._taken += 1
        try:
            return self._pool.get_connection()
        except BaseException:
            with self._taking:
                self._taken -= 1
            raise


class _Kept:
    """A kept connection's socket, the poller that watches it (a fresh poller per call was a
    tenth of a call's CPU), and whether `replies` reads its answers."""

    __slots__ = ("poller", "reads_itself", "sock")

    def __init__(self, sock: Any, poller: Any, reads_itself: bool) -> None:
        self.sock, self.poller, self.reads_itself = sock, poller, reads_itself


def _poller(sock: Any) -> Any:
    """What tells whether `sock` has anything to read: `poll`, which takes any descriptor
    (`select` fails past 1024), where the platform has it; else the socket, for `select`."""
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        return sock
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return poller


def _readable(poller: Any) -> bool:
    """Whether the watched socket has anything to read now (an EOF included)."""
    if not hasattr(poller, "poll"):  # pragma: no cover - Windows: the socket itself
        return bool(select.select((poller,), (), (), 0)[0])
    return bool(poller.poll(0))


def _sendall(errors: Any, sock: Any, packed: bytes) -> None:
    """`packed` sent as redis-py's `send_packed_command` sends it, its failures the same: a
    socket timeout is redis-py's TimeoutError, any other OSError its ConnectionError (the
    caller drops the connection: a command half sent must not be followed)."""
    try:
        sock.sendall(packed)
    except TimeoutError as exc:  # socket.timeout
        raise errors.TimeoutError("Timeout writing to socket") from exc
    except OSError as exc:
        if len(exc.args) > 1:
            errno, text = exc.args[0], exc.args[1]
        else:  # redis-py reads args[0] here, and fails on an OSError with none
            errno, text = "UNKNOWN", exc.args[0] if exc.args else exc
        raise errors.ConnectionError(f"Error {errno} while writing to socket. {text}.") from exc


UNSENT = object()
"""`LeanSender.evalsha`'s answer when it sent nothing (no kept connection free)."""


def _redis_pys_own(function: Any, module: str, qualname: str) -> bool:
    """Whether `function` is redis-py's own `qualname` of `redis.<module>` itself: defined
    there under that name, wrapping nothing (a tracer's wrapper, by wrapt, functools.wraps or
    by hand, fails one of these however it names itself)."""
    code = getattr(function, "__code__", None)
    return (
        not hasattr(function, "__wrapped__")
        and getattr(function, "__module__", None) == f"redis.{module}"
        and getattr(function, "__qualname__", None) == qualname
        and code is not None
        and code.co_name == qualname.rpartition(".")[2]
        and code.co_filename.replace("\\", "/").endswith(f"redis/{module}.py")
    )


def _resp(parts: list[bytes]) -> bytes:
    """A command as RESP: a count, then each argument's length and bytes."""
    return b"*%d\r\n" % len(parts) + b"".join([b"$%d\r\n%b\r\n" % (len(p), p) for p in parts])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _observability() -> Any:
    try:
        from redis.observability.providers import get_observability_instance
    except ImportError:
        return None
    return get_observability_instance


_OBSERVABILITY: list[Any] = []
"""redis-py's `get_observability_instance` (None before redis-py 8), looked up once."""


def _metrics_on() -> bool:
    """Whether redis-py's own OpenTelemetry metrics are on (redis-py 8: `redis.observability`),
    which count each command its client sends."""
    if not _OBSERVABILITY:
        _OBSERVABILITY.append(_observability())
    instance = _OBSERVABILITY[0]
    if instance is None:
        return False
    try:
        manager = instance().get_provider_manager()
    except Exception:  # an observability we cannot read: assume it counts
        return True
    return manager is not None and bool(manager.config.enabled_telemetry)
