"""An async FastAPI route on Lambda whose effect is an idempotent coroutine: the charge runs
once per order, whichever request (and Idempotency-Key) reaches it."""

import asyncio
import uuid
from typing import Any

from fastapi import FastAPI
from mangum import Mangum
from pydantic import BaseModel

from lambda_idempotency import DynamoDBStore, idempotent_function, idempotent_http

store = DynamoDBStore()  # IDEMPOTENCY_TABLE
app = FastAPI()
charges: list[dict[str, Any]] = []  # stands in for your payment provider


class Payment(BaseModel):
    amount_cents: int


@idempotent_function(key="order_id", store=store, ttl_seconds=86400, on_in_progress="wait")
async def charge(order_id: str, amount_cents: int) -> dict[str, Any]:
    await asyncio.sleep(0)  # your async client's request to the provider
    charges.append({"order_id": order_id, "amount_cents": amount_cents})
    return {"charge_id": f"ch_{uuid.uuid4().hex}", "amount_cents": amount_cents}


@app.post("/orders/{order_id}/payment", status_code=201)
async def pay(order_id: str, payment: Payment) -> dict[str, Any]:
    return await charge(order_id, payment.amount_cents)


asgi = Mangum(app, lifespan="off")


@idempotent_http(  # FastAPI's 422 is not stored, as in the app above
    store=store, ttl_seconds=86400, store_status=lambda status: status < 500 and status != 422
)
def handler(event: dict[str, Any], context: Any) -> Any:
    return asgi(event, context)
