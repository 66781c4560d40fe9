"""`current_execution().extend_lease(seconds)` on DynamoDB Local: long work holds its key by a
write fenced on its claim; a zombie whose key was taken over learns it lost it; waiters and
Retry-After follow the extended lease. Effects are counted in every test."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    LeaseLostError,
    StoreError,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores.record import Status
from tests.conftest import FakeClock, FakeContext
from tests.long_work import record_of

pytestmark = pytest.mark.dynamodb_local


def test_a_live_holder_extends_its_lease_and_later_callers_see_it(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    seen: list[InProgressError] = []

    @idempotent(store=store, key="id", payload="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        clock.advance(8)
        until = current_execution().extend_lease(60)
        assert until == clock.now_ms() + 60_000
        clock.advance(30)  # past the first lease (10 s + 2 s of skew), within the new one
        try:
            export({"id": "e-1", "duplicate": True}, None)
        except InProgressError as exc:
            seen.append(exc)
        effects.append("exported")
        return "done"

    assert export({"id": "e-1"}, None) == "done"
    assert effects == ["exported"]
    (refused,) = seen
    assert refused.retry_after == 60 - 30 + 2 + 1  # the first whole second the key is free
    assert record_of(store, export, "e-1").status is Status.COMPLETED


def test_a_waiter_keeps_waiting_while_the_holder_extends(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    effects: list[str] = []
    outcome: list[BaseException] = []

    @idempotent(
        store=store,
        key="id",
        payload="id",
        lease_seconds=10,
        clock=clock,
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=40,
    )
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        current_execution().extend_lease(120)
        try:  # polls for 40 s of the fake clock: the old lease lapsed long before
            export({"id": "e-2", "duplicate": True}, None)
        except InProgressError as exc:
            outcome.append(exc)
        effects.append("exported")
        return "done"

    export({"id": "e-2"}, None)
    assert effects == ["exported"]
    assert isinstance(outcome[0], InProgressError)
    assert 120 - 40 <= outcome[0].retry_after <= 120 + 2


def test_a_zombie_whose_key_was_taken_over_cannot_extend(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """A's lease lapses and B takes the key over: A's extension is refused while B still
    runs (B's lease stands) and after B completed, and A stops before its effect."""
    effects: list[str] = []
    lost: list[LeaseLostError] = []
    zombie: list[Any] = []

    def try_to_extend() -> None:
        try:
            zombie[0].extend_lease(600)
        except LeaseLostError as exc:
            lost.append(exc)

    @idempotent(store=store, key="id", payload="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("takeover"):
            try_to_extend()  # while B holds the key, IN_PROGRESS
            held = record_of(store, export, "e-3")
            assert held.owner == current_execution().owner
            assert held.lease_until == current_execution().lease_until_ms
            effects.append("export by the new holder")
            return "theirs"
        zombie.append(current_execution())
        clock.advance(15)  # our lease lapsed: another caller takes the key over
        other = threading.Thread(target=export, args=({"id": "e-3", "takeover": True}, None))
        other.start()
        other.join()
        try_to_extend()  # after B completed
        if lost:
            return "stopped"
        effects.append("export by the zombie")
        return "ours"

    assert export({"id": "e-3"}, None) == "stopped"
    assert len(lost) == 2 and lost[0].key_hash is not None
    assert effects == ["export by the new holder"]
    record = record_of(store, export, "e-3")
    assert record.status is Status.COMPLETED  # the new holder's result, untouched
    assert export({"id": "e-3"}, None) == "theirs"


def test_a_heartbeat_holds_the_key_through_long_work(store: DynamoDBStore) -> None:
    effects: list[str] = []
    seen: list[InProgressError] = []
    clock = FakeClock()
    real_sleep = threading.Event()

    @idempotent(store=store, key="id", payload="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        execution = current_execution()
        first_lease = execution.lease_until_ms
        with execution.heartbeat(every=0.05, extend_by=30):
            for _ in range(400):  # real time, for a beat to land (each beat is a write)
                if execution.lease_until_ms != first_lease:
                    break
                real_sleep.wait(0.05)
            clock.advance(25)  # past the first lease; the beats moved it to now + 30 s
            lease_until = execution.lease_until_ms
            try:
                export({"id": "e-4", "duplicate": True}, FakeContext())
            except InProgressError as exc:
                seen.append(exc)
        assert lease_until is not None and lease_until > clock.now_ms()
        effects.append("exported")
        return "done"

    assert export({"id": "e-4"}, None) == "done"
    assert effects == ["exported"]
    assert len(seen) == 1


def test_extend_lease_without_a_key_does_nothing(store: DynamoDBStore) -> None:
    @idempotent(store=store, key="id", key_required=False, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> int | None:
        return current_execution().extend_lease(30)

    assert handler({}, None) is None


def our_lines(caplog: Any, outcome: str) -> list[dict[str, Any]]:
    found = [json.loads(record.getMessage()) for record in caplog.records]
    return [line for line in found if line["idempotency"] == outcome]


def test_a_lost_extension_says_what_holds_the_key_now_and_logs_its_step(
    store: DynamoDBStore, clock: FakeClock, caplog: Any
) -> None:
    """The zombie's LeaseLostError names the status of the record that holds the key now
    (another claim's IN_PROGRESS, then its COMPLETED), and its `lease_lost` line the step
    (make mutate's survivors of `_protocol.claiming.extend_lease`)."""
    lost: list[str] = []
    zombie: list[Any] = []

    def try_to_extend() -> None:
        try:
            zombie[0].extend_lease(600)
        except LeaseLostError as exc:
            lost.append(str(exc))

    @idempotent(store=store, key="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("takeover"):
            try_to_extend()  # while the new holder runs
            return "theirs"
        zombie.append(current_execution())
        clock.advance(15)  # our lease lapsed: another caller takes the key over
        other = threading.Thread(target=export, args=({"id": "e-9", "takeover": True}, None))
        other.start()
        other.join()
        try_to_extend()  # after it completed
        return "stopped"

    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")
    assert export({"id": "e-9"}, None) == "stopped"

    assert [text.split("(")[1].split(")")[0] for text in lost] == ["IN_PROGRESS", "COMPLETED"]
    steps = [line.get("step") for line in our_lines(caplog, "lease_lost")]
    assert steps == ["extend_lease", "extend_lease", None]  # then the zombie's completion


def test_an_extension_dynamodb_refuses_is_a_store_error_logged_with_its_step(
    store: DynamoDBStore, caplog: Any
) -> None:
    """A refused extension write: StoreError out of `extend_lease`, one `store_error` line
    naming the step, and the key freed like any exception's (the retry runs)."""
    runs: list[str] = []
    refuse_next_write = threading.Event()

    def refuse(request: Any, **_: Any) -> AWSResponse | None:
        if not refuse_next_write.is_set():
            return None
        refuse_next_write.clear()
        body = json.dumps({"__type": "com.amazon.coral.validate#ValidationException"})
        return AWSResponse(request.url, 400, {}, _Body(body.encode()))

    store.client.meta.events.register("before-send.dynamodb", refuse)

    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        runs.append(event["id"])
        if len(runs) == 1:
            refuse_next_write.set()
            current_execution().extend_lease(600)
        return "done"

    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")
    with pytest.raises(StoreError) as refused:
        export({"id": "e-10"}, None)

    assert refused.value.code == "ValidationException"
    assert [line["step"] for line in our_lines(caplog, "store_error")] == ["extend_lease"]
    assert export({"id": "e-10"}, None) == "done"
    assert runs == ["e-10", "e-10"]


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Any:
        yield self.data


def test_an_extension_after_a_forced_release_goes_on_and_its_result_stands(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """operations.md: a holder still running when an operator forces its release completes
    over the tombstone, and its result stands. Its extension finds its own tombstone: that
    is no lost lease; nothing is written and the lease end comes back unchanged."""
    from tests.integration.test_long_work_breaks import release_cli

    exports: list[str] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        exports.append("exported")
        execution = current_execution()
        before = execution.lease_until_ms
        assert release_cli(store, dynamodb_local_endpoint, execution.key_hash or "", "--force") == 0
        assert execution.extend_lease(60) == before
        assert record_of(store, export, "r-1").status is Status.RELEASED  # nothing written
        return "exported"

    assert export({"id": "r-1"}, None) == "exported"
    assert export({"id": "r-1"}, None) == "exported"  # replayed
    assert exports == ["exported"]
    assert record_of(store, export, "r-1").status is Status.COMPLETED


def test_a_claim_after_a_forced_release_wins_and_the_old_holders_result_is_refused(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """The fence stays: after the release, a new caller claims and completes; the old
    holder's next extension is LeaseLostError, its completion is refused, and the one
    stored result is the new caller's."""
    from tests.integration.test_long_work_breaks import release_cli

    runs: list[str] = []
    lost: list[LeaseLostError] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        runs.append(event["who"])
        if event["who"] == "first":
            pk = current_execution().key_hash or ""
            assert release_cli(store, dynamodb_local_endpoint, pk, "--force") == 0
            second = threading.Thread(target=export, args=({"id": "r-2", "who": "second"}, None))
            second.start()
            second.join()
            try:
                current_execution().extend_lease(60)
            except LeaseLostError as exc:
                lost.append(exc)
        return event["who"]

    export({"id": "r-2", "who": "first"}, None)
    assert len(lost) == 1
    assert export({"id": "r-2", "who": "third"}, None) == "second"
    assert runs == ["first", "second"]


def test_an_async_heartbeat_outlasting_its_lease_after_a_forced_release_completes(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """A coroutine holding its key with a heartbeat, released by an operator: its beats
    write nothing since, and its block outlasts the last lease written; with no lease
    held there is none to lapse, so it completes over its tombstone (once) and the
    retry replays."""
    import asyncio

    from tests.integration.test_long_work_breaks import force_release

    exports: list[str] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=1, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        exports.append("exported")
        with current_execution().heartbeat(every=0.2, extend_by=0.5):
            pk = current_execution().key_hash or ""
            await asyncio.to_thread(force_release, store, dynamodb_local_endpoint, pk, "--force")
            await asyncio.sleep(1.5)  # past every lease written
        return "exported"

    assert asyncio.run(export({"id": "r-3"}, None)) == "exported"
    assert asyncio.run(export({"id": "r-3"}, None)) == "exported"
    assert exports == ["exported"]
