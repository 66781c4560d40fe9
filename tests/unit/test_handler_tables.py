"""`idempotency_table` / `import_handler`: a handler module with a module-level store is
imported afresh against a test table, and nothing of it outlives the test."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from lambda_idempotency.testing import FakeLambdaContext, IdempotencyTable

APP = textwrap.dedent(
    """
    import os

    from lambda_idempotency import DynamoDBStore, idempotent

    store = DynamoDBStore()
    GREETING = os.environ["GREETING"]
    runs = []

    @idempotent(store=store, key="order_id")
    def lambda_handler(event, context):
        runs.append(event)
        return {"greeting": GREETING, "order_id": event["order_id"]}
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: shop/orders/app.py, no __init__.py files (namespace packages)."""
    (tmp_path / "shop" / "orders").mkdir(parents=True)
    (tmp_path / "shop" / "orders" / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


def test_the_module_level_store_writes_to_the_test_table(project: Path) -> None:
    with IdempotencyTable(root=project) as table:
        app = table.import_handler("shop.orders.app", GREETING="hello")
        first = app.lambda_handler({"order_id": "o-1"}, FakeLambdaContext())
        assert app.lambda_handler({"order_id": "o-1"}, FakeLambdaContext()) == first

        assert first == {"greeting": "hello", "order_id": "o-1"}
        assert len(app.runs) == 1
        assert table.client.scan(TableName=table.name)["Count"] == 1


def test_everything_is_restored_afterwards(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "the-user-s-own")
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://elsewhere:1")
    monkeypatch.delenv("GREETING", raising=False)
    environment, path = dict(os.environ), list(sys.path)

    with IdempotencyTable(root=project) as table:
        table.import_handler("shop.orders.app", GREETING="hello")
        assert os.environ["IDEMPOTENCY_TABLE"] == table.name
        assert "IDEMPOTENCY_DISABLED" not in os.environ
        assert "AWS_ENDPOINT_URL_DYNAMODB" not in os.environ  # moto intercepts instead

    assert dict(os.environ) == environment
    assert sys.path == path
    assert not [name for name in sys.modules if name.startswith("shop")]


def test_each_test_imports_the_handler_afresh_on_its_own_table(project: Path) -> None:
    with IdempotencyTable(root=project) as first_table:
        first = first_table.import_handler("shop.orders.app", GREETING="hello")
        first.lambda_handler({"order_id": "o-1"}, FakeLambdaContext())

    with IdempotencyTable(root=project) as second_table:
        second = second_table.import_handler("shop.orders.app", GREETING="hi")
        assert second is not first
        assert second.store.table_name == second_table.name != first_table.name
        assert second.lambda_handler({"order_id": "o-1"}, FakeLambdaContext()) == {
            "greeting": "hi",
            "order_id": "o-1",
        }
        assert len(second.runs) == 1


def test_a_module_imported_before_the_test_comes_back(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.setenv("GREETING", "outside")
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    import shop.orders.app as outside  # type: ignore[import-not-found]

    try:
        with IdempotencyTable(root=project) as table:
            inside = table.import_handler("shop.orders.app", GREETING="inside")
            assert inside is not outside
            assert inside.GREETING == "inside"
        assert sys.modules["shop.orders.app"] is outside
    finally:
        for name in [name for name in sys.modules if name.startswith("shop")]:
            del sys.modules[name]


def test_a_missing_module_fails_the_test_and_leaves_nothing_behind(project: Path) -> None:
    environment = dict(os.environ)
    with IdempotencyTable(root=project) as table, pytest.raises(ModuleNotFoundError):
        table.import_handler("shop.refunds.app")
    assert dict(os.environ) == environment
