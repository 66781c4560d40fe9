"""Two versions side by side on one DynamoDB Local table, as a gradual deployment runs them:
this checkout and the previous release, each in a process of its own.

The previous release is the commit `tests/compat/PREVIOUS_RELEASE` names (the release's
full commit id, since a clone need not carry tags; the variable PREVIOUS_RELEASE overrides
it), taken from the repository's own history with `git archive` and imported from there
by `previous_driver.py`, in a subprocess whose PYTHONPATH holds only that tree (the
runtime dependencies are the virtualenv's, the same for both). `make test` runs this
module (`make compat-previous` alone); a clone without that commit fails it, saying so.

Both ways, every kind of record (`catalogue.RESULTS`: plain JSON, None, tuples, typed keys,
Decimal and long integers, a "not stored" marker, a chunked result, a release's tombstone,
a live claim), in both layouts, and effects counted across both processes. Then records of a
format newer than this version knows: refused untouched, and what the previous release
(which predates format versions) does with them, recorded as it is.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

import lambda_idempotency
from lambda_idempotency import DynamoDBStore, NewerFormatError
from lambda_idempotency._stores.record import FORMAT_VERSION
from tests.compat import catalogue, key_catalogue
from tests.conftest import create_table

pytestmark = [pytest.mark.dynamodb_local]

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("previous_driver.py")
RELEASE_FILE = Path(__file__).with_name("PREVIOUS_RELEASE")
CREDENTIALS = {"aws_access_key_id": "compat", "aws_secret_access_key": "compat"}
REGION = "us-east-1"
"""DynamoDB Local keeps one database per access key and Region: both processes use these."""
KINDS = sorted(catalogue.RESULTS)
READ_AS_WRITTEN = [kind for kind in KINDS if kind != "released"]
"""Kinds whose second call replays (or answers the "not stored" error) without running."""
NEWER = FORMAT_VERSION + 1


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's `layer/` folder, from the repository's history."""
    commit = os.environ.get("PREVIOUS_RELEASE") or RELEASE_FILE.read_text().strip()
    found = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "layer/lambda_idempotency"],
        capture_output=True,
        check=False,
    )
    assert found.returncode == 0, (
        f"the previous release {commit} is not in this clone's history "
        f"(a shallow clone: `make compat-previous` fetches it): {found.stderr.decode()[-300:]}"
    )
    archive = found.stdout
    root = tmp_path_factory.mktemp("previous-release")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root / "layer"


class Table:
    """One table both versions use: this version's store on it, and how to reach it from the
    previous release's process."""

    def __init__(self, endpoint: str, layout: str) -> None:
        self.client = boto3.client(
            "dynamodb", endpoint_url=endpoint, region_name=REGION, **CREDENTIALS
        )
        self.name = f"compat-{uuid.uuid4().hex[:8]}"
        create_table(self.client, self.name, "id" if layout == "powertools" else "pk")
        self.layout = layout
        self.store = DynamoDBStore(self.name, client=self.client, layout=layout)
        self.runs: list[str] = []
        self.endpoint = endpoint

    def run(self, kind: str, key: str, *, fail: bool = False) -> Any:
        """One call of the kind's function under this version."""
        return catalogue.protected(lambda_idempotency, self.store, kind, self.runs)(key, fail=fail)

    def call(self, kind: str, key: str, *, fail: bool = False) -> dict[str, Any]:
        """The same, as its outcome (`catalogue.outcome`)."""
        return catalogue.outcome(lambda: self.run(kind, key, fail=fail))

    def pk(self, kind: str, key: str) -> str:
        return self.store.layout.record_key(f"{catalogue.NAMESPACE}.{kind}", None, key)

    def hold(self, kind: str, key: str) -> None:
        """A live claim of the key, as a run still going leaves it."""
        now = int(time.time() * 1000)
        won, _ = self.store.claim(
            self.pk(kind, key),
            owner=uuid.uuid4().hex[:24],
            payload_hash=self.store.layout.payload_hash(key),
            now_ms=now,
            lease_until_ms=now + catalogue.LEASE_SECONDS * 1000,
            expiration_s=now // 1000 + 3600,
        )
        assert won

    def item(self, pk: str) -> dict[str, Any]:
        """The stored item as DynamoDB holds it."""
        key = self.store._key(pk)
        return dict(self.client.get_item(TableName=self.name, Key=key, ConsistentRead=True)["Item"])

    def put(self, item: dict[str, Any]) -> None:
        self.client.put_item(TableName=self.name, Item=item)

    def previous(
        self,
        tree: Path,
        calls: list[dict[str, Any]],
        holds: list[dict[str, Any]] | None = None,
        keys: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Calls, holds and key cases under the previous release, in its own process."""
        request = {
            "endpoint": self.endpoint,
            "region": REGION,
            **CREDENTIALS,
            "table": self.name,
            "layout": self.layout,
            "calls": calls,
            "holds": holds or [],
            "keys": keys or [],
        }
        done = subprocess.run(
            [sys.executable, str(DRIVER)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env={
                **{k: v for k, v in os.environ.items() if k != "AWS_LAMBDA_FUNCTION_NAME"},
                "PYTHONPATH": str(tree),
            },
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        answer: dict[str, Any] = json.loads(done.stdout)
        assert Path(answer["path"]).is_relative_to(tree), "the driver imported this checkout"
        return answer

    def stored_keys(self) -> dict[str, str | None]:
        """Every record's key and its payload hash, as the table holds them."""
        names, keys = self.store.names, {}
        for page in self.client.get_paginator("scan").paginate(TableName=self.name):
            for item in page["Items"]:
                hashed = item.get(names.payload_hash)
                keys[item[names.pk]["S"]] = None if hashed is None else hashed["S"]
        return keys


@pytest.fixture(params=["native", "powertools"])
def table(request: pytest.FixtureRequest, dynamodb_local_endpoint: str) -> Iterator[Table]:
    shared = Table(dynamodb_local_endpoint, request.param)
    yield shared
    shared.client.delete_table(TableName=shared.name)


def matches(outcome: dict[str, Any], kind: str, *, first: bool = False) -> bool:
    want = catalogue.expected(kind, first=first)
    return {name: outcome.get(name) for name in want} == want


def test_records_this_version_writes_replay_under_the_previous_release(
    table: Table, previous_release: Path
) -> None:
    """This version writes every kind; the previous release replays each as the first caller
    got it, without running it (a tombstone's key runs once more, as a release means), and
    refuses this version's live claim. The previous release ignores `fmt`: the records this
    version writes are the previous release's plus that attribute."""
    for kind in KINDS:
        first = table.call(kind, "a-1", fail=kind == "released")
        assert kind == "released" or matches(first, kind, first=True), (kind, first)
    table.hold("plain", "a-held")
    for kind in KINDS:
        pk = table.pk(kind, "a-1")
        if kind != "released" or table.layout == "native":  # powertools: released = deleted
            assert table.item(pk)[table.store.names.format_version] == {"N": str(FORMAT_VERSION)}
    assert table.runs == KINDS

    answer = table.previous(
        previous_release,
        [{"kind": kind, "key": "a-1"} for kind in KINDS] + [{"kind": "plain", "key": "a-held"}],
    )

    outcomes = dict(zip([*KINDS, "held"], answer["outcomes"], strict=True))
    for kind in KINDS:
        assert matches(outcomes[kind], kind), (kind, outcomes[kind])
    assert outcomes["held"]["error"] == "InProgressError"
    assert answer["runs"] == ["released"]  # only the released key ran again
    # ... and this version replays what the previous release stored after the release.
    assert matches(table.call("released", "a-1"), "released")
    assert table.runs == KINDS


def test_records_the_previous_release_writes_replay_under_this_version(
    table: Table, previous_release: Path
) -> None:
    """The previous release writes every kind (and holds a live claim); this version replays
    each as the first caller got it, with one effect per key in all, and refuses the live
    claim as in progress."""
    answer = table.previous(
        previous_release,
        [{"kind": kind, "key": "b-1", "fail": kind == "released"} for kind in KINDS],
        [{"kind": "plain", "key": "b-held"}],
    )
    assert answer["runs"] == KINDS
    assert answer["outcomes"][-1] == {"held": True}
    for kind in KINDS:
        item = table.item(table.pk(kind, "b-1")) if kind != "released" else None
        assert item is None or table.store.names.format_version not in item  # before formats

    for kind in KINDS:
        assert matches(table.call(kind, "b-1"), kind), kind
    held = table.call("plain", "b-held")

    assert held["error"] == "InProgressError"
    assert table.runs == ["released"]  # in both processes: each key's effect ran once
    # The previous release replays what this version ran after its release.
    again = table.previous(previous_release, [{"kind": "released", "key": "b-1"}])
    assert matches(again["outcomes"][0], "released") and again["runs"] == []


def newer(item: dict[str, Any], table: Table, **changes: Any) -> dict[str, Any]:
    """The item as a newer version might write it: format NEWER, and `changes`."""
    return {**item, table.store.names.format_version: {"N": str(NEWER)}, **changes}


def newer_records(table: Table) -> dict[str, str]:
    """Records in a format newer than this version's, written by hand from ones this
    version completed: each by what makes it newer, to its stored key."""
    names = table.store.names
    now_ms = int(time.time() * 1000)
    made: dict[str, str] = {}
    for case in ("completed", "unknown_tag", "unknown_status", "chunked", "in_progress"):
        kind = "chunked" if case == "chunked" else "plain"
        key = f"c-{case}"
        assert matches(table.call(kind, key), kind, first=True)
        pk = table.pk(kind, key)
        item = table.item(pk)
        changes: dict[str, Any] = {}
        if case == "unknown_tag":  # a typed-JSON tag no version writes yet
            changes[names.result] = {"B": b'tj{"\\u0000":"frozenset","v":"AQI="}'}
        elif case == "unknown_status":
            changes[names.status] = {"S": "COMPLETED_V2"}
        elif case == "in_progress":
            changes[names.status] = {"S": table.store.layout.in_progress_text}
            changes[names.lease_until] = {"N": str(now_ms + 600_000)}
        table.put(newer(item, table, **changes))
        made[case] = pk
    return made


def test_a_record_in_a_newer_format_is_refused_untouched_and_unlocked(table: Table) -> None:
    """A record of format FORMAT_VERSION + 1 answers NewerFormatError ("written by a newer
    version"), whatever else it holds (an unknown tag or status included): nothing runs, the
    record stays exactly as it was (not overwritten, not locked by this call)."""
    records = newer_records(table)
    runs_before = list(table.runs)
    before = {case: table.item(pk) for case, pk in records.items()}

    for case, pk in records.items():
        kind = "chunked" if case == "chunked" else "plain"
        outcome = table.call(kind, f"c-{case}")
        assert outcome.get("error") == "NewerFormatError", (case, outcome)
        assert outcome["code"] == "NewerRecordFormat"
        assert "written by a newer version of lambda-idempotency" in outcome["message"]
        assert table.item(pk) == before[case], case

    assert table.runs == runs_before
    with pytest.raises(NewerFormatError) as raised:
        table.run("plain", "c-completed")
    error = raised.value
    assert error.retryable and error.retry_after > 0 and error.format_version == NEWER


def test_a_newer_record_that_is_expired_lapsed_or_released_is_claimed_as_today(
    table: Table,
) -> None:
    """DynamoDB's condition frees a key by `expiration`, a lapsed lease or a past release,
    the same words in every format: such a record of a newer format is replaced and the
    function runs once, leaving a record of this version's format."""
    names, now_ms = table.store.names, int(time.time() * 1000)
    cases = {
        "expired": {names.expiration: {"N": str(now_ms // 1000 - 60)}},
        "lapsed": {
            names.status: {"S": table.store.layout.in_progress_text},
            names.lease_until: {"N": str(now_ms - 60_000)},
        },
    }
    if table.layout == "native":
        cases["released"] = {
            names.status: {"S": "RELEASED"},
            names.lease_until: {"N": str(now_ms - 60_000)},
        }
    for case, changes in cases.items():
        assert matches(table.call("plain", f"d-{case}"), "plain")
        pk = table.pk("plain", f"d-{case}")
        table.put(newer(table.item(pk), table, **changes))
    table.runs.clear()

    for case in cases:
        assert matches(table.call("plain", f"d-{case}"), "plain"), case
        item = table.item(table.pk("plain", f"d-{case}"))
        assert item[names.format_version] == {"N": str(FORMAT_VERSION)}
        assert item[names.status] == {"S": "COMPLETED"}

    assert table.runs == ["plain"] * len(cases)


def test_what_the_previous_release_does_with_a_newer_format(
    table: Table, previous_release: Path
) -> None:
    """The previous release predates format versions: it cannot refuse a newer record, and
    reads it by the attributes it knows. Recorded as it is, so a change here is seen: it
    replays what it can read (a newer format whose meaning changed would be misread), and
    answers a StoreError for a tag or status it does not know. It never runs the function
    and never overwrites a live record. This version's own guard protects from it onwards."""
    records = newer_records(table)
    before = {case: table.item(pk) for case, pk in records.items()}
    cases = list(records)

    answer = table.previous(
        previous_release,
        [
            {"kind": "chunked" if case == "chunked" else "plain", "key": f"c-{case}"}
            for case in cases
        ],
    )

    seen = dict(zip(cases, answer["outcomes"], strict=True))
    assert matches(seen["completed"], "plain")  # read as its own: no guard before 0.2.0
    assert matches(seen["chunked"], "chunked")
    assert seen["unknown_tag"]["code"] == "StoredResultUnreadable"
    assert seen["unknown_status"]["code"] == "UnknownRecordStatus"
    assert seen["in_progress"]["error"] == "InProgressError"
    assert answer["runs"] == []
    assert {case: table.item(pk) for case, pk in records.items()} == before


def key_calls(layout: str) -> list[dict[str, Any]]:
    """The key catalogue's cases, each on the events that exercise it: plain events whose
    payloads hold the numbers, strings and nesting canonical hashing must keep; HTTP requests
    from every authorizer kind (two principals each), every event shape, bodies plain and
    base64; SQS batches. A Powertools table has no scopes: `scope=` is left out there."""
    from tests.http_events import SHAPES, http_event
    from tests.tenant_events import KINDS as AUTHORIZERS
    from tests.tenant_events import principal_event

    orders = [
        {"order_id": "o-1", "customer": "c-1", "tenant": "t-1", "amount": 12.5,
         "currency": "EUR", "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1.5}]},
        {"order_id": "ö-2 ✓", "customer": "c 2", "tenant": "t-2", "amount": 100,
         "currency": None, "lines": [10**20, -0.0, 1e-7, True, "x"]},
        {"order_id": 3, "customer": ["c", 3], "tenant": {"id": 7}, "amount": 1e2,
         "currency": "", "lines": {"b": 1, "a": [None, 2.25]}},
    ]  # fmt: skip
    plain = [
        "key", "key_list", "key_callable", "scope", "payload", "payload_event",
        "namespace_default", "function",
    ]  # fmt: skip
    if layout == "powertools":
        plain.remove("scope")
    calls = [{"case": case, "event": order} for case in plain for order in orders]
    body = '{"amount": 12.5, "items": [1, 2.0, 30000000000000000000], "note": "é"}'
    requests = [
        principal_event(kind, who, headers={"Idempotency-Key": f"k-{kind}"}, body=body)
        for kind in AUTHORIZERS
        for who in ("a", "b")
    ]
    for shape in SHAPES:
        for encoded in (False, True):
            key = f"k-{shape}-{encoded}"
            requests.append(
                http_event(shape, headers={"Idempotency-Key": key}, body=body, base64_body=encoded)
            )
    scoped = ("http", "http_default_namespace") if layout == "native" else ()
    for case in ("http_no_scope", *scoped):
        calls += [{"case": case, "event": request} for request in requests]
    for case in ("batch", "batch_key", "batch_default_namespace"):
        calls += [{"case": case, "event": sqs_batch(case)}]
    return calls


def sqs_batch(case: str) -> dict[str, Any]:
    """An SQS batch of three messages, as Lambda delivers one."""
    return {
        "Records": [
            {
                "messageId": f"{case}-{n}",
                "receiptHandle": f"handle-{n}",
                "body": json.dumps({"order_id": f"o-{n}", "amount": n * 1.5}),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1545082649183",
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": "1545082649185",
                },
                "messageAttributes": {},
                "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
                "awsRegion": "us-east-1",
            }
            for n in range(3)
        ]
    }


@pytest.fixture
def other_table(table: Table) -> Iterator[Table]:
    """A second table of the same layout: one for each version's keys."""
    other = Table(table.endpoint, table.layout)
    yield other
    other.client.delete_table(TableName=other.name)


def test_both_versions_compute_the_same_keys_and_payload_hashes(
    table: Table, other_table: Table, previous_release: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key stability across versions: each key feature (key=, a callable key, scope=,
    payload=, the default and a given namespace, idempotent_function, the HTTP front end
    with every authorizer kind and event shape, batches with the default and a chosen key)
    on the same events, under both versions, each on a table of its own: the same records'
    keys (`pk`) and payload hashes, and each call the same outcome. A difference is a retry
    that, sent to one version after its first attempt ran on the other, runs again (a key)
    or is refused 422 (a payload hash)."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    calls = key_calls(table.layout)
    ours = key_catalogue.run(lambda_idempotency, table.store, calls)
    theirs = other_table.previous(previous_release, [], keys=calls)

    assert set(ours) == {"ok"}, [said for said in ours if said != "ok"][:3]
    assert theirs["keys"] == ours
    mine, previous = table.stored_keys(), other_table.stored_keys()
    assert len(mine) > len(calls) // 2  # shared keys replay (no scope: one record for two)
    assert _differences(mine, previous) == [], f"{theirs['version']} -> this version"


def _differences(mine: dict[str, str | None], previous: dict[str, str | None]) -> list[str]:
    only_mine = sorted(set(mine) - set(previous))
    only_previous = sorted(set(previous) - set(mine))
    payloads = sorted(pk for pk in set(mine) & set(previous) if mine[pk] != previous[pk])
    return (
        [f"key only in this version: {pk}" for pk in only_mine[:5]]
        + [f"key only in the previous release: {pk}" for pk in only_previous[:5]]
        + [f"payload hash differs: {pk}" for pk in payloads[:5]]
    )
