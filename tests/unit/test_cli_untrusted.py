"""The operator commands on records and arguments the library never writes, on moto, in
process through `main(argv)`: every answer is an exit code from the documented set with at
most one line of error, never a traceback, and only a release that says so writes."""

from __future__ import annotations

import json
import os
import time
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli import tables as cli_tables

EXIT_CODES = {0, 1, 2, 3, 4, 5}
"""docs/operations.md, "Exit codes"."""
NOW_S = int(time.time())
NOW_MS = NOW_S * 1000
LIVE_S = NOW_S + 86_400
"""An expiration still ahead when a test runs: the module is read once, at collection, and a
whole suite on a busy machine takes far more than ten minutes to reach its last test."""
PK = "ns#untrusted"


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def table_items(store: DynamoDBStore) -> list[dict[str, Any]]:
    client: Any = store.client
    return sorted(
        client.scan(TableName=store.table_name, ConsistentRead=True)["Items"],
        key=lambda item: item["pk"]["S"],
    )


def clear(store: DynamoDBStore) -> None:
    client: Any = store.client
    for item in table_items(store):
        client.delete_item(TableName=store.table_name, Key={"pk": item["pk"]})


def s(text: str) -> dict[str, str]:
    return {"S": text}


def n(number: int) -> dict[str, str]:
    return {"N": str(number)}


blobs = st.one_of(
    st.binary(min_size=1, max_size=48),
    st.tuples(
        st.sampled_from([b"j", b"z", b"t", b"x", b"c"]),
        st.one_of(
            st.binary(max_size=40),
            st.builds(
                lambda value: json.dumps(value).encode(),
                st.recursive(
                    st.none() | st.integers() | st.text(max_size=6),
                    lambda inner: (
                        st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3)
                    ),
                    max_leaves=6,
                ),
            ),
        ),
    ).map(b"".join),
)
numbers = st.one_of(
    st.integers(NOW_S - 7_200, NOW_S + 7_200),
    st.integers(NOW_MS - 3_600_000, NOW_MS + 3_600_000),
    st.integers(-(10**30), 10**30),
    st.sampled_from(["1.5", "1e3", "0.0001", "-7"]),
).map(str)
any_value = st.one_of(
    st.text(min_size=1, max_size=12).map(s),
    numbers.map(lambda number: {"N": number}),
    blobs.map(lambda blob: {"B": blob}),
    st.just({"BOOL": True}),
    st.just({"NULL": True}),
    st.lists(st.text(max_size=4).map(s), max_size=2).map(lambda items: {"L": items}),
)
statuses = st.sampled_from(["IN_PROGRESS", "COMPLETED", "RELEASED", "INPROGRESS", "EXPIRED"])
stored_items = st.fixed_dictionaries(
    {},
    optional={
        "status": statuses.map(s) | any_value,
        "expiration": numbers.map(lambda number: {"N": number}) | any_value,
        "lease_until": numbers.map(lambda number: {"N": number}) | any_value,
        "owner": st.text(min_size=1, max_size=12).map(s) | any_value,
        "payload_hash": any_value,
        "result": blobs.map(lambda blob: {"B": blob}) | any_value,
        "claimed_at": numbers.map(lambda number: {"N": number}) | any_value,
        "completed_at": any_value,
        "other": any_value,
    },
)
COMPLETED = {"status": s("COMPLETED"), "expiration": n(LIVE_S), "owner": s("A")}


@pytest.fixture
def table_args(moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """The moto table; every command on one boto3 session, so botocore reads its endpoint
    and service models once rather than per command (what a command does is the same)."""
    import boto3

    session = boto3.Session(region_name="us-east-1")
    monkeypatch.setattr(cli_tables, "session_for", lambda args: session)
    return ("--table", moto_store.table_name)


@pytest.mark.timeout_scale(6 if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else 40)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stored=stored_items)
@example(stored={"status": s("IN_PROGRESS"), "lease_until": n(LIVE_S * 1000)})  # no expiration
@example(stored={**COMPLETED, "expiration": s("soon")})
@example(stored={**COMPLETED, "claimed_at": {"N": "1.5"}})
@example(stored={**COMPLETED, "owner": n(7)})
@example(stored={**COMPLETED, "result": s("not bytes")})
@example(stored={**COMPLETED, "result": {"B": b"j{not json"}})
@example(stored={**COMPLETED, "result": {"B": b't{"\\u0000nope":1}'}})  # unknown type tag
@example(stored={**COMPLETED, "result": {"B": b"z" + b"not zlib"}})
@example(stored={**COMPLETED, "result": {"B": b"c{not a pointer"}})
@example(stored={**COMPLETED, "result": {"B": b'c{"owner": "A"}'}})  # no count
@example(stored={**COMPLETED, "result": {"B": b'c{"owner": "A", "count": "x", "bytes": []}'}})
@example(stored={**COMPLETED, "result": {"B": b"c[1]"}})
@example(stored={**COMPLETED, "result": {"B": b"x{malformed marker"}})
@example(stored={**COMPLETED, "result": {"B": b"?unknown format"}})
@example(stored={**COMPLETED, "result": {"B": b"z" + zlib.compress(b"\xff\xfe")}})
@example(stored={"status": s("IN_PROGRESS"), "expiration": n(10**30), "owner": s("A")})
@example(stored={"status": s("RELEASED"), "expiration": n(LIVE_S)})
@example(stored={"status": n(1), "expiration": n(LIVE_S)})
def test_no_stored_item_makes_an_operator_command_crash_or_write_unasked(
    stored: dict[str, Any], moto_store: DynamoDBStore, table_args: tuple[str, ...], capsys: Any
) -> None:
    clear(moto_store)
    client: Any = moto_store.client
    client.put_item(TableName=moto_store.table_name, Item={"pk": s(PK), **stored})
    before = table_items(moto_store)

    for argv in (
        ("inspect", *table_args, "--pk", PK),
        ("inspect", *table_args, "--pk", PK, "--result"),
        ("inspect", *table_args, "--pk", PK, "--result", "--json"),
        ("stuck", *table_args, "--older-than", "0"),
        ("release", *table_args, "--pk", PK),
    ):
        status, out, err = run(capsys, *argv)
        assert status in EXIT_CODES - {1, 3}, (argv, status, err)
        # stuck's progress and release's dry-run note go to stderr on success too
        dry_run = argv[0] == "release" and err.startswith("dry run, nothing written: ")
        quiet = not err.strip() or argv[0] == "stuck" or dry_run
        assert (status == 0) == quiet, (argv, status, err)
        if status != 0:
            assert err.splitlines()[-1].startswith("lambda-idempotency: "), err
            assert "Traceback" not in err
        if argv[0] == "inspect":
            assert err.count("\n") <= 1, err
            if status == 0 and "--json" in argv:
                json.loads(out)
        assert table_items(moto_store) == before, argv  # looking never writes

    status, _, err = run(capsys, "release", *table_args, "--pk", PK, "--yes", "--force")
    assert status in EXIT_CODES - {1}, (status, err)
    assert err.count("\n") <= 1 or status == 0, err
    if status != 0:
        assert table_items(moto_store) == before, (status, err)


@pytest.mark.parametrize(
    "blob",
    [
        b"j{not json",
        b"z" + b"not zlib",
        b"c{not a pointer",
        b'c{"owner": "A"}',
        b"?unknown format",
        b't{"\\u0000nope":1}',
    ],
)
def test_inspect_result_of_an_unreadable_result_shows_the_record_and_one_line(
    blob: bytes, moto_store: DynamoDBStore, table_args: tuple[str, ...], capsys: Any
) -> None:
    client: Any = moto_store.client
    item = {"pk": s(PK), **COMPLETED, "result": {"B": blob}}
    client.put_item(TableName=moto_store.table_name, Item=item)

    status, out, err = run(capsys, "inspect", *table_args, "--pk", PK, "--result")

    assert status == 5, (out, err)
    assert "status   COMPLETED" in out  # what could be read is shown
    assert err.count("\n") == 1 and err.startswith("lambda-idempotency: the stored result of")
    assert "cannot be read" in err and "nothing was changed" in err


def test_inspect_of_a_record_without_expiration_is_one_line_and_exit_5(
    moto_store: DynamoDBStore, table_args: tuple[str, ...], capsys: Any
) -> None:
    client: Any = moto_store.client
    item = {"pk": s(PK), "status": s("IN_PROGRESS"), "owner": s("A")}
    client.put_item(TableName=moto_store.table_name, Item=item)

    for command in (("inspect",), ("release", "--yes", "--force")):
        status, out, err = run(capsys, *command, *table_args, "--pk", PK)
        assert status == 5 and out == "", (command, err)
        assert err.count("\n") == 1 and f"record {PK} cannot be read" in err
    assert table_items(moto_store) == [item]


def test_stuck_lists_what_it_can_read_and_names_what_it_cannot(
    moto_store: DynamoDBStore, table_args: tuple[str, ...], capsys: Any
) -> None:
    client: Any = moto_store.client
    live = {"status": s("IN_PROGRESS"), "expiration": n(LIVE_S), "owner": s("A")}
    client.put_item(TableName=moto_store.table_name, Item={"pk": s("ns#fine"), **live})
    broken = {**live, "lease_until": s("soon")}
    client.put_item(TableName=moto_store.table_name, Item={"pk": s("ns#broken"), **broken})

    status, out, err = run(capsys, "stuck", *table_args, "--older-than", "0")

    assert status == 5
    assert "ns#fine" in out and "1 IN_PROGRESS record claimed over 0 min ago" in out
    last = err.splitlines()[-1]
    assert last.startswith("lambda-idempotency: 1 IN_PROGRESS record cannot be read")
    assert "ns#broken" in last and "inspect them with --pk" in last


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("{bad", "--key is not JSON (Expecting property name enclosed in double quotes"),
        ("[" * 100_000, "--key "),
        ("1" * 5_000, "--key cannot be read as JSON (ValueError)"),
    ],
)
def test_a_key_that_is_not_json_is_one_line(
    value: str, why: str, table_args: tuple[str, ...], capsys: Any
) -> None:
    for command in ("inspect", "release"):
        status, out, err = run(
            capsys, command, *table_args, "--json-values", "--key", value, "--namespace", "ns"
        )
        assert status == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith(f"lambda-idempotency: {why}"), err


@pytest.mark.parametrize(
    "arguments",
    [
        ("--older-than", "nan"),
        ("--older-than", "-1"),
        ("--older-than", "inf"),
        ("--older-than", "soon"),
        ("--page-size", "0"),
        ("--max-pages", "-2"),
    ],
)
def test_stuck_refuses_an_argument_it_cannot_use_in_one_line(
    arguments: tuple[str, str], table_args: tuple[str, ...], capsys: Any
) -> None:
    status, out, err = run(capsys, "stuck", *table_args, *arguments)

    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"lambda-idempotency stuck: argument {arguments[0]}"
    )
    assert "(see lambda-idempotency stuck --help)" in err


def test_the_exit_codes_are_in_the_help(capsys: Any) -> None:
    for command in ("inspect", "stuck", "release"):
        status, out, _ = run(capsys, command, "--help")
        assert status == 0
        for code in ("0  done", "1  release refused", "3  release: the record changed"):
            assert code in out, (command, out)
