"""Testing a real handler module: one with `store = DynamoDBStore()` at module level.

Such a module reads IDEMPOTENCY_TABLE (and its own settings) when it is imported, and its
store makes a boto3 client from the environment on first use. So the environment must point
at a test table *before* the import, the import must be fresh in each test, and both must be
undone afterwards, or one test's module (and table) leaks into the next.
"""

from __future__ import annotations

import importlib
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .._stores.dynamodb.store import DynamoDBStore
from .extras import missing_extra

_numbers = itertools.count()


class _Undo:
    """Remembers how to put back what each change replaced, and does so in reverse order."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], None]] = []

    def setenv(self, name: str, value: str | None) -> None:
        old = os.environ.get(name)
        self._steps.append(lambda: _setenv(name, old))
        _setenv(name, value)

    def setattr(self, owner: object, name: str, value: object) -> None:
        old = getattr(owner, name)
        self._steps.append(lambda: setattr(owner, name, old))
        setattr(owner, name, value)

    def prepend_path(self, folder: str) -> None:
        sys.path.insert(0, folder)
        self._steps.append(lambda: sys.path.remove(folder) if folder in sys.path else None)

    def forget_modules(self, package: str) -> None:
        """Drop `package` and its submodules from sys.modules now, and again at the end,
        when the ones that were there before come back."""
        before = _modules_of(package)
        for name in before:
            del sys.modules[name]

        def restore() -> None:
            for name in _modules_of(package):
                del sys.modules[name]
            sys.modules.update(before)

        self._steps.append(restore)

    def run(self) -> None:
        while self._steps:
            self._steps.pop()()


def _setenv(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _modules_of(package: str) -> dict[str, ModuleType]:
    return {
        name: module
        for name, module in sys.modules.items()
        if name == package or name.startswith(f"{package}.")
    }


class IdempotencyTable:
    """An idempotency table in moto or DynamoDB Local, with the environment pointing at it.

    While it is open, IDEMPOTENCY_TABLE names the table, the default boto3 client reaches it
    (AWS_ENDPOINT_URL_DYNAMODB for DynamoDB Local; moto intercepts requests in-process), with
    test credentials and region, and IDEMPOTENCY_DISABLED is unset. `import_handler` then
    imports a handler module afresh, so its module-level store uses this table. `close()`
    restores the environment, the boto3 default session and sys.modules as they were.
    """

    def __init__(self, *, endpoint_url: str | None = None, root: Path | None = None) -> None:
        try:
            import boto3
        except ModuleNotFoundError as exc:
            raise missing_extra(exc, "idempotency_table", sdk_extra="testing") from exc

        self.endpoint_url = endpoint_url
        self._root = root
        self._undo = _Undo()
        self._mock: Any = None
        if endpoint_url is None:
            try:
                from moto import mock_aws
            except ModuleNotFoundError as exc:
                raise missing_extra(exc, "a table in moto (idempotency_table)") from exc

            self._mock = mock_aws()
            self._mock.start()
        try:
            for name, value in self._environment().items():
                self._undo.setenv(name, value)
            self._undo.setattr(boto3, "DEFAULT_SESSION", None)  # no cached credentials
            self.client: Any = boto3.client("dynamodb", endpoint_url=endpoint_url)
            self.name = self.create_table("idempotency", key="pk")
            self._undo.setenv("IDEMPOTENCY_TABLE", self.name)
        except BaseException:
            self.close()
            raise
        self.store = DynamoDBStore(self.name, client=self.client)
        """A store on the table, for reading what the handler wrote."""

    def __repr__(self) -> str:
        where = self.endpoint_url or "moto"
        return f"IdempotencyTable(name={self.name!r}, endpoint={where!r})"

    def _environment(self) -> dict[str, str | None]:
        environment: dict[str, str | None] = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": None,
            "AWS_PROFILE": None,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": None,
            "AWS_ENDPOINT_URL_DYNAMODB": self.endpoint_url,
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": None,
            "IDEMPOTENCY_DISABLED": None,
            "POWERTOOLS_IDEMPOTENCY_DISABLED": None,
        }
        return environment

    def create_table(self, name: str, *, key: str = "pk") -> str:
        """A table with a string hash key `key`, for the handler's own writes; returns its
        name, made unique (`<name>-<pid>-<n>`) so tests sharing one DynamoDB Local never meet."""
        unique = f"{name}-{os.getpid()}-{next(_numbers)}"
        self.client.create_table(
            TableName=unique,
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return unique

    def setenv(self, **environment: str) -> None:
        """Set environment variables until close() (the handler's own settings)."""
        for name, value in environment.items():
            self._undo.setenv(name, value)

    def import_handler(self, module: str, **environment: str) -> ModuleType:
        """Import `module` (e.g. "functions.orders.app") afresh, after setting `environment`
        (the handler's own settings, such as the names of its other tables). Found from the
        project's root (pytest's rootdir) as well as sys.path; forgotten again at close()."""
        self.setenv(**environment)
        if self._root is not None and str(self._root) not in sys.path:
            self._undo.prepend_path(str(self._root))
        self._undo.forget_modules(module.partition(".")[0])
        importlib.invalidate_caches()
        return importlib.import_module(module)

    def close(self) -> None:
        self._undo.run()
        mock, self._mock = self._mock, None
        if mock is not None:
            mock.stop()

    def __enter__(self) -> IdempotencyTable:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture
def idempotency_table(request: pytest.FixtureRequest) -> Iterator[IdempotencyTable]:
    """An idempotency table in moto with the environment pointing at it, for handler modules
    imported with `import_handler` (needs `moto`). Everything is restored after the test."""
    table = IdempotencyTable(root=request.config.rootpath)
    yield table
    table.close()


@pytest.fixture
def idempotency_table_local(
    dynamodb_local_endpoint: str, request: pytest.FixtureRequest
) -> Iterator[IdempotencyTable]:
    """The same on DynamoDB Local: `idempotency_table_local.import_handler(...)`."""
    table = IdempotencyTable(endpoint_url=dynamodb_local_endpoint, root=request.config.rootpath)
    yield table
    table.close()


@pytest.fixture
def import_handler(idempotency_table: IdempotencyTable) -> Any:
    """`import_handler("functions.orders.app", SETTING="value")`: the module, imported
    afresh with its module-level store on `idempotency_table` (moto)."""
    return idempotency_table.import_handler
