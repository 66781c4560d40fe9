"""FastAPI on Lambda: the app runs under Mangum, and idempotent_http guards the handler."""

import uuid
from typing import Any

from fastapi import FastAPI, HTTPException, Response
from mangum import Mangum
from pydantic import BaseModel

from lambda_idempotency import DynamoDBStore, idempotent_http

store = DynamoDBStore()  # IDEMPOTENCY_TABLE
app = FastAPI()
orders: dict[str, dict[str, Any]] = {}  # stands in for your database


class NewOrder(BaseModel):
    sku: str
    quantity: int


@app.post("/orders", status_code=201)
def create_order(order: NewOrder, response: Response) -> dict[str, Any]:
    order_id = f"ord_{uuid.uuid4().hex}"
    orders[order_id] = order.model_dump()
    response.headers["Location"] = f"/orders/{order_id}"
    return {"id": order_id, **orders[order_id]}


@app.get("/orders/{order_id}")
def read_order(order_id: str) -> dict[str, Any]:
    if order_id not in orders:
        raise HTTPException(status_code=404)
    return {"id": order_id, **orders[order_id]}


def ran_the_route(status: int) -> bool:
    """FastAPI answers an invalid body 422 before any route runs: nothing happened, so
    nothing is stored, and the client may correct the body and send it under the same key."""
    return status < 500 and status != 422


asgi = Mangum(app, lifespan="off")  # one event loop per container, no lifespan per request


@idempotent_http(store=store, ttl_seconds=86400, store_status=ran_the_route)
def handler(event: dict[str, Any], context: Any) -> Any:
    return asgi(event, context)
