"""What the conformance tests of the fast wire path share (tests/unit/test_wire_conformance.py
on recorded answers, tests/integration/test_wire_results.py on DynamoDB Local): the requests
the store's own code makes, and a scripted wire in botocore's `before-send` hook."""

from __future__ import annotations

import contextlib
import copy
import datetime
import hashlib
import importlib
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import botocore.auth
import botocore.compat
import pytest
from botocore.awsrequest import AWSResponse

from lambda_idempotency import DynamoDBStore, StoreError
from lambda_idempotency._stores.dynamodb.wire.path import FastWire
from lambda_idempotency._stores.encoding import CHUNKED
from lambda_idempotency._stores.record import Record, Status

NOW = 1_800_000_000_000
FROZEN = datetime.datetime(2027, 1, 15, 8, 0, 0)


@dataclass
class Call:
    """One request the store made: the client method and its arguments."""

    shape: str
    method: str
    params: dict[str, Any]

    def fresh(self) -> dict[str, Any]:
        return copy.deepcopy(self.params)


class Recorder:
    """Stands in for the store's client: keeps each request, answers with `answer`."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._answer = answer

    def __getattr__(self, method: str) -> Callable[..., dict[str, Any]]:
        def call(**params: Any) -> dict[str, Any]:
            self.calls.append((method, copy.deepcopy(params)))
            return self._answer(method, params)

        return call


def store_calls(store: DynamoDBStore, answer: Callable[..., dict[str, Any]]) -> list[Call]:
    """Every request shape the protocol makes, from the store's own code, in this order:
    claim, complete inline, complete with an enlisted write, release, get, batch write (the
    chunks of a large result), batch get (reading them back), commit of enlisted writes
    alone (the idempotency token botocore generates)."""
    recorder = Recorder(answer)
    store._caller = lambda: recorder  # type: ignore[method-assign]
    table = store.table_name
    calls: list[Call] = []

    def made(shape: str, action: Callable[[], Any]) -> None:
        before = len(recorder.calls)
        with contextlib.suppress(StoreError):  # an answer not scripted: the request counts
            action()
        calls.extend(Call(shape, m, p) for m, p in recorder.calls[before:])

    enlisted = {
        "Update": {
            "TableName": table,
            "Key": {"pk": {"S": "order#1"}},
            "UpdateExpression": "SET #s = :s",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":s": {"S": "paid"}, ":b": {"B": b"\x00\xff"}},
            "ConditionExpression": "attribute_not_exists(#s) OR #s <> :b",
        }
    }
    made(
        "claim",
        lambda: store.claim(
            "k",
            owner="owner-a",
            payload_hash="h" * 64,
            now_ms=NOW,
            lease_until_ms=NOW + 10_000,
            expiration_s=NOW // 1000 + 3600,
            skew_ms=2_000,
        ),
    )
    completion = {
        "owner": "owner-a",
        "payload_hash": "h" * 64,
        "result": b'\x01{"ok": true}\xff',
        "expiration_s": NOW // 1000 + 3600,
        "claimed_at_ms": NOW,
        "completed_at_ms": NOW + 5,
    }
    made("complete inline", lambda: store.complete("k", **completion))
    made("complete with a write", lambda: store.complete("k", **completion, writes=[enlisted]))
    made("release", lambda: store.release("k", owner="owner-a", now_ms=NOW))
    made("get", lambda: store.get("k"))
    result = bytes(range(256)) * 4
    made(
        "batch write",
        lambda: store.put_chunks(
            "k", owner="owner-a", result=result, expiration_s=NOW // 1000 + 3600
        ),
    )
    pointer = {"owner": "owner-a", "count": 2, "bytes": 10, "sha256": hashlib.sha256().hexdigest()}
    record = Record(
        pk="k",
        status=Status.COMPLETED,
        expiration=NOW // 1000 + 3600,
        result=CHUNKED + json.dumps(pointer).encode(),
    )
    made("batch get", lambda: store.load_result(record))
    made("commit writes", lambda: store.commit_writes([enlisted]))
    del store._caller  # type: ignore[attr-defined]
    return calls


def empty_answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {}


@dataclass
class Scripted:
    """A wire in `before-send`: each attempt takes the next step of the script (an answer
    or an exception to raise), and records the request it was given."""

    steps: list[Any]
    requests: list[Any] = field(default_factory=list)

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.requests.append(request)
        step = self.steps[min(len(self.requests), len(self.steps)) - 1]
        if isinstance(step, Exception):
            raise step
        status, headers, body = step
        return response(request.url, status, body, headers)


def answer(
    status: int = 200, body: bytes = b"{}", *, crc: int | None = None, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    """An answer as DynamoDB sends it, with its x-amz-crc32 (`crc` to send a wrong one)."""
    headers = {
        "x-amzn-RequestId": "REQ",
        "Content-Type": "application/x-amz-json-1.0",
        "x-amz-crc32": str(zlib.crc32(body) if crc is None else crc),
        **headers,
    }
    return status, headers, body


def error(code: str, status: int = 400, message: str = "scripted", **extra: Any) -> Any:
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra}
    return answer(status, json.dumps(body).encode())


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def response(url: str, status: int, body: bytes, headers: dict[str, str]) -> AWSResponse:
    return AWSResponse(url, status, headers, _Body(body))


def frozen_datetime(remove_tzinfo: bool = True) -> datetime.datetime:
    """botocore's `get_current_datetime`, at FROZEN (UTC; naive unless asked otherwise, as the
    CRT signer asks)."""
    return FROZEN if remove_tzinfo else FROZEN.replace(tzinfo=datetime.UTC)


def freeze_signing_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """SigV4's clock, fixed: both paths sign with botocore's own signer, which reads
    `get_current_datetime` (older botocore: `datetime.datetime.utcnow`); with awscrt
    installed, that signer is the CRT's, which reads its own import of it."""
    if hasattr(botocore.auth, "get_current_datetime"):
        monkeypatch.setattr(botocore.auth, "get_current_datetime", frozen_datetime)
        if botocore.compat.HAS_CRT:
            crt_auth = importlib.import_module("botocore.crt.auth")
            monkeypatch.setattr(crt_auth, "get_current_datetime", frozen_datetime)
    else:  # pragma: no cover - botocore before 1.35

        class Frozen(datetime.datetime):
            @classmethod
            def utcnow(cls) -> Any:
                return FROZEN

        monkeypatch.setattr(botocore.auth.datetime, "datetime", Frozen)


def both_ways(make_client: Callable[[], Any], steps: list[Any], call: Call) -> tuple[Any, Any]:
    """The outcome of `call` through a client and through the fast path over another one
    like it, each on its own copy of the scripted wire: the result, or the exception."""
    outcomes = []
    for through_wire in (False, True):
        client = make_client()
        client.meta.events.register("before-send.dynamodb", Scripted(list(steps)))
        caller = FastWire(client) if through_wire else client
        assert not through_wire or caller.usable(call.method), "the fast path stepped aside"
        try:
            outcomes.append(getattr(caller, call.method)(**call.fresh()))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes[0], outcomes[1]


def same_outcome(through_client: Any, through_wire: Any) -> None:
    if isinstance(through_client, Exception):
        assert type(through_wire) is type(through_client), through_wire
        assert str(through_wire) == str(through_client)
        response_of = getattr(through_client, "response", None)
        assert getattr(through_wire, "response", None) == response_of
        assert getattr(through_wire, "operation_name", None) == getattr(
            through_client, "operation_name", None
        )
    else:
        assert through_wire == through_client
