"""Durable executions without the SDK's runner (moto): the cases the runner cannot stage — an
invocation killed by a BaseException, a checkpoint token revoked under a failure — the SDK's
own rule for FAILED against ours, and the refusals. The runner's own scenarios are in
tests/integration/test_durable.py."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace
from typing import Any

import pytest
from aws_durable_execution_sdk_python import durable_execution
from aws_durable_execution_sdk_python.exceptions import (
    BackgroundThreadError,
    BotoClientError,
    CheckpointError,
    ExecutionError,
    GetExecutionStateError,
    InvocationError,
    NonDeterministicExecutionError,
    RetryableSerDesError,
    StepInterruptedError,
    SuspendExecution,
)
from aws_durable_execution_sdk_python.execution import (
    DurableExecutionInvocationInputWithClient,
    InitialExecutionState,
)
from aws_durable_execution_sdk_python.lambda_service import Operation
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    InProgressError,
    durable_step_key,
    idempotent,
)
from lambda_idempotency._protocol.durable import owner_token
from lambda_idempotency._stores.record import Status
from tests.conftest import FakeContext


class DurableContextLike:
    """The parts of the SDK's DurableContext the library reads."""

    def __init__(self, arn: str, *, revoked: bool = False) -> None:
        self.execution_context = SimpleNamespace(durable_execution_arn=arn)
        self.state = SimpleNamespace(
            is_checkpoint_token_revoked=revoked, get_execution_operation=lambda: None
        )
        self.lambda_context = FakeContext()


class Died(BaseException):
    """What escapes the SDK's handler when an invocation is cut short (not an Exception)."""


def record_of(store: DynamoDBStore, handler: Any, key: str) -> Any:
    settings = handler.idempotency.settings
    return store.get(settings.layout.record_key(settings.namespace, None, key))


@pytest.mark.parametrize(
    ("failure", "revoked"), [(Died("killed"), False), (RuntimeError("replayed"), True)]
)
def test_an_invocation_cut_short_keeps_the_key_for_its_execution(
    moto_store: DynamoDBStore, failure: BaseException, revoked: bool
) -> None:
    effects: list[str] = []
    fail = [True]

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if fail[0]:
            fail[0] = False
            raise failure
        return "done"

    with pytest.raises(type(failure)):
        handler({"id": "k"}, DurableContextLike("arn:a", revoked=revoked))
    record = record_of(moto_store, handler, "k")
    assert record.status is Status.IN_PROGRESS and record.owner == owner_token("arn:a")
    with pytest.raises(InProgressError):
        handler({"id": "k"}, DurableContextLike("arn:b"))
    assert handler({"id": "k"}, DurableContextLike("arn:a")) == "done"  # the same execution
    assert handler({"id": "k"}, DurableContextLike("arn:c")) == "done"  # replayed
    assert effects == ["k", "k"]


def test_a_failed_execution_releases_its_key(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        raise RuntimeError("declined")

    with pytest.raises(RuntimeError):
        handler({"id": "k"}, DurableContextLike("arn:a"))
    assert record_of(moto_store, handler, "k").status is Status.RELEASED


def test_a_released_key_is_free_for_a_new_execution_and_its_own_is_taken_back(
    moto_store: DynamoDBStore,
) -> None:
    """A fails and releases; B, a new execution, runs over A's tombstone; a delayed copy of
    A's claim cannot lock the key again; and A, replayed after all (the SDK revoked its
    token), takes its own tombstone back, only while it is still there."""
    effects: list[str] = []

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        effects.append(context.execution_context.durable_execution_arn)
        if effects == ["arn:a"]:
            raise RuntimeError("declined")
        return "done"

    with pytest.raises(RuntimeError):
        handler({"id": "k"}, DurableContextLike("arn:a"))
    tombstone = record_of(moto_store, handler, "k")
    assert tombstone.status is Status.RELEASED and tombstone.owner == owner_token("arn:a")
    late = {"payload_hash": None, "lease_until_ms": 2**42, "expiration_s": 2**42 // 1000}
    now = (tombstone.lease_until or 0) + 1
    assert not moto_store.claim(tombstone.pk, owner=owner_token("arn:a"), now_ms=now, **late)[0]  # type: ignore[arg-type]
    assert handler({"id": "k"}, DurableContextLike("arn:a")) == "done"  # taken back
    assert handler.idempotency.stats["retaken"] == 1
    assert record_of(moto_store, handler, "k").owner == owner_token("arn:a")
    assert handler({"id": "k"}, DurableContextLike("arn:b")) == "done"  # replayed
    assert effects == ["arn:a", "arn:a"]

    effects.clear()
    with pytest.raises(RuntimeError):
        handler({"id": "k2"}, DurableContextLike("arn:a"))
    assert handler({"id": "k2"}, DurableContextLike("arn:b")) == "done"  # B over A's tombstone
    assert record_of(moto_store, handler, "k2").owner == owner_token("arn:b")
    assert effects == ["arn:a", "arn:b"]


def test_the_sdks_envelope_is_refused(moto_store: DynamoDBStore) -> None:
    ran: list[bool] = []

    @idempotent(store=moto_store, key="DurableExecutionArn", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        ran.append(True)
        return "ran"

    envelope = {"DurableExecutionArn": "arn:a", "CheckpointToken": "t", "InitialExecutionState": {}}
    with pytest.raises(ConfigurationError, match="inside"):
        handler(envelope, FakeContext())
    assert ran == []


def test_durable_step_key_needs_the_durable_context() -> None:
    assert durable_step_key(DurableContextLike("arn:a"), "charge") == "arn:a#step#charge"
    with pytest.raises(ConfigurationError):
        durable_step_key(FakeContext(), "charge")


def aws_error(kind: type[BotoClientError], status: int, code: str, message: str) -> BotoClientError:
    """The SDK's error for an AWS answer, built as its LambdaClient builds it."""
    answer: Any = {"Error": {"Code": code, "Message": message}}
    answer["ResponseMetadata"] = {"HTTPStatusCode": status}
    return kind.from_exception(ClientError(answer, "CheckpointDurableExecution"))


class UnreadableError(InvocationError):
    def is_retryable(self) -> bool:
        raise RuntimeError("cannot tell")


class Killed(BaseException):
    pass


AWS_ANSWERS = st.tuples(
    st.sampled_from([CheckpointError, GetExecutionStateError, BotoClientError]),
    st.sampled_from([400, 403, 404, 409, 413, 429, 499, 500, 502, 503]),
    st.sampled_from(
        [
            "InvalidParameterValueException",
            "TooManyRequestsException",
            "KMSDisabledException",
            "KMSAccessDeniedException",
            "AccessDeniedException",
            "ServiceException",
        ]
    ),
    st.sampled_from(["Invalid checkpoint token: stale", "Operation too large", ""]),
).map(lambda answer: aws_error(*answer))
OTHER_ERRORS = st.sampled_from(
    [
        lambda: InvocationError("invoke again"),
        lambda: StepInterruptedError("interrupted", "1"),
        lambda: RetryableSerDesError("offload timed out"),
        lambda: ExecutionError("fail it"),
        lambda: NonDeterministicExecutionError("changed code", "1"),
        lambda: SuspendExecution("wait"),
        lambda: RuntimeError("the handler's own"),
        lambda: Killed("cut short"),
        lambda: BackgroundThreadError("checkpointing died", RuntimeError("bug")),
    ]
).map(lambda make: make())
SDK_ERRORS = st.one_of(
    AWS_ANSWERS,
    AWS_ANSWERS.map(lambda error: BackgroundThreadError("Checkpoint creation failed", error)),
    OTHER_ERRORS,
)


class NoService:
    """The Durable service of an invocation that fails before its first checkpoint."""

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no checkpoint expected")

    def get_execution_state(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole state came with the invocation")


EXECUTIONS = itertools.count()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(error=SDK_ERRORS)
def test_the_key_is_released_exactly_when_the_sdk_fails_the_execution(
    moto_store: DynamoDBStore, error: BaseException
) -> None:
    """The SDK's own execution loop is the oracle: the handler raises `error` inside its
    `durable_execution`, and the key is released if and only if the SDK answers FAILED;
    when it answers PENDING or raises for Lambda to invoke again, the execution keeps it."""
    ran: list[str] = []

    @durable_execution
    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        ran.append(event["id"])
        raise error

    n = next(EXECUTIONS)
    arn = f"arn:aws:lambda:us-east-1:123456789012:function:f/durable-execution/e{n}/x{n}"
    execution = Operation.from_dict(
        {
            "Id": f"x{n}",
            "Type": "EXECUTION",
            "Status": "STARTED",
            "ExecutionDetails": {"InputPayload": json.dumps({"id": f"k{n}"})},
        }
    )
    invocation = DurableExecutionInvocationInputWithClient(
        durable_execution_arn=arn,
        checkpoint_token="token",
        initial_execution_state=InitialExecutionState([execution], ""),
        service_client=NoService(),
    )
    try:
        status = handler(invocation, FakeContext())["Status"]
    except BaseException:
        status = "RAISED"
    assert ran == [f"k{n}"]
    record = record_of(moto_store, handler.__wrapped__, f"k{n}")  # type: ignore[attr-defined]
    expected = Status.RELEASED if status == "FAILED" else Status.IN_PROGRESS
    assert (status, record.status) == (status, expected)
    assert record.owner == owner_token(arn)


def test_an_error_whose_retryability_cannot_be_read_keeps_the_key(
    moto_store: DynamoDBStore,
) -> None:
    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        raise UnreadableError("?")

    with pytest.raises(UnreadableError):
        handler({"id": "k"}, DurableContextLike("arn:a"))
    assert record_of(moto_store, handler, "k").status is Status.IN_PROGRESS
