"""The fast wire path proves itself on first use, per client, against botocore's own way, or
steps aside (issue 26): a botocore that behaves otherwise inside a function whose name stays
(a new default header, a changed canonical request, a changed blob decoding) gets every call
through the client, with one warning line; the check itself sends nothing, runs no hook of the
user's and spends no retry quota."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import boto3
import botocore
import botocore.auth
import botocore.client
import botocore.compat
import botocore.history
import botocore.parsers
import pytest
from botocore.config import Config

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.wire import check as _wire_check
from lambda_idempotency._stores.dynamodb.wire import guard
from lambda_idempotency._stores.dynamodb.wire.path import FastWire
from tests.wire_conformance import Scripted, answer

CREDENTIALS = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "secret"}


def plain_client(**options: Any) -> Any:
    options.setdefault("region_name", "eu-west-1")
    return boto3.client("dynamodb", **CREDENTIALS, **options)


CLIENTS: dict[str, Callable[[], Any]] = {
    "our client": lambda: default_client(None, "eu-west-1"),
    "a default boto3 client (legacy retries)": plain_client,
    "standard retries": lambda: plain_client(config=Config(retries={"mode": "standard"})),
    "adaptive retries": lambda: plain_client(config=Config(retries={"mode": "adaptive"})),
    "temporary credentials": lambda: plain_client(aws_session_token="token"),
    "a custom endpoint_url": lambda: plain_client(endpoint_url="http://localhost:8123"),
    "FIPS": lambda: plain_client(config=Config(use_fips_endpoint=True)),
    "another partition": lambda: plain_client(region_name="cn-north-1"),
}


@pytest.fixture(autouse=True)
def fast_wire_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IDEMPOTENCY_FAST_WIRE", raising=False)


@pytest.mark.parametrize("make_client", CLIENTS.values(), ids=CLIENTS.keys())
def test_on_this_botocore_both_ways_agree(make_client: Any) -> None:
    assert _wire_check.differences(FastWire(make_client())) is None


def add_a_default_header(monkeypatch: pytest.MonkeyPatch) -> str:
    """A botocore whose request preparation adds a header of its own to every request."""
    prepare = botocore.client.prepare_request_dict

    def prepare_with_a_header(request_dict: Any, *args: Any, **kwargs: Any) -> Any:
        request_dict["headers"]["X-Amz-Newly-Default"] = "1"
        return prepare(request_dict, *args, **kwargs)

    monkeypatch.setattr(botocore.client, "prepare_request_dict", prepare_with_a_header)
    return "PutItem request: header x-amz-newly-default (the client's only)"


def change_the_canonical_request(monkeypatch: pytest.MonkeyPatch) -> str:
    """A botocore whose SigV4 canonical request follows a new rule (here: the payload hash
    in upper case), so that its signature differs. The new rule is botocore's own code, as a
    release would ship it (its method's name, in botocore.auth's module): a patch of someone
    else's the lean paths' signer honours, signing as botocore does."""
    monkeypatch.setattr(
        botocore.auth,
        "_earlier_canonical_request",
        botocore.auth.SigV4Auth.canonical_request,
        raising=False,
    )
    release: dict[str, Any] = {}
    exec(  # a class body compiled in botocore.auth's namespace, as a release's would be
        "class SigV4Auth:\n"
        "    def canonical_request(self, request):\n"
        "        earlier = _earlier_canonical_request(self, request)\n"
        "        head, _, payload_hash = earlier.rpartition('\\n')\n"
        "        return f'{head}\\n{payload_hash.upper()}'\n",
        vars(botocore.auth),
        release,
    )
    changed = vars(release["SigV4Auth"])["canonical_request"]
    monkeypatch.setattr(botocore.auth.SigV4Auth, "canonical_request", changed)
    return "PutItem request: header authorization (its value)"


def change_blob_decoding(monkeypatch: pytest.MonkeyPatch) -> str:
    """A botocore whose JSON parser hands blobs back otherwise (here: as bytearray)."""
    handle_blob = botocore.parsers.BaseJSONParser._handle_blob

    def changed(self: Any, shape: Any, value: Any) -> Any:
        return bytearray(handle_blob(self, shape, value))

    monkeypatch.setattr(botocore.parsers.BaseJSONParser, "_handle_blob", changed)
    return "PutItem, a success: the answer read"


DRIFTS = {
    "an extra default header": add_a_default_header,
    "a changed canonical request": change_the_canonical_request,
    "a changed blob decoding": change_blob_decoding,
}


def api_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The operations botocore's `_make_api_call` makes, from its history recorder (a hook or
    a patch would itself send the calls to the client)."""
    recorder = botocore.history.get_global_history_recorder()
    made: list[str] = []

    class Handler:
        def emit(self, event_type: str, payload: Any, source: str) -> None:
            if event_type == "API_CALL" and payload["params"].get("TableName") == "idempotency":
                made.append(payload["operation"])  # the store's, not the self-check's

    monkeypatch.setattr(recorder, "_handlers", [Handler()])
    monkeypatch.setattr(recorder, "_enabled", True)
    return made


def warnings(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        json.loads(record.getMessage())
        for record in caplog.records
        if record.levelno == logging.WARNING and record.name == "lambda_idempotency"
    ]


@pytest.mark.parametrize("drift", DRIFTS.values(), ids=DRIFTS.keys())
def test_a_botocore_that_behaves_otherwise_gets_every_call_through_the_client(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, drift: Any
) -> None:
    differs = drift(monkeypatch)
    client = default_client(None, "eu-west-1")
    script = Scripted([answer()])
    client.meta.events.register("before-send.dynamodb", script)
    made = api_calls(monkeypatch)
    caplog.set_level(logging.WARNING, logger="lambda_idempotency")
    first = DynamoDBStore("idempotency", client=client)
    second = DynamoDBStore("idempotency", client=client)
    first.get("k")
    first.get("k")
    second.get("k")
    if drift is change_the_canonical_request and botocore.compat.HAS_CRT:
        # With awscrt both ways sign with the CRT's signer, which this drift of the Python
        # signer does not reach: there is no difference, and the path stays.
        assert isinstance(first._caller(), FastWire)
        assert made == [] and len(script.requests) == 3
        assert warnings(caplog) == []
        return
    assert first._caller() is client
    assert second._caller() is client
    assert made == ["GetItem"] * 3  # botocore's own `_make_api_call` made each call
    assert len(script.requests) == 3
    lines = warnings(caplog)
    assert len(lines) == 1  # once per client, not per store or per call
    assert lines[0]["idempotency"] == "fast_wire_off"
    assert lines[0]["differs"] == differs
    assert lines[0]["botocore"] == botocore.__version__
    assert '"k"' not in caplog.text and "k#" not in caplog.text


def test_an_exception_in_the_self_check_gets_every_call_through_the_client(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Any, wire: Any) -> None:
        raise KeyError("a private part botocore renamed")

    monkeypatch.setattr(_wire_check._Twin, "__init__", broken)
    caplog.set_level(logging.WARNING, logger="lambda_idempotency")
    client = default_client(None, "eu-west-1")
    assert DynamoDBStore("idempotency", client=client)._caller() is client
    assert [line["differs"] for line in warnings(caplog)] == ["the self-check raised KeyError"]


def test_the_self_check_sends_nothing_runs_no_users_hook_and_spends_no_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = plain_client(config=Config(retries={"mode": "standard"}))
    fired: list[str] = []
    for event in ("request-created", "before-send", "needs-retry", "after-call", "before-sign"):
        client.meta.events.register(
            f"{event}.dynamodb", lambda event_name, **_: fired.append(event_name)
        )
    sent: list[Any] = []
    monkeypatch.setattr(client._endpoint.http_session, "send", sent.append)
    quota = retry_quota(client)
    before = quota.available_capacity
    wire = FastWire(client)
    assert _wire_check.differences(wire) is None
    assert fired == []
    assert sent == []
    assert quota.available_capacity == before


def retry_quota(client: Any) -> Any:
    for handler in client.meta.events._emitter._handlers.prefix_search("needs-retry.dynamodb"):
        checker = getattr(getattr(handler, "__self__", None), "_retry_quota", None)
        if checker is not None:
            return checker._quota
    raise AssertionError("no standard retry handler")


def test_the_retry_decision_on_each_answer_is_botocores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decisions compared are the ones botocore's handler takes: a throttle and a 500 are
    retried, a refused condition and a success are not."""
    decisions: list[tuple[str, list[bool | None]]] = []
    run = _wire_check._Twin.run

    def recording(self: Any, way: Any, method: str, status: int, body: Any) -> Any:
        result = run(self, way, method, status, body)
        decisions.append((body.get("__type", "success").split("#")[-1], list(result.retry)))
        return result

    monkeypatch.setattr(_wire_check._Twin, "run", recording)
    assert _wire_check.differences(FastWire(plain_client())) is None
    by_answer = dict(decisions)
    assert by_answer["success"] == [False]
    assert by_answer["ConditionalCheckFailedException"] == [False]
    assert by_answer["ThrottlingException"] == [True]
    assert by_answer["InternalServerError"] == [True]


@pytest.mark.parametrize("value", ["0", "false", "No"])
def test_the_self_check_can_be_skipped_by_an_operator_who_vouches_for_botocore(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    add_a_default_header(monkeypatch)
    monkeypatch.setenv("IDEMPOTENCY_FAST_WIRE_CHECK", value)
    caplog.set_level(logging.WARNING, logger="lambda_idempotency")
    client = default_client(None, "eu-west-1")
    assert isinstance(DynamoDBStore("idempotency", client=client)._caller(), FastWire)
    assert warnings(caplog) == []


def test_the_self_check_never_fetches_the_clients_credentials() -> None:
    """Credentials from a source that fetches them (STS, SSO, the instance metadata service)
    are fetched by the first real call, not by the check: it signs with fixed ones."""
    import botocore.credentials
    import botocore.session

    fetched: list[str] = []

    def fetch() -> dict[str, str]:
        fetched.append("a network call")
        return {
            "access_key": "AKIDEXAMPLE",
            "secret_key": "secret",
            "token": "token",
            "expiry_time": "2000-01-01T00:00:00Z",  # expired: every read fetches again
        }

    session = botocore.session.Session()
    session._credentials = botocore.credentials.RefreshableCredentials.create_from_metadata(
        fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    client = session.create_client("dynamodb", region_name="eu-west-1")
    fetched.clear()
    assert _wire_check.differences(FastWire(client)) is None
    assert fetched == []


def lines_of(caplog: pytest.LogCaptureFixture) -> list[tuple[int, dict[str, Any]]]:
    return [
        (record.levelno, json.loads(record.getMessage()))
        for record in caplog.records
        if record.name == "lambda_idempotency"
    ]


def test_a_botocore_without_a_part_the_path_drives_says_so_once_per_client(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A release that drops a private part: every call through the client, and a warning,
    since every call now costs its CPU saving (before, nothing said so)."""
    import botocore.endpoint

    monkeypatch.delattr(botocore.endpoint.Endpoint, "_needs_retry")
    client = default_client(None, "eu-west-1")
    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")

    stores = [DynamoDBStore("idempotency", client=client) for _ in range(2)]

    assert all(store._caller() is client for store in stores)
    ((level, line),) = lines_of(caplog)
    assert level == logging.WARNING
    assert line["idempotency"] == "fast_wire_off"
    assert "botocore without _needs_retry" in line["reason"]
    assert line["botocore"] == botocore.__version__


def test_an_operation_whose_model_changed_is_named_and_the_others_stay_lean(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from lambda_idempotency._stores.dynamodb.wire import lean as _wire_lean
    from lambda_idempotency._stores.dynamodb.wire.plan import CannotHonourError, Plan

    def plan(operation_model: Any, client: Any, method: str) -> Plan:
        if method == "batch_get_item":
            raise CannotHonourError("a member of a kind the path does not know")
        return Plan(operation_model, client, method)

    monkeypatch.setattr(_wire_lean, "Plan", plan)
    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")

    store = DynamoDBStore("idempotency", client=default_client(None, "eu-west-1"))

    assert isinstance(store._caller(), FastWire)
    assert not store._caller().usable("batch_get_item")
    assert store._caller().usable("get_item")
    ((level, line),) = lines_of(caplog)
    assert level == logging.WARNING
    assert "the model of batch_get_item changed" in line["reason"]


def test_a_client_patched_on_its_class_steps_aside_with_one_info_line_naming_the_patch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A patch the path does not know (X-Ray's and OpenTelemetry's it calls itself) is meant:
    no warning for it in every cold start, but one info line a process that names it."""
    monkeypatch.setattr(guard, "_told", set())
    client = default_client(None, "eu-west-1")
    original = botocore.client.BaseClient._make_api_call

    def traced(self: Any, operation: str, params: Any) -> Any:  # a tracer's wrapper
        return original(self, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", traced)
    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")

    store = DynamoDBStore("idempotency", client=client)
    again = DynamoDBStore("idempotency", client=default_client(None, "eu-west-1"))

    assert store._caller() is client
    assert again._caller() is again.client
    ((level, line),) = lines_of(caplog)  # one line, however many clients
    assert level == logging.INFO
    assert "_make_api_call is patched by " + __name__ in line["reason"]
    assert "traced" in line["reason"]


def test_a_check_whose_second_keeps_turning_is_made_again_not_taken_for_a_difference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a busy machine one way can take most of a second: a check dated across a turn of
    the second is made again (a few times), and only a real difference sends the client."""
    answers = iter([_wire_check._DATED] * 3 + [None])
    monkeypatch.setattr(_wire_check, "_compare", lambda wire: next(answers))
    assert _wire_check.differences(None) is None  # type: ignore[arg-type]

    monkeypatch.setattr(_wire_check, "_compare", lambda wire: _wire_check._DATED)
    assert _wire_check.differences(None) == _wire_check._DATED  # type: ignore[arg-type]
