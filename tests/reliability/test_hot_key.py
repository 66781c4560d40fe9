"""A hot key throttled: many callers of one key at once (`on_in_progress="wait"`) on DynamoDB
Local, with a share of their claims and polls throttled on the library's own default client.

What a user must see: the handler's effect happens once, and every caller gets the one result
or a typed error it may retry on (`StoreError` marked retryable, `InProgressError`); a throttled
poll does not end a wait, it makes it poll less often.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, InProgressError, StoreError, idempotent
from lambda_idempotency.testing import FakeLambdaContext, create_idempotency_table
from tests.reliability.faults import Fault, FaultInjector, fast_retries

pytestmark = pytest.mark.dynamodb_local

CALLERS = 32
HANDLER_SECONDS = 1.0
"""Long enough that callers are refused while it runs, and poll several times, however
slowly a shared machine serves 32 concurrent claims."""
REMAINING_MS = 10_000
"""Each caller's Lambda time: it may wait 9 s, far longer than the holder runs."""


@pytest.fixture
def store(dynamodb_local_endpoint: str) -> Iterator[DynamoDBStore]:
    table = f"hot-key-{uuid.uuid4().hex[:12]}"
    store = DynamoDBStore(table, endpoint_url=dynamodb_local_endpoint, region_name="us-east-1")
    create_idempotency_table(store.client, table)
    fast_retries(store.client)  # botocore's backoff, shrunk: what it retries stays the same
    yield store
    store.client.delete_table(TableName=table)


def call_at_once(handler: Any, callers: int) -> list[Any]:
    """Every caller released at once on a barrier; each one's result or exception."""
    answers: list[Any] = [None] * callers
    barrier = threading.Barrier(callers)

    def caller(index: int) -> None:
        barrier.wait()
        try:
            answers[index] = handler({"id": "hot"}, FakeLambdaContext(REMAINING_MS))
        except Exception as exc:
            answers[index] = exc

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a caller never answered"
    return answers


@pytest.mark.timeout_scale(2)
@pytest.mark.parametrize("share", [0.5, 0.75])
def test_a_throttled_hot_key_runs_once_and_answers_everyone(
    store: DynamoDBStore, share: float
) -> None:
    effects: list[int] = []

    @idempotent(store=store, key="id", on_in_progress="wait", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(1)
        time.sleep(HANDLER_SECONDS)
        return {"charged": event["id"]}

    faults = FaultInjector(store.client)
    claims = faults.add(Fault("claim", "throttled", count=10**6, share=share))
    polls = faults.add(Fault("get", "throttled", count=10**6, share=share))

    answers = call_at_once(handler, CALLERS)
    faults.close()

    assert len(effects) <= 1
    results = [a for a in answers if not isinstance(a, BaseException)]
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert all(result == {"charged": "hot"} for result in results)
    for error in errors:
        assert isinstance(error, StoreError | InProgressError), repr(error)
        assert not isinstance(error, StoreError) or error.retryable, repr(error)
    if effects:
        assert results, "the handler ran, but nobody got its result"
    assert claims.injected > 0 and polls.injected > 0
    # botocore retried what it could; throttles it could not absorb reached the waiters,
    # which kept waiting (3 attempts a poll: an eighth of polls or more at these shares).
    assert handler.idempotency.stats["waiting"] > 0
    assert handler.idempotency.stats["wait_throttled"] > 0
    assert handler.idempotency.stats["executed"] == len(effects)

    # And the key is not locked by what happened: a retry now replays the one result, or
    # runs it (once) if no claim got through at all.
    again = handler({"id": "hot"}, FakeLambdaContext(REMAINING_MS))
    assert again == {"charged": "hot"}
    assert len(effects) == 1
