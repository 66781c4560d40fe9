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


def _pretending(module: str, qualname: str, body: Any) -> Any:
    """A function whose code says it is `module.qualname` (a tracer's wrapper, to the path)."""
    import types

    code = body.__code__.replace(co_name=qualname.rsplit(".", 1)[-1], co_qualname=qualname)
    return types.FunctionType(code, {"__builtins__": __builtins__, "__name__": module}, qualname)


def _reads_more(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    SEEN.append(instance._endpoint.host)  # type: ignore[name-defined]  # noqa: F821
    return wrapped(*args, **kwargs)


def test_a_known_tracers_wrapper_reading_more_of_the_client_gets_the_clients_call(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A newer X-Ray whose wrapper reads what the stand-in client lacks fails before the
    request: the store's own client makes that call (traced, as any client's) and every one
    after it; one info line says why; nothing is sent twice."""
    import logging

    import botocore.client
    import wrapt
    from botocore.awsrequest import AWSResponse

    from lambda_idempotency import DynamoDBStore
    from lambda_idempotency._stores.dynamodb.direct import transport
    from lambda_idempotency._stores.dynamodb.wire import guard

    for name, value in {**ENVIRONMENT, "AWS_DEFAULT_REGION": "eu-west-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("IDEMPOTENCY_DIRECT_WIRE", "1")
    monkeypatch.delenv("IDEMPOTENCY_FAST_WIRE", raising=False)  # CI's boto3-path run sets it
    monkeypatch.setattr(transport, "_METHODS", [])
    monkeypatch.setattr(guard, "_told", set())
    wrapper = _pretending("aws_xray_sdk.ext.botocore.patch", "_xray_traced_botocore", _reads_more)
    seen = wrapper.__globals__["SEEN"] = []
    monkeypatch.setattr(
        botocore.client.BaseClient,
        "_make_api_call",
        wrapt.FunctionWrapper(botocore.client.BaseClient.__dict__["_make_api_call"], wrapper),
    )
    sent: list[str] = []

    class Body:
        def stream(self, **_: Any) -> Any:
            yield b"{}"

    def answer(request: Any, **_: Any) -> Any:
        sent.append(request.headers["X-Amz-Target"].decode())
        return AWSResponse(request.url, 200, {"x-amzn-RequestId": "r"}, Body())

    caplog.set_level(logging.INFO, logger="lambda_idempotency")
    store = DynamoDBStore("t")
    direct = store._caller()
    assert type(direct).__name__ == "DirectWire"  # X-Ray's wrapper, by its name: honoured
    direct.events.register("before-send.dynamodb", answer)
    store._own_client().meta.events.register("before-send.dynamodb", answer)

    assert store.get("k") is None
    assert store.get("k") is None

    assert sent == ["DynamoDB_20120810.GetItem"] * 2  # each call sent once, by the client
    assert seen == [store._own_client()._endpoint.host] * 2  # the wrapper saw both, whole
    told = [r.getMessage() for r in caplog.records if "fast_wire_off" in r.getMessage()]
    assert len(told) == 1 and "reading the client" in told[0], told
