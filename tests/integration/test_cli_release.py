"""`lambda-idempotency release` on DynamoDB Local: conditional on the record it showed, never
over a live lease without --force, and never the cause of a second run.

Faults reach the command's own client through botocore's `before-send`, registered on the
store the command builds (cli.tables.store_for)."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._base import keys as _keys
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli import tables as cli_tables
from lambda_idempotency._dev.cli.records import now_ms
from lambda_idempotency._stores.dynamodb.layout import TOMBSTONE_SECONDS
from lambda_idempotency._stores.record import Status

NAMESPACE = "Release.app.handler"
MINUTE_MS = 60_000


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def release(capsys: Any, store: DynamoDBStore, endpoint: str, pk: str, *flags: str) -> Any:
    where = ("--table", store.table_name, "--endpoint", endpoint, "--pk", pk)
    return run(capsys, "release", *where, *flags)


def counted_handler(store: DynamoDBStore, runs: list[str]) -> Callable[..., Any]:
    @idempotent(store=store, key="order_id", namespace=NAMESPACE)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["order_id"])
        return {"charged": event["order_id"], "run": len(runs)}

    return handler


def raw_item(store: DynamoDBStore, pk: str) -> dict[str, Any] | None:
    client: Any = store.client
    item = client.get_item(TableName=store.table_name, Key={"pk": {"S": pk}}, ConsistentRead=True)
    return item.get("Item")  # type: ignore[no-any-return]


def before_the_commands_first_write(
    monkeypatch: pytest.MonkeyPatch, act: Callable[[Any], AWSResponse | None]
) -> list[str]:
    """Run `act(request)` once, just before the command's first write leaves (GetItem and
    Scan pass untouched); what it returns, if anything, is the write's answer. Returns the
    operations the command sent."""
    sent: list[str] = []
    build = cli_tables.store_for

    def store_with_hook(*args: Any, **kwargs: Any) -> DynamoDBStore:
        built = build(*args, **kwargs)

        def hook(request: Any, **_: Any) -> Any:
            target = request.headers.get("X-Amz-Target", b"")
            operation = (target.decode() if isinstance(target, bytes) else target).split(".")[-1]
            sent.append(operation)
            writes = [sent_one for sent_one in sent if sent_one not in {"GetItem", "Scan"}]
            return act(request) if writes == [operation] else None

        built.client.meta.events.register("before-send.dynamodb", hook)
        return built

    monkeypatch.setattr(cli_tables, "store_for", store_with_hook)
    return sent


def server_error(request: Any) -> AWSResponse:
    body = json.dumps({"__type": "com.amazon.coral.availability#InternalServerError"})

    class Body:
        def stream(self, **_: Any) -> Any:
            yield body.encode()

    headers: Any = {}
    return AWSResponse(request.url, 500, headers, Body())


def complete_then_back_to_in_progress(store: DynamoDBStore, runs: list[str]) -> tuple[str, Any]:
    """A key the handler completed, whose record is put back to the IN_PROGRESS claim it was
    while the handler ran (lease lapsed a minute ago); and the completed item, to restore."""
    handler = counted_handler(store, runs)
    handler({"order_id": "o-1"}, None)
    pk = _keys.key_hash(NAMESPACE, None, "o-1")
    completed = raw_item(store, pk)
    assert completed is not None and completed["status"]["S"] == "COMPLETED"
    now = now_ms()
    in_progress = {
        "pk": {"S": pk},
        "status": {"S": "IN_PROGRESS"},
        "owner": completed["owner"],
        "claimed_at": completed["claimed_at"],
        "lease_until": {"N": str(now - MINUTE_MS)},
        "expiration": {"N": str(now // 1000 + 3600)},
    }
    client: Any = store.client
    client.put_item(TableName=store.table_name, Item=in_progress)
    return pk, completed


def test_a_record_completed_between_the_read_and_the_release_stays_and_replays(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any, monkeypatch: Any
) -> None:
    runs: list[str] = []
    pk, completed = complete_then_back_to_in_progress(store, runs)
    client: Any = store.client

    def the_holder_completes(request: Any) -> None:
        client.put_item(TableName=store.table_name, Item=completed)

    before_the_commands_first_write(monkeypatch, the_holder_completes)

    status, out, err = release(capsys, store, dynamodb_local_endpoint, pk, "--yes")

    assert status == 3, (out, err)
    assert err.count("\n") == 1 and "changed" in err and "COMPLETED now" in err, err
    assert "released" not in out
    assert raw_item(store, pk) == completed
    assert counted_handler(store, runs)({"order_id": "o-1"}, None) == {"charged": "o-1", "run": 1}
    assert runs == ["o-1"]  # the retry replayed: the effect ran once


def test_a_live_lease_is_refused_without_force_with_when_it_ends(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    now = now_ms()
    lease_until = now + 10 * MINUTE_MS
    store.claim(
        "k-live",
        owner="holder",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=lease_until,
        expiration_s=now // 1000 + 3600,
    )
    before = raw_item(store, "k-live")
    utc = datetime.datetime.fromtimestamp(lease_until / 1000, datetime.UTC)
    iso = utc.isoformat(timespec="seconds").replace("+00:00", "Z")
    local = datetime.datetime.fromtimestamp(lease_until / 1000).astimezone()

    status, out, err = release(capsys, store, dynamodb_local_endpoint, "k-live", "--yes")

    assert status == 1, (out, err)
    assert err.count("\n") == 1 and out == ""
    assert "its holder may still be running" in err and "--force" in err
    assert iso in err and f"{local:%Y-%m-%d %H:%M:%S}" in err
    assert re.search(r"in (9\.\d|10\.0) min", err), err
    assert raw_item(store, "k-live") == before

    status, out, err = release(capsys, store, dynamodb_local_endpoint, "k-live", "--yes", "--force")

    assert (
        status == 0
        and out == "released k-live (was IN_PROGRESS): its next call runs the handler again\n"
    )
    assert "may still be running" in err and iso in err and f"{local:%Y-%m-%d %H:%M:%S}" in err
    tombstone = store.get("k-live")
    assert tombstone is not None and tombstone.status is Status.RELEASED
    assert tombstone.owner == "holder"  # the holder's own delayed claim cannot lock it again
    assert tombstone.lease_until is not None and 0 <= tombstone.lease_until - now < MINUTE_MS
    assert tombstone.expiration == tombstone.lease_until // 1000 + TOMBSTONE_SECONDS
    # The holder was still running: its completion lands, so a retry replays it.
    assert store.complete(
        "k-live",
        owner="holder",
        payload_hash=None,
        result=b'j"done"',
        expiration_s=now // 1000 + 60,
    )


def test_without_yes_the_live_lease_is_shown_and_both_flags_named(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    now = now_ms()
    store.claim(
        "k-show",
        owner="holder",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 10 * MINUTE_MS,
        expiration_s=now // 1000 + 3600,
    )

    status, out, err = release(capsys, store, dynamodb_local_endpoint, "k-show")

    assert status == 0 and "IN_PROGRESS" in out and "lease    " in out  # a dry run that ran
    assert "--yes and --force (its lease is live)" in err
    assert store.get("k-show") is not None and store.get("k-show").status is Status.IN_PROGRESS  # type: ignore[union-attr]


def test_releasing_a_completed_record_runs_the_key_again_and_fences_old_claims(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    runs: list[str] = []
    handler = counted_handler(store, runs)
    handler({"order_id": "o-2"}, None)
    pk = _keys.key_hash(NAMESPACE, None, "o-2")
    first = store.get(pk)
    assert first is not None and first.owner is not None

    status, out, err = release(capsys, store, dynamodb_local_endpoint, pk, "--yes")

    assert status == 0 and out.startswith(f"released {pk} (was COMPLETED)"), (out, err)
    tombstone = store.get(pk)
    assert tombstone is not None and tombstone.status is Status.RELEASED
    released_at = tombstone.lease_until or 0
    # A delayed copy of a claim sent before the release, the first run's own or another's,
    # cannot lock the key again.
    for owner in (first.owner, "someone-else"):
        won, _ = store.claim(
            pk,
            owner=owner,
            payload_hash=None,
            now_ms=released_at - 1_000,
            lease_until_ms=released_at + MINUTE_MS,
            expiration_s=released_at // 1000 + 3600,
        )
        assert not won
    # The next call runs again, and its retries replay the second run. (In a container of
    # its own: one that holds the result in its warm cache replays it until the record's
    # expiration, as docs/operations.md says.)
    elsewhere = counted_handler(store, runs)
    assert elsewhere({"order_id": "o-2"}, None) == {"charged": "o-2", "run": 2}
    assert elsewhere({"order_id": "o-2"}, None) == {"charged": "o-2", "run": 2}
    assert runs == ["o-2", "o-2"]


def test_a_released_completed_results_chunks_are_left_to_their_ttl_and_never_replayed(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    runs: list[str] = []
    big = "".join(f"{i:x}" for i in range(300_000))  # past one chunk, barely compressible

    @idempotent(store=store, key="order_id", namespace=NAMESPACE)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["order_id"])
        return {"run": len(runs), "big": big}

    handler({"order_id": "o-big"}, None)
    pk = _keys.key_hash(NAMESPACE, None, "o-big")
    first = store.get(pk)
    assert first is not None and first.owner is not None
    chunk = raw_item(store, f"{pk}#chunk#{first.owner}#0")
    assert chunk is not None

    status, _, _ = release(capsys, store, dynamodb_local_endpoint, pk, "--yes")

    assert status == 0
    tombstone = store.get(pk)  # which points at no chunk
    assert tombstone is not None and tombstone.status is Status.RELEASED
    assert tombstone.result is None and tombstone.owner == first.owner
    assert raw_item(store, f"{pk}#chunk#{first.owner}#0") == chunk  # its own TTL deletes it
    assert int(chunk["expiration"]["N"]) == first.expiration
    assert handler.__wrapped__ is not None  # type: ignore[attr-defined]
    elsewhere = idempotent(store=store, key="order_id", namespace=NAMESPACE, cache_size=0)(
        handler.__wrapped__  # type: ignore[attr-defined]
    )
    assert elsewhere({"order_id": "o-big"}, None)["run"] == 2
    assert elsewhere({"order_id": "o-big"}, None)["run"] == 2  # the new run's chunks replay
    assert len(runs) == 2


def test_a_release_whose_answer_was_lost_is_still_reported_as_released(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any, monkeypatch: Any
) -> None:
    runs: list[str] = []
    pk, _ = complete_then_back_to_in_progress(store, runs)
    client: Any = store.client

    def lands_but_the_answer_is_lost(request: Any) -> AWSResponse:
        client.put_item(**json.loads(request.body))
        return server_error(request)

    sent = before_the_commands_first_write(monkeypatch, lands_but_the_answer_is_lost)

    status, out, err = release(capsys, store, dynamodb_local_endpoint, pk, "--yes")

    assert status == 0 and out.startswith(f"released {pk} (was IN_PROGRESS)"), (out, err)
    assert sent.count("PutItem") == 2  # botocore sent it again, and met our own tombstone
    record = store.get(pk)
    assert record is not None and record.status is Status.RELEASED


@pytest.mark.parametrize("state", ["absent", "expired", "released"])
def test_nothing_to_release_is_its_own_exit_code_and_writes_nothing(
    state: str, store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    now = now_ms()
    client: Any = store.client
    pk = f"k-{state}"
    if state == "expired":
        store.claim(
            pk,
            owner="o",
            payload_hash=None,
            now_ms=now - 120 * MINUTE_MS,
            lease_until_ms=now - 110 * MINUTE_MS,
            expiration_s=(now - 60 * MINUTE_MS) // 1000,
        )
    if state == "released":
        store.claim(
            pk,
            owner="o",
            payload_hash=None,
            now_ms=now,
            lease_until_ms=now + MINUTE_MS,
            expiration_s=now // 1000 + 3600,
        )
        assert store.release(pk, owner="o", now_ms=now - 1_000)
    before = raw_item(store, pk)
    assert client is not None

    status, out, err = release(capsys, store, dynamodb_local_endpoint, pk, "--yes", "--force")

    assert status == 4, (out, err)
    assert out == "" and err.count("\n") == 1
    assert "nothing to release" in err and "the key is free" in err
    assert raw_item(store, pk) == before


@pytest.mark.parametrize(("ended_s_ago", "status"), [(1, 1), (5, 0)])
def test_a_lease_that_ended_within_the_skew_allowance_still_counts_as_live(
    ended_s_ago: int,
    status: int,
    store: DynamoDBStore,
    dynamodb_local_endpoint: str,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder's clock may be up to 2 s behind ours: a lease 1 s past on ours may still run
    on its, as the claim's own condition assumes; 5 s past, it cannot. The command judges at
    the test's `now` (on a loaded machine a second may pass before it reads its clock)."""
    from lambda_idempotency._dev.cli import release_record

    now = now_ms()
    monkeypatch.setattr(release_record, "now_ms", lambda: now)
    store.claim(
        "k-edge",
        owner="holder",
        payload_hash=None,
        now_ms=now - MINUTE_MS,
        lease_until_ms=now - ended_s_ago * 1000,
        expiration_s=now // 1000 + 3600,
    )

    got, out, err = release(capsys, store, dynamodb_local_endpoint, "k-edge", "--yes")

    assert got == status, (out, err)
    record = store.get("k-edge")
    assert record is not None
    assert record.status is (Status.IN_PROGRESS if status else Status.RELEASED)
