"""The direct path (`_stores.dynamodb.direct`) does what a boto3 client does, on DynamoDB Local:
the same answers parsed the same way, the same requests signed the same way, the same retries
on the same faults; and it steps aside, to a client, wherever it could not.

The reference is always a boto3 client with our default client's configuration, sent the same
request in the same state, its faults injected in its own `before-send`.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.awsrequest
import pytest
from botocore.auth import SigV4Auth
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, ConnectionClosedError

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.direct.settings import environment_settings
from lambda_idempotency._stores.dynamodb.direct.transport import DirectWire
from lambda_idempotency.testing import create_idempotency_table

pytestmark = pytest.mark.dynamodb_local

_tables = (f"direct-{os.getpid()}-{n}" for n in itertools.count())
LAMBDA = {
    "AWS_LAMBDA_FUNCTION_NAME": "direct",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "session",
}
VOLATILE_HEADERS = {"x-amzn-requestid", "date", "x-amz-crc32", "content-length"}


@pytest.fixture
def lambda_env(monkeypatch: pytest.MonkeyPatch, dynamodb_local_endpoint: str) -> str:
    """A Lambda function's environment, DynamoDB Local as its configured endpoint."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "IDEMPOTENCY_")):
            monkeypatch.delenv(name)
    for name, value in {**LAMBDA, "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_local_endpoint}.items():
        monkeypatch.setenv(name, value)
    # the reference client reads this environment, not what boto3's default session cached
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    return dynamodb_local_endpoint


@pytest.fixture
def pair(lambda_env: str) -> Iterator[tuple[DirectWire, Any, str]]:
    """(the direct path, a boto3 client configured as ours, a fresh table)."""
    client = default_client(None, None)
    table = create_idempotency_table(client, next(_tables))
    store = DynamoDBStore(table)
    direct = store._caller()
    assert isinstance(direct, DirectWire)
    yield direct, client, table


def _stable(answer: dict[str, Any]) -> dict[str, Any]:
    answer = json.loads(json.dumps(answer, default=repr))
    metadata = answer.get("ResponseMetadata", {})
    metadata.pop("RequestId", None)
    headers = metadata.get("HTTPHeaders", {})
    for name in VOLATILE_HEADERS:
        headers.pop(name, None)
    return answer


def _both(
    direct: DirectWire, client: Any, method: str, **params: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each way's answer, or its error's response, with the volatile parts taken out."""
    answers = []
    for caller in (direct, client):
        try:
            answer = getattr(caller, method)(**params)
        except ClientError as exc:
            kind = f"{type(exc).__module__}.{type(exc).__name__}"
            answer = {"raised": str(exc), "class": kind, **exc.response}
        answers.append(_stable(answer))
    return answers[0], answers[1]


EVERY_TYPE = {
    "pk": {"S": "k"},
    "s": {"S": "text é"},
    "n": {"N": "12.50"},
    "b": {"B": b"\x00\xffbytes"},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2"]},
    "bs": {"BS": [b"\x01", b"\x02\x03"]},
    "m": {"M": {"inner": {"B": b"\xfe"}, "list": {"L": [{"B": b"\x00"}, {"BS": [b"\x09"]}]}}},
    "l": {"L": [{"S": "x"}, {"M": {"b": {"B": b"\x07"}}}, {"NULL": True}, {"BOOL": False}]},
}


def test_answers_to_every_operation_read_as_botocore_reads_them(
    pair: tuple[DirectWire, Any, str],
) -> None:
    direct, client, table = pair
    client.put_item(TableName=table, Item=EVERY_TYPE)
    key = {"pk": {"S": "k"}}
    ours, theirs = _both(direct, client, "get_item", TableName=table, Key=key, ConsistentRead=True)
    assert ours == theirs and ours["Item"]["m"]["M"]["inner"]["B"] == repr(b"\xfe")
    ours, theirs = _both(
        direct, client, "put_item", TableName=table, Item=EVERY_TYPE, ReturnValues="ALL_OLD"
    )
    assert ours == theirs and "Attributes" in ours
    ours, theirs = _both(direct, client, "get_item", TableName=table, Key={"pk": {"S": "none"}})
    assert ours == theirs and "Item" not in ours
    batch = {table: {"Keys": [key, {"pk": {"S": "none"}}], "ConsistentRead": True}}
    ours, theirs = _both(direct, client, "batch_get_item", RequestItems=batch)
    assert ours == theirs and len(ours["Responses"][table]) == 1
    writes = {table: [{"PutRequest": {"Item": {**EVERY_TYPE, "pk": {"S": "w"}}}}]}
    ours, theirs = _both(direct, client, "batch_write_item", RequestItems=writes)
    assert ours == theirs


def test_refusals_and_errors_read_as_botocore_reads_them(
    pair: tuple[DirectWire, Any, str],
) -> None:
    direct, client, table = pair
    client.put_item(TableName=table, Item=EVERY_TYPE)
    refused = {
        "TableName": table,
        "Item": {"pk": {"S": "k"}},
        "ConditionExpression": "attribute_not_exists(pk)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    ours, theirs = _both(direct, client, "put_item", **refused)
    assert ours == theirs
    assert ours["Error"]["Code"] == "ConditionalCheckFailedException" and "Item" in ours
    ours, theirs = _both(
        direct, client, "get_item", TableName="no-such-table", Key={"pk": {"S": "k"}}
    )
    assert ours == theirs and ours["Error"]["Code"] == "ResourceNotFoundException"
    ours, theirs = _both(direct, client, "get_item", TableName=table, Key={"other": {"S": "k"}})
    assert ours == theirs and ours["Error"]["Code"] == "ValidationException"


def _sent(caller: Any, events: Any, method: str, **params: Any) -> Any:
    """The request `caller` sends, answered in `before-send` without the network."""
    seen: list[Any] = []

    def answer(request: Any, **_: Any) -> Any:
        seen.append(request)
        return botocore.awsrequest.AWSResponse(request.url, 200, {}, _Raw(b"{}"))

    events.register_first("before-send.dynamodb", answer)
    try:
        getattr(caller, method)(**params)
    finally:
        events.unregister("before-send.dynamodb", answer)
    return seen[0]


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def test_requests_are_the_clients_byte_for_byte_but_time_and_ids(
    pair: tuple[DirectWire, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    direct, client, table = pair
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1")
    params = {
        "TableName": table,
        "Item": EVERY_TYPE,
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": "pk"},
    }
    ours = _sent(direct, direct.events, "put_item", **params)
    theirs = _sent(client, client.meta.events, "put_item", **params)
    assert (ours.method, ours.url, ours.body) == (theirs.method, theirs.url, theirs.body)
    varying = {"authorization", "x-amz-date", "amz-sdk-invocation-id"}
    assert {k.lower(): v for k, v in ours.headers.items() if k.lower() not in varying} == {
        k.lower(): v for k, v in theirs.headers.items() if k.lower() not in varying
    }
    auth = [_text(h["Authorization"]) for h in (ours.headers, theirs.headers)]
    signed = [a.split("SignedHeaders=")[1].split(",")[0] for a in auth]
    assert signed[0] == signed[1]
    # our signature is SigV4's over what we sent, with our time
    headers = {k: _text(v) for k, v in ours.headers.items() if k.lower() in signed[0].split(";")}
    again = botocore.awsrequest.AWSRequest(
        method="POST", url=ours.url, data=ours.body, headers=headers
    )
    again.context["timestamp"] = _text(ours.headers["X-Amz-Date"])
    SigV4Auth(Credentials("local", "local", "session"), "dynamodb", "us-east-1").add_auth(again)
    assert again.headers["Authorization"] == auth[0]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _throttle(request: Any) -> Any:
    body = b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow"}'
    return botocore.awsrequest.AWSResponse(request.url, 400, {"x-amzn-requestid": "t"}, _Raw(body))


def _html_500(request: Any) -> Any:
    return botocore.awsrequest.AWSResponse(request.url, 503, {}, _Raw(b"<html>busy</html>"))


def _bad_crc(request: Any) -> Any:
    return botocore.awsrequest.AWSResponse(request.url, 200, {"x-amz-crc32": "1"}, _Raw(b"{}"))


def _reset(request: Any) -> Any:
    raise ConnectionClosedError(endpoint_url=request.url)


FAULTS: dict[str, Callable[[Any], Any]] = {
    "throttle": _throttle,
    "html 503": _html_500,
    "crc32 mismatch": _bad_crc,
    "connection reset": _reset,
}


@pytest.mark.parametrize("faults", [1, 2, 5])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_retries_are_botocores_on_the_same_faults(
    pair: tuple[DirectWire, Any, str], monkeypatch: pytest.MonkeyPatch, fault: str, faults: int
) -> None:
    """`faults` answers of one kind, then DynamoDB's own: the same attempts, the same outcome,
    the same metadata (retries, max attempts reached) each way."""
    direct, client, table = pair
    monkeypatch.setattr(time, "sleep", lambda _: None)
    outcomes = []
    for caller, events in ((direct, direct.events), (client, client.meta.events)):
        attempts = itertools.count(1)

        def inject(request: Any, attempts: Any = attempts, **_: Any) -> Any:
            return FAULTS[fault](request) if next(attempts) <= faults else None

        events.register_first("before-send.dynamodb", inject)
        try:
            answer = caller.get_item(TableName=table, Key={"pk": {"S": "k"}})
            outcome: dict[str, Any] = {"answer": _stable(answer)}
        except Exception as exc:
            response = getattr(exc, "response", None)
            outcome = {"raised": type(exc).__name__, "text": str(exc)}
            if response is not None:
                outcome["response"] = _stable(response)
        finally:
            events.unregister("before-send.dynamodb", inject)
        outcome["attempts"] = next(attempts) - 1
        outcomes.append(outcome)
    if fault == "throttle" and not _modeled("ThrottlingException"):
        # an error newer than this botocore's model: it raises a plain ClientError without
        # the error's members; the direct path knows the newer model (and nothing else differs)
        outcomes[0].pop("raised", None), outcomes[1].pop("raised", None)
        outcomes[0].get("response", {}).pop("message", None)
    assert outcomes[0] == outcomes[1]


def _modeled(code: str) -> bool:
    import botocore.session

    model = botocore.session.get_session().get_service_model("dynamodb")
    return code in model.shape_names


def test_a_default_store_in_lambda_runs_its_handler_once(lambda_env: str) -> None:
    from lambda_idempotency import idempotent

    table = create_idempotency_table(default_client(None, None), next(_tables))
    store = DynamoDBStore(table)
    effects: list[int] = []

    @idempotent(store=store, key="id", payload="@")
    def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
        effects.append(1)
        return {"id": event["id"], "big": "x" * 5000, "bytes": len(effects)}

    first = handler({"id": "a"}, None)
    assert handler({"id": "a"}, None) == first and effects == [1]
    assert isinstance(store._caller(), DirectWire)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AWS_PROFILE", "other"),
        ("AWS_USE_FIPS_ENDPOINT", "true"),
        ("AWS_USE_DUALSTACK_ENDPOINT", "true"),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r"),
        ("AWS_DATA_PATH", "/nowhere"),
    ],
)
def test_settings_only_a_session_reads_send_the_calls_to_a_client(
    lambda_env: str, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    assert isinstance(environment_settings(None, None, "t"), str)
    assert variable in DynamoDBStore("t")._build_direct()


def test_a_config_file_a_table_arn_and_partial_credentials_send_the_calls_to_a_client(
    lambda_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert "configuration file" in str(environment_settings(None, None, "t"))
    monkeypatch.delenv("AWS_CONFIG_FILE")
    assert "ARN" in str(environment_settings(None, None, "arn:aws:dynamodb:us-east-1:1:table/t"))
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")  # the client raises it, as it always did
    assert "PartialCredentialsError" in DynamoDBStore("t")._build_direct()


def test_outside_lambda_a_default_store_uses_a_client(
    lambda_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    assert not isinstance(DynamoDBStore("t")._caller(), DirectWire)
    monkeypatch.setenv("IDEMPOTENCY_DIRECT_WIRE", "1")
    assert isinstance(DynamoDBStore("t")._caller(), DirectWire)
    monkeypatch.setenv("IDEMPOTENCY_FAST_WIRE", "0")
    assert not isinstance(DynamoDBStore("t")._caller(), DirectWire)


def test_a_tracer_patching_botocore_sends_the_calls_to_a_client(
    lambda_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.client import BaseClient

    original = BaseClient._make_api_call

    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BaseClient, "_make_api_call", traced)
    assert "patched" in str(DynamoDBStore("t")._build_direct())


def _regions() -> list[str]:
    import botocore

    path = os.path.join(os.path.dirname(botocore.__file__), "data", "partitions.json")
    with open(path) as file:
        partitions = json.load(file)["partitions"]
    listed = {r for p in partitions for r in p["regions"] if not r.startswith("aws-")}
    return [*sorted(listed), "xx-future-1", "cn-future-9"]


def test_each_regions_endpoint_is_the_one_botocores_rules_give(
    lambda_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB")
    session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b")
    for region in _regions():
        settings = environment_settings(None, region, "t")
        assert not isinstance(settings, str), (region, settings)
        client = session.client("dynamodb", region_name=region)
        sent = _sent(client, client.meta.events, "get_item", TableName="t", Key={"pk": {"S": "k"}})
        assert settings.url == sent.url, region


def test_a_tracer_patching_after_the_path_was_built_gets_the_calls(
    pair: tuple[DirectWire, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """X-Ray, OpenTelemetry or Powertools' Tracer set up after INIT: the calls go through a
    client from then on, so the tracer sees them."""
    from botocore.client import BaseClient

    direct, _, table = pair
    original = BaseClient._make_api_call
    seen: list[str] = []

    def traced(self: Any, operation: str, params: Any) -> Any:
        seen.append(operation)
        return original(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", traced)
    direct.get_item(TableName=table, Key={"pk": {"S": "k"}})
    assert seen == ["GetItem"]


def test_what_a_library_adds_to_every_botocore_session_is_on_the_direct_path_too(
    lambda_env: str,
) -> None:
    """Powertools, once imported, adds its user agent to every botocore session
    (`botocore.register_initializer`); the direct path's requests carry it as a client's do."""
    import botocore

    def tag(request: Any, **_: Any) -> None:
        request.headers["User-Agent"] = request.headers["User-Agent"] + " Library/1.0"

    def initializer(session: Any) -> None:
        session.register("request-created", tag)

    botocore.register_initializer(initializer)
    try:
        direct = DynamoDBStore("t")._caller()
        client = boto3.Session().client("dynamodb")
    finally:
        botocore.unregister_initializer(initializer)
    assert isinstance(direct, DirectWire)
    key = {"TableName": "t", "Key": {"pk": {"S": "k"}}}
    ours = _sent(direct, direct.events, "get_item", **key).headers["User-Agent"]
    theirs = _sent(client, client.meta.events, "get_item", **key).headers["User-Agent"]
    assert _text(ours).endswith(" Library/1.0") and _text(theirs).endswith(" Library/1.0")
