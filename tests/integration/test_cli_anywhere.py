"""The command outside this repository: a folder with no SAM template (a CDK, Terraform or
plain-script project), a table named on the command line, records found by their namespace,
and the smaller points of issue 32 (a dry run's exit code, counts, the runtime note, the
durable SDK's traceback for an expected rejection)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli.exits import EXIT_NOTHING_TO_RELEASE
from lambda_idempotency._dev.cli.records import now_ms
from lambda_idempotency._dev.cli.run_functions import runtime_note
from lambda_idempotency._dev.dynamodb_local import free_port
from lambda_idempotency._dev.template import FunctionSpec
from tests.conftest import local_client

pytestmark = pytest.mark.dynamodb_local

ROOT = Path(__file__).resolve().parents[2]

APP = """
import uuid

from lambda_idempotency import DynamoDBStore, idempotent

store = DynamoDBStore()  # table, endpoint, region and credentials from the environment


@idempotent(key="order_id", store=store)
def handler(event, context):
    return {"order_id": event["order_id"], "charge_id": uuid.uuid4().hex}
"""


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def command(
    folder: Path, environment: dict[str, str], *argv: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lambda_idempotency", *argv],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def exported(lines: str) -> dict[str, str]:
    """What `eval` of `export NAME=value` lines would set."""
    variables = {}
    for line in lines.splitlines():
        assert line.startswith("export "), line
        name, _, value = line.removeprefix("export ").partition("=")
        variables[name] = value
    return variables


def console_lines(document: str, heading: str) -> list[str]:
    """The `$ ` commands of the first ```console block after `heading`."""
    text = (ROOT / document).read_text(encoding="utf-8")
    block = text[text.index(heading) :].split("```console\n", 1)[1].split("```", 1)[0]
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def shims(folder: Path) -> Path:
    """`lambda-idempotency` and `python` on PATH as a user's virtualenv has them: this
    interpreter, with the library it imports."""
    folder.mkdir()
    for name, run_as in (
        ("lambda-idempotency", f"{sys.executable} -m lambda_idempotency"),
        ("python", sys.executable),
    ):
        script = folder / name
        script.write_text(f'#!/bin/sh\nexec {run_as} "$@"\n')
        script.chmod(0o755)
    return folder


@pytest.mark.timeout_scale(6)  # a JVM of its own; a timeout would leave it behind
def test_the_guide_lines_outside_a_sam_project_replay_and_find_the_record(
    tmp_path: Path,
) -> None:
    """docs/operations.md, "Outside a SAM project", run as written in one shell (so `eval`
    holds), in a folder with no template, with an app of ten lines: the second call replays
    the first, the operator commands find the record with no option."""
    lines = console_lines("docs/operations.md", "### Outside a SAM project")
    assert lines[0].startswith('eval "$(lambda-idempotency local --print-env')
    assert lines[-1] == "lambda-idempotency local stop"
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.py").write_text(APP)
    port = free_port()
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AWS_") and name != "IDEMPOTENCY_TABLE"
    }
    environment["PATH"] = f"{shims(tmp_path / 'bin')}{os.pathsep}{environment['PATH']}"
    environment["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # this run's pid file, not the user's
    with_port = [
        line.replace(')"', f' --port {port})"')
        if "local --print-env" in line
        else f"{line} --port {port}"
        if line.startswith("lambda-idempotency local")
        else line
        for line in lines
    ]
    script = "set -e\n" + "".join(
        f"echo {shlex.quote('$ ' + line)}\n{line}\n" for line in with_port
    )
    try:
        shell = subprocess.run(
            ["bash", "-c", script],
            cwd=app,
            env=environment,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "lambda_idempotency", "local", "stop", "--port", str(port)],
            cwd=app,
            env=environment,
            capture_output=True,
            timeout=60,
            check=False,
        )
    out = shell.stdout
    assert shell.returncode == 0, (out, shell.stderr)
    calls = [out.split(f"$ {line}\n", 1)[1].split("\n", 1)[0] for line in with_port[1:3]]
    assert calls[0] == calls[1] and "charge_id" in calls[0]  # the second process replayed
    assert "app.handler  1 record\n" in out
    assert "status   COMPLETED" in out
    assert f"stopped DynamoDB Local on port {port}" in out
    assert "table orders-idem created, TTL on expiration" in shell.stderr


@pytest.mark.timeout_scale(6)
def test_local_print_env_prints_only_the_variables_and_runs_again(tmp_path: Path) -> None:
    port = free_port()
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = ("local", "--print-env", "--table", "orders-idem", "--port", str(port))
    try:
        started = command(tmp_path, environment, *argv)
        again = command(tmp_path, environment, *argv)
    finally:
        stopped = command(tmp_path, environment, "local", "stop", "--port", str(port))
    assert started.returncode == 0, started.stderr
    assert exported(started.stdout) == {
        "AWS_ENDPOINT_URL_DYNAMODB": f"http://127.0.0.1:{port}",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "IDEMPOTENCY_TABLE": "orders-idem",
    }
    assert again.returncode == 0 and again.stdout == started.stdout, again.stderr
    assert "already running" in again.stderr and "already exists" in again.stderr
    assert f"stopped DynamoDB Local on port {port}" in stopped.stdout


@pytest.mark.timeout_scale(6)
def test_local_in_a_sam_project_leaves_nothing_there_and_doctor_passes(tmp_path: Path) -> None:
    """A user's SAM project with the project's template.yaml: `local --background` keeps its
    pid file in the user's cache (once it was left in the project, as .tools/*.pid), names
    what it could not apply, and `doctor` passes on the table it made (once it failed:
    deletion protection was left off)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "template.yaml").write_text((ROOT / "template.yaml").read_text())
    port = free_port()
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    try:
        started = command(project, environment, "local", "--background", "--port", str(port))
        endpoint = f"http://127.0.0.1:{port}"
        doctor = command(project, environment, "doctor", "IdempotencyTable", "--endpoint", endpoint)
        files = sorted(path.name for path in project.rglob("*"))
        pid_file = tmp_path / "cache" / "lambda-idempotency" / f"dynamodb-local-{port}.pid"
        pid_file_there = pid_file.is_file()
    finally:
        stopped = command(project, environment, "local", "stop", "--port", str(port))
    assert started.returncode == 0, started.stderr
    assert (
        "not applied locally: PointInTimeRecoverySpecification, SSESpecification "
        "(DynamoDB Local does not keep them)\n"
    ) in started.stdout
    assert files == ["template.yaml"]
    assert pid_file_there
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "ok    deletion protection" in doctor.stdout
    assert stopped.returncode == 0 and f"stopped DynamoDB Local on port {port}" in stopped.stdout
    assert not pid_file.exists()


def test_create_table_without_a_template_makes_the_stores_default_table(
    dynamodb_local_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    name = f"plain-{uuid.uuid4().hex[:8]}"

    status, out, err = run(
        capsys, "create-table", "--endpoint", dynamodb_local_endpoint, "--table", name
    )

    assert (status, err) == (0, "")
    assert out == f"table {name} created, TTL on expiration\n"
    client = local_client(dynamodb_local_endpoint)
    table = client.describe_table(TableName=name)["Table"]
    assert table["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expiration"

    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_local_endpoint)  # as local prints
    status, out, err = run(capsys, "create-table", "--table", name)
    assert (status, "already exists" in out) == (0, True), (out, err)


def test_create_table_with_no_endpoint_says_where_one_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)

    status, out, err = run(capsys, "create-table", "--table", "t")

    assert (status, out) == (2, "")
    assert "pass --endpoint URL (or set AWS_ENDPOINT_URL_DYNAMODB" in err


@pytest.mark.parametrize("command_line", [("stuck",), ("inspect", "--pk", "x#1"), ("doctor",)])
def test_the_operators_without_a_table_or_template_ask_for_the_table(
    command_line: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    monkeypatch.delenv("IDEMPOTENCY_VALKEY_URL", raising=False)

    status, out, err = run(capsys, *command_line)

    assert (status, out) == (2, "")
    flag = "TABLE" if command_line[0] == "doctor" else "--table TABLE"
    assert err == (
        f"lambda-idempotency: which table? pass {flag} or set IDEMPOTENCY_TABLE (no "
        "template.yaml here to read it from); for a ValkeyStore's records, --valkey-url URL or "
        "IDEMPOTENCY_VALKEY_URL\n"
    )


def records_in_three_namespaces(store: DynamoDBStore) -> None:
    for namespace, keys in (("app.handler", 3), ("Orders.app.handler", 2), ("billing", 1)):

        @idempotent(store=store, key="id", namespace=namespace)
        def handler(event: dict[str, Any], context: Any) -> int:
            return 1

        for key in range(keys):
            handler({"id": key}, None)


def test_a_missing_record_names_the_namespaces_there(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    records_in_three_namespaces(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, _, err = run(capsys, "inspect", *where, "--key", "0", "--namespace", "handler")

    assert status == 2 and err.count("\n") == 1
    assert "namespaces in the table: app.handler, Orders.app.handler, billing;" in err
    assert "the default namespace is module.function off Lambda (app.handler;" in err

    status, _, err = run(capsys, "inspect", *where, "--key", "7", "--namespace", "app.handler")
    assert status == 2 and "namespace app.handler has records, not this key" in err

    status, _, err = run(capsys, "release", *where, "--key", "0", "--namespace", "handler")
    assert status == EXIT_NOTHING_TO_RELEASE and "namespaces in the table: app.handler" in err


def test_namespaces_counts_records_within_its_limit(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    records_in_three_namespaces(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, err = run(capsys, "namespaces", *where)

    assert status == 0
    assert out.splitlines() == [
        "app.handler  3 records",
        "Orders.app.handler  2 records",
        "billing  1 record",
    ]
    assert err == "3 namespaces in 6 items scanned (the whole table)\n"

    status, out, err = run(capsys, "namespaces", *where, "--limit", "2")
    assert status == 0 and len(out.splitlines()) <= 2
    assert err.endswith("in 2 items scanned (stopped at --limit 2)\n")


def test_a_dry_run_of_release_exits_0_and_one_stuck_record_is_singular(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    now = now_ms()
    store.claim(
        "ns#" + "a" * 64,
        owner="A",
        payload_hash=None,
        now_ms=now - 3_600_000,
        lease_until_ms=now - 3_000_000,
        expiration_s=now // 1000 + 3600,
    )
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, err = run(capsys, "stuck", *where, "--older-than", "10")
    assert status == 0 and "\n1 IN_PROGRESS record claimed over 10 min ago\n" in f"\n{out}"
    assert "scanned 1 item in 1 page" in err

    status, out, err = run(capsys, "release", *where, "--pk", "ns#" + "a" * 64)
    assert status == 0 and "status   IN_PROGRESS" in out
    assert err.startswith("dry run, nothing written:")


def test_a_runtime_other_than_the_local_python_is_noted_once() -> None:
    here = f"python{sys.version_info.major}.{sys.version_info.minor}"
    other = "python3.99"

    def spec(runtime: str | None) -> FunctionSpec:
        return FunctionSpec("OrderFunction", "app.handler", Path(), 3, 128, {}, runtime=runtime)

    assert runtime_note(spec(here)) is None and runtime_note(spec(None)) is None
    assert runtime_note(spec("nodejs20.x")) is None
    assert runtime_note(spec(other)) == (
        f"note: OrderFunction has Runtime {other}; invoked here with {here}"
    )


def test_an_expected_rejection_of_a_durable_execution_is_one_line_not_a_traceback(
    dynamodb_local_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The durable sample's payload mismatch: the SDK logs the library's answer as an ERROR
    with its traceback; `invoke` says `rejected (payload_mismatch)` alone."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    client = local_client(dynamodb_local_endpoint)
    if "IdempotencyTable" not in client.list_tables()["TableNames"]:
        run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    order = f"order-{uuid.uuid4().hex[:8]}"
    events = []
    for amount in (4200, 9900):
        event = tmp_path / f"{amount}.json"
        event.write_text(json.dumps({"order_id": order, "amount_cents": amount, "currency": "EUR"}))
        events.append(event)
    where = ("ProcessOrderFunction", "--endpoint", dynamodb_local_endpoint)

    first = run(capsys, "invoke", *where, "-e", str(events[0]))
    status, out, err = run(capsys, "invoke", *where, "-e", str(events[1]))

    assert first[0] == 0, first
    assert status == 1 and json.loads(out)["errorType"] == "PayloadMismatchError"
    assert err.strip().endswith("ProcessOrderFunction: rejected (payload_mismatch)"), err
    assert "Traceback" not in err and "ERROR" not in err, err


def test_stuck_in_one_namespace_names_the_others_when_it_finds_none(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    now = now_ms()
    for namespace in ("app.handler", "billing"):
        store.claim(
            f"{namespace}#{'b' * 64}",
            owner="A",
            payload_hash=None,
            now_ms=now - 3_600_000,
            lease_until_ms=now - 3_000_000,
            expiration_s=now // 1000 + 3600,
        )
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, err = run(capsys, "stuck", *where, "--namespace", "billing")
    assert status == 0 and out.splitlines()[0].startswith(f"billing#{'b' * 64}  ")
    assert "1 IN_PROGRESS record in namespace billing claimed over 15 min ago" in out

    status, out, err = run(capsys, "stuck", *where, "--namespace", "Orders.app.handler")
    assert status == 0
    assert out == "0 IN_PROGRESS records in namespace Orders.app.handler claimed over 15 min ago\n"
    assert "stuck in other namespaces: app.handler (1), billing (1)" in err


def test_create_table_finds_a_table_past_the_first_page_of_names(
    dynamodb_local_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """ListTables answers 100 names a page: with more tables than that sorting before it, an
    existing table was taken for missing and `create-table` failed creating it (exit 2)."""
    monkeypatch.chdir(tmp_path)
    client = local_client(dynamodb_local_endpoint)
    run_id = uuid.uuid4().hex[:8]
    for index in range(101):
        client.create_table(
            TableName=f"aaa-{run_id}-{index:03d}",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    name = f"zzz-{run_id}"
    for expected in ("created", "already exists"):
        status, out, err = run(
            capsys, "create-table", "--endpoint", dynamodb_local_endpoint, "--table", name
        )
        assert (status, out) == (0, f"table {name} {expected}, TTL on expiration\n"), err


def test_the_operators_take_aws_region_as_the_functions_store_does(
    dynamodb_local_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """boto3 reads AWS_DEFAULT_REGION only; the store falls back to AWS_REGION (Lambda sets
    both), and the commands' "no AWS region" line says to set AWS_REGION: with only that set
    they found no region (a newcomer's attack)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_local_endpoint)
    monkeypatch.delenv("IDEMPOTENCY_VALKEY_URL", raising=False)
    name = f"region-{uuid.uuid4().hex[:8]}"
    store = DynamoDBStore(name, client=local_client(dynamodb_local_endpoint))
    assert (
        run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint, "--table", name)[0] == 0
    )

    @idempotent(store=store, key="id", namespace="region.app.handler")
    def handler(event: dict[str, Any], context: Any) -> int:
        return 7

    handler({"id": "a"}, None)

    status, out, err = run(
        capsys, "inspect", "--table", name, "--key", "a", "--namespace", "region.app.handler"
    )
    assert status == 0 and "COMPLETED" in out, err
