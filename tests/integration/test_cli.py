"""The `lambda-idempotency` command against DynamoDB Local: local runs and operator commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._base import keys as _keys
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli.records import now_ms
from lambda_idempotency._dev.cli.tables import TABLES_NAMED
from lambda_idempotency._stores.record import Status
from tests.conftest import drop_tables, local_client

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events" / "charge_order"


@pytest.fixture
def fresh_tables(dynamodb_local_endpoint: str, monkeypatch: Any) -> Any:
    """The template's tables, empty, on the shared DynamoDB Local."""
    monkeypatch.chdir(ROOT)
    client = local_client(dynamodb_local_endpoint)
    drop_tables(client, "IdempotencyTable", "ChargesTable")
    return client


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_create_table_as_the_template_defines_it(
    fresh_tables: Any, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, out, _ = run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)

    assert status == 0
    assert "table IdempotencyTable created, TTL on expiration" in out
    ttl = fresh_tables.describe_time_to_live(TableName="IdempotencyTable")
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expiration"
    schema = fresh_tables.describe_table(TableName="IdempotencyTable")["Table"]["KeySchema"]
    assert schema == [{"AttributeName": "pk", "KeyType": "HASH"}]
    status, out, _ = run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    assert "already exists" in out


def test_invoke_each_sample_event_prints_the_response(
    fresh_tables: Any, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    responses, outcomes = [], []
    for event in sorted(EVENTS.glob("*.json")):
        status, out, err = run(
            capsys,
            "invoke",
            "ChargeOrderFunction",
            "-e",
            str(event),
            "--endpoint",
            dynamodb_local_endpoint,
        )
        responses.append((status, json.loads(out)))
        outcomes.append(err.strip().splitlines()[-1])

    (s1, first), (s2, retry), (s3, mismatch), (s4, missing) = responses
    assert (s1, s2, s3, s4) == (0, 0, 1, 1)
    assert first["status"] == "charged" and retry == first
    assert mismatch["errorType"] == "PayloadMismatchError"
    assert missing["errorType"] == "KeyMissingError"
    assert outcomes == [
        "ChargeOrderFunction: executed",
        "ChargeOrderFunction: replayed",
        "ChargeOrderFunction: rejected (payload_mismatch)",
        "ChargeOrderFunction: rejected (key_missing)",
    ]


def completed_and_stuck_records(store: DynamoDBStore) -> tuple[str, str, str]:
    """One completed record (by the decorator), one IN_PROGRESS claimed an hour ago, one
    IN_PROGRESS claimed just now."""

    @idempotent(store=store, key="order_id", namespace="Charge.app.handler")
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        return {"charged": event["order_id"]}

    handler({"order_id": "o-1"}, None)
    completed = _keys.key_hash("Charge.app.handler", None, "o-1")
    now = now_ms()
    old, fresh = "ns#old-stuck", "ns#fresh"
    for pk, claimed in ((old, now - 3_600_000), (fresh, now)):
        store.claim(
            pk,
            owner="o",
            payload_hash=None,
            now_ms=claimed,
            lease_until_ms=claimed + 900_000,
            expiration_s=now // 1000 + 3600,
        )
    return completed, old, fresh


def test_inspect_by_raw_key_and_by_pk(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    completed, old, _ = completed_and_stuck_records(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, _ = run(
        capsys, "inspect", *where, "--key", "o-1", "--namespace", "Charge.app.handler"
    )
    assert status == 0
    assert "COMPLETED" in out and completed in out and "bytes stored" in out

    status, out, _ = run(capsys, "inspect", *where, "--pk", old, "--json")
    described = json.loads(out)
    assert described["status"] == "IN_PROGRESS"
    assert 3590 < described["age_s"] < 3700
    assert described["lease_left_s"] < 0  # claimed an hour ago with a 15-minute lease


def test_inspect_missing_record(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, _, err = run(
        capsys,
        "inspect",
        "--table",
        store.table_name,
        "--endpoint",
        dynamodb_local_endpoint,
        "--pk",
        "nope",
    )
    assert status == 2 and "no record nope" in err


def test_stuck_lists_old_in_progress_records_with_progress_and_cost(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    _, old, fresh = completed_and_stuck_records(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, err = run(capsys, "stuck", *where, "--older-than", "10", "--page-size", "1")

    assert status == 0
    assert old in out and fresh not in out
    assert "1 IN_PROGRESS record claimed over 10 min ago" in out
    assert "scanned 3 items in" in err and "read cost:" in err

    status, out, err = run(
        capsys, "stuck", *where, "--older-than", "10", "--page-size", "1", "--max-pages", "1"
    )
    assert "stopped at --max-pages" in err


def test_release_without_yes_is_a_dry_run_that_succeeds(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    _, old, _ = completed_and_stuck_records(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint, "--pk", old)

    status, out, err = run(capsys, "release", *where)
    assert status == 0 and "IN_PROGRESS" in out
    assert err.startswith("dry run, nothing written:") and "add --yes" in err
    assert store.get(old) is not None

    status, out, _ = run(capsys, "release", *where, "--yes")
    assert status == 0 and f"released {old}" in out
    released = store.get(old)  # a tombstone, free to any claim made from now on
    assert released is not None and released.status is Status.RELEASED


def test_operator_commands_need_a_record_name(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, _, err = run(
        capsys, "inspect", "--table", store.table_name, "--endpoint", dynamodb_local_endpoint
    )
    assert status == 2 and "--pk PK, or --key KEY with --namespace" in err


def test_no_credentials_is_one_clear_line(capsys: Any, monkeypatch: Any, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv(
        "AWS_EC2_METADATA_DISABLED", "true"
    )  # never ask an instance metadata service
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)

    status, _, err = run(capsys, "inspect", "--table", "t", "--region", "eu-west-1", "--pk", "x")

    assert status == 2
    assert "no AWS credentials" in err and "Traceback" not in err


def test_invoke_against_moto_server(capsys: Any, monkeypatch: Any) -> None:
    from moto.server import ThreadedMotoServer

    from lambda_idempotency._dev.dynamodb_local import free_port

    monkeypatch.chdir(ROOT)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        assert run(capsys, "create-table", "--endpoint", endpoint)[0] == 0
        event = str(EVENTS / "01-first-call.json")
        first = run(capsys, "invoke", "ChargeOrderFunction", "-e", event, "--endpoint", endpoint)
        retry = run(capsys, "invoke", "ChargeOrderFunction", "-e", event, "--endpoint", endpoint)
    finally:
        server.stop()
    assert first[0] == retry[0] == 0
    assert json.loads(first[1]) == json.loads(retry[1])
    assert json.loads(first[1])["status"] == "charged"


# -- invoke: a set-up failure is one line naming where and the fix ---------------------------


def invoke_first_call(capsys: Any, *extra: str) -> tuple[int, str, str]:
    event = str(EVENTS / "01-first-call.json")
    return run(capsys, "invoke", "ChargeOrderFunction", "--event", event, *extra)


def test_invoke_with_no_dynamodb_running_says_how_to_start_one(
    capsys: Any, monkeypatch: Any
) -> None:
    from lambda_idempotency._dev.dynamodb_local import free_port

    monkeypatch.chdir(ROOT)
    nobody = f"http://127.0.0.1:{free_port()}"

    status, out, err = invoke_first_call(capsys, "--endpoint", nobody)

    assert status == 2 and out == ""
    assert err.count("\n") == 1, err
    assert f"cannot reach DynamoDB at {nobody} (table IdempotencyTable)" in err
    assert "`lambda-idempotency local --port" in err

    status, out, err = invoke_first_call(capsys, "--endpoint", nobody, "-v")
    assert json.loads(out)["errorType"] == "StoreError"  # Lambda's error document, behind -v


def test_invoke_with_a_missing_table_names_it_and_the_command_that_creates_it(
    fresh_tables: Any, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, out, err = invoke_first_call(capsys, "--endpoint", dynamodb_local_endpoint)

    assert status == 2 and out == ""
    assert err.count("\n") == 1, err
    assert "tables IdempotencyTable, ChargesTable not found" in err
    assert f"`lambda-idempotency create-table --endpoint {dynamodb_local_endpoint}`" in err


def test_invoke_with_no_credentials_points_at_a_local_run(
    capsys: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    monkeypatch.chdir(ROOT)
    without_credentials(monkeypatch, tmp_path)

    status, out, err = invoke_first_call(capsys)

    assert status == 2 and out == ""
    assert err.count("\n") == 1, err
    assert "no AWS credentials to reach table IdempotencyTable" in err
    assert "`lambda-idempotency local`, then add `--endpoint http://127.0.0.1:8000`" in err


def test_invoke_shows_the_handlers_own_output(
    dynamodb_local_endpoint: str, capsys: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    template = write_template(tmp_path, 'print("hello from the handler")\n')
    monkeypatch.chdir(tmp_path)
    client = local_client(dynamodb_local_endpoint)
    if "PrintTable" not in client.list_tables()["TableNames"]:
        run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    event = tmp_path / "e.json"
    event.write_text(json.dumps({"id": f"k-{tmp_path.name}"}))

    status, out, err = run(
        capsys, "invoke", "Printer", "-e", str(event), "--endpoint", dynamodb_local_endpoint
    )

    assert status == 0 and json.loads(out) == {"ok": True}
    assert "hello from the handler" in err and err.strip().endswith("Printer: executed")
    assert template.exists()


def write_template(folder: Path, body: str) -> Path:
    """A one-function template whose handler runs `body` and returns {"ok": true}."""
    (folder / "fn").mkdir()
    (folder / "fn" / "app.py").write_text(
        "from lambda_idempotency import DynamoDBStore, idempotent\n\n"
        "@idempotent(store=DynamoDBStore(), key='id')\n"
        "def handler(event, context):\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + "    return {'ok': True}\n"
    )
    template = folder / "template.yaml"
    template.write_text(
        f"""
Resources:
  PrintTable:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{{AttributeName: pk, AttributeType: S}}]
      KeySchema: [{{AttributeName: pk, KeyType: HASH}}]
  Layer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: {ROOT / "layer"}
  Printer:
    Type: AWS::Serverless::Function
    Properties:
      Handler: app.handler
      CodeUri: fn
      Layers: [!Ref Layer]
      Environment:
        Variables:
          IDEMPOTENCY_TABLE: !Ref PrintTable
"""
    )
    return template


def without_credentials(monkeypatch: Any, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask a metadata service
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)


# -- CLI traps -------------------------------------------------------------------------------


def test_template_is_accepted_after_the_command(capsys: Any, tmp_path: Path) -> None:
    template = write_template(tmp_path, "pass")
    status, _, err = run(capsys, "invoke", "Nope", "-e", "x.json", "--template", str(template))
    assert status == 2
    assert "no function 'Nope' in template.yaml (functions: Printer)" in err
    assert "--template" in err


def test_create_table_of_an_unknown_table_lists_the_tables(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(ROOT)
    status, _, err = run(
        capsys, "create-table", "--endpoint", "http://127.0.0.1:9", "--table", "Nope"
    )
    assert status == 2
    assert "no DynamoDB table 'Nope' in template.yaml" in err
    assert "(tables: IdempotencyTable, ChargesTable)" in err


@pytest.mark.parametrize("command", ["inspect", "stuck", "release"])
def test_operator_commands_on_a_wrong_table_name_it_and_the_fix(
    command: str, store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    record = ["--pk", "x"] if command != "stuck" else []
    status, _, err = run(
        capsys,
        command,
        "--table",
        "no-such-table",
        "--endpoint",
        dynamodb_local_endpoint,
        *record,
    )
    assert status == 2 and err.count("\n") == 1, err
    assert f"no table no-such-table at {dynamodb_local_endpoint}" in err
    listed = store.client.list_tables(Limit=TABLES_NAMED + 1)["TableNames"]
    named = err.split("(tables there: ")[1].split(")")[0].split(", ")
    assert named == listed[:TABLES_NAMED] + (["..."] if len(listed) > TABLES_NAMED else [])
    assert listed  # the store's table at least
    assert "name one of them with --table" in err
    assert f"`lambda-idempotency create-table --endpoint {dynamodb_local_endpoint}`" in err


def test_run_samples_without_the_events_folder_fails_clearly(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(ROOT)
    status, out, err = run(capsys, "run-samples", "--events", "no-such-folder")
    assert status == 2 and out == ""
    assert "no events folder no-such-folder: pass --events FOLDER" in err


def test_run_samples_reports_functions_without_events(
    dynamodb_local_endpoint: str, capsys: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    template = write_template(tmp_path, "pass")
    with_events = tmp_path / "events"
    (with_events / "elsewhere").mkdir(parents=True)
    (with_events / "elsewhere" / "e.json").write_text("{}")
    monkeypatch.chdir(tmp_path)

    status, _, err = run(
        capsys, "run-samples", "--template", str(template), "--endpoint", dynamodb_local_endpoint
    )
    assert status == 2 and "no events for any function in events" in err

    (with_events / "fn").mkdir()
    (with_events / "fn" / "e.json").write_text(json.dumps({"id": f"s-{tmp_path.name}"}))
    text = template.read_text().replace(
        "  Printer:",
        "  Quiet:\n    Type: AWS::Serverless::Function\n    Properties:\n"
        "      Handler: app.handler\n      CodeUri: quiet\n  Printer:",
    )
    template.write_text(text)
    status, out, _ = run(
        capsys, "run-samples", "--template", str(template), "--endpoint", dynamodb_local_endpoint
    )
    assert status == 0
    assert "Quiet (app.handler)\n  no events in events/quiet/: not invoked" in out
    assert "executed" in out


def test_inspect_shows_the_stored_result_decoded(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    big = "x" * 500_000 + "".join(f"{i:x}" for i in range(200_000))  # past one item: chunked

    @idempotent(store=store, key="id", namespace="Show")
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"small": event["id"]} if event["id"] == "s" else {"big": big}

    handler({"id": "s"}, None)
    handler({"id": "b"}, None)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, _ = run(capsys, "inspect", *where, "--key", "s", "--namespace", "Show", "--result")
    assert status == 0
    assert 'decoded  13 bytes as JSON:\n{\n  "small": "s"\n}' in out

    status, out, _ = run(
        capsys, "inspect", *where, "--key", "b", "--namespace", "Show", "--result", "--json"
    )
    described = json.loads(out)
    assert described["result"] == {"big": big}
    assert described["result_json_bytes"] == len(json.dumps({"big": big}, separators=(",", ":")))
    assert 0 < described["result_bytes"] < described["result_json_bytes"]


# -- lambda-idempotency local, and the README's lines as written ----------------------------


def shell_lines(document: str, start: str, end: str | None = None) -> list[str]:
    """The shell lines of the ```sh blocks between `start` and `end` in a document (only the
    first block when `end` is None), continuation lines joined, comments dropped."""
    text = (ROOT / document).read_text(encoding="utf-8")
    text = text[text.index(start) :]
    if end is not None:
        text = text[: text.index(end)]
    blocks = [part.split("```", 1)[0] for part in text.split("```sh\n")[1:]]
    if end is None:
        blocks = blocks[:1]
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split("  #")[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def run_as_written(lines: list[str]) -> list[str]:
    """Each line in order, from the project's folder, with `python -m lambda_idempotency` for
    the venv's script and a free port for 8000 (other runs on this machine may hold 8000).
    Stops the background DynamoDB Local whatever happens."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from lambda_idempotency._dev.dynamodb_local import free_port

    port = free_port()
    outputs = []
    # the background emulator's pid file in a cache of this run's own, not the user's
    cache = tempfile.mkdtemp(prefix="lambda-idempotency-cache-")
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": cache}
    try:
        for line in lines:
            command = line.replace(
                ".venv/bin/lambda-idempotency", f"{sys.executable} -m lambda_idempotency"
            )
            command = command.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}")
            if " local " in f"{command} ":
                command += f" --port {port}"
            completed = subprocess.run(
                command,
                check=False,
                shell=True,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=180,
                env=environment,
            )
            assert completed.returncode == 0, (line, completed.stdout, completed.stderr)
            outputs.append(completed.stdout + completed.stderr)
    finally:
        subprocess.run(
            [sys.executable, "-m", "lambda_idempotency", "local", "stop", "--port", str(port)],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(cache, ignore_errors=True)
    assert f"stopped DynamoDB Local on port {port}" in outputs[-1]
    return outputs


@pytest.mark.timeout_scale(6)  # a fresh process per line; on a timeout its finally stops the JVM
def test_the_readme_local_block_runs_as_written() -> None:
    lines = shell_lines("README.md", "The same tool invokes one function")
    assert lines[0] == ".venv/bin/lambda-idempotency local --background"
    assert lines[-1] == ".venv/bin/lambda-idempotency local stop"

    joined = "\n".join(run_as_written(lines))

    assert "table IdempotencyTable created, TTL on expiration" in joined
    assert "ChargeOrderFunction: executed" in joined
    assert "ChargeOrderFunction: replayed" in joined
    assert '"status": "charged"' in joined  # inspect --result
    assert "released ChargeOrderFunction.app.lambda_handler#" in joined


@pytest.mark.timeout_scale(7)  # run-samples invokes every sample
def test_the_operations_guide_local_blocks_run_as_written() -> None:
    lines = shell_lines("docs/operations.md", "## Without Docker", "## Observability")
    assert len(lines) == 10 and lines[-1] == ".venv/bin/lambda-idempotency local stop"

    joined = "\n".join(run_as_written(lines))

    assert "ChargeOrderFunction: executed" in joined
    assert '"result_json_bytes"' in joined and "status   COMPLETED" in joined
    assert "0 IN_PROGRESS records claimed over 15 min ago" in joined
    assert "released ChargeOrderFunction.app.lambda_handler#52f85d" in joined


def _interruptible() -> None:
    """In the child: Ctrl-C stops it, however the test run was started. A shell without job
    control starts a background command (`make test &`, nohup) with SIGINT ignored, and the
    child would inherit that and ignore the test's Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_local_in_the_foreground_stops_cleanly_on_ctrl_c() -> None:
    """Ctrl-C the moment "stop it with Ctrl-C" shows: a clean stop, not a traceback (it once
    was said before the Ctrl-C handler was in place, and a loaded machine's test lost it)."""
    import signal
    import subprocess
    import sys

    from lambda_idempotency._dev.dynamodb_local import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "lambda_idempotency", "local", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_interruptible,  # noqa: PLW1509
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        while not lines or lines[-1] != "stop it with Ctrl-C\n":
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert lines[-1] == "stop it with Ctrl-C\n", lines

        process.send_signal(signal.SIGINT)  # at once, as a user quick on the keys
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0 and rest.strip().endswith("stopped"), (lines, rest)
    # The tables were there (test_the_readme_local_block_runs_as_written reads them).
    assert "table IdempotencyTable created, TTL on expiration\n" in lines
    assert "table ChargesTable created\n" in lines
    assert (
        "not applied locally: PointInTimeRecoverySpecification, SSESpecification "
        "(DynamoDB Local does not keep them)\n"
    ) in lines
    with pytest.raises(Exception, match="Could not connect"):
        local_client(f"http://127.0.0.1:{port}").list_tables()


def test_invoke_reads_the_outcome_from_the_counts_when_the_log_lines_go_elsewhere(
    dynamodb_local_endpoint: str, capsys: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """As with a Powertools Logger that took over the library's logger."""
    write_template(
        tmp_path,
        "import logging\n"
        "logging.getLogger('lambda_idempotency').handlers.clear()\n"
        "logging.getLogger('lambda_idempotency').setLevel(logging.WARNING)",
    )
    monkeypatch.chdir(tmp_path)
    client = local_client(dynamodb_local_endpoint)
    if "PrintTable" not in client.list_tables()["TableNames"]:
        run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    event = tmp_path / "e.json"
    event.write_text(json.dumps({"id": f"quiet-{tmp_path.name}"}))
    where = ("Printer", "-e", str(event), "--endpoint", dynamodb_local_endpoint)

    first, second = run(capsys, "invoke", *where), run(capsys, "invoke", *where)

    assert first[2].strip().endswith("Printer: executed")
    assert second[2].strip().endswith("Printer: replayed")
