"""Durable executions without the SDK's runner (moto): the cases the runner cannot stage — an
invocation killed by a BaseException, a checkpoint token revoked under a failure — and the
refusals. The runner's own scenarios are in tests/integration/test_durable.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    InProgressError,
    durable_step_key,
    idempotent,
)
from lambda_idempotency._durable import owner_token
from lambda_idempotency._record import Status
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
