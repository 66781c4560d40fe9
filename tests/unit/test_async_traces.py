"""An idempotent coroutine's outcome on the function's X-Ray trace, as a plain function's:
the outcomes are counted in the worker threads that call the store, where the X-Ray SDK's
thread-local context has no open subsegment of its own (found by test_async_attacks.py's
review; before the fix the async outcomes were missing)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aws_lambda_powertools import Tracer
from aws_xray_sdk.core import xray_recorder

from lambda_idempotency import DynamoDBStore, idempotent
from tests.conftest import FakeContext
from tests.unit.test_traces import (  # noqa: F401 (fixtures, the socket closed after)
    RAW_KEY,
    SentToXRay,
    _close_the_sdk_socket,
    xray_in_lambda,
)


def test_an_async_handlers_outcome_goes_on_the_open_xray_subsegment(
    moto_store: DynamoDBStore,
    xray_in_lambda: SentToXRay,  # noqa: F811
) -> None:
    @idempotent(key="order_id", store=moto_store, cache_size=0)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"charged": 5}

    Tracer(service="checkout", disabled=False, auto_patch=False)  # the SDK on, as in Lambda
    for _ in range(2):
        with xray_recorder.in_subsegment("## handler"):
            asyncio.run(handler({"order_id": RAW_KEY}, FakeContext()))

    handled = [d for d in xray_in_lambda.documents if d["name"] == "## handler"]
    outcomes = [d.get("annotations", {}).get("idempotency_outcome") for d in handled]
    assert outcomes == ["executed", "replayed"]
    assert RAW_KEY not in json.dumps(xray_in_lambda.documents)


def test_a_sync_handlers_outcome_goes_on_the_same_subsegment(
    moto_store: DynamoDBStore,
    xray_in_lambda: SentToXRay,  # noqa: F811
) -> None:
    """The same set-up with a plain def: the control that the subsegment is the right one."""

    @idempotent(key="order_id", store=moto_store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"charged": 5}

    Tracer(service="checkout", disabled=False, auto_patch=False)  # the SDK on, as in Lambda
    for _ in range(2):
        with xray_recorder.in_subsegment("## handler"):
            handler({"order_id": RAW_KEY}, FakeContext())

    handled = [d for d in xray_in_lambda.documents if d["name"] == "## handler"]
    outcomes = [d.get("annotations", {}).get("idempotency_outcome") for d in handled]
    assert outcomes == ["executed", "replayed"]
