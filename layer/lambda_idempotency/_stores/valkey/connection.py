"""A ValkeyStore's client, and what its failures mean: the one place redis-py is built and its
errors become `StoreError`s (what failed, whether retrying may help, whether a write may
have landed; never a key or a payload).

A client built from a URL makes no retries of its own: each script is safe to send again,
but only the protocol knows when (it retries completions with a backoff, and answers a failed
claim before its effect runs), and an error says truthfully whether anything went out. A
cluster client keeps redis-py's re-routing (MOVED after a failover, a node gone). A pooled
connection the server closed while the function was frozen is found closed when it leaves
the pool, and replaced. Its pool blocks: a call that finds every connection busy waits for
one. A standalone client's pool with no free connection sent nothing (redis-py takes the
connection before any attempt), so a call on a given client's full pool waits for one too,
up to the store's timeout (`waking` says why pools fill: blocked waiters).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._base.errors import (
    STORED_RECORD_UNREADABLE,
    ConfigurationError,
    StoreError,
    unreadable,
)
from .urls import SCHEMES, checked_url, masked, redis_url

URL_VARIABLE = "IDEMPOTENCY_VALKEY_URL"
SOCKET_TIMEOUT_SECONDS = 5.0
"""How long a call waits for its answer on a client built from a URL: past it, the call is a
`StoreError` (retryable, maybe applied) rather than a wait as long as the invocation."""
MAX_TIMEOUT_SECONDS = 900
"""Lambda's longest invocation: a longer wait for one answer could only outlive its caller."""
CONNECT_TIMEOUT_SECONDS = 2.0
POOL_CONNECTIONS = 100
"""The connections a client built from a URL opens at most (redis-py's default)."""
POOL_EXHAUSTED = "PoolExhausted"
"""The `StoreError.code` of a call that found no free connection in time: nothing was sent."""
POOL_RETRY_FIRST_SECONDS = 0.001
POOL_RETRY_MAX_SECONDS = 0.05
"""A call on a given client's full pool is sent again after these pauses, doubling."""
_POOL_EXHAUSTED_SAID = ("Too many connections", "No connection available.")


def redis_module() -> Any:
    """redis-py, or the error naming the extra that brings it."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - exercised where redis-py is absent
        from ..._base.extras import MissingExtraError

        raise MissingExtraError(
            "ValkeyStore needs redis-py: pip install 'lambda-idempotency[valkey]'",
            extra="valkey",
            module="redis",
        ) from exc
    return redis


def checked_target(
    url: str | None, client: Any, timeout: object, *, cluster: bool = False
) -> tuple[str | None, float]:
    """(the URL, or None for a client given; the timeout in seconds), each checked: a URL,
    else a client, else the environment's; never both; bytes answers; a timeout no longer
    than an invocation. redis-py must be installed either way."""
    redis_module()
    if client is None and url is None:
        url = os.environ.get(URL_VARIABLE) or None
        if url is None:
            raise ConfigurationError(
                f"ValkeyStore needs a url, a client= or {URL_VARIABLE} in the environment"
            )
    if client is not None and url is not None:
        raise ConfigurationError("ValkeyStore takes a url or a client=, not both")
    if url is not None and not url.startswith(SCHEMES):
        raise ConfigurationError(
            f"ValkeyStore's url starts with one of {', '.join(SCHEMES)}; "
            f"not {masked(url).partition(':')[0]!r}"
        )
    if url is not None:
        checked_url(url, cluster=cluster)
    if client is not None and decodes(client):
        raise ConfigurationError(
            "ValkeyStore needs a client that answers bytes (decode_responses=False): "
            "results are binary"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        timeout = -1
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        raise ConfigurationError(
            f"timeout must be seconds, more than 0 and at most {MAX_TIMEOUT_SECONDS}"
        )
    return url, float(timeout)


def close_client(client: Any) -> None:
    """Close a client the store built, every connection of it: RedisCluster.close() closes
    each node's client but not its pool, where the sockets a pipeline sent to a key's node
    (`replicas`) would linger."""
    client.close()
    for node in client.get_nodes() if hasattr(client, "get_nodes") else ():
        if node.redis_connection is not None:
            node.redis_connection.connection_pool.disconnect()


def fresh_pool_locks(client: Any) -> None:
    """In a forked child, before anything uses `client`: its pools' locks made anew. A fork
    copies a lock another thread of the parent held as held, and redis-py (8.x) takes a
    pool's lock to reset the pool in the child: the child's first call would hang for ever.
    Nothing else runs in the child yet, so nothing can hold them (as `logging` does at fork)."""
    pools = [getattr(client, "connection_pool", None)]
    for node in client.get_nodes() if hasattr(client, "get_nodes") else ():
        pools.append(getattr(node.redis_connection, "connection_pool", None))
    for pool in pools:
        if pool is None or getattr(pool, "pid", None) == os.getpid():
            continue
        for name in ("_lock", "_fork_lock"):
            lock = getattr(pool, name, None)
            if isinstance(lock, _RLOCK):
                setattr(pool, name, threading.RLock())
            elif isinstance(lock, _LOCK):
                setattr(pool, name, threading.Lock())


_RLOCK, _LOCK = type(threading.RLock()), type(threading.Lock())


def build_client(url: str, *, cluster: bool, timeout: float) -> Any:
    """A client of `url` (the module docstring says how it is built, and why)."""
    redis = redis_module()
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": min(timeout, CONNECT_TIMEOUT_SECONDS),
        "max_connections": POOL_CONNECTIONS,
        "timeout": timeout,  # the blocking pool's wait for a free connection
    }
    if cluster:
        from redis.cluster import RedisCluster

        options["connection_pool_class"] = redis.BlockingConnectionPool
        return RedisCluster.from_url(redis_url(url), **options)
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    pool = redis.BlockingConnectionPool.from_url(
        redis_url(url), retry=Retry(NoBackoff(), 0), **options
    )
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


def not_built(exc: Exception, step: str | None, pk: str | None) -> StoreError | None:
    """Building the client failed: what the caller gets, or None for an error that is not
    the client's (a bug of ours, raised as it is). Nothing was sent: building a cluster client
    only reads its slots. A bad option (ValueError, TypeError) is for the user to fix; a
    cluster none of whose nodes answers as one may answer later."""
    errors = redis_module().exceptions
    if isinstance(exc, ValueError | TypeError):
        message = f"the Valkey client cannot be built ({type(exc).__name__}): check the URL"
        return StoreError(message, key_hash=pk, code="ClientNotBuilt", step=step)
    if isinstance(exc, errors.RedisClusterException | errors.RedisError):
        said = str(exc)
        # redis-py names the node it tried (host and port, never the credentials)
        tried = said.partition(": ")[2] if "connecting to" in said else ""
        detail = f": {_connect_failure(tried)}" if tried else ""
        return StoreError(
            f"the Valkey client cannot start ({type(exc).__name__}): no node answered (as a "
            f"cluster's, for cluster=True){detail}",
            key_hash=pk,
            code=type(exc).__name__,
            retryable=True,
            maybe_applied=False,
            step=step,
        )
    return None


def call(
    client: Any,
    send: Callable[[Any], Any],
    step: str,
    pk: str | None,
    *,
    timeout: float,
    knows_unsent: bool,
) -> Any:
    """`send(client)`'s answer, or its failure as a StoreError. `knows_unsent`: a failure to
    connect sent nothing (a client built from a URL: no attempt before it)."""
    errors = redis_module().exceptions
    give_up = 0.0
    pause = POOL_RETRY_FIRST_SECONDS
    while True:
        try:
            return send(client)
        except (ValueError, TypeError, errors.RedisClusterException) as exc:
            # ValueError, TypeError: redis-py's parser on an answer that is RESP but not what
            # its type says (`,x`, a map keyed by a list), the connection dropped, the request
            # had left. RedisClusterException (not a RedisError): a cluster client that cannot
            # start or route. Either way a write may have gone out.
            cluster = isinstance(exc, errors.RedisClusterException)
            code = "RedisClusterException" if cluster else "InvalidResponse"
            writes = step not in ("get", "scan")
            raise error(step, code, pk, retryable=True, maybe_applied=writes) from exc
        except IndexError as exc:
            # redis-py's send meeting an OSError without arguments (it reads `args[0]`): the
            # socket failed and part of the request may have left
            writes = step not in ("get", "scan")
            raise error(step, "IndexError", pk, retryable=True, maybe_applied=writes) from exc
        except errors.RedisError as exc:
            exhausted = pool_exhausted(errors, exc)
            give_up = give_up or time.monotonic() + timeout
            if exhausted and time.monotonic() + pause < give_up:
                time.sleep(pause)  # each script is safe to send again: once a connection frees
                pause = min(pause * 2, POOL_RETRY_MAX_SECONDS)
                continue
            if exhausted:
                # a standalone client takes its connection before any attempt: nothing went
                # out; a cluster client's retries may have sent one before the pool ran dry
                cluster = hasattr(client, "get_node_from_key")
                sent = cluster and step not in ("get", "scan")
                raise error(step, POOL_EXHAUSTED, pk, retryable=True, maybe_applied=sent) from exc
            raise store_error(errors, exc, step, pk, knows_unsent=knows_unsent) from exc


def pool_exhausted(errors: Any, exc: Exception) -> bool:
    """Whether `exc` says the pool had no connection to give: raised before anything is sent
    (MaxConnectionsError, or the messages of older redis-py and of a blocking pool)."""
    if isinstance(exc, getattr(errors, "MaxConnectionsError", ())):
        return True
    return isinstance(exc, errors.ConnectionError) and str(exc) in _POOL_EXHAUSTED_SAID


def store_error(
    errors: Any, exc: Exception, step: str, pk: str | None, *, knows_unsent: bool
) -> StoreError:
    """redis-py's error as the library's. A refusal the server answered (READONLY from a
    replica after a failover, MOVED/ASK/TRYAGAIN, LOADING, NOSCRIPT, OOM) ran nothing: retry.
    A connection that dropped or timed out after the request left may have run it: a write
    may have landed. A failure to connect sent nothing, when the client made no attempt
    before it (`knows_unsent`)."""
    name = type(exc).__name__
    writes = step not in ("get", "scan")
    refused = (
        errors.ReadOnlyError,
        errors.BusyLoadingError,
        errors.NoScriptError,
        errors.TryAgainError,
        errors.AskError,
        errors.MovedError,
        errors.ClusterDownError,
    )
    if isinstance(exc, refused):
        return error(step, name, pk, retryable=True, maybe_applied=False)
    if isinstance(exc, errors.AuthenticationError | errors.AuthorizationError):
        return error(step, name, pk, retryable=False, maybe_applied=False)
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError | errors.ClusterError):
        unsent = knows_unsent and "connecting to" in str(exc)
        detail = _connect_failure(exc) if "connecting to" in str(exc) else None
        return error(
            step, name, pk, retryable=True, maybe_applied=writes and not unsent, detail=detail
        )
    if isinstance(exc, errors.InvalidResponse):
        # the request left and its answer came back unreadable (the connection, out of step,
        # is dropped): as a lost answer, a write may have landed
        return error(step, name, pk, retryable=True, maybe_applied=writes)
    if isinstance(exc, getattr(errors, "OutOfMemoryError", ())) or str(exc).startswith("OOM"):
        # redis-py strips the OOM code from the message where it has a class for it
        return error(step, "OOM", pk, retryable=True, maybe_applied=False)
    if str(exc).startswith("BUSY "):
        # another script ran past busy-reply-threshold: refused before this one ran
        return error(step, "BUSY", pk, retryable=True, maybe_applied=False)
    if str(exc).startswith("NOREPLICAS"):
        # min-replicas-to-write unmet: refused at a script's first write, so before any
        return error(step, "NOREPLICAS", pk, retryable=True, maybe_applied=False)
    if isinstance(exc, errors.ResponseError) and str(exc).startswith("WRONGTYPE"):
        # The record's key holds no hash: nothing this library wrote. Nothing ran.
        return unreadable(STORED_RECORD_UNREADABLE, "not a hash", key_hash=pk, step=step)
    # A script that failed as it ran (`user_script` in its error) keeps the writes it made
    # before failing: a writing step's may have landed. BUSY (another script running) ran none.
    message = str(exc)
    ran = isinstance(exc, errors.ResponseError) and "script" in message
    ran = ran and not message.startswith("BUSY")
    return error(step, name, pk, retryable=False, maybe_applied=writes and ran)


NOTHING_ANSWERS = (
    "nothing answers there: start a server (`lambda-idempotency local --valkey` prints the URL "
    "to export), or check the store's URL (IDEMPOTENCY_VALKEY_URL) and the network"
)


NO_ANSWER_IN_TIME = (
    "no answer in time: check the store's URL (IDEMPOTENCY_VALKEY_URL; rediss:// and valkeys:// "
    "need a server that speaks TLS), the network, and timeout="
)


def _connect_failure(exc: Exception | str) -> str:
    """redis-py's line for a failed connect (the address and the system's reason, never the
    URL's credentials: it names host and port, or the socket's path) and the fix."""
    said = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    fix = NO_ANSWER_IN_TIME if said.startswith("Timeout") else NOTHING_ANSWERS
    return f"{said.rstrip('.')}; {fix}"


def error(
    step: str,
    reason: str,
    pk: str | None,
    *,
    retryable: bool,
    maybe_applied: bool,
    detail: str | None = None,
) -> StoreError:
    return StoreError(
        f"Valkey {step} failed ({reason})" + (f": {detail}" if detail else ""),
        key_hash=pk,
        code=reason,
        retryable=retryable,
        maybe_applied=maybe_applied,
        step=step,
    )


def decodes(client: Any) -> bool:
    """Whether a given client answers text (it must answer bytes: results are binary)."""
    try:
        return bool(client.get_encoder().decode_responses)
    except AttributeError:
        return False
