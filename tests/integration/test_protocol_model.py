"""The protocol against a reference model, on DynamoDB Local, with time on a fake clock.

Hypothesis interleaves calls of two functions (two containers each, one with a warm cache)
over three keys and two payloads: calls that complete, raise, are killed mid-handler, or return
a result the store cannot hold; answers lost on the wire; time moving past leases and TTLs; a
duplicate arriving while a call holds its key; and a zombie that stalls past its lease while
another call takes the key over. Before each call the model (`tests/model/reference.py`) says
what it must do; after it, the test compares, and after every step the table must hold what
the model holds. A failure names the promise broken:

- the effect ran twice within the TTL of its completed result (+ the skew allowance);
- a live lease was taken over (before `lease_until` + the allowance);
- a replay differs from the key's first result;
- a different payload ran something, or was not refused with PayloadMismatchError;
- a released key, an expired result or a lapsed lease did not run on the next call.

Examples per run come from the hypothesis profile (`tests/hypothesis_profiles.py`): small in
CI, large with HYPOTHESIS_PROFILE=nightly. A failure prints its steps as found: each example
costs about a second of DynamoDB Local, so shrinking takes minutes, past a per-test timeout.
HYPOTHESIS_SHRINK=1 shrinks (CI's examples are derandomized: the same failure, made minimal).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import boto3
from botocore.config import Config
from hypothesis import Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from lambda_idempotency import (
    DynamoDBStore,
    IdempotencyError,
    InProgressError,
    PayloadMismatchError,
    idempotent,
)
from lambda_idempotency._base import keys as _keys
from tests.conftest import FakeClock, FakeContext, create_table
from tests.model.reference import Completed, End, Expected, Free, Held, Reference
from tests.model.wire import Faults, Killed, Lose, Wire


@dataclass(frozen=True)
class Function:
    ttl_seconds: int
    lease_seconds: int


FUNCTIONS = {
    "orders": Function(ttl_seconds=10, lease_seconds=3),
    "brief": Function(ttl_seconds=2, lease_seconds=5),
    # A TTL shorter than the lease: the claim's record must outlive its lease all the same.
}
KEYS = [("orders", "k0"), ("orders", "k1"), ("brief", "k0")]
PAYLOADS = [1, 2]
CONTAINERS = [0, 1]
"""Two warm containers per function: 0 keeps a result cache, 1 has none."""
START_MS = 1_900_000_000_000


class _Opaque:
    """No JSON for it, typed or not: the key completes with a "not stored" marker."""


UNSTORABLE = _Opaque()

keys = st.sampled_from(KEYS)
payloads = st.sampled_from(PAYLOADS)
containers = st.sampled_from(CONTAINERS)
steps_ms = st.sampled_from([400, 1_300, 2_600, 3_400, 5_700, 8_000, 11_200, 14_500])
"""Small steps, past a lease (3 s, 5 s), past a TTL (2 s, 10 s), each plus the 2 s allowance."""
lease_overruns_ms = st.sampled_from([0, 2_000, 2_700, 4_000])
"""How far past its lease a stalled handler gets: at its end, at the allowance, beyond it."""


class HandlerError(Exception):
    """The handler's own error: the key must be released."""


@dataclass
class Call:
    container: int
    key: tuple[str, str]
    payload: int
    end: End = "return"
    lose: Lose = None
    stall_ms: int = 0
    """Time the handler takes before it calls `nested` (a zombie stalls past its lease)."""
    nested: Call | None = None


@dataclass
class Frame:
    """One call in progress, then its outcome."""

    id: int
    call: Call
    expected: Expected
    start_ms: int
    faults: Faults
    ran: bool = False
    result: Any = None
    value: Any = None
    error: BaseException | None = None
    fenced: bool = False
    nested: list[Frame] = field(default_factory=list)


class ProtocolModel(RuleBasedStateMachine):
    client: ClassVar[Any]
    wire: ClassVar[Wire]

    def __init__(self) -> None:
        super().__init__()
        self.table = create_table(self.client, f"model-{next(_tables)}")
        self.store = DynamoDBStore(self.table, client=self.client)
        self.clock = FakeClock(START_MS)
        self.wire.calls = []  # a failed example may leave calls on it
        self.model = Reference({key: FUNCTIONS[key[0]].ttl_seconds * 1000 for key in KEYS})
        self.handlers = {
            (name, container): self._handler(name, container)
            for name in FUNCTIONS
            for container in CONTAINERS
        }
        self.runs = itertools.count(1)
        self.ids = itertools.count(1)
        self._frames: list[Frame] = []
        """The calls in progress, innermost last (a handler may call a decorated function)."""

    def _handler(self, name: str, container: int) -> Callable[[dict[str, Any], Any], Any]:
        function = FUNCTIONS[name]

        @idempotent(
            key="id",
            store=self.store,
            namespace=name,
            ttl_seconds=function.ttl_seconds,
            lease_seconds=function.lease_seconds,
            cache_size=256 if container == 0 else 0,
            clock=self.clock,
        )
        def handler(event: dict[str, Any], context: Any) -> Any:
            return self._body()

        return handler

    def teardown(self) -> None:
        self.client.delete_table(TableName=self.table)

    # -- one call: predict, run, compare -------------------------------------------------

    def perform(self, call: Call) -> Frame:
        now = self.clock.now_ms()
        frame = Frame(
            next(self.ids),
            call,
            self.model.predict(call.key, call.payload, now),
            now,
            Faults(lose=call.lose),
        )
        self.wire.calls.append(frame.faults)
        self._frames.append(frame)
        lambda_event = {"id": call.key[1], "amount": call.payload}
        try:
            frame.value = self.handlers[call.key[0], call.container](
                lambda_event, FakeContext(60_000, clock=self.clock)
            )
        except (Exception, Killed) as exc:
            frame.error = exc
        finally:
            self.wire.calls.pop()
            self._frames.pop()
        if frame.ran:
            ours = self.model.end(call.key, frame.id, call.end, frame.result, self.clock.now_ms())
            frame.fenced = not ours
        return frame

    def _body(self) -> Any:
        """The handler: counts a run, records the effect, then ends as the call says."""
        frame = self._frames[-1]
        call = frame.call
        frame.ran = True
        lease_ms = FUNCTIONS[call.key[0]].lease_seconds * 1000
        self.model.begin(call.key, frame.id, call.payload, frame.start_ms + lease_ms)
        frame.result = {"key": call.key[1], "amount": call.payload, "run": next(self.runs)}
        if call.stall_ms:
            self.clock.ms += call.stall_ms
        if call.nested is not None:
            frame.nested.append(self.perform(call.nested))
        frame.faults.handler_ended = True
        match call.end:
            case "raise":
                raise HandlerError("the handler failed")
            case "kill":
                frame.faults.dead = True
                raise Killed
            case "unstorable":
                return UNSTORABLE
        return frame.result

    def check(self, frame: Frame) -> None:
        for inner in frame.nested:
            self.check(inner)
        problem = verdict(frame)
        event(f"{frame.expected.reason}: {'ran' if frame.ran else frame.expected.otherwise}")
        if frame.faults.lost:
            event(f"answer lost: {frame.call.lose}")
        assert problem is None, (
            f"{problem}\n  call: {frame.call}\n  expected: {frame.expected}\n"
            f"  got: {frame.value!r} / {frame.error!r} at t+{frame.start_ms - START_MS} ms"
        )

    def call(self, call: Call) -> None:
        self.check(self.perform(call))

    # -- rules ----------------------------------------------------------------------------

    @initialize(offset_ms=st.integers(0, 999))
    def start_within_a_second(self, offset_ms: int) -> None:
        """Expirations are whole seconds: where within one a call lands matters."""
        self.clock.ms += offset_ms

    @rule(key=keys, payload=payloads, container=containers)
    def completes(self, key: tuple[str, str], payload: int, container: int) -> None:
        self.call(Call(container, key, payload))

    @rule(key=keys, payload=payloads, container=containers)
    def raises(self, key: tuple[str, str], payload: int, container: int) -> None:
        self.call(Call(container, key, payload, end="raise"))

    @rule(key=keys, payload=payloads, container=containers)
    def killed_mid_handler(self, key: tuple[str, str], payload: int, container: int) -> None:
        self.call(Call(container, key, payload, end="kill"))

    @rule(key=keys, payload=payloads, container=containers)
    def returns_unstorable(self, key: tuple[str, str], payload: int, container: int) -> None:
        self.call(Call(container, key, payload, end="unstorable"))

    @rule(key=keys, payload=payloads, container=containers)
    def claim_answer_lost(self, key: tuple[str, str], payload: int, container: int) -> None:
        self.call(Call(container, key, payload, lose="claim"))

    @rule(
        key=keys,
        payload=payloads,
        container=containers,
        end=st.sampled_from(["return", "raise", "unstorable"]),
    )
    def completion_answer_lost(
        self, key: tuple[str, str], payload: int, container: int, end: End
    ) -> None:
        """The answer to the completion (or to the release, or the marker) is lost."""
        self.call(Call(container, key, payload, end=end, lose="finish"))

    @rule(step_ms=steps_ms)
    def time_passes(self, step_ms: int) -> None:
        self.clock.ms += step_ms

    @rule(key=keys, moment=st.sampled_from(["last live", "between", "first expired"]))
    def time_nears_expiry(self, key: tuple[str, str], moment: str) -> None:
        """To the last millisecond the key's result must replay, into the window where whole
        seconds make either outcome right, or to the first millisecond it must not."""
        state = self.model.state(key)
        if isinstance(state, Completed):
            last_live, first_expired = self.model.expiry(key, state)
            target = {"last live": last_live, "first expired": first_expired}.get(
                moment, (last_live + first_expired) // 2
            )
            self.clock.ms = max(self.clock.ms, target)

    @rule(key=keys, delta_ms=st.sampled_from([0, 1]))
    def time_nears_lease_end(self, key: tuple[str, str], delta_ms: int) -> None:
        """To the last millisecond a held lease is live (`lease_until` + the allowance), or
        the first one past it."""
        state = self.model.state(key)
        if isinstance(state, Held):
            self.clock.ms = max(self.clock.ms, self.model.lease_end(state) + delta_ms)

    @rule(
        key=keys,
        payload=payloads,
        duplicate_payload=payloads,
        container=containers,
        duplicate_container=containers,
        after_ms=st.sampled_from([0, 1_500, 2_600]),
        end=st.sampled_from(["return", "raise", "kill"]),
    )
    def duplicate_while_held(
        self,
        key: tuple[str, str],
        payload: int,
        duplicate_payload: int,
        container: int,
        duplicate_container: int,
        after_ms: int,
        end: End,
    ) -> None:
        """The same key arrives again `after_ms` into the handler, within its lease (and, for
        the function whose TTL is shorter than its lease, past the TTL): InProgressError (or
        PayloadMismatchError), and nothing runs."""
        duplicate = Call(duplicate_container, key, duplicate_payload)
        self.call(Call(container, key, payload, end=end, stall_ms=after_ms, nested=duplicate))

    @rule(
        key=keys,
        payload=payloads,
        container=containers,
        taker_container=containers,
        overrun_ms=lease_overruns_ms,
        end=st.sampled_from(["return", "raise"]),
        taker_end=st.sampled_from(["return", "raise", "kill"]),
    )
    def zombie(
        self,
        key: tuple[str, str],
        payload: int,
        container: int,
        taker_container: int,
        overrun_ms: int,
        end: End,
        taker_end: End,
    ) -> None:
        """The handler stalls past its lease; another call arrives (and takes the key over
        once the lease lapsed by more than the allowance); then the stalled one ends. Its
        completion or release must leave the taker's record alone, completed or still held
        (a taker killed mid-handler)."""
        stall_ms = FUNCTIONS[key[0]].lease_seconds * 1000 + overrun_ms
        taker = Call(taker_container, key, payload, end=taker_end)
        self.call(Call(container, key, payload, end=end, stall_ms=stall_ms, nested=taker))

    # -- after every step: the table holds what the model holds ----------------------------

    @invariant()
    def table_matches_model(self) -> None:
        items = self.client.scan(TableName=self.table, ConsistentRead=True)["Items"]
        stored = {item["pk"]["S"]: item for item in items}
        for key in KEYS:
            item = stored.get(_keys.key_hash(key[0], None, key[1]))
            status = None if item is None else item["status"]["S"]
            match self.model.state(key):
                case Held(_, _, lease_until):
                    assert status == "IN_PROGRESS", f"{key}: the claim is gone ({status})"
                    assert item is not None and int(item["lease_until"]["N"]) == lease_until
                case Completed():
                    assert status == "COMPLETED", f"{key}: the completed result is gone ({status})"
                case Free():
                    assert status not in ("IN_PROGRESS", "COMPLETED"), f"{key}: still {status}"


def verdict(frame: Frame) -> str | None:
    """None when the call did what the model expected, else the broken promise."""
    expected, call, error = frame.expected, frame.call, frame.error
    if frame.ran:
        if expected.run == "never":
            if expected.reason == "live lease":
                return "a live lease was taken over"
            return "the effect ran twice within the TTL of its completed result"
        match call.end:
            case "return" if frame.fenced:  # a zombie: its result, or word that it lost
                ok = frame.value == frame.result or isinstance(error, IdempotencyError)
            case "return":
                ok = error is None and frame.value == frame.result
            case "raise":
                ok = isinstance(error, HandlerError)
            case "kill":
                ok = isinstance(error, Killed)
            case "unstorable":
                ok = frame.value == UNSTORABLE or isinstance(error, IdempotencyError)
            case _:
                ok = False
        return None if ok else f"a call that ran ended wrongly ({call.end})"
    if expected.run == "must":
        return {
            "free": "a free key did not run",
            "released": "a released key did not run on the next call",
            "expired": "an expired result still replays",
            "lapsed": "a lapsed lease was not taken over",
        }.get(expected.reason, "the handler did not run")
    match expected.otherwise:
        case "replay":
            if error is not None or frame.value != expected.replay:
                return "a replay differs from the key's first result"
        case "mismatch":
            if not isinstance(error, PayloadMismatchError):
                return "a different payload was not refused with PayloadMismatchError"
        case "in_progress":
            if not isinstance(error, InProgressError):
                return "a duplicate of a call in progress did not get InProgressError"
        case "unstorable":
            if not isinstance(error, IdempotencyError) or isinstance(
                error, PayloadMismatchError | InProgressError
            ):
                return "a retry of a result the store could not hold got no typed error"
    return None


_tables = itertools.count()


def test_protocol_keeps_its_promises_under_interleaved_faults(
    dynamodb_local_endpoint: str,
) -> None:
    # botocore's legacy retries back off in milliseconds for DynamoDB (standard mode: up to a
    # second), and every lost answer costs one retry.
    ProtocolModel.client = boto3.client(
        "dynamodb",
        endpoint_url=dynamodb_local_endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"mode": "legacy", "max_attempts": 3}),
    )
    ProtocolModel.wire = Wire(ProtocolModel.client)
    phases = settings().phases
    if os.environ.get("HYPOTHESIS_SHRINK") != "1":
        phases = tuple(phase for phase in phases if phase is not Phase.shrink)
    try:
        run_state_machine_as_test(ProtocolModel, settings=settings(phases=phases))
    finally:
        ProtocolModel.wire.close()
