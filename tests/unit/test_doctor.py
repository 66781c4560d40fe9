"""`lambda-idempotency doctor` on moto: tables right and wrong in each way it checks.

moto models key schemas, TTL, billing modes, point-in-time recovery, deletion protection and
Application Auto Scaling, but not global tables (no Replicas, no MultiRegionConsistency in
DescribeTable): those tests add them to moto's DescribeTable answer with a botocore
`after-call` handler, the rest of the answer staying moto's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli import tables as cli_tables

TABLE = "Idempotency"


@pytest.fixture
def aws(monkeypatch: Any) -> Iterator[Any]:
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def make_table(
    client: Any,
    *,
    keys: tuple[tuple[str, str, str], ...] = (("pk", "HASH", "S"),),
    ttl: str | None = "expiration",
    pitr: bool = True,
    protected: bool = True,
    provisioned: bool = False,
) -> None:
    """A table as the store wants it, unless told otherwise."""
    capacity: dict[str, Any] = {"BillingMode": "PAY_PER_REQUEST"}
    if provisioned:
        capacity = {"ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}}
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": name, "KeyType": kind} for name, kind, _ in keys],
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": type_} for name, _, type_ in keys
        ],
        DeletionProtectionEnabled=protected,
        **capacity,
    )
    if ttl is not None:
        client.update_time_to_live(
            TableName=TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl}
        )
    if pitr:
        client.update_continuous_backups(
            TableName=TABLE,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )


def doctor(capsys: Any, *options: str) -> tuple[int, dict[str, str], str]:
    """Exit status, each check's line by its name, and the whole output."""
    status = cli.main(["doctor", TABLE, *options])
    out = capsys.readouterr().out
    lines = {}
    for line in out.splitlines()[1:-1]:
        name = line[6:].split("  ")[0]
        lines[name] = line
    return status, lines, out


def test_a_table_as_the_store_wants_it_passes_every_check(aws: Any, capsys: Any) -> None:
    make_table(aws)

    status, lines, out = doctor(capsys)

    assert status == 0
    assert list(lines) == [
        "key schema",
        "TTL",
        "billing",
        "point-in-time recovery",
        "deletion protection",
        "Regions",
    ]
    assert all(line.startswith("ok") for line in lines.values()), out
    assert out.splitlines()[0] == f"table {TABLE} at region us-east-1 (native layout)"
    assert "partition key pk (S)" in lines["key schema"]
    assert "on expiration" in lines["TTL"]
    assert "on demand" in lines["billing"]
    assert out.splitlines()[-1] == "all 6 checks ok"


def test_a_wrong_key_name_fails_and_names_the_layout_that_fits(aws: Any, capsys: Any) -> None:
    make_table(aws, keys=(("id", "HASH", "S"),))

    status, lines, _ = doctor(capsys)

    assert status == 1
    assert lines["key schema"].startswith("FAIL")
    assert (
        "partition key id (S); the native layout needs partition key pk (S)"
        in (lines["key schema"])
    )
    assert "--layout powertools" in lines["key schema"]
    status, lines, _ = doctor(capsys, "--layout", "powertools")
    assert status == 0 and lines["key schema"].startswith("ok")
    assert "as the powertools layout needs" in lines["key schema"]


def test_a_renamed_key_passes_with_the_stores_name(aws: Any, capsys: Any) -> None:
    make_table(aws, keys=(("request", "HASH", "S"),))

    status, lines, _ = doctor(capsys)
    assert status == 1 and "--key-attr request" in lines["key schema"]

    status, lines, _ = doctor(capsys, "--key-attr", "request")
    assert status == 0 and lines["key schema"].startswith("ok")


def test_a_numeric_key_fails_with_a_new_table_as_the_fix(aws: Any, capsys: Any) -> None:
    make_table(aws, keys=(("pk", "HASH", "N"),))

    status, lines, _ = doctor(capsys)

    assert status == 1
    assert (
        "partition key pk (N); the native layout needs partition key pk (S)"
        in (lines["key schema"])
    )
    assert (
        "Fix: A key schema cannot be changed: create a table with partition key pk (S)"
        in (lines["key schema"])
    )


def test_a_composite_key_needs_the_stores_sort_key(aws: Any, capsys: Any) -> None:
    make_table(aws, keys=(("pk", "HASH", "S"), ("sk", "RANGE", "S")))

    status, lines, _ = doctor(capsys)
    assert status == 1 and "--sort-key-attr sk" in lines["key schema"]

    status, lines, _ = doctor(capsys, "--sort-key-attr", "other")
    assert status == 1
    assert (
        "with sort_key_attr='other' needs partition key pk (S), sort key other (S)"
        in (lines["key schema"])
    )

    status, lines, out = doctor(capsys, "--sort-key-attr", "sk")
    assert status == 0, out
    assert "partition key pk (S), sort key sk (S)" in lines["key schema"]


def test_a_sort_key_the_table_lacks_fails(aws: Any, capsys: Any) -> None:
    make_table(aws)

    status, lines, _ = doctor(capsys, "--sort-key-attr", "sk")

    assert status == 1
    assert "every key would land on one item" in lines["key schema"]
    assert "no --sort-key-attr (this table has no sort key)" in lines["key schema"]
    assert "template.yaml" not in lines["key schema"]  # its table has no sort key either


def test_ttl_off_fails_with_the_command_that_enables_it(aws: Any, capsys: Any) -> None:
    make_table(aws, ttl=None)

    status, lines, _ = doctor(capsys)

    assert status == 1
    assert lines["TTL"].startswith("FAIL  TTL")
    assert (
        f"aws dynamodb update-time-to-live --table-name {TABLE} "
        "--time-to-live-specification Enabled=true,AttributeName=expiration"
    ) in lines["TTL"]


def test_ttl_on_another_attribute_fails_unless_the_store_uses_it(aws: Any, capsys: Any) -> None:
    make_table(aws, ttl="ttl")

    status, lines, _ = doctor(capsys)
    assert status == 1
    assert "on ttl, but the store writes its expiry to expiration" in lines["TTL"]
    assert "--expiry-attr ttl" in lines["TTL"]

    status, lines, _ = doctor(capsys, "--expiry-attr", "ttl")
    assert status == 0 and lines["TTL"].startswith("ok")


def test_the_powertools_layout_is_checked_against_its_own_names(aws: Any, capsys: Any) -> None:
    make_table(aws, keys=(("id", "HASH", "S"),), ttl="expires_at")

    status, lines, _ = doctor(capsys, "--layout", "powertools")
    assert status == 1 and "the store writes its expiry to expiration" in lines["TTL"]

    status, _, out = doctor(capsys, "--layout", "powertools", "--expiry-attr", "expires_at")
    assert status == 0, out


def test_point_in_time_recovery_off_fails(aws: Any, capsys: Any) -> None:
    make_table(aws, pitr=False)

    status, lines, out = doctor(capsys)

    assert status == 1
    assert lines["point-in-time recovery"].startswith("FAIL")
    assert "update-continuous-backups" in lines["point-in-time recovery"]
    assert out.splitlines()[-1] == "1 failed (point-in-time recovery): exit 1"


def test_deletion_protection_off_fails(aws: Any, capsys: Any) -> None:
    make_table(aws, protected=False)

    status, lines, out = doctor(capsys)

    assert status == 1
    assert "--deletion-protection-enabled" in lines["deletion protection"]
    assert out.splitlines()[-1] == "1 failed (deletion protection): exit 1"


def test_provisioned_without_auto_scaling_warns_and_exits_0(aws: Any, capsys: Any) -> None:
    make_table(aws, provisioned=True)

    status, lines, out = doctor(capsys)

    assert status == 0
    assert lines["billing"].startswith("warn")
    assert "provisioned, 5 WCU" in lines["billing"] and "no write auto scaling" in out
    assert "--billing-mode PAY_PER_REQUEST" in lines["billing"]
    assert out.splitlines()[-1] == "no check failed; 1 warning (billing): exit 0"


def test_provisioned_with_write_auto_scaling_passes(aws: Any, capsys: Any) -> None:
    make_table(aws, provisioned=True)
    boto3.client("application-autoscaling", region_name="us-east-1").register_scalable_target(
        ServiceNamespace="dynamodb",
        ResourceId=f"table/{TABLE}",
        ScalableDimension="dynamodb:table:WriteCapacityUnits",
        MinCapacity=5,
        MaxCapacity=100,
    )

    status, lines, _ = doctor(capsys)

    assert status == 0
    assert lines["billing"].startswith("ok")
    assert "write auto scaling between 5 and 100 WCU" in lines["billing"]


def as_global_table(monkeypatch: Any, **fields: Any) -> None:
    """moto's DescribeTable answer, with the global-table fields moto does not model."""

    def add_fields(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Table"].update(fields)

    real_session = cli_tables.session_for

    def session(args: Any) -> Any:
        made = real_session(args)
        made.events.register("after-call.dynamodb.DescribeTable", add_fields)
        return made

    monkeypatch.setattr(cli_tables, "session_for", session)


REPLICAS = [{"RegionName": "eu-west-1"}, {"RegionName": "us-east-1"}]


@pytest.mark.parametrize("mode", [{"MultiRegionConsistency": "EVENTUAL"}, {}])
def test_a_global_table_with_eventual_consistency_warns(
    aws: Any, capsys: Any, monkeypatch: Any, mode: dict[str, str]
) -> None:
    make_table(aws)
    as_global_table(monkeypatch, Replicas=REPLICAS, **mode)

    status, lines, out = doctor(capsys)

    assert status == 0
    assert lines["Regions"].startswith("warn")
    assert "multi-Region eventual consistency (replicas: eu-west-1, us-east-1)" in out
    assert "route each key to one Region" in lines["Regions"]
    assert out.splitlines()[-1] == "no check failed; 1 warning (Regions): exit 0"


def test_a_global_table_with_strong_consistency_passes(
    aws: Any, capsys: Any, monkeypatch: Any
) -> None:
    make_table(aws)
    as_global_table(monkeypatch, Replicas=REPLICAS, MultiRegionConsistency="STRONG")

    status, lines, _ = doctor(capsys)

    assert status == 0
    assert lines["Regions"].startswith("ok")
    assert "multi-Region strong consistency" in lines["Regions"]
    assert "TransactWriteItems" in lines["Regions"]


def test_ttl_off_on_a_strongly_consistent_global_table_only_warns(
    aws: Any, capsys: Any, monkeypatch: Any
) -> None:
    """Such a table cannot have TTL: the fix is not a command but a chore."""
    make_table(aws, ttl=None)
    as_global_table(monkeypatch, Replicas=REPLICAS, MultiRegionConsistency="STRONG")

    status, lines, _ = doctor(capsys)

    assert status == 0
    assert lines["TTL"].startswith("warn")
    assert "cannot have TTL" in lines["TTL"]


def test_json_lists_every_check(aws: Any, capsys: Any) -> None:
    make_table(aws, pitr=False)

    status = cli.main(["doctor", TABLE, "--json"])
    report = json.loads(capsys.readouterr().out)

    assert status == 1
    assert report["table"] == TABLE
    statuses = {check["check"]: check["status"] for check in report["checks"]}
    assert statuses["point-in-time recovery"] == "fail"
    assert statuses["key schema"] == "ok"


def test_a_missing_table_is_one_line_with_the_tables_there(aws: Any, capsys: Any) -> None:
    make_table(aws)

    status = cli.main(["doctor", "Nope"])
    captured = capsys.readouterr()

    assert status == 2
    assert captured.out == ""
    assert captured.err == (
        f"lambda-idempotency: no table Nope at region us-east-1 (tables there: {TABLE}): "
        "name the right one with TABLE (and --region)\n"
    )


def test_refused_credentials_name_the_permissions_doctor_needs(
    aws: Any, capsys: Any, monkeypatch: Any
) -> None:
    make_table(aws)

    def refuse(**_: Any) -> None:
        from botocore.exceptions import ClientError

        error = {"Error": {"Code": "AccessDeniedException", "Message": "no"}}
        raise ClientError(error, "DescribeTable")  # type: ignore[arg-type]

    real_session = cli_tables.session_for

    def session(args: Any) -> Any:
        made = real_session(args)
        made.events.register("before-call.dynamodb.DescribeTable", refuse)
        return made

    monkeypatch.setattr(cli_tables, "session_for", session)

    status = cli.main(["doctor", TABLE])
    err = capsys.readouterr().err

    assert status == 2
    assert "(AccessDeniedException): doctor needs dynamodb:DescribeTable" in err
    assert err.count("\n") == 1


def test_the_operations_guide_shows_what_doctor_prints(capsys: Any) -> None:
    """The sample in docs/operations.md is doctor's output for the table it describes."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    command = "$ lambda-idempotency doctor orders-idempotency --region eu-west-1\n"
    shown = guide[guide.index(command) + len(command) :].split("```", 1)[0]
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(
            TableName="orders-idempotency",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            ProvisionedThroughput={"ReadCapacityUnits": 25, "WriteCapacityUnits": 25},
            DeletionProtectionEnabled=True,
        )
        client.update_time_to_live(
            TableName="orders-idempotency",
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"},
        )
        status = cli.main(["doctor", "orders-idempotency", "--region", "eu-west-1"])

    assert status == 1
    assert capsys.readouterr().out == shown
