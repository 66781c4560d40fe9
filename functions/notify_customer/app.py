"""Sample: send a customer's shipping notice once, however often it is retried, with the
idempotency record in Valkey (ElastiCache Serverless in template.yaml).

Event: {"notification_id": "...", "order_id": "...", "email": "..."}. The notice goes out
from the handler; a retry of the same notification_id gets the first answer back (the same
message_id) and sends nothing. Valkey cannot write a business row with the record
(`add_write` is DynamoDB's): what the handler does outside is protected by the one run.
"""

import uuid

from lambda_idempotency import ValkeyStore, idempotent

# IDEMPOTENCY_VALKEY_URL from template.yaml (rediss://: TLS); ElastiCache Serverless is in
# cluster mode, so a cluster client (a record and its result share one slot)
store = ValkeyStore(cluster=True)


@idempotent(store=store, key="notification_id", payload="[order_id, email]", ttl_seconds=86400)
def lambda_handler(event, context):
    message_id = f"msg_{uuid.uuid4().hex[:16]}"
    print(f"sending notice {message_id} for order {event['order_id']}")  # the email's stand-in
    return {
        "message_id": message_id,
        "notification_id": event["notification_id"],
        "order_id": event["order_id"],
        "status": "sent",
    }
