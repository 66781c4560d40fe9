"""Every front end on a real Valkey server: durable executions, coroutines, HTTP and batches,
their promises as on DynamoDB, effects counted.

Where a DynamoDB test's assertions hold for any store, it runs here as it is, given a
`ValkeyStore` (a prefix of its own on the session's node, or on the 3-primary cluster where
the front end touches many keys). What reads DynamoDB's clock-free items, holds a botocore
request or moves a FakeClock past a lease is written again for Valkey: a lease lapses on the
server's clock there, so a test waits short real durations (tests/conformance/conftest.py,
SERVER_CLOCK)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from lambda_idempotency import (
    ConfigurationError,
    ValkeyStore,
    current_execution,
    idempotent,
    idempotent_function,
    idempotent_http,
    idempotent_record,
)
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyServer
from lambda_idempotency._protocol.durable import owner_token
from lambda_idempotency._stores.record import Status
from tests.batch_events import batch, failed, sqs_record
from tests.conftest import FakeContext
from tests.http_events import SHAPES, header_field
from tests.integration import test_async as on_async
from tests.integration import test_batch as on_batch
from tests.integration import test_durable as on_durable
from tests.integration import test_http as on_http

pytestmark = pytest.mark.valkey

Handler = Callable[[Any, Any], Any]
Runners = Callable[[Handler], DurableFunctionTestRunner]


def fresh(server: ValkeyServer | ValkeyCluster, *, cluster: bool = False) -> ValkeyStore:
    return ValkeyStore(server.url, cluster=cluster, prefix=f"fe-{uuid.uuid4().hex[:8]}:")


@pytest.fixture
def store(valkey_node: ValkeyServer) -> Iterator[ValkeyStore]:
    """A ValkeyStore on the session's node, empty: a prefix of the test's own."""
    built = fresh(valkey_node)
    yield built
    built.close()


@pytest.fixture(params=["node", "cluster"])
def spread_store(request: pytest.FixtureRequest) -> Iterator[ValkeyStore]:
    """The same on the node, then on the 3-primary cluster (a batch's keys on every node)."""
    server = request.getfixturevalue("valkey_node" if request.param == "node" else "valkey_cluster")
    built = fresh(server, cluster=request.param == "cluster")
    yield built
    built.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- durable executions -----------------------------------------------------------------------


def test_durable_an_execution_suspended_after_its_charge_keeps_the_key(
    store: ValkeyStore, runner_for: Runners
) -> None:
    on_durable.test_an_execution_suspended_after_its_charge_keeps_the_key(store, runner_for)


def test_durable_two_executions_started_while_the_first_is_suspended_charge_once(
    store: ValkeyStore, runner_for: Runners
) -> None:
    on_durable.test_two_executions_started_while_the_first_is_suspended_charge_once(
        store,
        runner_for,
    )


def test_durable_the_record_is_held_by_the_execution_for_its_whole_timeout(
    store: ValkeyStore, runner_for: Runners
) -> None:
    on_durable.test_the_record_is_held_by_the_execution_for_its_whole_timeout(store, runner_for)


def test_durable_an_invocation_that_dies_is_invoked_again_as_the_owner(
    store: ValkeyStore, runner_for: Runners
) -> None:
    """The resume: the re-invocation finds its own claim and completes, one charge."""
    on_durable.test_an_invocation_that_dies_is_invoked_again_as_the_owner(store, runner_for)


def test_durable_a_failed_execution_releases_the_key_for_a_new_one(
    store: ValkeyStore, runner_for: Runners
) -> None:
    on_durable.test_a_failed_execution_releases_the_key_for_a_new_one(store, runner_for)


def test_durable_another_payload_for_a_key_held_by_an_execution_is_a_mismatch(
    store: ValkeyStore, runner_for: Runners
) -> None:
    on_durable.test_another_payload_for_a_key_held_by_an_execution_is_a_mismatch(
        store,
        runner_for,
    )


@pytest.mark.parametrize(("status", "code", "message"), on_durable.NOT_RETRYABLE)
def test_durable_a_checkpoint_aws_refuses_fails_the_execution_and_frees_its_key(
    store: ValkeyStore, runner_for: Runners, status: int, code: str, message: str
) -> None:
    on_durable.test_a_checkpoint_aws_refuses_fails_the_execution_and_frees_its_key(
        store,
        runner_for,
        status,
        code,
        message,
    )


@pytest.mark.parametrize(("status", "code", "message"), on_durable.RETRYABLE)
def test_durable_a_checkpoint_throttled_keeps_the_key_and_the_retried_execution_charges_once(
    store: ValkeyStore, runner_for: Runners, status: int, code: str, message: str
) -> None:
    on_durable.test_a_checkpoint_throttled_keeps_the_key_and_the_retried_execution_charges_once(
        store,
        runner_for,
        status,
        code,
        message,
    )


@pytest.mark.parametrize("flag", ["--force", "--force-durable"])
@pytest.mark.parametrize("order", on_durable.ORDERS, ids="-".join)
def test_durable_a_forced_release_of_a_durable_holder_in_every_order(
    store: ValkeyStore,
    valkey_node: ValkeyServer,
    runner_for: Runners,
    order: tuple[str, ...],
    flag: str,
) -> None:
    """The operator's `release --valkey-url` (the store's `release_version` of the record it
    read) in every order of suspend, release, resume and a new execution."""
    where = ["--valkey-url", valkey_node.url, "--prefix", store.prefix]

    def release(pk: str) -> int:
        return cli.main(["release", *where, "--pk", pk, "--yes", flag])

    on_durable.forced_release_in_order(store, runner_for, release, order, flag)


def test_durable_a_retake_is_fenced_on_the_tombstone_it_saw(store: ValkeyStore) -> None:
    on_durable.test_a_retake_is_fenced_on_the_tombstone_it_saw(store)


LEASE_S = 1.0
"""A durable lease short enough to lapse, for real, on the server's clock within a test."""


@pytest.mark.parametrize("ending", ["returns", "fails"])
def test_durable_a_zombie_invocation_of_an_older_execution_cannot_complete_or_release(
    store: ValkeyStore, runner_for: Runners, ending: str
) -> None:
    """A's lease (`lease_seconds`, 1 s here) lapses on the server's clock while it waits;
    execution B takes the key over with a claim at the server's time; A's next invocation,
    past its claim, returns or fails: neither its completion nor its release touches B's."""
    ledger = on_durable.Ledger()
    taken_over: list[str] = []

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0, lease_seconds=LEASE_S)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        context.create_callback(name="shipping").result()
        pk = current_execution().key_hash or ""
        time.sleep(LEASE_S + 0.3)  # past A's lease, counted from its start, on any clock
        now = now_ms()
        won, _ = store.claim(
            pk,
            owner=owner_token("arn:b"),
            payload_hash=None,
            now_ms=now,
            lease_until_ms=now + 60_000,
            expiration_s=now // 1000 + 3600,
        )
        taken_over.append(pk if won else "")
        if ending == "fails":
            raise RuntimeError("A fails after losing its key")
        return charge_id

    runner = runner_for(handler)
    arn = on_durable.start(runner, "a", {"order_id": "o-9"})
    done = on_durable.ship(runner, arn)
    assert done.status is (
        InvocationStatus.SUCCEEDED if ending == "returns" else InvocationStatus.FAILED
    )
    (pk,) = taken_over
    assert pk, "B could not take over the lapsed key"
    record = store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS
    assert record.owner == owner_token("arn:b")  # B's claim stands
    assert ledger.charges == ["o-9"]
    stats = handler.__wrapped__.idempotency.stats  # type: ignore[attr-defined]
    assert stats["released"] == 0
    assert stats["lease_lost" if ending == "returns" else "not_released"] == 1


# -- coroutines -------------------------------------------------------------------------------


def test_async_32_tasks_on_one_key_one_run_the_rest_refused_in_progress(
    store: ValkeyStore,
) -> None:
    on_async.test_32_tasks_on_one_key_one_run_the_rest_refused_in_progress(store)


def test_async_32_tasks_waiting_all_get_the_one_result_and_never_sleep_on_the_loop(
    store: ValkeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_async.test_32_tasks_waiting_all_get_the_one_result_and_never_sleep_on_the_loop(
        store,
        monkeypatch,
    )


def test_async_a_task_cancelled_mid_run_releases_its_key_and_the_next_call_runs(
    store: ValkeyStore,
) -> None:
    on_async.test_a_task_cancelled_mid_run_releases_its_key_and_the_next_call_runs(store)


def test_async_a_timeout_around_the_call_releases_the_key_and_raises_timeout(
    store: ValkeyStore,
) -> None:
    on_async.test_a_timeout_around_the_call_releases_the_key_and_raises_timeout(store)


def test_async_a_coroutine_that_raises_releases_its_key_and_the_retry_runs(
    store: ValkeyStore,
) -> None:
    on_async.test_a_coroutine_that_raises_releases_its_key_and_the_retry_runs(store)


def test_async_typed_errors_as_on_the_sync_path(store: ValkeyStore) -> None:
    on_async.test_typed_errors_as_on_the_sync_path(store)


class Held:
    """The store's `name` call (claim, write_completion) held in its worker thread before it
    reaches the server: `entered` once held, on again at `go` or after `seconds`."""

    def __init__(self, store: ValkeyStore, name: str, seconds: float = 30.0) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        self.threads: list[int] = []
        real = getattr(store, name)

        def held(*args: Any, **kwargs: Any) -> Any:
            self.threads.append(threading.get_ident())
            self.entered.set()
            self.go.wait(seconds)
            return real(*args, **kwargs)

        setattr(store, name, held)


async def entered(held: Held) -> None:
    while not held.entered.is_set():
        await asyncio.sleep(0.005)


def test_async_a_cancel_while_the_claim_is_in_flight_releases_the_claim_it_won(
    store: ValkeyStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = Held(store, "claim", seconds=on_async.HELD_SECONDS)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        await entered(held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert runs == []
    record = store.get(pk)
    assert record is not None and record.status is Status.RELEASED  # claimed, then released
    stats = charge.idempotency.stats  # type: ignore[attr-defined]
    assert (stats["claimed"], stats["released"]) == (1, 1)
    assert held.threads and held.threads[0] != threading.main_thread().ident

    assert asyncio.run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


def test_async_a_cancel_while_the_result_is_stored_completes_first_then_cancels(
    store: ValkeyStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = Held(store, "write_completion")

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        await entered(held)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()  # a second cancel while the completion is still held
        await asyncio.sleep(0.05)
        assert not task.done()  # the completion is not abandoned
        held.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = store.get(pk)
    assert record is not None and record.status is Status.COMPLETED
    assert asyncio.run(charge("o-1")) == "charged"  # replayed
    assert runs == ["o-1"]


# -- HTTP -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_http_first_request_runs_and_the_retry_replays_status_headers_and_body(
    store: ValkeyStore, shape: str
) -> None:
    on_http.test_first_request_runs_and_the_retry_replays_status_headers_and_body(store, shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_http_request_in_flight_is_409_with_retry_after_from_the_lease(
    store: ValkeyStore, shape: str
) -> None:
    """The holder's lease is 30 s on the server's clock: a duplicate meanwhile is a 409
    whose Retry-After is the first second past it and the 2 s skew allowance (33 s, or 32
    if a second of real time passed in between); the body ran once."""
    duplicates: list[dict[str, Any]] = []
    runs: list[int] = []

    @idempotent_http(store=store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        if len(runs) == 1:  # a retry arrives while the first request still holds the key
            duplicates.append(handler(on_http.post(shape), FakeContext(30_000)))
        return {"statusCode": 201, "body": "{}"}

    assert handler(on_http.post(shape), FakeContext(30_000))["statusCode"] == 201

    (duplicate,) = duplicates
    problem = on_http.assert_problem(duplicate, shape, 409, "request-in-progress")
    assert problem["title"] == "Request in progress"
    retry_after = header_field(duplicate)["retry-after"]
    seconds = retry_after[0] if shape == "alb-multi-value" else retry_after
    assert seconds in ("32", "33")
    assert runs == [1]
    replay = handler(on_http.post(shape), FakeContext(30_000))
    assert replay["statusCode"] == 201 and runs == [1]


@pytest.mark.parametrize("shape", SHAPES)
def test_http_same_key_with_another_body_is_422(store: ValkeyStore, shape: str) -> None:
    on_http.test_same_key_with_another_body_is_422(store, shape)


def test_http_same_key_on_another_path_is_422(store: ValkeyStore) -> None:
    on_http.test_same_key_on_another_path_is_422(store)


@pytest.mark.parametrize("authorizers", on_http.TENANTS.values(), ids=on_http.TENANTS.keys())
def test_http_another_tenant_with_the_same_key_gets_its_own_run_never_the_first_body(
    store: ValkeyStore, authorizers: tuple[str, dict[str, Any], dict[str, Any]]
) -> None:
    on_http.test_another_tenant_with_the_same_key_gets_its_own_run_never_the_first_body(
        store,
        authorizers,
    )


def test_http_scope_override_replaces_the_principal(store: ValkeyStore) -> None:
    on_http.test_scope_override_replaces_the_principal(store)


def test_http_a_500_is_not_stored_and_the_retry_runs_again(store: ValkeyStore) -> None:
    on_http.test_a_500_is_not_stored_and_the_retry_runs_again(store)


@pytest.mark.parametrize("status", [201, 400, 404, 409])
def test_http_2xx_and_4xx_answers_are_stored_and_replayed(store: ValkeyStore, status: int) -> None:
    on_http.test_2xx_and_4xx_answers_are_stored_and_replayed(store, status)


def test_http_a_handler_exception_releases_the_key_and_propagates(store: ValkeyStore) -> None:
    on_http.test_a_handler_exception_releases_the_key_and_propagates(store)


# -- batches, on a node and across a cluster's nodes ------------------------------------------


def test_batch_each_record_runs_once_and_a_redelivery_replays(spread_store: ValkeyStore) -> None:
    on_batch.test_each_record_runs_once_and_a_redelivery_replays(spread_store)


def test_batch_a_failing_record_is_reported_the_others_complete_and_its_retry_runs(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_a_failing_record_is_reported_the_others_complete_and_its_retry_runs(spread_store)


def test_batch_a_record_in_flight_elsewhere_is_reported_not_dropped(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_a_record_in_flight_elsewhere_is_reported_not_dropped(spread_store)


def test_batch_a_key_over_the_body_runs_one_order_once_across_messages(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_a_key_over_the_body_runs_one_order_once_across_messages(spread_store)


def test_batch_a_reused_key_with_another_payload_is_reported_and_does_not_run(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_a_reused_key_with_another_payload_is_reported_and_does_not_run(spread_store)


def test_batch_fifo_after_a_failure_the_rest_of_the_batch_is_reported_and_does_not_run(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_fifo_after_a_failure_the_rest_of_the_batch_is_reported_and_does_not_run(
        spread_store
    )


def test_batch_kinesis_records_are_keyed_by_event_id_and_stop_at_the_first_failure(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_kinesis_records_are_keyed_by_event_id_and_stop_at_the_first_failure(spread_store)


def test_batch_a_stream_record_in_flight_elsewhere_holds_back_the_rest_of_the_shard(
    spread_store: ValkeyStore,
) -> None:
    on_batch.test_a_stream_record_in_flight_elsewhere_holds_back_the_rest_of_the_shard(spread_store)


def test_batch_records_of_one_batch_land_on_every_node_of_the_cluster_each_once(
    valkey_cluster: ValkeyCluster,
) -> None:
    """24 records, redelivered whole after a partial failure: their keys spread over the
    three primaries (each record on the slot of its own key), each ran once, but the
    failed one, which ran again on its redelivery."""
    store = fresh(valkey_cluster, cluster=True)
    try:
        ship, runs = on_batch.orders(store)
        bodies = [{"order_id": f"o{n}", "bad": n == 5} for n in range(24)]
        event = batch(*(sqs_record(f"m{n}", body) for n, body in enumerate(bodies)))
        assert failed(process(event, ship)) == ["m5"]
        bodies[5]["bad"] = False
        again = batch(*(sqs_record(f"m{n}", b, receive_count=2) for n, b in enumerate(bodies)))
        assert failed(process(again, ship)) == []
        assert sorted(runs) == sorted([f"o{n}" for n in range(24)] + ["o5"])

        holding = 0
        for node in valkey_cluster.nodes:
            with redis.Redis.from_url(node.url) as client:
                holding += any(True for _ in client.scan_iter(match=f"{store.prefix}*"))
        assert holding == 3
    finally:
        store.close()


def process(event: dict[str, Any], ship: Any) -> dict[str, Any]:
    from lambda_idempotency import process_batch

    return process_batch(event, FakeContext(), ship)  # type: ignore[no-any-return]


# -- enlisted DynamoDB writes, refused on Valkey by every front end ---------------------------

WRITE = {"Put": {"TableName": "charges", "Item": {"id": {"S": "1"}}}}


def test_async_a_write_enlisted_in_a_task_the_coroutine_awaits_is_refused_and_frees_the_key(
    store: ValkeyStore,
) -> None:
    runs: list[str] = []
    fail = [True]

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        async def child() -> None:
            await asyncio.sleep(0)
            if fail[0]:
                current_execution().add_write(WRITE)  # a task copies the context
            runs.append(order_id)  # the effect, after the write was enlisted

        await asyncio.create_task(child())
        return "charged"

    with pytest.raises(ConfigurationError, match="cannot join a DynamoDB transaction"):
        asyncio.run(charge("o-1"))
    assert runs == []
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = store.get(pk)
    assert record is not None and record.status is Status.RELEASED
    fail[0] = False  # the code fixed: the retry runs, once
    assert asyncio.run(charge("o-1")) == asyncio.run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


def test_batch_a_record_enlisting_a_write_is_refused_the_others_complete(
    spread_store: ValkeyStore,
) -> None:
    runs: list[str] = []

    @idempotent_record(store=spread_store)
    def ship(record: Any) -> str:
        if record.message_id == "m2":
            current_execution().add_write(WRITE)
        runs.append(record.message_id)
        return "shipped"

    event = batch(*(sqs_record(f"m{n}", {"order_id": f"o{n}"}) for n in range(1, 4)))
    assert failed(process(event, ship)) == ["m2"]  # reported: Lambda redelivers it
    assert failed(process(event, ship)) == ["m2"]  # m1 and m3 replayed, m2 refused again
    assert runs == ["m1", "m3"]  # m2's effect never ran
    namespace = ship.idempotency.settings.namespace
    record = spread_store.get(spread_store.layout.record_key(namespace, None, "m2"))
    assert record is not None and record.status is Status.RELEASED


def test_async_waiters_on_a_holder_that_fails_one_runs_the_rest_get_its_result(
    store: ValkeyStore,
) -> None:
    """Eight tasks wait on a holder that raises: its release frees the key, one waiter runs
    the body again, the other seven get that run's result; two runs in all."""
    runs: list[int] = []

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", cache_size=0)
    async def charge(order_id: str, context: Any) -> str:
        runs.append(len(runs))
        await asyncio.sleep(0.3)
        if len(runs) == 1:
            raise ValueError("declined")
        return f"ch_{len(runs)}"

    async def scenario() -> list[Any]:
        context = FakeContext(remaining_ms=30_000)
        first = asyncio.create_task(charge("o-1", context))
        while not runs:
            await asyncio.sleep(0.005)
        waiters = [charge("o-1", context) for _ in range(7)]
        return await asyncio.gather(first, *waiters, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[0], ValueError)
    assert outcomes[1:] == ["ch_2"] * 7
    assert runs == [0, 1]
