"""Sample: charge an order once, however often the caller retries (direct invoke).

Event: {"order_id": "...", "amount_cents": 1250, "currency": "EUR"}. The charge is written
to the Charges table in the same transaction that completes the idempotency record, so the
charge and the stored answer land together or not at all.
"""

import os
import uuid

from lambda_idempotency import DynamoDBStore, current_execution, idempotent

store = DynamoDBStore()  # IDEMPOTENCY_TABLE from template.yaml
CHARGES_TABLE = os.environ["CHARGES_TABLE"]


@idempotent(
    store=store, key="order_id", payload="[order_id, amount_cents, currency]", ttl_seconds=86400
)
def lambda_handler(event, context):
    charge_id = f"ch_{uuid.uuid4().hex[:16]}"
    current_execution().add_write(
        {
            "Put": {
                "TableName": CHARGES_TABLE,
                "Item": {
                    "charge_id": {"S": charge_id},
                    "order_id": {"S": event["order_id"]},
                    "amount_cents": {"N": str(event["amount_cents"])},
                    "currency": {"S": event["currency"]},
                },
                "ConditionExpression": "attribute_not_exists(charge_id)",
            }
        }
    )
    return {
        "charge_id": charge_id,
        "order_id": event["order_id"],
        "amount_cents": event["amount_cents"],
        "currency": event["currency"],
        "status": "charged",
    }
