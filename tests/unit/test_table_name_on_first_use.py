"""The documented module-level `store = DynamoDBStore()` imports without a table name; the
name comes from IDEMPOTENCY_TABLE at the first call that needs the table."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from lambda_idempotency import ConfigurationError, DynamoDBStore
from tests.conftest import FakeContext

HANDLER = textwrap.dedent(
    """
    from lambda_idempotency import DynamoDBStore, idempotent

    store = DynamoDBStore()
    runs = []

    @idempotent(store=store, key="order_id")
    def handler(event, context):
        runs.append(event)
        return {"charged": event["order_id"]}
    """
)


@pytest.fixture
def import_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Imports a handler module written as the README shows it, with no IDEMPOTENCY_TABLE."""
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    (tmp_path / "table_name_app.py").write_text(HANDLER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("table_name_app")
    sys.modules.pop("table_name_app", None)


def test_a_disabled_module_level_store_imports_and_runs_without_a_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    (tmp_path / "disabled_app.py").write_text(HANDLER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        app = importlib.import_module("disabled_app")
        with pytest.warns(RuntimeWarning, match="runs without protection"):
            assert app.handler({"order_id": "o-1"}, FakeContext()) == {"charged": "o-1"}
        assert app.handler({"order_id": "o-1"}, FakeContext()) == {"charged": "o-1"}
    finally:
        sys.modules.pop("disabled_app", None)
    assert len(app.runs) == 2


def test_without_a_table_the_first_call_says_how_to_name_one(import_app: ModuleType) -> None:
    with pytest.raises(ConfigurationError) as raised:
        import_app.handler({"order_id": "o-1"}, FakeContext())

    assert str(raised.value) == (
        "no table name: pass DynamoDBStore(table_name) or set IDEMPOTENCY_TABLE"
    )
    assert import_app.runs == []
    assert repr(import_app.store) == "DynamoDBStore(table_name=None)"


def test_a_table_named_after_import_is_the_one_used(
    import_app: ModuleType, moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", moto_store.table_name)
    import_app.store._client = moto_store.client

    first = import_app.handler({"order_id": "o-1"}, FakeContext())
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "another-table")  # resolved once, on first use
    assert import_app.handler({"order_id": "o-1"}, FakeContext()) == first

    assert len(import_app.runs) == 1
    assert import_app.store.table_name == moto_store.table_name
    assert repr(import_app.store) == f"DynamoDBStore(table_name={moto_store.table_name!r})"
    assert moto_store.client.scan(TableName=moto_store.table_name)["Count"] == 1


def test_a_name_given_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "from-env")

    assert DynamoDBStore("given").table_name == "given"
    assert DynamoDBStore().table_name == "from-env"
    assert repr(DynamoDBStore(layout="powertools")) == (
        "DynamoDBStore(table_name='from-env', layout='powertools')"
    )
