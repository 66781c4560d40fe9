"""`idempotency_table_local`: a module-level store's default client reaches DynamoDB Local
through the environment alone (AWS_ENDPOINT_URL_DYNAMODB), and leaves it as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lambda_idempotency.testing import FakeLambdaContext, IdempotencyTable
from tests.unit.test_handler_tables import APP

pytestmark = pytest.mark.dynamodb_local


def test_a_handler_module_runs_against_dynamodb_local(
    tmp_path: Path, dynamodb_local_endpoint: str
) -> None:
    (tmp_path / "shop" / "orders").mkdir(parents=True)
    (tmp_path / "shop" / "orders" / "app.py").write_text(APP, encoding="utf-8")
    environment = dict(os.environ)

    with IdempotencyTable(endpoint_url=dynamodb_local_endpoint, root=tmp_path) as table:
        app = table.import_handler("shop.orders.app", GREETING="hello")
        first = app.lambda_handler({"order_id": "o-1"}, FakeLambdaContext())
        assert app.lambda_handler({"order_id": "o-1"}, FakeLambdaContext()) == first

        assert os.environ["AWS_ENDPOINT_URL_DYNAMODB"] == dynamodb_local_endpoint
        assert app.store.client.meta.endpoint_url == dynamodb_local_endpoint
        assert table.client.scan(TableName=table.name)["Count"] == 1
        assert len(app.runs) == 1

    assert dict(os.environ) == environment
