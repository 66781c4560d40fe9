"""What every call of an idempotent function must do, from the promises alone, with no I/O.

The model knows one thing per key: nobody holds it (`Free`), a claim holds it (`Held`), or a
result was stored (`Completed`). From that and the time it predicts a call's outcome
(`Expected`); the test compares the real call with the prediction.

Three constants say where the promises and today's core may differ; flip them, not the model:
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

SKEW_MS = 2000
"""The clock-skew allowance: a lease counts as lapsed, and a record as expired, only this long
after its time (`lease_until < now - allowance`, `expiration < now - allowance`). 0 for a core
without the allowance."""
ROUNDING_MS = 1000
"""`expiration` is stored in whole seconds, so after a result's TTL and allowance (but never
within its TTL) the model accepts both a replay and a new run for up to this long on either
side, and follows what happened."""
UNSTORABLE_COMPLETES = True
"""A result the store cannot hold completes the key with a "not storable" marker: retries get a
typed error and nothing runs again. False for a core that releases the key instead."""

End = Literal["return", "raise", "kill", "unstorable"]
"""How a handler ends: returns a result, raises, is killed (nothing after it reaches DynamoDB),
or returns something the store cannot hold."""
Otherwise = Literal["replay", "mismatch", "in_progress", "unstorable"]
Reason = Literal[
    "free", "released", "expired", "lapsed", "live result", "near expiry", "live lease"
]


@dataclass(frozen=True)
class Free:
    reason: Literal["free", "released"] = "free"


@dataclass(frozen=True)
class Held:
    owner: int
    payload: int
    lease_until_ms: int


@dataclass(frozen=True)
class Completed:
    result: Any
    payload: int
    completed_ms: int
    unstorable: bool = False


KeyState = Free | Held | Completed


class Expected(NamedTuple):
    """`run`: must the handler run, may it (near an expiry), or must it not. When it does not
    run, the call must end as `otherwise` says (replaying `replay`)."""

    run: Literal["must", "may", "never"]
    reason: Reason
    otherwise: Otherwise | None = None
    replay: Any = None


@dataclass
class Reference:
    """The keys of one table; `ttl_ms` per key, because functions with different settings
    share the table."""

    ttl_ms: dict[Any, int]
    keys: dict[Any, KeyState] = field(default_factory=dict)

    def state(self, key: Any) -> KeyState:
        return self.keys.get(key, Free())

    def predict(self, key: Any, payload: int, now_ms: int) -> Expected:
        state = self.state(key)
        match state:
            case Free(reason):
                return Expected("must", reason)
            case Held(_, held_payload, _):
                if now_ms > self.lease_end(state):
                    return Expected("must", "lapsed")
                mismatch = payload != held_payload
                return Expected("never", "live lease", "mismatch" if mismatch else "in_progress")
            case Completed(result, done_payload, _, unstorable):
                last_live, first_expired = self.expiry(key, state)
                if now_ms >= first_expired:
                    return Expected("must", "expired")
                otherwise: Otherwise = "unstorable" if unstorable else "replay"
                if payload != done_payload:
                    otherwise = "mismatch"
                if now_ms > last_live:
                    return Expected("may", "near expiry", otherwise, result)
                return Expected("never", "live result", otherwise, result)
        raise AssertionError(state)

    def lease_end(self, state: Held) -> int:
        """The last millisecond a held lease must not be taken over."""
        return state.lease_until_ms + SKEW_MS

    def expiry(self, key: Any, state: Completed) -> tuple[int, int]:
        """The last millisecond a completed result must still replay (its full TTL, and the
        allowance less the rounding of whole seconds), and the first one it must not."""
        expires = state.completed_ms + self.ttl_ms[key]
        return expires + max(0, SKEW_MS - ROUNDING_MS), expires + SKEW_MS + ROUNDING_MS

    def begin(self, key: Any, owner: int, payload: int, lease_until_ms: int) -> None:
        """The handler started: its claim holds the key."""
        self.keys[key] = Held(owner, payload, lease_until_ms)

    def end(self, key: Any, owner: int, how: End, result: Any, now_ms: int) -> bool:
        """The handler ended. False when the claim was no longer ours (taken over): the fence
        keeps the new owner's record whatever we do."""
        state = self.state(key)
        if not (isinstance(state, Held) and state.owner == owner):
            return False
        if how == "return":
            self.keys[key] = Completed(result, state.payload, now_ms)
        elif how == "unstorable" and UNSTORABLE_COMPLETES:
            self.keys[key] = Completed(None, state.payload, now_ms, unstorable=True)
        elif how != "kill":  # raised, or not storable by a core that releases: runs again
            self.keys[key] = Free("released")
        return True
