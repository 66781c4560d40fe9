"""`lambda-idempotency doctor --valkey-url URL`: a Valkey (or Redis) server checked for what
`ValkeyStore` needs, the way `doctor` checks a DynamoDB table (`doctor.Check` lines).

Most comes from INFO (server, replication, persistence, memory, cluster), which managed
services answer too, and CONFIG GET appendfsync, which some refuse (then `??`); what the
store sends (scripts, BLPOP, WAIT) is tried on a scratch key (`doctor_valkey_access`), since
INFO answers whatever an ACL user may run. The last check
is always a warning, whatever the server says: replication is asynchronous, and a failover
can lose a claim the primary acknowledged (measured in docs/contributing/valkey.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import doctor_valkey_access
from .doctor import Check, Status

WAITAOF_SINCE = (7, 2)
"""WAITAOF came with Redis 7.2 (Valkey 7.2 and later have it)."""
SAFE_POLICIES = ("noeviction",)
"""A store's records carry an expiry, so every other policy (volatile-* included) may evict
a live claim or a completed result under memory pressure: the key then runs again."""


def diagnose(
    client: Any,
    *,
    cluster: bool,
    replicas: int,
    aof: bool = False,
    prefix: str = "idempotency:",
    connect: Callable[[], Any] | None = None,
    user: str = "default",
) -> list[Check]:
    """Every check of the server `client` (a redis-py client of one node) for a store built
    with `cluster`, `replicas`, `aof` and `prefix` as the functions build it; `connect()`
    builds the client such a store builds (`client` itself when not given), on which the
    store's commands are tried (`doctor_valkey_access`) as `user`."""
    server = client.info("server")
    replication = client.info("replication")
    clustered = client.info("cluster")
    checks = [
        version(server),
        role(replication, replicas),
        cluster_mode(clustered, cluster, client),
    ]
    if replication.get("role") != "master":
        checks.append(Check("commands", Status.UNKNOWN, "not tried: a replica refuses writes"))
    elif (str(clustered.get("cluster_enabled", 0)) == "1") != cluster:
        checks.append(Check("commands", Status.UNKNOWN, "not tried: cluster mode does not match"))
    else:
        checks.append(
            doctor_valkey_access.commands(
                connect or (lambda: client), prefix=prefix, replicas=replicas, aof=aof, user=user
            )
        )
    return [
        *checks,
        persistence(client.info("persistence"), _appendfsync(client)),
        eviction(client.info("memory")),
        asynchronous_replication(replicas),
    ]


def version(server: Mapping[str, Any]) -> Check:
    name = server.get("server_name") or ("valkey" if "valkey_version" in server else "redis")
    text = str(server.get("valkey_version") or server.get("redis_version") or "unknown")
    found = tuple(int(part) for part in text.split(".")[:2] if part.isdigit())
    if found and found < WAITAOF_SINCE:
        return Check(
            "server",
            Status.WARN,
            f"{name} {text}: no WAITAOF before 7.2 (ValkeyStore(aof=True) is refused)",
            "upgrade to Valkey 7.2 or later",
        )
    return Check("server", Status.OK, f"{name} {text}")


def role(replication: Mapping[str, Any], replicas: int) -> Check:
    """A replica refuses writes (READONLY); too few replicas make `replicas=N` refuse claims."""
    if replication.get("role") != "master":
        primary = f"{replication.get('master_host')}:{replication.get('master_port')}"
        return Check(
            "role and replicas",
            Status.FAIL,
            f"a replica (of {primary}): every claim is refused (READONLY)",
            "point the store at the primary (or the cluster's configuration endpoint)",
        )
    connected = int(replication.get("connected_slaves", 0))
    detail = f"primary, {connected} replica{'s' * (connected != 1)} connected"
    if connected < replicas:
        return Check(
            "role and replicas",
            Status.FAIL,
            f"{detail}: with replicas={replicas} every claim is refused (not acknowledged)",
            f"add replicas, or build the store with replicas={connected}",
        )
    if connected == 0:
        return Check(
            "role and replicas",
            Status.WARN,
            f"{detail}: a node lost loses every record, and a retry runs its effect again",
            "add a replica (and failover), or use MemoryDB or the DynamoDB store",
        )
    return Check("role and replicas", Status.OK, detail)


def cluster_mode(info: Mapping[str, Any], cluster: bool, client: Any) -> Check:
    """The store's client must match the server: a standalone client meets MOVED on every
    key of another node's slots; a cluster client cannot start on a standalone server."""
    enabled = str(info.get("cluster_enabled", 0)) == "1"
    if enabled and not cluster:
        return Check(
            "cluster mode",
            Status.FAIL,
            "on, but the store is standalone: keys of other nodes' slots are refused (MOVED)",
            "build the store with cluster=True (here: --cluster)",
        )
    if cluster and not enabled:
        return Check(
            "cluster mode",
            Status.FAIL,
            "off, but the store is built with cluster=True: its client cannot start",
            "drop cluster=True (here: --cluster)",
        )
    if not enabled:
        return Check("cluster mode", Status.OK, "off (standalone), as the store is built")
    state = _fields(client.execute_command("CLUSTER", "INFO")).get("cluster_state", "?")
    nodes = client.execute_command("CLUSTER", "NODES") or b""
    text = nodes.decode(errors="replace") if isinstance(nodes, bytes) else str(nodes)
    rows = [line.split() for line in text.splitlines() if len(line.split()) > 3]
    primaries = sum("master" in row[2].split(",") for row in rows)
    replicated = {row[3] for row in rows if {"slave", "replica"} & set(row[2].split(","))}
    detail = f"on, state {state}, {primaries} primaries, {len(replicated)} with a replica"
    if state != "ok":
        return Check("cluster mode", Status.FAIL, detail, "every slot must be served")
    return Check("cluster mode", Status.OK, detail)


def persistence(info: Mapping[str, Any], appendfsync: str | None) -> Check:
    """What a restart of this node keeps: with no AOF, only the last RDB snapshot (or
    nothing), so claims and results written since are lost and their keys run again."""
    if str(info.get("aof_enabled", 0)) != "1":
        return Check(
            "persistence",
            Status.WARN,
            "appendonly no: a restart loses every record written since the last snapshot",
            "CONFIG SET appendonly yes (and appendfsync everysec or always)",
        )
    if appendfsync is None:
        return Check("persistence", Status.UNKNOWN, "appendonly yes; appendfsync not readable")
    if appendfsync == "no":
        return Check(
            "persistence",
            Status.WARN,
            "appendonly yes, appendfsync no: the OS decides when writes reach the disk",
            "CONFIG SET appendfsync everysec (or always)",
        )
    lost = "none" if appendfsync == "always" else "up to a second"
    return Check(
        "persistence",
        Status.OK,
        f"appendonly yes, appendfsync {appendfsync}: a crash of this node loses {lost}",
    )


def eviction(info: Mapping[str, Any]) -> Check:
    policy = str(info.get("maxmemory_policy", "unknown"))
    limit = int(info.get("maxmemory", 0) or 0)
    if policy in SAFE_POLICIES or limit == 0:
        detail = f"maxmemory-policy {policy}" + ("" if limit else ", no maxmemory")
        return Check("eviction", Status.OK, detail)
    return Check(
        "eviction",
        Status.FAIL,
        f"maxmemory-policy {policy}: under memory pressure a live claim or a stored result "
        "may be evicted, and its key runs again",
        "CONFIG SET maxmemory-policy noeviction (writes then fail loudly when full)",
    )


def asynchronous_replication(replicas: int) -> Check:
    """Always a warning: no setting of a Valkey server makes a failover lose nothing."""
    waits = (
        f"the store waits for {replicas} replica{'s' * (replicas != 1)} (WAIT) and refuses a "
        "claim they did not acknowledge, which narrows the window but does not close it "
        "(a failover may promote a replica that did not acknowledge)"
        if replicas
        else "the store does not wait for replicas"
    )
    return Check(
        "replication",
        Status.WARN,
        "asynchronous: a failover can lose a claim the primary acknowledged, and a second "
        f"caller then runs the effect again; {waits}",
        ("" if replicas else "ValkeyStore(replicas=1), or ")
        + "where a lost claim is unacceptable, MemoryDB (a durable multi-AZ log) or the "
        "DynamoDB store",
    )


def _appendfsync(client: Any) -> str | None:
    from redis.exceptions import ResponseError

    try:
        answer = client.config_get("appendfsync")
    except ResponseError:  # managed services refuse CONFIG (NOPERM, unknown command)
        return None
    value = answer.get("appendfsync") or answer.get(b"appendfsync")
    return None if value is None else str(value, "utf-8") if isinstance(value, bytes) else value


def _fields(text: Any) -> dict[str, str]:
    if isinstance(text, bytes):
        text = text.decode()
    if isinstance(text, dict):
        return {str(k): str(v) for k, v in text.items()}
    return dict(line.split(":", 1) for line in str(text).splitlines() if ":" in line)
