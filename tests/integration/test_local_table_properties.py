"""The template's table properties on the tables `local` (and `create-table`) make on
DynamoDB Local: each one it keeps is applied, each one it does not keep is named, and the
emulator is asked which is which, so a DynamoDB Local that starts keeping one fails here."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._dev.local import not_applied_lines
from lambda_idempotency._dev.local_tables import create_table
from lambda_idempotency._dev.template import Template
from tests.conftest import local_client

pytestmark = pytest.mark.dynamodb_local

ROOT = Path(__file__).resolve().parents[2]

EVERY_PROPERTY = """
Parameters:
  Protect:
    Type: String
    Default: "true"
Resources:
  Everything:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PROVISIONED
      ProvisionedThroughput: {ReadCapacityUnits: 3, WriteCapacityUnits: "4"}
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
        - {AttributeName: sk, AttributeType: S}
        - {AttributeName: other, AttributeType: S}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
        - {AttributeName: sk, KeyType: RANGE}
      GlobalSecondaryIndexes:
        - IndexName: by-other
          KeySchema: [{AttributeName: other, KeyType: HASH}]
          Projection: {ProjectionType: KEYS_ONLY}
          ProvisionedThroughput: {ReadCapacityUnits: 1, WriteCapacityUnits: 2}
          ContributorInsightsSpecification: {Enabled: true}
      LocalSecondaryIndexes:
        - IndexName: by-pk-other
          KeySchema:
            - {AttributeName: pk, KeyType: HASH}
            - {AttributeName: other, KeyType: RANGE}
          Projection: {ProjectionType: ALL}
      TimeToLiveSpecification: {AttributeName: gone_at, Enabled: "true"}
      DeletionProtectionEnabled: "true"
      StreamSpecification: {StreamViewType: NEW_AND_OLD_IMAGES}
      PointInTimeRecoverySpecification: {PointInTimeRecoveryEnabled: true}
      SSESpecification: {SSEEnabled: true}
      TableClass: STANDARD_INFREQUENT_ACCESS
      Tags: [{Key: team, Value: payments}]
      ContributorInsightsSpecification: {Enabled: false}
  OnDemand:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      OnDemandThroughput: {MaxReadRequestUnits: 100, MaxWriteRequestUnits: 50}
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      DeletionProtectionEnabled: !Ref Protect
      SSESpecification: {SSEEnabled: false}
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def created(client: Any, template: Template, logical_id: str) -> dict[str, Any]:
    spec = dataclasses.replace(template.table(logical_id), name=unique(logical_id))
    assert create_table(client, spec)
    return dict(client.describe_table(TableName=spec.name)["Table"])


def test_the_projects_table_has_the_templates_deletion_protection_billing_and_ttl(
    dynamodb_local_endpoint: str,
) -> None:
    client = local_client(dynamodb_local_endpoint)
    spec = Template(ROOT / "template.yaml").idempotency_table()
    spec = dataclasses.replace(spec, name=unique("template-table"))

    assert create_table(client, spec)

    table = client.describe_table(TableName=spec.name)["Table"]
    assert table["DeletionProtectionEnabled"] is True
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = client.describe_time_to_live(TableName=spec.name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiration"}
    with pytest.raises(client.exceptions.ClientError, match="protected against deletion"):
        client.delete_table(TableName=spec.name)
    assert spec.not_kept == ("PointInTimeRecoverySpecification", "SSESpecification")


def test_every_property_dynamodb_local_keeps_is_applied(
    dynamodb_local_endpoint: str, tmp_path: Path
) -> None:
    (tmp_path / "template.yaml").write_text(EVERY_PROPERTY)
    template = Template(tmp_path / "template.yaml")
    client = local_client(dynamodb_local_endpoint)

    table = created(client, template, "Everything")

    assert table["DeletionProtectionEnabled"] is True
    assert "BillingModeSummary" not in table  # provisioned
    throughput = table["ProvisionedThroughput"]
    assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (3, 4)
    assert table["StreamSpecification"] == {
        "StreamEnabled": True,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "by-other"
    assert index["ProvisionedThroughput"]["WriteCapacityUnits"] == 2
    assert [i["IndexName"] for i in table["LocalSecondaryIndexes"]] == ["by-pk-other"]
    ttl = client.describe_time_to_live(TableName=table["TableName"])["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "gone_at"

    on_demand = created(client, template, "OnDemand")
    assert on_demand["OnDemandThroughput"] == {
        "MaxReadRequestUnits": 100,
        "MaxWriteRequestUnits": 50,
    }
    assert on_demand["DeletionProtectionEnabled"] is False  # !Ref Protect: not resolved


def test_the_rest_are_named_in_one_line_and_dynamodb_local_does_not_keep_them(
    dynamodb_local_endpoint: str, tmp_path: Path
) -> None:
    (tmp_path / "template.yaml").write_text(EVERY_PROPERTY)
    template = Template(tmp_path / "template.yaml")

    assert template.table("Everything").not_kept == (
        "GlobalSecondaryIndexes.ContributorInsightsSpecification",
        "PointInTimeRecoverySpecification",
        "SSESpecification",
        "TableClass",
        "Tags",
    )
    assert template.table("OnDemand").not_kept == ()  # SSE off: nothing lost
    assert not_applied_lines(template.tables()) == [
        "not applied locally: GlobalSecondaryIndexes.ContributorInsightsSpecification, "
        "PointInTimeRecoverySpecification, SSESpecification, TableClass, Tags "
        "(DynamoDB Local does not keep them)",
        "not applied locally: DeletionProtectionEnabled (set by a CloudFormation function, "
        "which a local run does not resolve)",
    ]
    assert not_applied_lines(Template(ROOT / "template.yaml").tables()) == [
        "not applied locally: PointInTimeRecoverySpecification, SSESpecification "
        "(DynamoDB Local does not keep them)"
    ]

    # What DynamoDB Local does with each when asked: it accepts them and keeps none.
    client = local_client(dynamodb_local_endpoint)
    name = unique("not-kept")
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        SSESpecification={"Enabled": True},
        TableClass="STANDARD_INFREQUENT_ACCESS",
        Tags=[{"Key": "team", "Value": "payments"}],
    )
    table = client.describe_table(TableName=name)["Table"]
    assert "SSEDescription" not in table and "TableClassSummary" not in table
    with pytest.raises(client.exceptions.ClientError, match="Tagging is not currently supported"):
        client.list_tags_of_resource(ResourceArn=table["TableArn"])
    with pytest.raises(client.exceptions.ClientError, match="UnknownOperation"):
        client.update_continuous_backups(
            TableName=name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )
