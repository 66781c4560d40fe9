"""Long work, held once, on DynamoDB Local (issue 31): a lease measured when its claim is
sent (however long an async claim queued for a worker, or a cold client took to build), a
heartbeat that can never stop silently, lease extensions that cannot be dishonoured, a
completion window that follows the work, and deferred objects nested in a result. Every
test counts how many times the protected body ran."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    idempotent,
)
from lambda_idempotency import _store as store_module
from lambda_idempotency._record import Status
from tests.conftest import FakeClock, FakeContext

pytestmark = pytest.mark.dynamodb_local


def record_of(store: DynamoDBStore, handler: Any, key: str) -> Any:
    settings = handler.idempotency.settings
    return store.get(settings.layout.record_key(settings.namespace, None, key))


# -- 1. a lease measured when its claim is sent -------------------------------------------


def test_an_async_claim_queued_behind_the_handlers_blocking_work_leases_its_whole_invocation(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """The issue's scenario in small: 12 s of invocation left, the loop's 4 workers held
    4 s by the handler's own blocking work while the claim queues; a second container's
    caller at 10.5 s must find the key held (it lapsed at 8 s + 2 s before the fix)."""
    effects: list[str] = []
    refused: list[InProgressError] = []

    @idempotent(store=store, key="id", payload="id", clock=clock, cache_size=0)
    async def charge(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate charged")
            return "duplicate"
        clock.advance(6.5)  # the body runs on: 10.5 s after the invocation began
        try:
            await charge({"id": "c-1", "duplicate": True}, FakeContext(60_000, clock=clock))
        except InProgressError as exc:
            refused.append(exc)
        effects.append("charged")
        return "charged"

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(4))
        gate = threading.Event()
        busy = [loop.run_in_executor(None, gate.wait) for _ in range(4)]
        began = clock.now_ms()
        call = asyncio.ensure_future(charge({"id": "c-1"}, FakeContext(12_000, clock=clock)))
        await asyncio.sleep(0.05)  # the call started, read the clock, and its claim queued
        clock.advance(4)  # the handler's blocking work holds every worker for 4 s
        gate.set()
        await asyncio.gather(*busy)
        result = await call
        assert record_of(store, charge, "c-1").claimed_at == began + 4000
        return result

    assert asyncio.run(main()) == "charged"
    assert effects == ["charged"]
    assert len(refused) == 1
    assert record_of(store, charge, "c-1").status is Status.COMPLETED


@pytest.mark.parametrize("with_context", [False, True])
def test_a_claim_sent_after_a_slow_client_build_leases_from_when_it_is_sent(
    store: DynamoDBStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    with_context: bool,
) -> None:
    """The sync path: a cold start's client build (4 s under CPU throttling) comes between
    the call's first clock read and its claim. The lease (12 s, or the invocation's 16 s
    left) still runs from the claim as sent: a caller 10.5 s into the body is refused."""
    effects: list[str] = []
    refused: list[InProgressError] = []

    def slow_client(endpoint_url: Any, region_name: Any) -> Any:
        clock.advance(4)
        return store.client

    monkeypatch.setattr(store_module, "_default_client", slow_client)
    cold = DynamoDBStore(store.table_name)
    lease = None if with_context else 12

    @idempotent(store=cold, key="id", payload="id", lease_seconds=lease, clock=clock, cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate charged")
            return "duplicate"
        clock.advance(10.5)  # within the lease from the claim, plus the 2 s allowance
        try:
            charge({"id": "c-1", "duplicate": True}, FakeContext(60_000, clock=clock))
        except InProgressError as exc:
            refused.append(exc)
        effects.append("charged")
        return "charged"

    context = FakeContext(16_000, clock=clock) if with_context else None
    assert charge({"id": "c-1"}, context) == "charged"
    assert effects == ["charged"]
    assert len(refused) == 1
