"""Our log lines through the user's Powertools `Logger`: one request's lines carry the same
correlation keys, so they are found together."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from lambda_idempotency import DynamoDBStore, InProgressError, idempotent

RAW_KEY = "order-secret-4242"
RAW_PAYLOAD = "card-4111111111111111"


class LambdaContext:
    """What Powertools' `inject_lambda_context` reads of Lambda's context."""

    function_name = "ChargeOrder"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ChargeOrder"
    aws_request_id = "52fdfc07-2182-154f-163f-5f0f9a621d72"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.fixture
def ours() -> Iterator[logging.Logger]:
    """Our logger, put back as it was (the copy below gives it Powertools' handler)."""
    logger = logging.getLogger("lambda_idempotency")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield logger
    logger.handlers, logger.propagate = saved[0], saved[2]
    logger.setLevel(saved[1])


def test_our_lines_carry_the_users_correlation_and_appended_keys(
    moto_store: DynamoDBStore, ours: logging.Logger
) -> None:
    output = io.StringIO()
    # Powertools configures a service's logger once per process and keeps its first stream:
    # a service name of its own lets this test run twice in one process (mutmut does).
    service = f"logger-test-checkout-{uuid.uuid4().hex}"
    logger = Logger(service=service, stream=output, level="DEBUG")  # `released` is DEBUG
    copy_config_to_registered_loggers(source_logger=logger, include={"lambda_idempotency"})

    @logger.inject_lambda_context(correlation_id_path="headers.correlation")
    @idempotent(key="order_id", store=moto_store, lease_seconds=60)
    def handler(event: dict[str, Any], context: Any) -> None:
        logger.append_keys(tenant="acme")
        with pytest.raises(InProgressError):
            handler(event, context)  # a duplicate while this call holds the key
        raise ValueError("card declined")  # the key is released

    event = {"order_id": RAW_KEY, "card": RAW_PAYLOAD, "headers": {"correlation": "c-77"}}
    with pytest.raises(ValueError, match="declined"):
        handler(event, LambdaContext())

    text = output.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    ours_only = [line for line in lines if "idempotency" in line]
    assert [line["idempotency"]["idempotency"] for line in ours_only] == [
        "claimed",
        "in_progress",
        "released",
    ]
    for line in ours_only:
        assert line["service"] == service
        assert line["correlation_id"] == "c-77"
        assert line["function_request_id"] == LambdaContext.aws_request_id
        if line["idempotency"]["idempotency"] != "claimed":  # before the handler's append
            assert line["tenant"] == "acme"
        assert line["idempotency"]["key_hash"].startswith(handler.idempotency.settings.namespace)
    assert RAW_KEY not in text
    assert RAW_PAYLOAD not in text
