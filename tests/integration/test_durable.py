"""`@idempotent` on Lambda durable functions, run by AWS's own local runner
(DurableFunctionTestRunner) against DynamoDB Local. Every test counts the effects.

The charge step is the effect: it runs once per execution (the SDK replays it from its
checkpoint), so two charges for one key mean two executions ran the handler's body."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.exceptions import InvocationError
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python.lambda_service import (
    CheckpointOutput,
    LambdaClient,
    OperationUpdate,
    StateOutput,
)
from aws_durable_execution_sdk_python_testing.runner import (
    DurableFunctionTestResult,
    DurableFunctionTestRunner,
)
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from lambda_idempotency import (
    DynamoDBStore,
    current_execution,
    durable_step_key,
    idempotent,
    idempotent_function,
)
from lambda_idempotency._protocol.durable import owner_token
from lambda_idempotency._stores.contract import IdempotencyStore
from lambda_idempotency._stores.record import Status

pytestmark = pytest.mark.dynamodb_local

Handler = Callable[[Any, Any], Any]


class Ledger:
    """What happened, counted: charges made, and invocations of the handler's body."""

    def __init__(self) -> None:
        self.charges: list[str] = []
        self.invocations = 0
        self.crash_after_charge = 0
        """Invocations still to die after the charge step (Lambda invokes again)."""
        self.on_crash: Callable[[], None] = lambda: None
        self.on_first_charge: Callable[[], object] = lambda: None
        """Run in the first invocation, after its charge step (a test holds it there)."""

    def charge(self, order_id: str) -> str:
        self.charges.append(order_id)
        return f"ch_{order_id}_{len(self.charges)}"


def checkout(store: DynamoDBStore, ledger: Ledger, **options: Any) -> Handler:
    """The sample's shape: charge, wait for shipping (a callback: the execution suspends
    until it arrives), return the receipt."""

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0, **options)
    def handler(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
        ledger.invocations += 1
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        if ledger.invocations == 1:
            ledger.on_first_charge()
        if ledger.crash_after_charge > 0:
            ledger.crash_after_charge -= 1
            ledger.on_crash()
            raise InvocationError("the invocation died after its charge step")
        shipping = context.create_callback(name="shipping").result()
        return {"order_id": event["order_id"], "charge_id": charge_id, "shipping": shipping}

    return handler


def start(runner: DurableFunctionTestRunner, name: str, event: dict[str, Any]) -> str:
    return runner.run_async(input=json.dumps(event), execution_name=name, execution_timeout=60)


def ship(runner: DurableFunctionTestRunner, arn: str) -> DurableFunctionTestResult:
    """Send the shipping callback the execution is suspended on, and wait for its end."""
    callback_id = runner.wait_for_callback(arn, name="shipping", timeout=20)
    runner.send_callback_success(callback_id, result=b"shipped")
    return runner.wait_for_result(arn, timeout=20)


def finish(runner: DurableFunctionTestRunner, arn: str) -> DurableFunctionTestResult:
    return runner.wait_for_result(arn, timeout=20)


def error_type(result: DurableFunctionTestResult) -> str | None:
    """The class name of the error that failed the execution."""
    return None if result.error is None else (result.error.type or "").rsplit(".", 1)[-1]


def test_an_execution_suspended_after_its_charge_keeps_the_key(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """A suspends between its claim and its completion (waiting for shipping); B, another
    execution with the same key, is refused while A waits; A then completes; C replays."""
    ledger = Ledger()
    runner = runner_for(checkout(store, ledger))
    order = {"order_id": "o-1", "amount": 30}

    first = start(runner, "a", order)
    runner.wait_for_callback(first, name="shipping", timeout=20)  # A is suspended now
    second = finish(runner, start(runner, "b", order))
    assert second.status is InvocationStatus.FAILED
    assert error_type(second) == "InProgressError"
    assert ledger.charges == ["o-1"]

    done = ship(runner, first)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    receipt = json.loads(done.result or "null")
    assert receipt == {"order_id": "o-1", "charge_id": "ch_o-1_1", "shipping": "shipped"}

    third = finish(runner, start(runner, "c", order))
    assert third.status is InvocationStatus.SUCCEEDED
    assert json.loads(third.result or "null") == receipt  # replayed, not run
    assert ledger.charges == ["o-1"]
    assert ledger.invocations == 2  # A before and after its suspension; B and C never ran


def test_two_executions_started_while_the_first_is_suspended_charge_once(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    ledger = Ledger()
    runner = runner_for(checkout(store, ledger))
    order = {"order_id": "o-2", "amount": 30}
    first = start(runner, "a", order)
    runner.wait_for_callback(first, name="shipping", timeout=20)
    others = [start(runner, name, order) for name in ("b", "c")]
    results = [finish(runner, arn) for arn in others]
    assert [error_type(result) for result in results] == ["InProgressError"] * 2
    assert ship(runner, first).status is InvocationStatus.SUCCEEDED
    assert ledger.charges == ["o-2"]


def test_the_record_is_held_by_the_execution_for_its_whole_timeout(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """The lease runs from the execution's start for `lease_seconds` (its timeout), not for
    the invocation's 15 minutes; the owner is the execution, never its raw ARN."""
    ledger = Ledger()
    handler = checkout(store, ledger, lease_seconds=7 * 24 * 3600)
    runner = runner_for(handler)
    arn = start(runner, "a", {"order_id": "o-3"})
    runner.wait_for_callback(arn, name="shipping", timeout=20)
    engine = handler.__wrapped__.idempotency  # type: ignore[attr-defined]
    pk = engine.settings.layout.record_key(engine.settings.namespace, None, "o-3")
    record = store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS
    assert record.owner == owner_token(arn) and arn not in str(record)
    assert record.lease_until is not None and record.claimed_at is not None
    assert record.lease_until - record.claimed_at > 7 * 24 * 3600 * 1000 - 60_000
    assert record.expiration * 1000 >= record.lease_until
    ship(runner, arn)
    assert ledger.charges == ["o-3"]


def test_an_invocation_that_dies_is_invoked_again_as_the_owner(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """The invocation dies after the charge step (Lambda runs the execution again): the key
    stays the execution's, so B, started as it dies, is refused; the next invocation is the
    same execution, finds its own claim, and goes on without a second charge."""
    ledger = Ledger()
    ledger.crash_after_charge = 2
    runner = runner_for(checkout(store, ledger))
    others: list[str] = []
    ledger.on_crash = lambda: others.append(start(runner, f"b{len(others)}", {"order_id": "o-4"}))
    arn = start(runner, "a", {"order_id": "o-4"})
    done = ship(runner, arn)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert [error_type(finish(runner, other)) for other in others] == ["InProgressError"] * 2
    assert ledger.charges == ["o-4"]
    assert ledger.invocations == 4  # two died, one suspended, one finished
    assert json.loads(done.result or "null")["charge_id"] == "ch_o-4_1"


def test_a_failed_execution_releases_the_key_for_a_new_one(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """A charges, suspends (B is refused meanwhile), then fails: its key is released, C runs
    the charge again (A's execution ended, its charge is the user's to refund), D replays."""
    ledger = Ledger()

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        if context.create_callback(name="shipping").result() == "lost":
            raise RuntimeError("the parcel was lost")
        return charge_id

    runner = runner_for(handler)
    first = start(runner, "a", {"order_id": "o-5"})
    callback_id = runner.wait_for_callback(first, name="shipping", timeout=20)
    refused = finish(runner, start(runner, "b", {"order_id": "o-5"}))
    assert error_type(refused) == "InProgressError"
    runner.send_callback_success(callback_id, result=b"lost")
    failed = finish(runner, first)
    assert failed.status is InvocationStatus.FAILED
    assert error_type(failed) == "RuntimeError"
    assert ledger.charges == ["o-5"]

    again = start(runner, "c", {"order_id": "o-5"})
    done = ship(runner, again)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert json.loads(done.result or "null") == "ch_o-5_2"
    replayed = finish(runner, start(runner, "d", {"order_id": "o-5"}))
    assert json.loads(replayed.result or "null") == "ch_o-5_2"
    assert ledger.charges == ["o-5", "o-5"]


def test_another_payload_for_a_key_held_by_an_execution_is_a_mismatch(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    ledger = Ledger()
    runner = runner_for(checkout(store, ledger))
    first = start(runner, "a", {"order_id": "o-6", "amount": 30})
    runner.wait_for_callback(first, name="shipping", timeout=20)
    other = finish(runner, start(runner, "b", {"order_id": "o-6", "amount": 99}))
    assert error_type(other) == "PayloadMismatchError"
    ship(runner, first)
    after = finish(runner, start(runner, "c", {"order_id": "o-6", "amount": 99}))
    assert error_type(after) == "PayloadMismatchError"
    assert ledger.charges == ["o-6"]


def test_an_effect_keyed_on_its_step_happens_once_when_the_step_runs_again(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """The step's invocation dies after the effect but before the step's checkpoint: the step
    runs again (at-least-once), and the effect keyed on execution + step replays."""
    ledger = Ledger()
    dies_before_checkpoint = [True]

    @idempotent_function(store=store, key="step", cache_size=0)
    def send_invoice(step: str, order_id: str) -> str:
        return ledger.charge(order_id)

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        def invoice(_: Any) -> str:
            key = durable_step_key(context, "invoice")
            sent = send_invoice(step=key, order_id=event["order_id"])
            if dies_before_checkpoint[0]:
                dies_before_checkpoint[0] = False
                raise InvocationError("the invocation died before the step's checkpoint")
            return sent

        return context.step(invoice, name="invoice")

    runner = runner_for(handler)
    done = finish(runner, start(runner, "a", {"order_id": "o-7"}))
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert json.loads(done.result or "null") == "ch_o-7_1"
    assert ledger.charges == ["o-7"]
    other = finish(runner, start(runner, "b", {"order_id": "o-7"}))
    assert json.loads(other.result or "null") == "ch_o-7_2"  # another execution: its own
    assert ledger.charges == ["o-7", "o-7"]


def test_outside_durable_execution_the_decorator_refuses_to_run(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    ledger = Ledger()

    @idempotent(store=store, key="order_id", cache_size=0)
    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        return ledger.charge(event["order_id"])

    runner = runner_for(handler)
    refused = finish(runner, start(runner, "a", {"order_id": "o-8"}))
    assert refused.status is InvocationStatus.FAILED  # each invocation refused, then given up
    assert error_type(refused) == "ConfigurationError"
    assert ledger.charges == []


@pytest.mark.parametrize("ending", ["returns", "fails"])
def test_a_zombie_invocation_of_an_older_execution_cannot_complete_or_release(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    ending: str,
) -> None:
    """A's lease (its `lease_seconds`) lapsed while it waited, and execution B took the key
    over; A's next invocation, already past its claim, then returns or fails: neither its
    completion nor its release touches B's claim."""
    ledger = Ledger()
    taken_over: list[str] = []

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        context.create_callback(name="shipping").result()
        pk = current_execution().key_hash or ""
        # B claims as the protocol lets it once A's lease lapsed (a claim with a later clock)
        won, _ = store.claim(
            pk,
            owner=owner_token("arn:b"),
            payload_hash=None,
            now_ms=2**42,
            lease_until_ms=2**42 + 60_000,
            expiration_s=2**42 // 1000 + 3600,
        )
        taken_over.append(pk if won else "")
        if ending == "fails":
            raise RuntimeError("A fails after losing its key")
        return charge_id

    runner = runner_for(handler)
    arn = start(runner, "a", {"order_id": "o-9"})
    done = ship(runner, arn)
    assert done.status is (
        InvocationStatus.SUCCEEDED if ending == "returns" else InvocationStatus.FAILED
    )
    (pk,) = taken_over
    record = store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS
    assert record.owner == owner_token("arn:b")  # B's claim stands
    assert ledger.charges == ["o-9"]
    stats = handler.__wrapped__.idempotency.stats  # type: ignore[attr-defined]
    assert stats["released"] == 0  # neither A's suspension nor its failure freed the key
    assert stats["lease_lost" if ending == "returns" else "not_released"] == 1


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class RefusedCheckpoints:
    """The runner's in-memory Durable service, except that the checkpoints of the operation
    named `operation` (the first `times` of them) go to AWS and are refused: the SDK's own
    `LambdaClient` sends them on a boto3 Lambda client whose HTTP answer botocore's
    `before-send` gives (`status`, `code`, `message`), so the SDK builds and classifies the
    error (`CheckpointError`, retryable or not) exactly as it does in Lambda."""

    def __init__(
        self,
        runner: DurableFunctionTestRunner,
        operation: str,
        status: int,
        code: str,
        message: str,
        times: int = 1,
    ) -> None:
        self.inner = runner._invoker.service_client
        runner._invoker.service_client = self  # type: ignore[assignment]
        self.operation, self.left, self.refused = operation, times, 0
        self.on_refusal: Callable[[], None] = lambda: None
        body = json.dumps({"Type": "User", "message": message}).encode()
        headers = {"x-amzn-ErrorType": code, "Content-Type": "application/json"}
        client = boto3.client(
            "lambda",
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
        )
        client.meta.events.register(
            "before-send.lambda.CheckpointDurableExecution",
            lambda request, **_: AWSResponse(request.url, status, headers, _Body(body)),
        )
        self.aws = LambdaClient(client)

    def checkpoint(
        self,
        durable_execution_arn: str,
        checkpoint_token: str,
        updates: list[OperationUpdate],
        client_token: str | None,
    ) -> CheckpointOutput:
        call = (durable_execution_arn, checkpoint_token, updates, client_token)
        if self.left > 0 and any(update.name == self.operation for update in updates):
            self.left -= 1
            self.refused += 1
            self.on_refusal()
            return self.aws.checkpoint(*call)  # raises the SDK's CheckpointError
        return self.inner.checkpoint(*call)  # type: ignore[no-any-return]

    def get_execution_state(
        self,
        durable_execution_arn: str,
        checkpoint_token: str,
        next_marker: str,
        max_items: int = 1000,
    ) -> StateOutput:
        return self.inner.get_execution_state(  # type: ignore[no-any-return]
            durable_execution_arn, checkpoint_token, next_marker, max_items
        )


def record_key(runner: DurableFunctionTestRunner, key: str) -> str:
    engine = runner._invoker.handler.__wrapped__.idempotency
    return engine.settings.layout.record_key(engine.settings.namespace, None, key)  # type: ignore[no-any-return]


NOT_RETRYABLE = [
    pytest.param(400, "InvalidParameterValueException", "Operation payload too large", id="400"),
    pytest.param(403, "AccessDeniedException", "not authorized to checkpoint", id="403"),
    pytest.param(502, "KMSAccessDeniedException", "the key denied access", id="502-kms"),
]
RETRYABLE = [
    pytest.param(429, "TooManyRequestsException", "Rate exceeded", id="429"),
    pytest.param(
        400, "InvalidParameterValueException", "Invalid checkpoint token: stale", id="400-token"
    ),
    pytest.param(500, "ServiceException", "internal error", id="500"),
]


@pytest.mark.parametrize(("status", "code", "message"), NOT_RETRYABLE)
def test_a_checkpoint_aws_refuses_fails_the_execution_and_frees_its_key(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    status: int,
    code: str,
    message: str,
) -> None:
    """A charges, then AWS refuses the checkpoint of its callback for good (the SDK's rule:
    a 4xx but throttling or a stale token, or a KMS error): the SDK ends A FAILED with no
    exception of the handler's own. Its key is released, fenced, so C, the next execution
    with the key, runs (A's charge is the user's to refund, as after any failure) rather
    than meet InProgressError for the execution lease (366 days by default); D replays C."""
    ledger = Ledger()
    runner = runner_for(checkout(store, ledger))
    service = RefusedCheckpoints(runner, "shipping", status, code, message)
    order = {"order_id": "o-10", "amount": 30}
    failed_arn = start(runner, "a", order)
    failed = finish(runner, failed_arn)
    assert failed.status is InvocationStatus.FAILED
    assert error_type(failed) == "CheckpointError"
    assert service.refused == 1 and ledger.charges == ["o-10"]
    record = store.get(record_key(runner, "o-10"))
    assert record is not None and record.status is Status.RELEASED  # fenced: A's own token
    assert record.owner == owner_token(failed_arn)

    again = start(runner, "c", order)
    done = ship(runner, again)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert json.loads(done.result or "null")["charge_id"] == "ch_o-10_2"
    replayed = finish(runner, start(runner, "d", order))
    assert replayed.result == done.result
    assert ledger.charges == ["o-10", "o-10"]


@pytest.mark.parametrize(("status", "code", "message"), RETRYABLE)
def test_a_checkpoint_throttled_keeps_the_key_and_the_retried_execution_charges_once(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    status: int,
    code: str,
    message: str,
) -> None:
    """AWS throttles A's checkpoint twice (or answers a stale token, or a 5xx): the SDK
    raises for Lambda to invoke A again, so the key stays A's. B, started at each refusal,
    is refused; A's next invocation replays its charge from its checkpoint, suspends,
    completes with one charge; C replays A's receipt."""
    ledger = Ledger()
    runner = runner_for(checkout(store, ledger))
    service = RefusedCheckpoints(runner, "shipping", status, code, message, times=2)
    order = {"order_id": "o-11", "amount": 30}
    others: list[str] = []
    service.on_refusal = lambda: others.append(start(runner, f"b{len(others)}", order))
    arn = start(runner, "a", order)
    done = ship(runner, arn)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert service.refused == 2
    assert [error_type(finish(runner, other)) for other in others] == ["InProgressError"] * 2
    assert json.loads(done.result or "null")["charge_id"] == "ch_o-11_1"
    replayed = finish(runner, start(runner, "c", order))
    assert replayed.result == done.result
    assert ledger.charges == ["o-11"]
    assert ledger.invocations == 4  # two refused, one suspended, one finished


def test_a_retake_is_fenced_on_the_tombstone_it_saw(store: DynamoDBStore) -> None:
    """A durable execution's claim over its own tombstone lands only on that very tombstone:
    not over another execution's claim, nor over a later release of its own (a delayed copy
    of the retake cannot lock a key its execution released again), nor another owner's."""
    pk, mine, other = "retake#k", owner_token("arn:a"), owner_token("arn:b")
    times = {"payload_hash": None, "lease_until_ms": 2**42, "expiration_s": 2**42 // 1000}

    def claim(owner: str, now: int) -> bool:
        return store.claim(pk, owner=owner, now_ms=now, **times)[0]  # type: ignore[arg-type]

    def retake(owner: str, released_at: int, now: int) -> bool:
        return store.retake(pk, owner=owner, released_at_ms=released_at, now_ms=now, **times)[0]  # type: ignore[arg-type]

    assert claim(mine, 1_000) and store.release(pk, owner=mine, now_ms=2_000)
    assert not retake(other, 2_000, 3_000)  # not another owner's tombstone
    assert not retake(mine, 1_999, 3_000)  # not a tombstone other than the one seen
    assert retake(mine, 2_000, 3_000)
    assert not retake(mine, 2_000, 3_500)  # the key is held again: nothing to retake
    assert store.release(pk, owner=mine, now_ms=4_000)
    assert not retake(mine, 2_000, 5_000)  # a delayed copy of the first retake
    assert claim(other, 6_000)
    assert not retake(mine, 4_000, 7_000)  # another execution claimed since
    record = store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS and record.owner == other


EVENTS = ("suspend", "release", "resume", "new execution")
ORDERS = [
    order
    for order in itertools.permutations(EVENTS)
    if order.index("resume") > max(order.index("suspend"), order.index("release"))
]
"""Resumed after its suspension, and after the release: released once it has completed, the
record is no holder's, and `release` makes its key run again (what it is for)."""


def settle(runner: DurableFunctionTestRunner, arn: str) -> str:
    """Wait until the execution has ended (its error's type, or SUCCEEDED) or is suspended
    on its shipping callback. (Its state is read, not waited for: a wait that times out
    leaves the runner unable to report the end of the execution later.)"""
    for _ in range(50):
        execution = runner._store.load(arn)
        if execution.is_complete:
            return error_type(DurableFunctionTestResult.create(execution)) or "SUCCEEDED"
        try:
            runner.wait_for_callback(arn, name="shipping", timeout=0.2)  # type: ignore[arg-type]
            return "suspended"
        except TimeoutError:
            pass
    raise AssertionError("the execution neither ended nor suspended")


def release_cli(store: DynamoDBStore, endpoint: str, pk: str, flag: str) -> int:
    from lambda_idempotency._dev import cli

    where = ("--table", store.table_name, "--endpoint", endpoint, "--pk", pk)
    return cli.main(["release", *where, "--yes", flag])


@pytest.mark.parametrize("flag", ["--force", "--force-durable"])
@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_a_forced_release_of_a_durable_holder_in_every_order(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    dynamodb_local_endpoint: str,
    order: tuple[str, ...],
    flag: str,
) -> None:
    forced_release_in_order(
        store,
        runner_for,
        lambda pk: release_cli(store, dynamodb_local_endpoint, pk, flag),
        order,
        flag,
    )


def forced_release_in_order(
    store: IdempotencyStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    release_pk: Callable[[str], int],
    order: tuple[str, ...],
    flag: str,
) -> None:
    """A claims and charges; then suspend, an operator's release, resume and a new execution
    B with the key happen in every order. `--force` refuses a durable holder (its lease is
    the execution's whole timeout): one charge in every order. `--force-durable` releases
    it: A, resuming, takes its key back and completes over the tombstone, its result
    standing; only a B that starts after the release and before A resumes runs the charge
    again (and A then fails), as its --help says.

    A release before the suspension runs inside A's first invocation, after its charge. The
    local runner does not run another execution reliably while one's invocation runs, so a B
    "before the suspension" starts just after it, before what followed it in the order: the
    suspension writes nothing to the record, so each claim meets what it would have met."""
    ledger = Ledger()
    runner = runner_for(checkout(store, ledger))
    key = f"o-12{flag}-{'-'.join(order)}"  # the table lives for the session: a key per case
    pk = record_key(runner, key)
    released: list[int] = []
    outcomes: dict[str, str] = {}
    b = ""

    def release() -> None:
        released.append(release_pk(pk))

    suspended_at = order.index("suspend")
    live = list(itertools.takewhile(lambda event: event == "release", order[:suspended_at]))
    ledger.on_first_charge = lambda: [release() for _ in live]
    a = start(runner, "a", {"order_id": key})
    suspended = False
    for event in order[len(live) :]:
        if event in ("suspend", "new execution") and not suspended:
            runner.wait_for_callback(a, name="shipping", timeout=20)
            suspended = True
        if event == "release":
            release()
        elif event == "resume":
            outcomes["a"] = error_type(ship(runner, a)) or "SUCCEEDED"
        elif event == "new execution":
            b = start(runner, "b", {"order_id": key})
            outcomes["b"] = settle(runner, b)
    if outcomes["b"] == "suspended":
        outcomes["b"] = error_type(ship(runner, b)) or "SUCCEEDED"

    forced = flag == "--force-durable"
    assert released == [0 if forced else 1]
    released_at, b_at, a_at = (order.index(e) for e in ("release", "new execution", "resume"))
    second_run = forced and released_at < b_at < a_at
    assert ledger.charges == [key] * (2 if second_run else 1)
    assert outcomes["a"] == ("InProgressError" if second_run else "SUCCEEDED")
    assert outcomes["b"] == ("SUCCEEDED" if second_run or a_at < b_at else "InProgressError")
    record = store.get(pk)
    assert record is not None and record.status is Status.COMPLETED
    assert record.owner == owner_token(b if second_run else a)
