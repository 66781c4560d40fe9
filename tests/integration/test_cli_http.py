"""`inspect --http`: an `idempotent_http` record found by what an operator has, the
`Idempotency-Key` header's value and either the request's event (--event) or the caller's
principal (--principal), on DynamoDB Local and on a real Valkey server.

Each record here is written by a real `idempotent_http` handler; the pk `inspect` computes
must be the one it wrote, which the test reads from the store itself (a scan of the
namespace's keys), never from the code under test. The principals are typed out below as
an operator would type them, from docs/http.md's table, not derived from the events."""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, ValkeyStore, idempotent_http
from lambda_idempotency._dev import cli
from tests.conftest import drop_tables, local_client
from tests.http_events import SHAPES, http_event
from tests.tenant_events import KINDS, principal_event

KEY = "8e03978e-40d5-43e8-bc93-6894a57f9324"
BODY = '{"amount_cents": 2500, "currency": "EUR"}'
COGNITO = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example"
POOL = "us-east-1:4f291106-8703-466b-8f2b-3ecee1ca56ce"
ALICE = ("iam", "arn:aws:iam::111122223333:user/alice", "AIDACKCEVSQ6C2EXAMPLE")
BOB = ("iam", "arn:aws:iam::111122223333:user/bob", "AIDAJQABLZS4A3QDU576Q")
SSO = "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_Payments_0123456789abcdef"

PRINCIPALS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "http-api-jwt": (
        ("jwt", COGNITO, "7d8ca528-4931-4254-9273-ea5ee853f271"),
        ("jwt", COGNITO, "f1b2c3d4-1111-2222-3333-444455556666"),
    ),
    "http-api-jwt-ambiguous": (
        ("jwt", "https://idp.example x", "y"),
        ("jwt", "https://idp.example", "x y"),
    ),
    "http-api-jwt-two-issuers": (
        ("jwt", "https://login.example-a.com/", "user-1"),
        ("jwt", "https://login.example-b.com/", "user-1"),
    ),
    "rest-cognito-user-pool": (
        ("jwt", COGNITO, "7d8ca528-4931-4254-9273-ea5ee853f271"),
        ("jwt", COGNITO, "f1b2c3d4-1111-2222-3333-444455556666"),
    ),
    "rest-lambda": (("lambda", "tenant-a"), ("lambda:tenant-b",)),
    "rest-lambda-shared-principal-id": (("lambda", "user"), ("lambda", "user")),
    "rest-iam-user": (ALICE, BOB),
    "rest-iam-role-sessions": (
        ("iam", f"{SSO}/alice@example.com", "AROA3XFRBF535PLBIFPI4:alice@example.com"),
        ("iam", f"{SSO}/bob@example.com", "AROA3XFRBF535PLBIFPI4:bob@example.com"),
    ),
    "rest-iam-cognito-identity-pool": (
        ("cognito-identity", POOL, "us-east-1:3f291106-8703-466b-8f2b-3ecee1ca56ce"),
        ("cognito-identity", POOL, "us-east-1:9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"),
    ),
    "rest-api-key": (("api-key", "o0y1ar8fe6"), ("api-key:k9s8ndq2vx",)),
    "http-api-iam": (ALICE, BOB),
    "http-api-iam-cognito-identity-pool": (
        ("cognito-identity", POOL, "us-east-1:3f291106-8703-466b-8f2b-3ecee1ca56ce"),
        ("cognito-identity", POOL, "us-east-1:9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"),
    ),
    "http-api-lambda": (("lambda", "tenant-a"), ("lambda", "tenant-b")),
    "http-api-lambda-simple-response": (
        ("lambda-context", '{"userId": "user-a", "plan": "gold"}'),
        ("lambda-context", '{"plan":"gold","userId":"user-b"}'),
    ),
    "http-api-mutual-tls": (
        ("client-certificate", "CN=Example Private CA", "CN=client-a.example.com"),
        ("client-certificate", "CN=Example Private CA", "CN=client-b.example.com"),
    ),
    "function-url-iam": (
        ALICE,
        ("iam", "arn:aws:iam::444455556666:user/alice", "AIDAJQABLZS4A3QDU576Q"),
    ),
    "function-url-iam-cognito-identity-pool": (
        ("cognito-identity", POOL, "us-east-1:3f291106-8703-466b-8f2b-3ecee1ca56ce"),
        ("cognito-identity", POOL, "us-east-1:9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"),
    ),
    "alb-oidc": (("anonymous",), ("anonymous",)),  # headers are never trusted by default
}
"""Principals "a" and "b" of each kind of tests/events/principals.json, as typed."""

SHAPE_PRINCIPALS: dict[str, tuple[str, ...]] = {
    "rest-api": ("anonymous",),
    "http-api": ("client-certificate", "Example issuer", "www.example.com"),
    "function-url": ("iam", "arn:aws:iam::111122223333:user/example-user", ALICE[2]),
    "alb": ("anonymous",),
    "alb-multi-value": ("anonymous",),
}
"""The principal of each shape's event of tests/events/ as it stands."""


class Backend:
    """A store the functions write to, the options that name it, and its keys as stored."""

    def __init__(self, store: DynamoDBStore | ValkeyStore, options: list[str]) -> None:
        self.store = store
        self.options = options
        self.namespace = f"Payments{uuid.uuid4().hex[:8]}.app.handler"

    def handler(self) -> Any:
        @idempotent_http(store=self.store, namespace=self.namespace, cache_size=0)
        def create_payment(event: dict[str, Any], context: Any) -> dict[str, Any]:
            return {"statusCode": 201, "body": json.dumps({"id": "pay_123"})}

        return create_payment

    def stored_pks(self) -> set[str]:
        """The keys of the namespace's records, read from the store itself."""
        if isinstance(self.store, ValkeyStore):
            from lambda_idempotency._stores.valkey.operators import record_pks

            pks, _, complete = record_pks(self.store, 10_000)
            assert complete
        else:
            items = self.store.client.scan(TableName=self.store.table_name)["Items"]
            pks = [item["pk"]["S"] for item in items]
        return {pk for pk in pks if pk.startswith(f"{self.namespace}#")}

    def inspect(self, capsys: Any, *argv: str) -> tuple[int, str, str]:
        status = cli.main(["inspect", *self.options, "--namespace", self.namespace, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    def found(self, capsys: Any, *argv: str) -> str:
        """The pk of the COMPLETED record `inspect` finds."""
        status, out, err = self.inspect(capsys, "--json", *argv)
        assert status == 0, err
        described = json.loads(out)
        assert described["status"] == "COMPLETED"
        return str(described["pk"])


@pytest.fixture(params=["dynamodb", pytest.param("valkey", marks=pytest.mark.valkey)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "dynamodb":
        store = request.getfixturevalue("store")
        endpoint = request.getfixturevalue("dynamodb_local_endpoint")
        yield Backend(store, ["--table", store.table_name, "--endpoint", endpoint])
        return
    server = request.getfixturevalue("valkey_node")
    prefix = f"http-{uuid.uuid4().hex[:8]}:"
    valkey = ValkeyStore(server.url, prefix=prefix)
    yield Backend(valkey, ["--valkey-url", server.url, "--prefix", prefix])
    valkey.close()


def saved(event: dict[str, Any], folder: Path, name: str = "request.json") -> str:
    path = folder / name
    path.write_text(json.dumps(event))
    return str(path)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_event_shape_is_found_by_header_value_and_event_or_principal(
    backend: Backend, shape: str, capsys: Any, tmp_path: Path
) -> None:
    event = http_event(shape, headers={"Idempotency-Key": KEY}, body=BODY)
    assert backend.handler()(event, None)["statusCode"] == 201
    (written,) = backend.stored_pks()
    event_file = saved(event, tmp_path)

    assert backend.found(capsys, "--http", "--key", KEY, "--event", event_file) == written
    by_principal = ("--principal", *SHAPE_PRINCIPALS[shape])
    assert backend.found(capsys, "--http", "--key", KEY, *by_principal) == written
    # The header's value as sent: quoted (RFC 8941) or bare, one key; or the event's own.
    assert backend.found(capsys, "--http", "--key", f'"{KEY}"', *by_principal) == written
    assert backend.found(capsys, "--http", "--event", event_file) == written


@pytest.mark.parametrize("kind", KINDS)
def test_each_principal_kind_is_found_by_header_value_and_event_or_principal(
    backend: Backend, kind: str, capsys: Any, tmp_path: Path
) -> None:
    handler = backend.handler()
    events = {
        who: principal_event(kind, who, headers={"Idempotency-Key": KEY}, body=BODY)
        for who in ("a", "b")
    }
    found = set()
    for who, event in events.items():
        handler(event, None)
        event_file = saved(event, tmp_path, f"{who}.json")
        words = PRINCIPALS[kind][0 if who == "a" else 1]
        by_event = backend.found(capsys, "--http", "--key", KEY, "--event", event_file)
        by_principal = backend.found(capsys, "--http", "--key", KEY, "--principal", *words)
        assert by_event == by_principal
        found.add(by_event)

    assert found == backend.stored_pks()  # each caller's own record (one, when they share)
    assert len(found) == (1 if kind in ("rest-lambda-shared-principal-id", "alb-oidc") else 2)


def test_a_handler_with_its_own_scope_is_found_with_scope(
    backend: Backend, capsys: Any, tmp_path: Path
) -> None:
    @idempotent_http(store=backend.store, namespace=backend.namespace, scope=None)
    def shared(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200}

    shared(http_event("http-api", headers={"Idempotency-Key": KEY}), None)
    (written,) = backend.stored_pks()

    null = ("--json-values", "--scope", "null")
    assert backend.found(capsys, "--http", "--key", KEY, *null) == written


def test_a_key_not_there_names_what_to_check(backend: Backend, capsys: Any, tmp_path: Path) -> None:
    event = principal_event("http-api-jwt", "a", headers={"Idempotency-Key": KEY}, body=BODY)
    backend.handler()(event, None)
    other = PRINCIPALS["http-api-jwt"][1]

    status, _, err = backend.inspect(capsys, "--http", "--key", KEY, "--principal", *other)

    assert status == 2
    assert f"namespace {backend.namespace} has records, not this key" in err
    assert "Idempotency-Key value and the scope" in err
    assert KEY not in err


SECRET = "sk-live-0a1b2c3d"
"""A key that must appear in no line the command prints."""


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--http", "--key", SECRET], "--http needs the record's scope: --event FILE"),
        (["--http", "--principal", "anonymous"], "--http needs --key"),
        (["--key", SECRET, "--principal", "anonymous"], "add --http"),
        (["--http", "--pk", "ns#ab", "--principal", "anonymous"], "not --pk"),
        (
            ["--http", "--key", SECRET, "--principal", "anonymous", "--scope", "x"],
            "--principal and --scope each name the scope",
        ),
        (["--http", "--key", f"{SECRET} x", "--principal", "anonymous"], "contains a space"),
        (["--http", "--key", f'"{SECRET}", "b"', "--principal", "anonymous"], "send one"),
        (["--http", "--key", SECRET, "--principal", "oidc", "x"], "unknown kind 'oidc'"),
        (["--http", "--key", SECRET, "--principal", "jwt", "iss"], "takes ISSUER SUB, not 1"),
        (
            ["--http", "--key", SECRET, "--principal", "jwt:https://idp:user-1"],
            "as separate words",
        ),
        (
            ["--http", "--key", SECRET, "--principal", "lambda-context", "[1]"],
            "one JSON object",
        ),
        (["--http", "--key", SECRET, "--principal", "anonymous", "x"], "takes no field"),
    ],
)
def test_wrong_or_missing_inputs_are_one_line_naming_what(
    argv: list[str], says: str, capsys: Any
) -> None:
    where = ["--table", "t", "--endpoint", "http://127.0.0.1:9", "--namespace", "ns"]

    status = cli.main(["inspect", *where, *argv])

    err = capsys.readouterr().err
    assert status == 2
    assert says in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert SECRET not in err


def test_an_event_that_cannot_name_the_scope_is_one_line(capsys: Any, tmp_path: Path) -> None:
    where = ["--table", "t", "--endpoint", "http://127.0.0.1:9", "--namespace", "ns"]
    token = "eyJ.secret.sig"
    unnamed = http_event("http-api", headers={"Idempotency-Key": SECRET, "authorization": token})
    unnamed["requestContext"]["authorizer"] = {"jwt": {"claims": {"iss": "https://idp"}}}
    del unnamed["requestContext"]["authentication"]  # no client certificate to fall back on
    sqs = {"Records": [{"body": token}]}
    cases = {
        str(tmp_path / "missing.json"): "cannot read it",
        saved(sqs, tmp_path, "sqs.json"): "needs an API Gateway, ALB or Function URL event",
        saved(unnamed, tmp_path, "unnamed.json"): "without naming them",
    }
    (tmp_path / "bad.json").write_text('{"headers": ')
    cases[str(tmp_path / "bad.json")] = "is not JSON"
    no_key = http_event("rest-api")
    cases[saved(no_key, tmp_path, "no-key.json")] = "has no Idempotency-Key header"

    for event_file, says in cases.items():
        status = cli.main(["inspect", *where, "--http", "--event", event_file])
        err = capsys.readouterr().err
        assert status == 2 and says in err, (event_file, err)
        assert err.count("\n") == 1 and "Traceback" not in err
        assert SECRET not in err and token not in err


def test_powertools_layout_takes_the_header_value_alone(
    dynamodb_local_endpoint: str, capsys: Any, tmp_path: Path
) -> None:
    client = local_client(dynamodb_local_endpoint)
    name = f"powertools-http-{uuid.uuid4().hex[:12]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    store = DynamoDBStore(name, client=client, layout="powertools")

    @idempotent_http(store=store, namespace="Payments.app.handler", scope=None)
    def create_payment(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201}

    event = principal_event("http-api-jwt", "a", headers={"Idempotency-Key": f'"{KEY}"'})
    create_payment(event, None)
    (item,) = client.scan(TableName=name)["Items"]
    where = ["--table", name, "--endpoint", dynamodb_local_endpoint, "--layout", "powertools"]
    where += ["--namespace", "Payments.app.handler", "--http", "--json"]

    for named_by in (["--key", KEY], ["--event", saved(event, tmp_path)]):
        assert cli.main(["inspect", *where, *named_by]) == 0
        assert json.loads(capsys.readouterr().out)["pk"] == item["id"]["S"]
    status = cli.main(["inspect", *where, "--key", KEY, "--principal", "jwt", "i", "s"])
    assert status == 2 and "Powertools layout has no scope" in capsys.readouterr().err


def test_release_names_the_record_the_same_way(
    backend: Backend, capsys: Any, tmp_path: Path
) -> None:
    event = principal_event("rest-iam-user", "a", headers={"Idempotency-Key": KEY}, body=BODY)
    handler = backend.handler()
    handler(event, None)
    argv = [*backend.options, "--namespace", backend.namespace, "--http", "--key", KEY]

    status = cli.main(["release", *argv, "--principal", *ALICE, "--yes"])

    assert status == 0, capsys.readouterr().err
    assert backend.store.get(next(iter(backend.stored_pks()))).status.value == "RELEASED"


def test_the_operations_guide_http_lines_run_as_written(
    dynamodb_local_endpoint: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md's `inspect --http` example, line by line, on the template's tables."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("### An HTTP request's record") : text.index("### On a Valkey")]
    block = section.split("```console\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    lines = [line.removeprefix("$ ") for line in block.splitlines() if line.startswith("$ ")]
    assert len(lines) == 3
    monkeypatch.chdir(root)
    drop_tables(local_client(dynamodb_local_endpoint), "IdempotencyTable", "ChargesTable")
    assert cli.main(["create-table", "--endpoint", dynamodb_local_endpoint]) == 0

    outputs = []
    for line in lines:
        words = shlex.split(line.replace("http://127.0.0.1:8000", dynamodb_local_endpoint))
        assert words[0] == "lambda-idempotency"
        capsys.readouterr()
        status = cli.main(words[1:])
        captured = capsys.readouterr()
        assert status == 0, (line, captured.err)
        outputs.append(captured.out)

    assert '"statusCode": 201' in outputs[0]
    first, second = (output.splitlines() for output in outputs[1:])
    assert first[0].startswith("pk       CreatePaymentFunction.app.lambda_handler#")
    assert first[0] == second[0]  # one record, named both ways
    assert first[1] == second[1] == "status   COMPLETED"


def test_an_http_record_asked_for_without_http_says_to_add_it(
    backend: Backend, capsys: Any, tmp_path: Path
) -> None:
    """The header's value alone, as an operator first tries it: the line says --http."""
    event = principal_event("http-api-jwt", "a", headers={"Idempotency-Key": KEY}, body=BODY)
    backend.handler()(event, None)

    status, _, err = backend.inspect(capsys, "--key", KEY)

    assert status == 2
    assert f"namespace {backend.namespace} has records, not this key" in err
    assert "for a record of idempotent_http, add --http with --event FILE or --principal" in err
    assert KEY not in err
