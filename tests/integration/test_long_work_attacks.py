"""Attacks on long work (durable executions, extended leases, completion windows, async
results) that held: each is a regression test, run on DynamoDB Local, counting how many
times the protected body (its effect) ran."""

from __future__ import annotations

import contextlib
import decimal
import fractions
import json
import threading
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    InProgressError,
    LeaseLostError,
    current_execution,
    idempotent,
)
from lambda_idempotency._record import Status
from tests.conftest import FakeClock

pytestmark = pytest.mark.dynamodb_local

HEARTBEAT = "lambda-idempotency-heartbeat"


def record_of(store: DynamoDBStore, handler: Any, key: str) -> Any:
    settings = handler.idempotency.settings
    return store.get(settings.layout.record_key(settings.namespace, None, key))


def one_attempt(store: DynamoDBStore) -> DynamoDBStore:
    """The same table through a client that sends each request once (no botocore retry)."""
    client = boto3.client(
        "dynamodb",
        endpoint_url=store.client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    return DynamoDBStore(store.table_name, client=client)


class Refusal:
    def __init__(self, code: str, status: int = 400) -> None:
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}"})
        self.body, self.status = body.encode(), status

    def stream(self, **_: Any) -> Any:
        yield self.body


def refused(request: Any, code: str, status: int = 400) -> AWSResponse:
    error = Refusal(code, status)
    return AWSResponse(request.url, error.status, {}, error)


def target(request: Any) -> str:
    return str(request.headers.get("X-Amz-Target", b"").decode().rsplit(".", 1)[-1])


# -- leases you extend ---------------------------------------------------------------------


def test_a_beat_racing_an_explicit_extension_never_shortens_the_lease(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """A heartbeat (extend_by=30) beats while the handler calls extend_lease(600) once for
    the long tail of its work; the beat read the lease before the extension and would land
    after it. The stored lease stays the 600 s extend_lease returned, so a second caller
    60 s later is refused and the export runs once (the beat's 30 s lease stood, and the
    second caller ran, before extensions were taken one at a time)."""
    effects: list[str] = []
    beat_sent, extended = threading.Event(), threading.Event()
    leases: list[tuple[int | None, int | None]] = []

    def hook(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT and not beat_sent.is_set():
            beat_sent.set()
            extended.wait(1)  # the extension lands first, unless it has to wait for the beat

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate exported")
            return "theirs"
        execution = current_execution()
        with execution.heartbeat(every=0.05, extend_by=30):
            assert beat_sent.wait(10)
            promised = execution.extend_lease(600)
            extended.set()
            threading.Event().wait(0.3)  # the raced beat, and a few more, land
        store.client.meta.events.unregister("before-send.dynamodb", hook)
        clock.advance(60)  # well inside the 600 s extend_lease promised
        with contextlib.suppress(InProgressError):
            export({"id": "r-1", "duplicate": True}, None)
        leases.append((record_of(store, export, "r-1").lease_until, promised))
        effects.append("exported")
        return "ours"

    store.client.meta.events.register("before-send.dynamodb", hook)
    assert export({"id": "r-1"}, None) == "ours"
    assert effects == ["exported"]
    [(stored, promised)] = leases
    assert stored == promised


HOSTILE = [
    10**400,
    -(10**400),
    2**1024,
    decimal.Decimal("60"),
    fractions.Fraction(1, 2),
    complex(60, 0),
    None,
    b"60",
    [60],
    -0.0,
    float("-inf"),
]


@pytest.mark.parametrize("seconds", HOSTILE, ids=lambda value: repr(value)[:12])
def test_extend_lease_refuses_hostile_numbers_with_a_typed_error_and_frees_the_key(
    store: DynamoDBStore, seconds: Any
) -> None:
    """An int too large for a float raised OverflowError (no typed error) before the bound
    was checked first; every other non-duration is a ConfigurationError too."""
    runs: list[str] = []

    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        runs.append("ran")
        current_execution().extend_lease(seconds)
        return "done"

    with pytest.raises(ConfigurationError, match="extend_lease: seconds"):
        export({"id": "x-1"}, None)
    assert record_of(store, export, "x-1").status is Status.RELEASED
    assert runs == ["ran"]


@pytest.mark.parametrize(
    ("every", "extend_by"),
    [(10**400, 30), (0.1, 10**400), (0.1, -(10**400))],
    ids=["every", "extend_by", "negative extend_by"],
)
def test_a_heartbeat_refuses_ints_too_large_for_a_float(
    store: DynamoDBStore, every: Any, extend_by: Any
) -> None:
    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        with current_execution().heartbeat(every=every, extend_by=extend_by):
            return "done"

    with pytest.raises(ConfigurationError, match="heartbeat"):
        export({"id": "h-1"}, None)
    assert record_of(store, export, "h-1").status is Status.RELEASED


def test_a_float_subclass_duration_is_honoured(store: DynamoDBStore, clock: FakeClock) -> None:
    """A numpy-like float (a float subclass) is a duration like any float."""

    class Seconds(float):
        pass

    @idempotent(store=store, key="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> int | None:
        return current_execution().extend_lease(Seconds(120.5))

    until = export({"id": "f-1"}, None)
    assert until == clock.now_ms() + 120_500


def test_a_handler_that_catches_lease_lost_and_returns_stores_nothing(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """The lease lapsed, a second caller took the key over and completed; the first one's
    extend_lease raises LeaseLostError, the handler swallows it and returns: its result
    is never stored over the new holder's, and retries replay the new holder's."""
    effects: list[str] = []
    lost: list[LeaseLostError] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=5, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("second"):
            effects.append("second exported")
            return "second"
        effects.append("first exported")
        clock.advance(10)
        assert export({"id": "l-1", "second": True}, None) == "second"
        try:
            current_execution().extend_lease(60)
        except LeaseLostError as exc:
            lost.append(exc)
        return "first"

    assert export({"id": "l-1"}, None) == "first"
    assert len(lost) == 1
    assert export({"id": "l-1"}, None) == "second"
    assert effects == ["first exported", "second exported"]


def test_nested_heartbeats_hold_the_key_and_the_shorter_never_shortens_the_longer(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """An outer heartbeat (extend_by=600) around an inner one (extend_by=5): while both beat,
    and after the inner ends, a caller 100 s on (fake time) is refused; the body runs once."""
    effects: list[str] = []
    refusals: list[InProgressError] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate exported")
            return "theirs"
        execution = current_execution()
        with execution.heartbeat(every=0.05, extend_by=600):
            with execution.heartbeat(every=0.05, extend_by=5):
                threading.Event().wait(0.3)
                clock.advance(100)
                try:
                    export({"id": "n-1", "duplicate": True}, None)
                except InProgressError as exc:
                    refusals.append(exc)
            threading.Event().wait(0.2)
            clock.advance(100)
            try:
                export({"id": "n-1", "duplicate": True}, None)
            except InProgressError as exc:
                refusals.append(exc)
        effects.append("exported")
        return "ours"

    assert export({"id": "n-1"}, None) == "ours"
    assert effects == ["exported"]
    assert len(refusals) == 2 and all(exc.retry_after > 300 for exc in refusals)
    assert export({"id": "n-1", "duplicate": True}, None) == "ours"


def test_throttled_beats_inside_the_lease_end_normally_and_complete_once(
    store: DynamoDBStore,
) -> None:
    """Half the beats throttled (real time, a 3 s lease, beats every 0.1 s for 1 s): the
    lease never lapses, so the block ends normally and the result is stored once."""
    store = one_attempt(store)
    effects: list[str] = []
    beats = {"sent": 0}

    def hook(request: Any, **_: Any) -> Any:
        if threading.current_thread().name == HEARTBEAT:
            beats["sent"] += 1
            if beats["sent"] % 2:
                return refused(request, "ThrottlingException")
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", payload=None, lease_seconds=3, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        with current_execution().heartbeat(every=0.1, extend_by=3):
            threading.Event().wait(1.0)
        return "done"

    assert export({"id": "t-1"}, None) == "done"
    assert export({"id": "t-1"}, None) == "done"
    assert effects == ["exported"] and beats["sent"] >= 4
    assert record_of(store, export, "t-1").status is Status.COMPLETED
