"""Attacks on the direct path (`_stores.dynamodb.direct`): a store built without `client=` in
Lambda sends its PutItem, GetItem, BatchGetItem and BatchWriteItem itself, and must behave
exactly as the boto3 client path would for everything a user can observe, or step aside.

Every comparison builds the reference in the same environment: `DynamoDBStore(table,
fast_wire=False)`, the store's own default boto3 client with nothing lean in the way. Faults
and odd answers go in through botocore's `before-send` on both (the direct path's `events`,
the client's `meta.events`), answered there so that nothing but DynamoDB Local is reached; an
HTTPS proxy on a closed loopback port catches any request that would leave anyway.

A promise that holds is a plain test. The attack found 14 defects, each first a strict xfail;
all are fixed, and each case's text (in the tables below, or the test's docstring) still says
what the direct path did before, and what that cost.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import datetime
import json
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.auth
import pytest
import urllib3
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from lambda_idempotency import (
    DynamoDBStore,
    IdempotencyError,
    InProgressError,
    StoreError,
    current_execution,
    idempotent,
)
from lambda_idempotency._base import lifecycle
from lambda_idempotency._dev.local_tables import local_client
from lambda_idempotency._stores.dynamodb.direct.transport import DirectWire
from lambda_idempotency.testing import RoundTrips, create_idempotency_table
from tests.reliability import scenarios
from tests.reliability.faults import Fault, FaultInjector, fast_retries

pytestmark = pytest.mark.dynamodb_local

LAMBDA_ENVIRONMENT = {
    "AWS_LAMBDA_FUNCTION_NAME": "direct-attacks",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
    # A tripwire: an https request that escapes the before-send answers fails at once here.
    "HTTPS_PROXY": "http://127.0.0.1:9",
}
"""What Lambda's runtime sets that a store building its own client reads."""
CLEARED_PREFIXES = ("AWS_", "IDEMPOTENCY_", "BOTO")
CLEARED = ("HTTP_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY")
FROZEN = datetime.datetime(2026, 11, 28, 12, 0, 0)
"""Signing time for request comparisons: both paths sign the same second."""
THROTTLE = b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"m"}'
PTEE = b'{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}'
ISE = b'{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"m"}'
VALIDATION = b'{"__type":"com.amazon.coral.validate#ValidationException","message":"m"}'
SEED_KEY = {"pk": {"S": "seeded"}}

Step = Callable[[Any], Any]


# -- the world -------------------------------------------------------------------------------


ABSENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no-such-aws-config")
"""Where the configuration files are said to be: nowhere."""


@pytest.fixture(scope="module")
def shared_session() -> Any:
    """One boto3 session for the module's clients (building one per test costs seconds on a
    busy machine). It caches the credentials it first finds, the Lambda environment's: tests
    that vary credentials take a fresh one."""
    return boto3.session.Session()


@pytest.fixture
def lambda_env(
    monkeypatch: pytest.MonkeyPatch, dynamodb_local_endpoint: str, shared_session: Any
) -> str:
    """A Lambda function's environment pointed at DynamoDB Local, with no configuration file
    (each named file is absent), boto3's default session the module's own."""
    for name in list(os.environ):
        if name.startswith(CLEARED_PREFIXES) or name in CLEARED or name == "_X_AMZN_TRACE_ID":
            monkeypatch.delenv(name)
    for name, value in LAMBDA_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_local_endpoint)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "BOTO_CONFIG"):
        monkeypatch.setenv(name, ABSENT)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", shared_session)
    return dynamodb_local_endpoint


@pytest.fixture
def lambda_table(lambda_env: str) -> str:
    admin = local_client(lambda_env)
    table = create_idempotency_table(admin, f"direct-attack-{uuid.uuid4().hex[:10]}")
    admin.put_item(TableName=table, Item={**SEED_KEY, "x": {"S": "y"}})
    return table


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's back-off (and the store's) recorded instead of slept, on both paths."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def setenv(monkeypatch: pytest.MonkeyPatch, changes: dict[str, str | None]) -> None:
    for name, value in changes.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


def direct_store(table: str, **options: Any) -> DynamoDBStore:
    store = DynamoDBStore(table, **options)
    assert isinstance(store._caller(), DirectWire), store._direct
    return store


def client_store(table: str) -> DynamoDBStore:
    """The reference: the store's own default boto3 client, in the same environment."""
    return DynamoDBStore(table, fast_wire=False)


def events_of(store: DynamoDBStore) -> Any:
    caller = store._caller()
    return caller.events if isinstance(caller, DirectWire) else store.client.meta.events


def caller_of(store: DynamoDBStore) -> Any:
    caller = store._caller()
    return caller if isinstance(caller, DirectWire) else store.client


# -- answers, as a proxy or DynamoDB could send them --------------------------------------------


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> Step:
    def step(request: Any) -> AWSResponse:
        return AWSResponse(request.url, status, dict(headers or {}), _Body(body))

    return step


def raises(error: type[Exception]) -> Step:
    def step(request: Any) -> None:
        raise error(endpoint_url=request.url)

    return step


CANNED = answer(200, b"{}", {"x-amzn-requestid": "canned"})
_LOST = urllib3.PoolManager(maxsize=2)


def lost(request: Any) -> None:
    """The write lands (sent to DynamoDB Local for real), its answer is lost."""
    headers = {name: _text(value) for name, value in request.headers.items()}
    _LOST.request(request.method, request.url, body=request.body, headers=headers, retries=False)
    raise ReadTimeoutError(endpoint_url=request.url)


class Script:
    """A before-send hook: each request takes the next step (an answer, a raised error, or
    None: sent to DynamoDB Local for real), then `then`."""

    def __init__(self, steps: list[Step | None], *, then: Step | None = None) -> None:
        self.steps = list(steps)
        self.then = then
        self.requests: list[Any] = []

    def __call__(self, request: Any, **_: Any) -> Any:
        self.requests.append(request)
        step = self.steps.pop(0) if self.steps else self.then
        return None if step is None else step(request)

    @contextlib.contextmanager
    def on(self, events: Any) -> Iterator[Script]:
        events.register("before-send.dynamodb", self)
        try:
            yield self
        finally:
            events.unregister("before-send.dynamodb", self)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def target(request: Any) -> str:
    return _text(request.headers.get("X-Amz-Target", b"")).rsplit(".", 1)[-1]


def counted_handler(store: DynamoDBStore, **options: Any) -> tuple[Any, list[str]]:
    runs: list[str] = []
    options.setdefault("cache_size", 0)

    @idempotent(store=store, key="id", **options)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(event["id"])
        for write in event.get("enlist", []):
            current_execution().add_write(write)
        return {"ran": event["id"]}

    return handler, runs


def store_outcome(call: Callable[[], Any], *, exact_cause: bool = False) -> tuple[Any, ...]:
    """What the user gets: the answer, or the error's class and its StoreError fields (the
    chained botocore error's class, or 'ClientError' for any of its modeled subclasses)."""
    try:
        return ("ok", call())
    except StoreError as exc:
        cause = exc.__cause__
        metadata = (getattr(cause, "response", None) or {}).get("ResponseMetadata", {})
        return (
            "StoreError",
            exc.code,
            exc.retryable,
            exc.maybe_applied,
            "ClientError"
            if isinstance(cause, ClientError) and not exact_cause
            else type(cause).__name__,
            metadata.get("RetryAttempts"),
            metadata.get("MaxAttemptsReached"),
        )
    except Exception as exc:
        return (type(exc).__name__,)


# -- where requests go, as whom: the environment as botocore reads it ----------------------------


@pytest.fixture
def frozen_signing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda remove_tzinfo=True: FROZEN)


def sent(store: DynamoDBStore) -> tuple[str, dict[str, str], bytes]:
    """The store's read of one record, as it left: URL, headers (less the per-call id and the
    user agent, compared on their own), body. Answered in before-send: nothing leaves."""
    with Script([], then=CANNED).on(events_of(store)) as script:
        store.get("attack-pk")
    request = script.requests[0]
    skipped = ("amz-sdk-invocation-id", "user-agent")
    headers = {k: _text(v) for k, v in request.headers.items() if k.lower() not in skipped}
    return request.url, headers, request.body


SAME_ENDPOINT = {
    "endpoint from the environment": {},
    "generic endpoint variable": {
        "AWS_ENDPOINT_URL_DYNAMODB": None,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    },
    "empty service endpoint, generic set": {
        "AWS_ENDPOINT_URL_DYNAMODB": "",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9/",
    },
    "endpoint with a path": {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9/prefix"},
    "endpoint with a slash path": {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9/prefix/"},
    "endpoint with an encoded path": {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9/a%20b/c"},
    "endpoint with userinfo": {"AWS_ENDPOINT_URL_DYNAMODB": "http://user:pw@127.0.0.1:9"},
    "IPv6 endpoint": {"AWS_ENDPOINT_URL_DYNAMODB": "http://[::1]:9/p"},
    "IPv6 endpoint, no port": {"AWS_ENDPOINT_URL_DYNAMODB": "http://[::1]"},
    "https on 443, upper-case host": {"AWS_ENDPOINT_URL_DYNAMODB": "https://HOST.example:443"},
    "endpoint with a trailing space (steps aside)": {
        "AWS_ENDPOINT_URL_DYNAMODB": " http://127.0.0.1:9"
    },
    "endpoint with a query (steps aside)": {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9?x=1"},
    "ignore configured endpoints = true": {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
    "trace id in Lambda": {"_X_AMZN_TRACE_ID": "Root=1-5e1b4151-5ac6c58f;Parent=x;Sampled=1"},
    "region from AWS_REGION only": {
        "AWS_ENDPOINT_URL_DYNAMODB": None,
        "AWS_DEFAULT_REGION": None,
        "AWS_REGION": "eu-west-1",
    },
    **{
        f"region {region}": {
            "AWS_ENDPOINT_URL_DYNAMODB": None,
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
        }
        for region in (
            "eu-central-2",
            "cn-north-1",
            "us-gov-west-1",
            "us-iso-east-1",
            "eu-isoe-west-1",
            "eusc-de-east-1",
            "mars-1",
        )
    },
    "FIPS variable (steps aside)": {
        "AWS_ENDPOINT_URL_DYNAMODB": None,
        "AWS_USE_FIPS_ENDPOINT": "true",
    },
    "dual-stack variable (steps aside)": {
        "AWS_ENDPOINT_URL_DYNAMODB": None,
        "AWS_USE_DUALSTACK_ENDPOINT": "true",
    },
    "account id in the environment (steps aside)": {
        "AWS_ENDPOINT_URL_DYNAMODB": None,
        "AWS_ACCOUNT_ID": "123456789012",
    },
}
DIFFERENT_ENDPOINT = {
    "ignore configured endpoints = 1": (
        {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "1"},
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=1 (or yes): botocore's ensure_boolean takes only "
        "'true', so the client keeps the configured endpoint; the direct path ignores it and "
        "sends the claims to the Region's public endpoint",
    ),
    "ignore configured endpoints = yes": (
        {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "yes"},
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=yes: see =1",
    ),
    "FIPS pseudo-region us-east-1-fips": (
        {
            "AWS_ENDPOINT_URL_DYNAMODB": None,
            "AWS_DEFAULT_REGION": "us-east-1-fips",
            "AWS_REGION": "us-east-1-fips",
        },
        "region us-east-1-fips: botocore sends to dynamodb-fips.us-east-1 signed for us-east-1; "
        "the direct path sends to dynamodb.us-east-1-fips.amazonaws.com (no such host) signed "
        "for 'us-east-1-fips': every call fails, and FIPS is not stepped aside for",
    ),
    "FIPS pseudo-region fips-us-gov-west-1": (
        {
            "AWS_ENDPOINT_URL_DYNAMODB": None,
            "AWS_DEFAULT_REGION": "fips-us-gov-west-1",
            "AWS_REGION": "fips-us-gov-west-1",
        },
        "region fips-us-gov-west-1: botocore sends to dynamodb.us-gov-west-1 signed for "
        "us-gov-west-1; the direct path to dynamodb.fips-us-gov-west-1.amazonaws.com",
    ),
}


@pytest.mark.parametrize("changes", SAME_ENDPOINT.values(), ids=SAME_ENDPOINT.keys())
def test_requests_go_where_the_clients_go_signed_as_the_client_signs(
    lambda_table: str,
    monkeypatch: pytest.MonkeyPatch,
    frozen_signing: None,
    changes: dict[str, str | None],
) -> None:
    setenv(monkeypatch, changes)
    assert sent(DynamoDBStore(lambda_table)) == sent(client_store(lambda_table))


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(changes, id=name, marks=())
        for name, (changes, reason) in DIFFERENT_ENDPOINT.items()
    ],
)
def test_requests_go_where_the_clients_go_for_values_botocore_reads_its_own_way(
    lambda_table: str,
    monkeypatch: pytest.MonkeyPatch,
    frozen_signing: None,
    changes: dict[str, str | None],
) -> None:
    setenv(monkeypatch, changes)
    assert sent(DynamoDBStore(lambda_table)) == sent(client_store(lambda_table))


def test_a_table_named_by_its_arn_goes_where_the_client_sends_it(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch, frozen_signing: None
) -> None:
    setenv(monkeypatch, {"AWS_ENDPOINT_URL_DYNAMODB": None})
    arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{lambda_table}"
    store = DynamoDBStore(arn)
    assert not isinstance(store._caller(), DirectWire)
    assert sent(store) == sent(client_store(arn))


REFUSED = {
    "endpoint port out of range": ({"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:99999"}, None),
    "endpoint with a trailing space": (
        {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9 "},
        None,
    ),
    "region with a trailing space": (
        {"AWS_ENDPOINT_URL_DYNAMODB": None, "AWS_DEFAULT_REGION": "us-east-1 "},
        None,
    ),
    "endpoint host with an underscore": (
        {"AWS_ENDPOINT_URL_DYNAMODB": "http://dynamodb_local:8000"},
        "botocore refuses an endpoint whose host is no valid DNS name (an underscore, as a "
        "compose service name has, a %-escape, non-ASCII): the client path raises StoreError "
        "InvalidRequest before anything is sent; the direct path sends there, and the same "
        "store's transactions and Powertools-layout releases (its fallback client) fail",
    ),
    "endpoint host with a %-escape": (
        {"AWS_ENDPOINT_URL_DYNAMODB": "http://h%41st:8000"},
        "see the underscore case",
    ),
    "empty CA bundle": (
        {"AWS_CA_BUNDLE": ""},
        "AWS_CA_BUNDLE='': botocore's client refuses it (InvalidConfigError); the direct path "
        "verifies against its default bundle and serves",
    ),
    "bogus account-id endpoint mode": (
        {"AWS_ACCOUNT_ID_ENDPOINT_MODE": "bogus"},
        "AWS_ACCOUNT_ID_ENDPOINT_MODE=bogus: botocore's client refuses it (InvalidConfigError); "
        "the direct path reads it only when the credentials carry an account id, and serves",
    ),
    "account-id endpoint mode required, no account id": (
        {"AWS_ENDPOINT_URL_DYNAMODB": None, "AWS_ACCOUNT_ID_ENDPOINT_MODE": "required"},
        "AWS_ACCOUNT_ID_ENDPOINT_MODE=required without an account id: botocore refuses to "
        "resolve an endpoint (EndpointResolutionError); the direct path sends to the "
        "Region's endpoint, which the setting exists to forbid",
    ),
    "empty AWS_DEFAULT_REGION, AWS_REGION set": (
        {"AWS_ENDPOINT_URL_DYNAMODB": None, "AWS_DEFAULT_REGION": ""},
        "AWS_DEFAULT_REGION='' with AWS_REGION set: botocore's client takes the empty region "
        "and fails (ValueError); the direct path falls through to AWS_REGION and serves",
    ),
}


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(
            changes,
            id=name,
            marks=(),
        )
        for name, (changes, reason) in REFUSED.items()
    ],
)
def test_what_botocores_client_refuses_the_direct_path_refuses(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch, changes: dict[str, str | None]
) -> None:
    """Answered in before-send wherever a request gets that far: only refusals differ."""
    setenv(monkeypatch, changes)
    outcomes = []
    for store in (DynamoDBStore(lambda_table), client_store(lambda_table)):
        script = Script([], then=CANNED)

        def read(store: DynamoDBStore = store, script: Script = script) -> Any:
            try:
                events = events_of(store)
            except Exception:  # no client to be built: the store's call says so, sends nothing
                return store.get("attack-pk")
            with script.on(events):
                return store.get("attack-pk")

        outcomes.append(store_outcome(read))
    assert outcomes[0] == outcomes[1]


def test_the_claim_and_its_transactional_completion_reach_one_endpoint(
    lambda_table: str, lambda_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "1"})
    store = DynamoDBStore(lambda_table)
    urls: list[str] = []
    away = Script([], then=CANNED)  # whatever goes elsewhere than DynamoDB Local is answered

    def route(request: Any, **_: Any) -> Any:
        urls.append(request.url)
        return None if request.url.startswith(lambda_env) else away(request)

    events = events_of(store)
    events.register("before-send.dynamodb", route)
    if isinstance(store._caller(), DirectWire):
        store.client.meta.events.register("before-send.dynamodb", route)
    handler, runs = counted_handler(store)
    business = {"Put": {"TableName": lambda_table, "Item": {"pk": {"S": "business"}}}}
    outcome = store_outcome(lambda: handler({"id": "split", "enlist": [business]}, None))
    assert len({url.split("/")[2] for url in urls}) == 1, urls
    assert outcome == ("ok", {"ran": "split"}) and runs == ["split"]


def test_socket_options_are_the_clients(lambda_table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    setenv(monkeypatch, {"BOTOCORE_TCP_KEEPALIVE": "1"})
    wire = direct_store(lambda_table)._caller()
    client = client_store(lambda_table).client
    assert wire._session()._socket_options == client._endpoint.http_session._socket_options


def test_the_user_agent_is_the_clients(lambda_table: str) -> None:
    agents = []
    for store in (direct_store(lambda_table), client_store(lambda_table)):
        with Script([], then=CANNED).on(events_of(store)) as script:
            store.get("attack-pk")
        agents.append(_text(script.requests[0].headers["User-Agent"]))
    assert agents[0] == agents[1]


def test_a_store_error_names_the_endpoint_as_the_clients_does(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    from botocore.exceptions import EndpointConnectionError

    setenv(monkeypatch, {"AWS_ENDPOINT_URL_DYNAMODB": None})
    messages = []
    for store in (direct_store(lambda_table), client_store(lambda_table)):
        script = Script([], then=raises(EndpointConnectionError))
        with script.on(events_of(store)), pytest.raises(StoreError) as caught:
            store.get("attack-pk")
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


CREDENTIALS = {
    "expired AWS_CREDENTIAL_EXPIRATION": {"AWS_CREDENTIAL_EXPIRATION": "2000-01-01T00:00:00Z"},
    "future AWS_CREDENTIAL_EXPIRATION": {"AWS_CREDENTIAL_EXPIRATION": "2099-01-01T00:00:00Z"},
    "unparseable AWS_CREDENTIAL_EXPIRATION": {"AWS_CREDENTIAL_EXPIRATION": "soon"},
    "no secret key": {"AWS_SECRET_ACCESS_KEY": None},
    "empty secret key": {"AWS_SECRET_ACCESS_KEY": ""},
    "empty session token": {"AWS_SESSION_TOKEN": ""},
    "legacy security token": {"AWS_SESSION_TOKEN": None, "AWS_SECURITY_TOKEN": "local"},
    "unreachable HTTP proxy": {"HTTP_PROXY": "http://127.0.0.1:9"},
    "HTTP proxy, endpoint in NO_PROXY": {
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1",
    },
    "missing CA bundle (http endpoint)": {"AWS_CA_BUNDLE": ABSENT},
}


@pytest.mark.parametrize("changes", CREDENTIALS.values(), ids=CREDENTIALS.keys())
def test_credentials_and_proxies_from_the_environment_end_as_the_clients_do(
    lambda_table: str,
    monkeypatch: pytest.MonkeyPatch,
    no_sleep: list[float],
    changes: dict[str, str | None],
) -> None:
    """Against DynamoDB Local for real: the first run of a key, and its replay."""
    setenv(monkeypatch, changes)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # credentials read afresh
    outcomes = []
    for path, store in enumerate((DynamoDBStore(lambda_table), client_store(lambda_table))):
        handler, runs = counted_handler(store, namespace=f"creds-{path}")
        key = "creds"
        first = store_outcome(lambda handler=handler, key=key: handler({"id": key}, None))
        again = store_outcome(lambda handler=handler, key=key: handler({"id": key}, None))
        outcomes.append((first, again, len(runs)))
    assert outcomes[0] == outcomes[1]


# -- answers: the four operations' parsing, retries and errors against botocore's -----------------


def _compared(response: dict[str, Any]) -> dict[str, Any]:
    """An answer less what differs between two real answers (request id, date, CRC)."""
    response = copy.deepcopy(response)
    metadata = response.pop("ResponseMetadata", {})
    response["_meta"] = {
        name: metadata.get(name)
        for name in ("HTTPStatusCode", "RetryAttempts", "MaxAttemptsReached")
    }
    return response


def transport_outcome(store: DynamoDBStore, steps: list[Step | None], table: str) -> Any:
    """One GetItem through the store's caller (the direct path, or the boto3 client) with
    `steps` in before-send: the parsed answer or error, and the requests sent."""
    with Script(steps).on(events_of(store)) as script:
        try:
            outcome: Any = (
                "ok",
                _compared(caller_of(store).get_item(TableName=table, Key=SEED_KEY)),
            )
        except ClientError as exc:
            outcome = ("ClientError", _compared(exc.response))
        except Exception as exc:
            outcome = (type(exc).__name__,)
    return outcome, len(script.requests)


def _nested(depth: int) -> bytes:
    value: dict[str, Any] = {"B": "AA=="}
    for _ in range(depth):
        value = {"L": [value]}
    return json.dumps({"Item": {"pk": {"S": "seeded"}, "deep": value}}).encode()


def _huge() -> bytes:
    blob = base64.b64encode(os.urandom(600_000)).decode()
    many = [{"M": {"b": {"B": "AAE="}, "s": {"S": "x"}}}] * 5_000
    return json.dumps(
        {"Item": {"pk": {"S": "seeded"}, "r": {"B": blob}, "l": {"L": many}}}
    ).encode()


CRC_OK = b'{"Item":{"pk":{"S":"seeded"}}}'
SAME_ANSWER: dict[str, list[Step | None]] = {
    "real answer": [None],
    "HTML 502 page x3": [answer(502, b"<html><body>Bad Gateway</body></html>")] * 3,
    "HTML 503 with doctype x3": [answer(503, b"<!DOCTYPE html><html></html>")] * 3,
    "empty 500 x3": [answer(500, b"")] * 3,
    "non-JSON 400": [answer(400, b"oops")],
    "400 without __type": [answer(400, b'{"message":"m"}')],
    "429 without __type x3": [answer(429, b"{}")] * 3,
    "400 with __type a number": [answer(400, b'{"__type": 5}')],
    "truncated 200": [answer(200, b'{"Item": {"pk": {"S": "se')],
    "non-UTF-8 200": [answer(200, b"\xff\xfe{}")],
    "non-UTF-8 400": [answer(400, b"\xff\xfe{}")],
    "200 with Item a list": [answer(200, b'{"Item": [1]}')],
    "200 with Item null": [answer(200, b'{"Item": null}')],
    "200 with an attribute of two types": [
        answer(200, b'{"Item": {"pk": {"S": "seeded"}, "z": {"S": "a", "N": "1"}}}')
    ],
    "200 with bad base64": [answer(200, b'{"Item": {"z": {"B": "!!!"}}}')],
    "200 with unknown members": [
        answer(200, b'{"Item":{"pk":{"S":"k"}},"Bogus":1,"ConsumedCapacity":{"TableName":"t"}}')
    ],
    "wrong x-amz-crc32 x3": [answer(200, CRC_OK, {"x-amz-crc32": "1"})] * 3,
    "wrong x-amz-crc32 then real": [answer(200, CRC_OK, {"x-amz-crc32": "1"}), None],
    "non-numeric x-amz-crc32": [answer(200, CRC_OK, {"x-amz-crc32": "abc"})],
    "300": [answer(300, b"{}")],
    "301": [answer(301, b"{}")],
    "204": [answer(204, b"")],
    "throttled twice, then real": [answer(400, THROTTLE)] * 2 + [None],
    "throttled x3": [answer(400, PTEE)] * 3,
    "500 twice, then real": [answer(500, ISE)] * 2 + [None],
    "connection reset twice, then real": [raises(ConnectionClosedError)] * 2 + [None],
    "connection reset x3": [raises(ConnectionClosedError)] * 3,
    "read timeout x3": [raises(ReadTimeoutError)] * 3,
    "validation error": [answer(400, VALIDATION)],
    "modeled error with blobs in its item": [
        answer(
            400,
            b'{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",'
            b'"message":"m","Item":{"b":{"B":"AAE="},"m":{"M":{"bs":{"BS":["AQ=="]},'
            b'"l":{"L":[{"B":"Ag=="}]}}}}}',
        )
    ],
    "modeled error, capital Message": [
        answer(400, b'{"__type":"x#ResourceNotFoundException","Message":"cap"}')
    ],
    "error code with ':' and '#'": [answer(400, b'{"__type":"a:b#c"}')],
    "throttling reasons": [answer(400, THROTTLE[:-1] + b',"throttlingReasons":[{"reason":"r"}]}')]
    * 3,
    "huge answer (1 MB)": [answer(200, _huge())],
    "nested 32 deep": [answer(200, _nested(32))],
}
DIFFERENT_ANSWER: dict[str, tuple[list[Step | None], str]] = {
    "400 with a JSON list body": (
        [answer(400, b"[1, 2]")],
        "an error body that is JSON but no object: botocore's parser raises AttributeError "
        "(the store: StoreError InvalidRequest); the direct path reads code '400'",
    ),
    "500 with a JSON list body x3": (
        [answer(500, b"[]")] * 3,
        "a 5xx whose body is a JSON list: botocore raises AttributeError at once (StoreError "
        "InvalidRequest, not retryable, not maybe_applied); the direct path retries 3 times "
        "and raises code '500' (retryable, maybe_applied)",
    ),
    "200 with a JSON null body": (
        [answer(200, b"null")],
        "a 200 whose body is JSON null, a list or a string: botocore raises AttributeError; "
        "the direct path reads an empty success (a claim granted, a record absent)",
    ),
    "200 with a JSON list body": ([answer(200, b"[]")], "see the null body"),
    "400 with __type null": (
        [answer(400, b'{"__type": null, "message": "m"}')],
        "__type null: botocore reads code ''; the direct path raises TypeError",
    ),
    "x-amzn-query-error header": (
        [answer(400, THROTTLE, {"x-amzn-query-error": "Foo;Sender"})] * 3,
        "an x-amzn-query-error header: botocore reads code 'Foo' (QueryErrorCode, Type) and "
        "does not retry; the direct path ignores the header: ThrottlingException, 3 attempts",
    ),
    "unknown attribute type": (
        [answer(200, b'{"Item": {"pk": {"S": "seeded"}, "z": {"XX": "1"}}}')],
        "an attribute value of a type botocore does not know: botocore gives {} (its "
        "unknown-union handling); the direct path passes {'XX': '1'} on",
    ),
    "__type inside an attribute value": (
        [answer(200, b'{"Item": {"pk": {"S": "seeded"}, "z": {"__type": "q", "S": "a"}}}')],
        "an attribute value carrying __type: botocore drops it, the direct path keeps it",
    ),
    "attribute value null": (
        [answer(200, b'{"Item": {"pk": null}}')],
        "an attribute value null: botocore reads None; the direct path raises TypeError",
    ),
    "list element a string": (
        [answer(200, b'{"Item": {"z": {"L": ["x"]}}}')],
        "a list element (or map value) that is no object: botocore raises AttributeError, "
        "the direct path passes the string on",
    ),
}


@pytest.mark.parametrize("steps", SAME_ANSWER.values(), ids=SAME_ANSWER.keys())
def test_answers_parse_retry_and_fail_as_botocores(
    lambda_table: str, no_sleep: list[float], steps: list[Step | None]
) -> None:
    outcomes = [
        transport_outcome(store, steps, lambda_table)
        for store in (direct_store(lambda_table), client_store(lambda_table))
    ]
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(
    "steps",
    [pytest.param(steps, id=name, marks=()) for name, (steps, reason) in DIFFERENT_ANSWER.items()],
)
def test_answers_botocore_refuses_or_reads_its_own_way_are_read_as_botocore_reads_them(
    lambda_table: str, no_sleep: list[float], steps: list[Step | None]
) -> None:
    outcomes = [
        transport_outcome(store, steps, lambda_table)
        for store in (direct_store(lambda_table), client_store(lambda_table))
    ]
    assert outcomes[0] == outcomes[1]


RETRY_SETTINGS = {
    "AWS_MAX_ATTEMPTS=1": {"AWS_MAX_ATTEMPTS": "1"},
    "AWS_MAX_ATTEMPTS=10": {"AWS_MAX_ATTEMPTS": "10"},
    "AWS_RETRY_MODE=legacy": {"AWS_RETRY_MODE": "legacy"},
    "AWS_RETRY_MODE=adaptive": {"AWS_RETRY_MODE": "adaptive"},
}


@pytest.mark.parametrize("changes", RETRY_SETTINGS.values(), ids=RETRY_SETTINGS.keys())
def test_retry_settings_in_the_environment_retry_as_the_client_retries(
    lambda_table: str,
    monkeypatch: pytest.MonkeyPatch,
    no_sleep: list[float],
    changes: dict[str, str],
) -> None:
    setenv(monkeypatch, changes)
    steps: list[Step | None] = [answer(400, THROTTLE)] * 5
    outcomes = [
        transport_outcome(store, steps, lambda_table)
        for store in (direct_store(lambda_table), client_store(lambda_table))
    ]
    assert outcomes[0] == outcomes[1]


CLAIM_FAULTS: dict[str, list[Step | None]] = {
    "throttled x3": [answer(400, THROTTLE)] * 3,
    "throttled twice": [answer(400, PTEE)] * 2,
    "500 x3": [answer(500, ISE)] * 3,
    "HTML 502 x3": [answer(502, b"<html>bad gateway</html>")] * 3,
    "connection reset x3": [raises(ConnectionClosedError)] * 3,
    "read timeout x3": [raises(ReadTimeoutError)] * 3,
    "lost answer x3 (each attempt lands)": [lost] * 3,
    "lost answer once": [lost],
    "400 without __type": [answer(400, b"{}")],
    "validation error": [answer(400, VALIDATION)],
    "refused claim, item unreadable": [
        answer(400, b'{"__type":"x#ConditionalCheckFailedException","Item":{"status":{"N":"1"}}}')
    ],
}


def _claimed_twice(store: DynamoDBStore, steps: list[Step | None], namespace: str) -> Any:
    """The first requests take `steps` (the rest go to DynamoDB Local); one key is called
    twice: the answers, the handler's runs, the requests sent."""
    handler, runs = counted_handler(store, lease_seconds=1, namespace=namespace)
    key = "claimed"
    with Script(steps).on(events_of(store)) as script:
        answers = [store_outcome(lambda: handler({"id": key}, None)) for _ in range(2)]
    return answers, len(runs), [target(request) for request in script.requests]


@pytest.mark.parametrize("steps", CLAIM_FAULTS.values(), ids=CLAIM_FAULTS.keys())
def test_store_errors_carry_the_client_paths_fields_and_the_handler_runs_once(
    lambda_table: str, no_sleep: list[float], steps: list[Step | None]
) -> None:
    """code, retryable, maybe_applied, botocore's error, RetryAttempts, MaxAttemptsReached,
    the requests sent, the runs: the same on both paths."""
    direct = _claimed_twice(direct_store(lambda_table), steps, "direct")
    reference = _claimed_twice(client_store(lambda_table), steps, "client")
    assert direct == reference
    assert direct[1] <= 1


def test_a_store_errors_cause_is_the_clients_modeled_exception(
    lambda_table: str, no_sleep: list[float]
) -> None:
    causes = []
    for store in (direct_store(lambda_table), client_store(lambda_table)):
        with Script([answer(400, THROTTLE)] * 3).on(events_of(store)):
            causes.append(store_outcome(lambda store=store: store.get("pk"), exact_cause=True))
    assert causes[0] == causes[1]


def test_a_claim_answered_with_a_json_null_runs_nothing(
    lambda_table: str, no_sleep: list[float]
) -> None:
    direct = _claimed_twice(direct_store(lambda_table), [answer(200, b"null")], "direct")
    reference = _claimed_twice(client_store(lambda_table), [answer(200, b"null")], "client")
    assert direct[1] == reference[1] == 1


# -- the parsed answers of real DynamoDB Local answers --------------------------------------------


ITEM: dict[str, Any] = {
    "pk": {"B": b"\x00p"},
    "sk": {"B": b"\xffs"},
    "l": {"B": b"l"},
    "s": {"S": "\u00e9\U0001f600"},
    "n": {"N": "-1.5E+10"},
    "b": {"B": b"\x00\x01\x02"},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"\x00", b"\xff\xfe"]},
    "null": {"NULL": True},
    "t": {"BOOL": True},
    "f": {"BOOL": False},
    "m": {
        "M": {
            "b": {"B": b"in-m"},
            "bs": {"BS": [b"x", b"y"]},
            "l": {"L": [{"B": b"in-l-in-m"}, {"M": {"deep": {"BS": [b"d"]}}}]},
            "e": {"M": {}},
        }
    },
    "lst": {
        "L": [
            {"B": b"in-l"},
            {"BS": [b"q"]},
            {"L": [{"B": b"nested"}]},
            {"S": "x"},
            {"NULL": True},
            {"L": []},
        ]
    },
}
ITEM_KEY = {"pk": ITEM["pk"], "sk": ITEM["sk"]}
MISSING_KEY = {"pk": {"B": b"no"}, "sk": {"B": b"no"}}


def _binary_table(endpoint: str) -> str:
    """Binary keys and a local secondary index: blobs in keys, ItemCollectionMetrics."""
    table = f"direct-attack-binary-{uuid.uuid4().hex[:8]}"
    local_client(endpoint).create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": "B"} for a in ("pk", "sk", "l")
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "lsi",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "l", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    return table


REAL_CALLS: dict[str, Callable[[Any, str], Any]] = {
    "PutItem": lambda c, t: c.put_item(
        TableName=t, Item=ITEM, ReturnConsumedCapacity="INDEXES", ReturnItemCollectionMetrics="SIZE"
    ),
    "PutItem ALL_OLD": lambda c, t: c.put_item(
        TableName=t,
        Item=ITEM,
        ReturnValues="ALL_OLD",
        ReturnConsumedCapacity="TOTAL",
        ReturnItemCollectionMetrics="SIZE",
    ),
    "PutItem refused, ALL_OLD": lambda c, t: c.put_item(
        TableName=t,
        Item=ITEM,
        ConditionExpression="attribute_not_exists(pk)",
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    ),
    "PutItem invalid": lambda c, t: c.put_item(TableName=t, Item={"pk": {"S": "wrong type"}}),
    "GetItem": lambda c, t: c.get_item(
        TableName=t, Key=ITEM_KEY, ConsistentRead=True, ReturnConsumedCapacity="INDEXES"
    ),
    "GetItem absent": lambda c, t: c.get_item(TableName=t, Key=MISSING_KEY),
    "GetItem, no such table": lambda c, t: c.get_item(TableName=t + "-none", Key=ITEM_KEY),
    "BatchGetItem": lambda c, t: c.batch_get_item(
        RequestItems={t: {"Keys": [ITEM_KEY, MISSING_KEY], "ConsistentRead": True}},
        ReturnConsumedCapacity="INDEXES",
    ),
    "BatchWriteItem": lambda c, t: c.batch_write_item(
        RequestItems={t: [{"PutRequest": {"Item": ITEM}}, {"DeleteRequest": {"Key": MISSING_KEY}}]},
        ReturnConsumedCapacity="INDEXES",
        ReturnItemCollectionMetrics="SIZE",
    ),
}
UNPROCESSED = {
    "BatchGetItem": {
        "Responses": {"T": [{"pk": {"B": "AAE="}, "m": {"M": {"x": {"BS": ["AA=="]}}}}]},
        "UnprocessedKeys": {
            "T": {
                "Keys": [{"pk": {"B": "AAE="}, "sk": {"B": "/w=="}}],
                "ConsistentRead": True,
                "ProjectionExpression": "#a",
                "ExpressionAttributeNames": {"#a": "b"},
            }
        },
    },
    "BatchWriteItem": {
        "UnprocessedItems": {
            "T": [
                {"PutRequest": {"Item": {"pk": {"B": "AAE="}, "l": {"L": [{"B": "AA=="}]}}}},
                {"DeleteRequest": {"Key": {"pk": {"B": "AAE="}, "sk": {"B": "AA=="}}}},
            ]
        },
        "ItemCollectionMetrics": {
            "T": [{"ItemCollectionKey": {"pk": {"B": "AAE="}}, "SizeEstimateRangeGB": [0.0, 1.0]}]
        },
        "ConsumedCapacity": [{"TableName": "T", "CapacityUnits": 1.0}],
    },
}


def _both_parse(
    table: str, call: Callable[[Any, str], Any], status: int, body: bytes, headers: Any
) -> list[Any]:
    outcomes = []
    for store in (direct_store(table), client_store(table)):
        with Script([answer(status, body, headers)]).on(events_of(store)):
            try:
                outcomes.append(("ok", call(caller_of(store), table)))
            except ClientError as exc:
                outcomes.append(("ClientError", exc.response))
    return outcomes


def test_real_answers_of_the_four_operations_parse_as_botocore_parses_them(
    lambda_env: str,
) -> None:
    """Each real answer (every attribute type, blobs in keys, sets, maps and lists, consumed
    capacity, item collection metrics, modeled errors) recorded once, then read by both
    paths: equal, ResponseMetadata and its headers included."""
    table = _binary_table(lambda_env)
    recorder = local_client(lambda_env)
    for name, call in REAL_CALLS.items():
        recorded: dict[str, Any] = {}

        def record(http_response: Any, recorded: dict[str, Any] = recorded, **_: Any) -> None:
            recorded.update(
                status=http_response.status_code,
                headers=dict(http_response.headers),
                body=http_response.content,
            )

        recorder.meta.events.register("after-call.dynamodb", record)
        with contextlib.suppress(ClientError):
            call(recorder, table)
        recorder.meta.events.unregister("after-call.dynamodb", record)
        direct, reference = _both_parse(
            table, call, recorded["status"], recorded["body"], recorded["headers"]
        )
        assert direct == reference, name


@pytest.mark.parametrize("operation", UNPROCESSED)
def test_unprocessed_keys_and_items_with_blobs_parse_as_botocore_parses_them(
    lambda_table: str, operation: str
) -> None:
    body = json.dumps(UNPROCESSED[operation]).replace('"T"', json.dumps(lambda_table)).encode()
    call = REAL_CALLS[operation]
    direct, reference = _both_parse(lambda_table, call, 200, body, {"x-amzn-requestid": "r"})
    assert direct == reference
    assert direct[1].get("UnprocessedKeys") or direct[1].get("UnprocessedItems")


# -- the protocol's promises on the direct path, faults injected in its own emitter ------------


class _WireAsClient:
    """What tests.reliability.faults reads of a client, over the direct path's emitter."""

    def __init__(self, wire: DirectWire) -> None:
        self._wire = wire
        events = wire.events
        self.meta = type("Meta", (), {})()
        self.meta.events = type("Events", (), {})()
        self.meta.events.register = events.register
        self.meta.events.unregister = events.unregister
        self.meta.events._emitter = events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wire, name)


class DirectRig(scenarios.Rig):
    """The reliability suite's world, its store on the direct path as a Lambda function's
    own store is, faults in the direct path's before-send."""

    def __init__(self, endpoint: str) -> None:  # (no super: the Rig builds a client)
        self.table = f"reliability-direct-{uuid.uuid4().hex[:10]}"
        self.store = DynamoDBStore(self.table)
        wire = self.store._caller()
        assert isinstance(wire, DirectWire), self.store._direct
        self.client = _WireAsClient(wire)
        self.admin = local_client(endpoint)
        create_idempotency_table(self.admin, self.table)
        self.faults = FaultInjector(self.client)
        fast_retries(self.client)
        start = (self.store_time() // 1000 + 1) * 1000
        self.clock = scenarios.FakeClock(start)
        self.trial = scenarios.Trial()
        self.runs = 0


RELIABILITY = [
    "claim/unsent",
    "claim/lost",
    "claim/throttled",
    "complete-plain/lost",
    "complete-plain/5xx",
    "complete-chunked/lost",
    "release/lost",
    "release/throttled",
    "wait-get/5xx",
    "replay-batch-get/lost",
    "replay-batch-get/throttled",
    "stale-claim/after-release",
    "stale-claim/after-completion",
    "stale-release/during-retry",
    "quota-spent/throttle-on-completion",
    "refused-claim/without-record",
    "skew/-1.9s-failed-holder",
]


@pytest.mark.parametrize("name", RELIABILITY)
def test_the_handler_runs_once_and_no_key_stays_locked_under_faults_on_the_direct_path(
    lambda_env: str, name: str
) -> None:
    scenario = scenarios.SCENARIOS[name]
    rig = DirectRig(lambda_env)
    try:
        with scenarios.deadline(scenario.timeout_s):
            scenario.run(rig)
    finally:
        rig.trial.injected = max(rig.trial.injected, rig.faults.total)
        rig.close()
    assert scenario.verdict(rig.trial) == []


# -- what else sees the calls: tracers, hooks, test doubles, moto ---------------------------------


TRACED = """
import json, os
import boto3
from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency.testing import create_idempotency_table

admin = boto3.client("dynamodb")
table = create_idempotency_table(admin, os.environ["ATTACK_TABLE"])
# Lambda's INIT: stores at module scope, built (and prepared) before the tracers patch botocore
early_direct = DynamoDBStore(table)
early_client = DynamoDBStore(table, fast_wire=False)

from opentelemetry import trace
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
BotocoreInstrumentor().instrument()
from aws_xray_sdk.core import patch_all, xray_recorder
xray_recorder.configure(context_missing="IGNORE_ERROR", sampling=False)
patch_all()
segment = xray_recorder.begin_segment("direct-attacks")

late_direct = DynamoDBStore(table)

def spans(store, key):
    otel, xray = len(exporter.get_finished_spans()), len(segment.subsegments)

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event, context):
        return 1

    handler({"id": key}, None)
    return {
        "path": type(store._caller()).__name__,
        "otel": [span.name for span in exporter.get_finished_spans()[otel:]],
        "xray": [sub.name for sub in segment.subsegments[xray:]],
    }

print(json.dumps({
    "early_direct": spans(early_direct, "a"),
    "early_client": spans(early_client, "b"),
    "late_direct": spans(late_direct, "c"),
}))
"""


@pytest.fixture(scope="module")
def traced(dynamodb_local_endpoint: str) -> dict[str, Any]:
    """One interpreter: patching is for good there (X-Ray's cannot be undone)."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(CLEARED_PREFIXES) and name not in CLEARED
    }
    environment.update(LAMBDA_ENVIRONMENT)
    environment.update(
        AWS_ENDPOINT_URL_DYNAMODB=dynamodb_local_endpoint,
        AWS_LAMBDA_INITIALIZATION_TYPE="on-demand",
        AWS_CONFIG_FILE=ABSENT,
        AWS_SHARED_CREDENTIALS_FILE=ABSENT,
        BOTO_CONFIG=ABSENT,
        ATTACK_TABLE=f"direct-attack-traced-{uuid.uuid4().hex[:8]}",
        PYTHONPATH=os.pathsep.join(path for path in sys.path if path),
    )
    done = subprocess.run(
        [sys.executable, "-c", TRACED],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_tracer_patching_first_sees_every_call_the_direct_path_serving(
    traced: dict[str, Any],
) -> None:
    """X-Ray's and OpenTelemetry's wrappers, both at once: the direct path calls them (issue
    40; it used to step aside to a client)."""
    assert traced["late_direct"]["path"] == "DirectWire"
    assert traced["late_direct"]["otel"] == ["DynamoDB.PutItem"] * 2
    assert traced["late_direct"]["xray"] == ["dynamodb"] * 2
    assert traced["early_client"]["otel"] == ["DynamoDB.PutItem"] * 2
    assert traced["early_client"]["xray"] == ["dynamodb"] * 2


def test_a_tracer_patching_after_init_sees_every_call(traced: dict[str, Any]) -> None:
    assert traced["early_direct"]["otel"] == ["DynamoDB.PutItem"] * 2
    assert traced["early_direct"]["xray"] == ["dynamodb"] * 2


def _calls_seen_by_client_hooks(
    monkeypatch: pytest.MonkeyPatch, store: Callable[[], DynamoDBStore]
) -> list[str]:
    """Hooks on every client as it is built (BaseClient.__init__ wrapped, as Sentry's boto3
    integration does it), on boto3's default session (which every client inherits)."""
    from botocore.client import BaseClient

    seen: list[str] = []
    built = BaseClient.__init__

    def traced_init(self: Any, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        self.meta.events.register(
            "after-call", lambda model, **_: seen.append(f"client-hook {model.name}")
        )

    monkeypatch.setattr(BaseClient, "__init__", traced_init)
    session = boto3.session.Session()
    session.events.register(
        "before-send.dynamodb", lambda request, **_: seen.append(f"session-hook {target(request)}")
    )
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)
    handler, _ = counted_handler(store())
    handler({"id": f"hooked-{uuid.uuid4().hex[:8]}"}, None)
    return sorted(seen)


def test_hooks_on_every_client_and_on_the_default_session_see_the_client_paths_calls(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _calls_seen_by_client_hooks(monkeypatch, lambda: client_store(lambda_table))
    assert seen == ["client-hook PutItem"] * 2 + ["session-hook PutItem"] * 2


def test_hooks_on_every_client_and_on_the_default_session_see_the_direct_paths_calls(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _calls_seen_by_client_hooks(monkeypatch, lambda: DynamoDBStore(lambda_table))
    assert seen == ["client-hook PutItem"] * 2 + ["session-hook PutItem"] * 2


def _on_the_stores_client(store: DynamoDBStore) -> tuple[list[str], Any, list[str]]:
    """What test doubles on `store.client` see and do: the library's own RoundTrips counting
    a first run, then botocore's Stubber answering the next claim with a throttle."""
    from botocore.stub import Stubber

    handler, runs = counted_handler(store)
    trips = RoundTrips(store.client)
    handler({"id": f"counted-{uuid.uuid4().hex[:8]}"}, None)
    counted = trips.take()
    stubber = Stubber(store.client)
    stubber.add_client_error("put_item", "ProvisionedThroughputExceededException")
    stubber.activate()
    outcome = store_outcome(lambda: handler({"id": "stubbed"}, None))
    return counted, outcome[:2], [run for run in runs if run == "stubbed"]


def test_a_stubber_and_round_trips_on_store_client_see_the_client_paths_calls(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, {"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"})
    counted, outcome, runs = _on_the_stores_client(client_store(lambda_table))
    assert counted == ["PutItem", "PutItem"]
    assert outcome == ("StoreError", "ProvisionedThroughputExceededException") and runs == []


def test_a_stubber_and_round_trips_on_store_client_see_the_direct_paths_calls(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, {"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"})
    store = DynamoDBStore(lambda_table)
    assert isinstance(store._direct, DirectWire)
    counted, outcome, runs = _on_the_stores_client(store)
    assert counted == ["PutItem", "PutItem"]
    assert outcome == ("StoreError", "ProvisionedThroughputExceededException") and runs == []


@pytest.mark.parametrize("init", [False, True], ids=["first-call", "init"])
def test_moto_answers_a_store_built_in_the_lambda_environment(
    lambda_env: str, monkeypatch: pytest.MonkeyPatch, init: bool
) -> None:
    """moto imported first, as its users do: its before-send handler answers the direct
    path (the HTTPS proxy tripwire fails whatever would leave for AWS)."""
    from moto import mock_aws

    setenv(monkeypatch, {"AWS_ENDPOINT_URL_DYNAMODB": None})
    if init:
        setenv(monkeypatch, {"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"})
    with mock_aws():
        admin = boto3.client("dynamodb", region_name="us-east-1")
        table = create_idempotency_table(admin, "moto-direct")
        store = direct_store(table)
        handler, runs = counted_handler(store)
        assert handler({"id": "m"}, None) == handler({"id": "m"}, None) == {"ran": "m"}
        assert runs == ["m"]
        assert admin.scan(TableName=table)["Count"] == 1


# -- the process: threads on a cold store, a fork, a SnapStart restore, log lines -----------------


def test_threads_racing_a_cold_stores_first_call_share_one_path_and_run_each_key_once(
    lambda_table: str,
) -> None:
    store = DynamoDBStore(lambda_table)
    runs: collections.Counter[str] = collections.Counter()
    errors: list[str] = []
    callers: set[int] = set()

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs[event["id"]] += 1
        time.sleep(0.05)
        return event["id"]

    barrier = threading.Barrier(12)

    def worker(number: int) -> None:
        barrier.wait()
        try:
            handler({"id": f"race-{number % 3}"}, None)
        except InProgressError:
            pass
        except Exception as exc:
            errors.append(repr(exc))
        callers.add(id(store._caller()))

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert runs == {"race-0": 1, "race-1": 1, "race-2": 1}
    assert len(callers) == 1 and isinstance(store._caller(), DirectWire)
    assert store._client is None


def test_a_forked_child_uses_connections_of_its_own_and_runs_each_key_once(
    lambda_table: str,
) -> None:
    store = direct_store(lambda_table)
    handler, runs = counted_handler(store)
    handler({"id": "parent"}, None)  # the parent's pool holds a live connection now
    wire = store._caller()
    parent_pool = wire._http
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        try:
            answers = [handler({"id": f"child-{n}"}, None) for n in range(10)]
            answers.append(handler({"id": "parent"}, None))
            report = {"answers": answers, "runs": len(runs), "own": wire._http is not parent_pool}
        except BaseException as exc:
            report = {"error": "".join(traceback.format_exception(exc))[-1500:]}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    answers = [handler({"id": f"parent-{n}"}, None) for n in range(10)]
    _, status = os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        report = json.loads(pipe.read())
    assert status == 0 and "error" not in report, report
    assert report["own"] is True and wire._http is parent_pool
    assert report["runs"] == 1 + 10  # the parent's one run, then the child's ten
    assert report["answers"][-1] == {"ran": "parent"}  # replayed, not run again
    assert answers == [{"ran": f"parent-{n}"} for n in range(10)]


def test_after_a_snapstart_restore_the_path_signs_with_the_environments_new_credentials(
    lambda_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = direct_store(lambda_table)
    handler, _ = counted_handler(store)
    handler({"id": "before"}, None)
    pool = store._caller()._http
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "restored")
    lifecycle.after_restore()
    with Script([]).on(events_of(store)) as script:
        handler({"id": "after"}, None)
    assert store._caller()._http is not pool
    credentials = {_text(r.headers["Authorization"]).split("/")[0] for r in script.requests}
    assert credentials == {"AWS4-HMAC-SHA256 Credential=restored"}


RAW_KEY, RAW_PAYLOAD = "RAWKEY-q8z1", "PAYLOADSECRET-m4x2"


def test_no_log_line_carries_a_raw_key_or_payload_under_faults_on_the_direct_path(
    lambda_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every logger at DEBUG (botocore's included) while claims, completions and releases
    are throttled, lost, refused and fail, payloads mismatch, results replay."""
    caplog.set_level(logging.DEBUG)
    store = direct_store(lambda_table)
    client = _WireAsClient(store._caller())
    injector = FaultInjector(client)
    fast_retries(client)

    @idempotent(store=store, key="k", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        if event.get("fail"):
            raise ValueError("the handler failed")
        return {"size": len(event)}

    for kind in ("throttled", "lost", "5xx", "unsent"):
        for call in ("claim", "complete", "release"):
            injector.clear()
            injector.add(Fault(call, kind, count=5))
            key = f"{RAW_KEY}-{kind}-{call}"
            for event in (
                {"k": key, "p": RAW_PAYLOAD, "fail": 1},
                {"k": key, "p": RAW_PAYLOAD},
                {"k": key, "p": RAW_PAYLOAD + "-other"},
                {"k": key, "p": RAW_PAYLOAD},
            ):
                with contextlib.suppress(IdempotencyError, ValueError):
                    handler(event, None)
    injector.close()
    assert injector.total > 0 and len(caplog.records) > 100
    leaked = [
        record.getMessage()
        for record in caplog.records
        if any(
            secret in record.getMessage() or secret in str(record.exc_text or "")
            for secret in (RAW_KEY, RAW_PAYLOAD)
        )
    ]
    assert leaked == []
