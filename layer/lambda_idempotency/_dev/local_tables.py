"""The tables on a local endpoint (DynamoDB Local, a moto server): a client with the
credentials it accepts, a table created as the template defines it, and without a template
the one table `DynamoDBStore()` uses by default.

Below both `local` (the emulator) and the command's modules, so neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from .template import TableSpec

DEFAULT_LOCAL_TABLE = "idempotency"
"""The table `local` and `create-table` create where there is no template and no --table."""
LOCAL_ENDPOINT = "http://127.0.0.1:8000"
"""Where `lambda-idempotency local` listens by default; the docs' lines use it."""


def local_client(endpoint_url: str) -> DynamoDBClient:
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def create_table(client: DynamoDBClient, table: TableSpec) -> bool:
    """Create the table as the template defines it: its key, TTL, and the other properties
    DynamoDB Local keeps (`TableSpec.create_options`: billing, deletion protection, streams,
    indexes). False if it exists."""
    # One look-up by name: list_tables answers 100 names a page, so a table past the first
    # page was taken for missing, and creating it failed.
    try:
        client.create_table(
            TableName=table.name,
            KeySchema=table.key_schema,  # type: ignore[arg-type]
            AttributeDefinitions=table.attribute_definitions,  # type: ignore[arg-type]
            **({"BillingMode": "PAY_PER_REQUEST"} | table.create_options),
        )
    except client.exceptions.ResourceInUseException:
        return False
    client.get_waiter("table_exists").wait(TableName=table.name, WaiterConfig={"Delay": 1})
    if table.ttl_attribute is not None:
        client.update_time_to_live(
            TableName=table.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
        )
    return True


def store_table(name: str) -> TableSpec:
    """A table as `DynamoDBStore()` uses it by default: string key `pk`, TTL on
    `expiration` (the record's attribute names, AttributeNames' defaults)."""
    from .._stores.record import AttributeNames
    from .template import TableSpec

    names = AttributeNames()
    return TableSpec(
        logical_id=name,
        name=name,
        key_schema=[{"AttributeName": names.pk, "KeyType": "HASH"}],
        attribute_definitions=[{"AttributeName": names.pk, "AttributeType": "S"}],
        ttl_attribute=names.expiration,
    )
