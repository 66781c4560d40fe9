"""The boto3 DynamoDB client a store builds for itself when none is passed in (on first use:
loaded then, not at import)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from botocore.exceptions import NoRegionError

from ..._version import VERSION

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

USER_AGENT = f"lambda-idempotency/{VERSION}"
"""The default client's user agent; botocore appends its own name and version."""


def default_client(endpoint_url: str | None, region_name: str | None) -> DynamoDBClient:
    import boto3
    from botocore.config import Config

    # Our requests are built by code, not typed by people: botocore's client-side parameter
    # validation would only cost CPU on every call (about 35 µs a request). Enlisted writes
    # are typed by people: botocore checks those (an {"SS": "vip"} DynamoDB would store as
    # the set of its letters), on either path (validate_user_data).
    # total_max_attempts counts the first attempt too (botocore reads "max_attempts" in a
    # Config as retries: 3 there means 4 attempts). A fixed user agent spares botocore
    # building its long one twice per request (about 90 µs of a ~320 µs call).
    config = Config(
        user_agent=USER_AGENT,
        connect_timeout=2,
        read_timeout=10,
        retries={"mode": "standard", "total_max_attempts": 3},
        parameter_validation=False,
    )
    try:
        client = boto3.client(
            "dynamodb", endpoint_url=endpoint_url, region_name=region_name, config=config
        )
    except NoRegionError:
        # boto3 reads AWS_DEFAULT_REGION only; Lambda sets both, other SDKs read AWS_REGION.
        fallback = os.environ.get("AWS_REGION")
        if region_name is not None or not fallback:
            raise
        client = boto3.client(
            "dynamodb", endpoint_url=endpoint_url, region_name=fallback, config=config
        )
    from .wire.path import validate_user_data

    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems", validate_user_data
    )
    return client
