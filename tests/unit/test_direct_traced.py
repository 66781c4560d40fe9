"""The client tracers' wrappers are given on the direct path reads as our default client does
(issue 40): what X-Ray and OpenTelemetry read of it, field by field, and its Config."""

from __future__ import annotations

from typing import Any

import pytest

from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.direct.settings import environment_settings
from lambda_idempotency._stores.dynamodb.direct.transport import DirectWire

ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_CONFIG_FILE": "/nonexistent/config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "BOTO_CONFIG": "/nonexistent/boto",
}


@pytest.mark.parametrize(
    ("region", "endpoint_url"),
    [
        ("eu-west-1", None),
        ("cn-north-1", None),
        ("us-gov-west-1", None),
        ("us-east-1", "http://127.0.0.1:8000"),
        ("us-east-1", "https://vpce-1.dynamodb.us-east-1.vpce.amazonaws.com/"),
    ],
)
def test_what_a_tracer_reads_is_what_our_default_client_gives(
    region: str, endpoint_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    settings = environment_settings(endpoint_url, region, "t", ENVIRONMENT)
    assert not isinstance(settings, str), settings
    wire = DirectWire(settings, lambda: None, "lambda-idempotency/test")
    view: Any = wire._client_for_tracers()
    client: Any = default_client(endpoint_url, region)

    def read(c: Any) -> dict[str, Any]:
        model = c.meta.service_model
        config = c.meta.config
        return {
            # X-Ray's wrapper and meta processor
            "endpointPrefix": c._service_model.metadata["endpointPrefix"],
            "region_name": c.meta.region_name,
            # OpenTelemetry's call context
            "service_name": model.service_name,
            "service_id": str(model.service_id),
            "api_version": model.api_version,
            "endpoint_url": c.meta.endpoint_url,
            "metadata": model.metadata,
            "partition": c.meta.partition,
            # the Config a tracer could read
            "config": {
                name: getattr(config, name)
                for name in (
                    "region_name",
                    "connect_timeout",
                    "read_timeout",
                    "retries",
                    "parameter_validation",
                )
            },
        }

    assert read(view) == read(client)
    assert view.meta.config.user_agent == "lambda-idempotency/test"
