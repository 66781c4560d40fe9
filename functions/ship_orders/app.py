"""Sample: ship each order once, however often SQS delivers it (SQS queue consumer).

Each message body is an order: {"order_id": "...", "sku": "...", "quantity": 2,
"address": "..."}. The key is the order id inside the body, so the same order sent twice
(two messages, two messageIds) ships once. A message the handler rejects is reported in
batchItemFailures: SQS redelivers it, and after maxReceiveCount it lands in the DLQ.
"""

import json
import uuid

from lambda_idempotency import DynamoDBStore, idempotent_record, process_batch

store = DynamoDBStore()  # IDEMPOTENCY_TABLE from template.yaml


@idempotent_record(store=store, key="powertools_json(body).order_id", ttl_seconds=86400)
def ship(record):
    order = json.loads(record.body)
    if order.get("quantity", 0) < 1 or not order.get("address"):
        raise ValueError(f"order {order.get('order_id')} cannot be shipped: no quantity or address")
    shipment_id = f"shp_{uuid.uuid4().hex[:16]}"
    print(f"shipping {order['quantity']} x {order['sku']} to {order['address']}: {shipment_id}")
    return {"order_id": order["order_id"], "shipment_id": shipment_id}


def lambda_handler(event, context):
    return process_batch(event, context, ship)
