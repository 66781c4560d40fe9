"""The guide's infrastructure snippets, read by the tools that read them (`make infra-check`).

Each file here is shown in docs/guide.md as is (tests/unit/test_docs.py holds them equal).
These tests run outside `make test`, because their tools install apart: the SAM CLI of
`make sam-check`, the CDK CLI (npm) with aws-cdk-lib (PyPI) in .tools/cdk, python-hcl2 there
too. `terraform validate` needs the AWS provider from the Terraform registry, which CI's
machines cannot reach: main.tf is parsed and its resources checked instead, and formatted
as `terraform fmt` would (when terraform is installed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._stores.dynamodb.calls import RUNTIME_IAM_ACTIONS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SAM = os.environ.get("SAM_CLI", str(ROOT / ".tools" / "sam" / "bin" / "sam"))
CDK = os.environ.get("CDK_CLI", str(ROOT / ".tools" / "cdk" / "node_modules" / ".bin" / "cdk"))
CDK_PYTHON = os.environ.get("CDK_PYTHON", str(ROOT / ".tools" / "cdk" / "venv" / "bin" / "python"))
QUIET = {
    "SAM_CLI_TELEMETRY": "0",
    "CDK_DISABLE_VERSION_CHECK": "1",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
}


def run(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, **QUIET},
    )


def test_the_sam_snippet_passes_sam_validate_lint(tmp_path: Path) -> None:
    completed = run(SAM, "validate", "--lint", "--template", str(HERE / "sam.yaml"), cwd=tmp_path)

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "is a valid SAM Template" in completed.stdout + completed.stderr


def table_and_actions(resources: dict[str, Any]) -> tuple[str, dict[str, Any], set[str]]:
    """The one DynamoDB table's logical id and properties, and the actions granted on it."""
    (table_id,) = [k for k, v in resources.items() if v["Type"] == "AWS::DynamoDB::Table"]
    actions: set[str] = set()
    for resource in resources.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Resource"] == {"Fn::GetAtt": [table_id, "Arn"]}:
                actions |= set(statement["Action"])
    return table_id, resources[table_id]["Properties"], actions


def test_the_cdk_app_synthesises_the_table_and_policy_the_library_needs(tmp_path: Path) -> None:
    shutil.copy(HERE / "cdk_app.py", tmp_path)
    shutil.copy(HERE / "cdk.json", tmp_path)  # as a user has it; --app below names this venv
    code = tmp_path / "build" / "order_function"
    code.mkdir(parents=True)
    (code / "app.py").write_text("def handler(event, context): ...\n")

    completed = run(
        CDK, "synth", "--quiet", "--no-notices", "--app", f"{CDK_PYTHON} cdk_app.py", cwd=tmp_path
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    template = json.loads((tmp_path / "cdk.out" / "OrdersStack.template.json").read_text())
    table_id, table, actions = table_and_actions(template["Resources"])
    assert table["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": "pk", "AttributeType": "S"}]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["DeletionProtectionEnabled"] is True
    assert actions == RUNTIME_IAM_ACTIONS
    (function,) = [
        v for v in template["Resources"].values() if v["Type"] == "AWS::Lambda::Function"
    ]
    environment = function["Properties"]["Environment"]["Variables"]
    assert environment["IDEMPOTENCY_TABLE"] == {"Ref": table_id}


def unquoted(value: Any) -> Any:
    """python-hcl2 keeps a string's quotes (`"\\"pk\\""`): the values as Terraform reads them."""
    if isinstance(value, str):
        return value[1:-1] if len(value) > 1 and value[0] == value[-1] == '"' else value
    if isinstance(value, list):
        return [unquoted(item) for item in value]
    if isinstance(value, dict):
        return {unquoted(k): unquoted(v) for k, v in value.items() if k != "__is_block__"}
    return value


def test_the_terraform_snippet_parses_into_the_table_and_policy_the_library_needs(
    tmp_path: Path,
) -> None:
    completed = run(
        CDK_PYTHON,
        "-c",
        "import hcl2, json, sys; print(json.dumps(hcl2.load(open(sys.argv[1]))))",
        str(HERE / "main.tf"),
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    parsed = unquoted(json.loads(completed.stdout))

    resources = {kind: named for block in parsed["resource"] for kind, named in block.items()}
    table = resources["aws_dynamodb_table"]["idempotency"]
    assert (table["hash_key"], table["billing_mode"]) == ("pk", "PAY_PER_REQUEST")
    assert table["attribute"] == [{"name": "pk", "type": "S"}]
    assert table["ttl"] == [{"attribute_name": "expiration", "enabled": True}]
    assert table["point_in_time_recovery"] == [{"enabled": True}]
    assert table["deletion_protection_enabled"] is True
    (document,) = [block["aws_iam_policy_document"]["idempotency"] for block in parsed["data"]]
    (statement,) = document["statement"]
    assert set(statement["actions"]) == RUNTIME_IAM_ACTIONS
    assert statement["resources"] == ["${aws_dynamodb_table.idempotency.arn}"]
    policy = resources["aws_iam_role_policy"]["idempotency"]
    assert policy["policy"] == "${data.aws_iam_policy_document.idempotency.json}"


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")
def test_the_terraform_snippet_is_formatted_as_terraform_fmt_writes_it(tmp_path: Path) -> None:
    completed = run("terraform", "fmt", "-check", "-diff", str(HERE / "main.tf"), cwd=tmp_path)

    assert completed.returncode == 0, completed.stdout + completed.stderr
