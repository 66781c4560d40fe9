"""Waiting for replicas (`ValkeyStore(replicas=, aof=)`): each write script is followed, on the
same connection, by `WAIT replicas timeout` (or `WAITAOF`): one pipeline, one round trip, sent
in cluster mode to the node that owns the key's slot.

What a shortfall means depends on the step: a claim (or retake) not acknowledged is released
at once and refused with a `StoreError` (`REPLICAS_NOT_ACKNOWLEDGED`) before the effect
runs; an extension not acknowledged is a `StoreError` too (a lost extension lets a second
caller in while the holder runs). A completion or a release not acknowledged is logged
(`replicas_not_acknowledged`, a warning) and answered as written: the effect has run and the
record on the primary says so; raising would only make the protocol retry until the
invocation must answer and then return the same result, and what a failover can lose then is
a replay (a completion) or a wait until the lease ends (a release), never a second run of an
effect whose claim was acknowledged. WAIT narrows the window; it does not close it: a replica
that acknowledged may still lose the write if it dies too, and an asynchronous failover may
promote a replica that did not.

A WAIT the server refuses (no append-only file for WAITAOF, an ACL user without WAIT) comes
after the script ran: the write landed, unconfirmed. It is treated as a shortfall that no
retry can mend (`WAIT_REFUSED`, not retryable): a claim is released first, never left to
lock the key while the error says nothing was applied.
"""

from __future__ import annotations

from typing import Any

from ..._base.errors import ConfigurationError, StoreError
from .connection import redis_module

REPLICA_TIMEOUT_MS = 1000
"""How long a write waits for its replicas' acknowledgement by default (`replica_timeout_ms`):
a healthy replica answers WAIT within a millisecond or two."""
AOF_REPLICA_TIMEOUT_MS = 2500
"""The default with `aof=True`: WAITAOF 1 1 answered in about a second on a healthy pair,
under `appendfsync everysec` and `always` alike (a replica reports the offset it fsynced in
its once-a-second acknowledgement), so a 1 s limit refused claims that were fine."""
REPLICAS_NOT_ACKNOWLEDGED = "ReplicasNotAcknowledged"
"""The `StoreError.code` of a claim, retake or extension fewer replicas acknowledged than
asked."""
WAIT_REFUSED = "WaitRefused"
"""The `StoreError.code` of a claim, retake or extension whose WAIT (or WAITAOF) the server
refused after the write ran: configuration, so not retryable; a claim is released first."""
WAIT_FAILS = ("claim", "retake", "extend")
"""The writes refused when not acknowledged; the others are logged (the module docstring)."""


class ReplicaWait:
    """What each write waits for, checked once: `replicas`, `timeout_ms`, `aof`."""

    def __init__(self, replicas: object, timeout_ms: object, aof: object, call_timeout_s: float):
        """WAIT's timeout 0 would block for ever, and one as long as the call's own would drop
        the connection first (a store that waits for nothing keeps any `timeout`)."""
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ConfigurationError(
                f"replicas must be a whole number, 0 or more; not {replicas!r}"
            )
        if not isinstance(aof, bool):
            raise ConfigurationError(f"aof must be True or False; not {aof!r}")
        if timeout_ms is None:
            timeout_ms = AOF_REPLICA_TIMEOUT_MS if aof else REPLICA_TIMEOUT_MS
        waits = replicas > 0 or aof
        limit = int(call_timeout_s * 1000) if waits else 2**31
        if (
            isinstance(timeout_ms, bool)
            or not isinstance(timeout_ms, int)
            or not 0 < timeout_ms < limit
        ):
            raise ConfigurationError(
                "replica_timeout_ms must be whole milliseconds, more than 0 and less than the "
                f"call's timeout ({limit} ms); not {timeout_ms!r}"
            )
        self.replicas, self.timeout_ms, self.aof = replicas, timeout_ms, aof
        self.asks = waits

    def send(
        self, client: Any, script: Any, key: str, values: list[Any]
    ) -> tuple[Any, str | None, bool]:
        """The script, then WAIT (or WAITAOF), in one pipeline: both on one connection, as
        WAIT counts the acknowledgements of its own connection's writes. A cluster client's
        pipeline would send the keyless WAIT to any node: the key's node is asked directly.
        EVALSHA, not the script object: a pipeline running one checks SCRIPT EXISTS first,
        a round trip more each time. (answer, what fell short or None, whether the server
        refused the WAIT): a WAIT refused after the script ran is a write not confirmed,
        never an error that says nothing was applied."""
        node_client = client
        if hasattr(client, "get_node_from_key"):
            node_client = client.get_redis_connection(client.get_node_from_key(key))
        errors = redis_module().exceptions
        for attempt in (1, 2):
            pipe = node_client.pipeline(transaction=False)
            pipe.evalsha(script.sha, 1, key, *values)
            if self.aof:
                pipe.waitaof(1, self.replicas, self.timeout_ms)
            else:
                pipe.wait(self.replicas, self.timeout_ms)
            answer, acked = pipe.execute(raise_on_error=False)
            if isinstance(answer, errors.NoScriptError) and attempt == 1:
                script.sha = node_client.script_load(script.script)
                continue
            break
        if isinstance(answer, errors.MovedError | errors.AskError) and node_client is not client:
            client.nodes_manager.initialize()  # the slot moved: learn where, then retry
        if isinstance(answer, Exception):
            raise answer  # the script did not run, or failed as it ran: `failures` says
        if isinstance(acked, Exception):
            verb = "WAITAOF" if self.aof else "WAIT"
            return answer, f"{verb}: {type(acked).__name__}", True
        return answer, self.shortfall(acked), False

    def shortfall(self, acked: Any) -> str | None:
        """What fell short of the acknowledgements asked, or None."""
        if self.aof:
            local, replicas = int(acked[0]), int(acked[1])
            if local >= 1 and replicas >= self.replicas:
                return None
            return (
                f"WAITAOF: local fsync {local}, {replicas} of {self.replicas} replicas "
                f"within {self.timeout_ms} ms"
            )
        if int(acked) >= self.replicas:
            return None
        return f"WAIT: {int(acked)} of {self.replicas} replicas within {self.timeout_ms} ms"


def refusal(step: str, pk: str, short: str, *, refused: bool, undone: bool | None) -> StoreError:
    """The error of a claim, retake or extension not confirmed. `undone`: None for an
    extension (nothing to undo), else whether the claim was released (nothing applied)."""
    what = (
        "the claim was released and nothing ran"
        if undone
        else "nothing ran; the claim may hold the key until its lease ends"
        if undone is not None
        else "the extension may be lost in a failover: stop the work"
    )
    said = "the server refused" if refused else "replicas did not acknowledge the write"
    return StoreError(
        f"Valkey {step}: {said} ({short}); {what}",
        key_hash=pk,
        code=WAIT_REFUSED if refused else REPLICAS_NOT_ACKNOWLEDGED,
        retryable=not refused,
        maybe_applied=not undone,
        step=step,
    )
