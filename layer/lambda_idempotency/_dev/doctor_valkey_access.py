"""doctor's `commands` check for a Valkey server: what `ValkeyStore` sends, tried.

INFO answers whatever an ACL user may run, so a user who may not run scripts passed every
other check while every claim failed. Only trying tells: on a scratch key of doctor's own
under the store's prefix (never a user's record; removed afterwards, and expiring within a
minute if it cannot be), the store's own scripts run as a store after a restart runs them
(SCRIPT LOAD, then EVALSHA): a claim, a waiter armed, the completion that wakes it. Then the
waiter's BLPOP (1 ms, as waiters block) must find that wake-up, and WAIT (or WAITAOF) follows
the writes on their node, as `replicas=` (or `aof=`) sends it.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._stores.valkey import scripts
from .doctor import Check, Status

BLOCK_SECONDS = 0.001
"""A waiter's shortest block (the store's WAKE_MIN_BLOCK_SECONDS): the wake-up is there already."""
SCRATCH_SECONDS = 60
"""The scratch record's expiration: what is left of it if it cannot be removed."""
_COMMAND = re.compile(r"no permissions to run the '([^']+)' command", re.IGNORECASE)
_SCRIPTING = {"eval", "evalsha", "script", "script|load", "evalsha_ro", "eval_ro"}


@dataclass(frozen=True)
class Refusal:
    """One thing the server refused: what, what it costs the store, and what to grant."""

    what: str
    cost: str
    grant: str = ""


def commands(
    connect: Callable[[], Any], *, prefix: str, replicas: int, aof: bool, user: str
) -> Check:
    """The check: `connect()` builds the client the store would build (a cluster client for
    a cluster), whose scratch key's node then answers every step."""
    from redis.exceptions import RedisClusterException, RedisError

    pk = f"lambda-idempotency-doctor-{secrets.token_hex(8)}"
    key = f"{prefix}{{{pk}}}"
    waiters, wake = f"{key}:waiters", f"{key}:wake:doctor"
    refused: list[Refusal] = []
    try:
        client = connect()
    except (RedisError, RedisClusterException) as exc:  # it asks for the slots' nodes
        cost = "the store's client cannot start"
        refusal = _refusal("the cluster client's start", exc, cost, prefix)
        return _failed([refusal], user)
    node = (
        client.get_redis_connection(client.get_node_from_key(key))
        if _is_cluster(client)
        else client
    )
    try:
        tried = _try(node, key, waiters, wake, prefix, replicas, aof, refused)
    finally:
        kept = not _removed(node, key, waiters, wake)
    left = " (left to expire within a minute: DEL refused)" if kept else " (removed)"
    if not refused:
        ran = ", ".join(tried[:-1]) + " and " + tried[-1] if len(tried) > 1 else tried[0]
        return Check("commands", Status.OK, f"{ran} ran on a scratch key under {prefix}{left}")
    return _failed(refused, user)


def _failed(refused: list[Refusal], user: str) -> Check:
    said = "; ".join(f"{r.what}: {r.cost}" for r in refused)
    grants = list(dict.fromkeys(r.grant for r in refused if r.grant))
    fix = (
        f"grant the user what the store sends: ACL SETUSER {user} {' '.join(grants)} (on a "
        "managed service, add it to the user's access string)"
        if grants
        else ""
    )
    return Check("commands", Status.FAIL, f"refused on a scratch key: {said}", fix)


def _try(
    node: Any,
    key: str,
    waiters: str,
    wake: str,
    prefix: str,
    replicas: int,
    aof: bool,
    refused: list[Refusal],
) -> list[str]:
    """Each step the store sends, in its order; what ran, and what was refused (`refused`)."""
    from redis.exceptions import ResponseError

    from .._stores.valkey.replicas import AOF_REPLICA_TIMEOUT_MS, REPLICA_TIMEOUT_MS

    tried: list[str] = []
    scripted = False
    try:
        for source, keys, args in _steps(key, waiters, wake):
            node.evalsha(node.script_load(source), len(keys), *keys, *args)
        scripted = True
        tried.append("the store's scripts (SCRIPT LOAD, EVALSHA)")
    except ResponseError as exc:
        refused.append(_refusal("the store's scripts", exc, "every claim fails", prefix))
    try:
        woke = node.blpop([wake], timeout=BLOCK_SECONDS) is not None
        tried.append("a waiter's BLPOP")
        if scripted and not woke:  # a refusal inside the completion's pcall: not an error
            refused.append(
                Refusal(
                    "the completion's wake-up (SMEMBERS, RPUSH in its script)",
                    "waiters poll instead of waking",
                    "+smembers +rpush",
                )
            )
    except ResponseError as exc:
        cost = "a waiter sleeps out each poll interval instead of waking"
        refused.append(_refusal("BLPOP", exc, cost, prefix, "+blpop"))
    if aof:
        timeout = AOF_REPLICA_TIMEOUT_MS
        try:
            local, acked = node.waitaof(1, replicas, timeout)
            tried.append(f"WAITAOF 1 {replicas}")
            _short(refused, "WAITAOF", int(local) >= 1 and int(acked) >= replicas, acked, replicas)
        except ResponseError as exc:
            refused.append(_refusal("WAITAOF", exc, "every claim fails", prefix, "+waitaof"))
    elif replicas:
        try:
            acked = node.wait(replicas, REPLICA_TIMEOUT_MS)
            tried.append(f"WAIT {replicas}")
            _short(refused, "WAIT", int(acked) >= replicas, acked, replicas)
        except ResponseError as exc:
            refused.append(_refusal("WAIT", exc, "every claim fails", prefix, "+wait"))
    return tried


def _steps(key: str, waiters: str, wake: str) -> list[tuple[str, list[str], list[str]]]:
    """A claim, a waiter armed on it, the completion that wakes it: every command the store's
    scripts call, on the scratch key (source, KEYS, ARGV)."""
    now = time.time_ns() // 1_000_000
    lease, expiration = str(now + SCRATCH_SECONDS * 1000), str(now // 1000 + SCRATCH_SECONDS)
    owner = "doctor"
    return [
        (scripts.CLAIM, [key], [owner, "", str(now), lease, expiration, "0"]),
        (
            scripts.ARM,
            [key, waiters, wake],
            ["IN_PROGRESS", owner, lease, "doctor", str(scripts.WAKE_KEEP_MS)],
        ),
        (scripts.COMPLETE, [key], [owner, "", expiration, "", "", str(now)]),
    ]


def _short(refused: list[Refusal], what: str, enough: bool, acked: Any, replicas: int) -> None:
    if not enough:
        refused.append(
            Refusal(
                f"{what} ({acked} of {replicas} replicas acknowledged in time)",
                "every claim is refused (not acknowledged)",
            )
        )


def _refusal(what: str, exc: Exception, cost: str, prefix: str, grant: str = "") -> Refusal:
    """What the server's error says was refused, and what to grant: a command named in a
    NOPERM answer (a script's own calls included), or the keys under the prefix."""
    message = str(exc)
    named = _COMMAND.search(message)
    if named is not None:
        command = named[1].lower()
        grant = "+@scripting" if command in _SCRIPTING else f"+{command}"
        shown = command.upper().replace("|", " ")
        said = "not permitted" if shown == what else f"{shown} not permitted"
        return Refusal(f"{what} ({said})", cost, grant)
    if "access a key" in message:
        return Refusal(f"{what} (keys under {prefix} not permitted)", cost, f"~{prefix}*")
    from redis.exceptions import NoPermissionError

    first = message.splitlines()[0][:120] if message else type(exc).__name__
    return Refusal(f"{what} ({first})", cost, grant if isinstance(exc, NoPermissionError) else "")


def _removed(node: Any, *keys: str) -> bool:
    from redis.exceptions import RedisError

    try:
        node.delete(*keys)
    except RedisError:
        return False
    return True


def _is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key")
