"""Sample: a Lambda durable function that charges an order once, waits for the warehouse,
then ships it, however often the order is sent (direct or asynchronous invoke).

Event: {"order_id": "...", "amount_cents": 1250, "currency": "EUR"}. `@idempotent` sits
inside `@durable_execution`: the execution owns its key across its invocations (after the
wait it runs again from the top and finds its own claim) for its whole timeout, and another
execution with the same order replays the receipt instead of charging again. The charge is
keyed on the execution and its step, so a step that runs again does not charge twice.

The Durable Execution SDK ships in Lambda's Python runtimes, so this sample has no
requirements.txt. In production pin your own: a requirements.txt beside this file naming
`aws-durable-execution-sdk-python` within the range lambda-idempotency was checked against
(pyproject.toml: 3.0.x) is what `sam build` bundles: which of its errors fail an execution,
and so release the key, is the SDK's rule, read from that version.
"""

import os
import uuid

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

from lambda_idempotency import DynamoDBStore, durable_step_key, idempotent, idempotent_function

store = DynamoDBStore()  # IDEMPOTENCY_TABLE from template.yaml
EXECUTION_TIMEOUT = int(os.environ.get("EXECUTION_TIMEOUT_SECONDS", "3600"))


@idempotent_function(store=store, key="step", payload="order")
def charge(step: str, order: dict) -> str:
    """The payment provider's call (here: a charge id). Keyed on execution + step."""
    return f"ch_{uuid.uuid4().hex[:16]}"


@durable_execution
@idempotent(
    store=store,
    key="order_id",
    payload="[order_id, amount_cents, currency]",
    lease_seconds=EXECUTION_TIMEOUT,  # the execution's timeout: DurableConfig below
    ttl_seconds=86400,
)
def lambda_handler(event: dict, context: DurableContext) -> dict:
    charge_id = context.step(
        lambda _: charge(step=durable_step_key(context, "charge"), order=event), name="charge"
    )
    context.wait(Duration.from_seconds(300), name="warehouse")  # suspends: no compute billed
    shipment = context.step(lambda _: f"sh_{uuid.uuid4().hex[:16]}", name="ship")
    return {
        "order_id": event["order_id"],
        "charge_id": charge_id,
        "shipment_id": shipment,
        "status": "shipped",
    }
