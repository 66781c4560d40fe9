"""The store conformance suite's fixtures: one `store_factory` per store under test.

Every test in this package takes `store_factory` and runs once per factory: DynamoDB Local
in the native layout, DynamoDB Local in Powertools' layout, DynamoDB Local as a Lambda
function's own store reaches it (the direct path), moto in the native layout, and
ValkeyStore on one real Valkey node and on a real cluster of three primaries.
A store of your own runs the same tests: point IDEMPOTENCY_STORE_FACTORY at a
`module:name` that is a `StoreFactory` (or a callable returning one, or a list of them), see
docs/testing.md, "Conformance suite for a store of your own".

A behaviour only some stores have is a capability the factory declares, and a test of it
asserts what a store without it promises instead (a refusal, a deletion): nothing is skipped.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.contract import IdempotencyStore
from lambda_idempotency.testing import FakeClock, create_idempotency_table

TOMBSTONE = "tombstone"
"""`release` leaves a RELEASED record carrying the released claim's token (a delayed copy of
that claim cannot lock the key again); without it, `release` removes the record."""
SCOPE = "scope"
"""Keys carry a scope (tenant); without it, a decorator given `scope=` is refused."""
OPERATORS = "operators"
"""The store is an `OperatorStore`: `scan_stuck` and `release_version`."""
ENLISTED_WRITES = "enlisted_writes"
"""`write_completion(form, writes)` commits the caller's DynamoDB writes with the record."""
CHUNKS = "chunks"
"""Results past what one record holds are stored in parts (`stored_form(...).chunks`)."""

SERVER_CLOCK = "server_clock"
"""Leases and expiry are decided on the store's own clock: the caller's times set how long a
lease or a record lasts, not when it ends. A test that lets a lease lapse or a record expire
by passing a later `now_ms` (or moving a FakeClock) waits for it for real instead, with short
durations, a margin either side of the edge (a real wait cannot hit the millisecond)."""

CAPABILITIES = frozenset({TOMBSTONE, SCOPE, OPERATORS, ENLISTED_WRITES, CHUNKS, SERVER_CLOCK})


class StoreFactory:
    """Fresh, empty stores of one kind, and what that kind can do.

    `make()` returns a new store on its own empty table (keyspace, database) each call.
    `capabilities` names what beyond the core contract the store keeps (the constants
    above). With ENLISTED_WRITES, `enlisted_write(store, name)` returns one write the
    store's `write_completion` accepts, and `written(store, name)` whether it landed."""

    def __init__(
        self,
        name: str,
        make: Callable[[], IdempotencyStore],
        capabilities: frozenset[str] = frozenset(),
        *,
        enlisted_write: Callable[[Any, str], Mapping[str, Any]] | None = None,
        written: Callable[[Any, str], bool] | None = None,
    ) -> None:
        unknown = capabilities - CAPABILITIES
        if unknown:
            raise ValueError(f"unknown {sorted(unknown)}; capabilities: {sorted(CAPABILITIES)}")
        if ENLISTED_WRITES in capabilities and (enlisted_write is None or written is None):
            raise ValueError("enlisted_writes needs enlisted_write= and written=")
        self.name = name
        self.make = make
        self.capabilities = capabilities
        self._enlisted_write = enlisted_write
        self._written = written

    def __call__(self) -> IdempotencyStore:
        return self.make()

    def has(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}")
        return capability in self.capabilities

    def enlisted_write(self, store: Any, name: str) -> Mapping[str, Any]:
        assert self._enlisted_write is not None
        return self._enlisted_write(store, name)

    def written(self, store: Any, name: str) -> bool:
        assert self._written is not None
        return self._written(store, name)

    def __repr__(self) -> str:
        return f"StoreFactory({self.name!r})"


# -- the DynamoDB stores ----------------------------------------------------------------------

_tables = (f"conformance-{os.getpid()}-{n}" for n in itertools.count())
"""The pid too: `make mutate` forks each mutant's tests from one process, on one DynamoDB Local,
and names without it would meet the tables an earlier mutant made ("preexisting table")."""
DYNAMODB = frozenset({OPERATORS, ENLISTED_WRITES, CHUNKS})


def _business_put(store: Any, name: str) -> Mapping[str, Any]:
    """A business item in the store's own table, keyed as its records are."""
    key = store.names.pk
    return {"Put": {"TableName": store.table_name, "Item": {key: {"S": f"business#{name}"}}}}


def _business_written(store: Any, name: str) -> bool:
    key = {store.names.pk: {"S": f"business#{name}"}}
    return "Item" in store.client.get_item(TableName=store.table_name, Key=key, ConsistentRead=True)


def _native(client: Any) -> DynamoDBStore:
    return DynamoDBStore(create_idempotency_table(client, next(_tables)), client=client)


def _powertools(client: Any) -> DynamoDBStore:
    name = next(_tables)
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return DynamoDBStore(name, client=client, layout="powertools")


def _dynamodb(
    name: str, make: Callable[[], DynamoDBStore], capabilities: frozenset[str]
) -> StoreFactory:
    return StoreFactory(
        name, make, capabilities, enlisted_write=_business_put, written=_business_written
    )


def _local_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _local_native(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    client = _local_client(request.getfixturevalue("dynamodb_local_endpoint"))
    yield _dynamodb("dynamodb-local-native", lambda: _native(client), DYNAMODB | {TOMBSTONE, SCOPE})


def _local_powertools(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    client = _local_client(request.getfixturevalue("dynamodb_local_endpoint"))
    yield _dynamodb("dynamodb-local-powertools", lambda: _powertools(client), DYNAMODB)


LAMBDA_ENVIRONMENT = {
    "AWS_LAMBDA_FUNCTION_NAME": "conformance",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
}
"""What Lambda's runtime sets that a store building its own client reads."""


def _local_direct(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """A store as a Lambda function builds it, `DynamoDBStore(table)`: in Lambda, its requests
    go the direct path (`_stores.dynamodb.direct`), no botocore client."""
    from lambda_idempotency._stores.dynamodb.direct.transport import DirectWire

    endpoint = request.getfixturevalue("dynamodb_local_endpoint")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for name, value in {**LAMBDA_ENVIRONMENT, "AWS_ENDPOINT_URL_DYNAMODB": endpoint}.items():
        monkeypatch.setenv(name, value)
    for name in ("IDEMPOTENCY_FAST_WIRE", "IDEMPOTENCY_DIRECT_WIRE", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    client = _local_client(endpoint)

    def make() -> DynamoDBStore:
        store = DynamoDBStore(create_idempotency_table(client, next(_tables)))
        assert isinstance(store._caller(), DirectWire), store._direct
        return store

    yield _dynamodb("dynamodb-local-direct", make, DYNAMODB | {TOMBSTONE, SCOPE})


def _moto_native(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client(
            "dynamodb",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        yield _dynamodb("moto-native", lambda: _native(client), DYNAMODB | {TOMBSTONE, SCOPE})


# -- the Valkey stores -------------------------------------------------------------------------

_prefixes = (f"conformance-{n}:" for n in itertools.count())
VALKEY = frozenset({TOMBSTONE, SCOPE, OPERATORS, SERVER_CLOCK})


def _valkey(name: str, client: Any, **options: Any) -> StoreFactory:
    """Every store on one client (one connection pool), each under a prefix of its own: an
    empty keyspace per store on the session's shared servers."""
    from lambda_idempotency import ValkeyStore

    return StoreFactory(
        name, lambda: ValkeyStore(client=client, prefix=next(_prefixes), **options), VALKEY
    )


def _valkey_node(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    import redis

    client = redis.Redis.from_url(request.getfixturevalue("valkey_node").url)
    yield _valkey("valkey-node", client)
    client.close()


def _valkey_pair_replicas(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """The primary of a pair, every write waiting for its replica (`replicas=1`): the path
    through WAIT keeps every promise."""
    import redis

    client = redis.Redis.from_url(request.getfixturevalue("valkey_pair").primary.url)
    yield _valkey("valkey-pair-replicas", client, replicas=1)
    client.close()


def _valkey_cluster(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(request.getfixturevalue("valkey_cluster").url)
    yield _valkey("valkey-cluster", client)
    client.close()


BUILT_IN: dict[str, Callable[[pytest.FixtureRequest], Iterator[StoreFactory]]] = {
    "dynamodb-local-native": _local_native,
    "dynamodb-local-powertools": _local_powertools,
    "dynamodb-local-direct": _local_direct,
    "moto-native": _moto_native,
    "valkey-node": _valkey_node,
    "valkey-cluster": _valkey_cluster,
    "valkey-pair-replicas": _valkey_pair_replicas,
}

FACTORY_VARIABLE = "IDEMPOTENCY_STORE_FACTORY"


def _given() -> list[StoreFactory] | None:
    """The factories named by IDEMPOTENCY_STORE_FACTORY (`module:name`), if set."""
    spec = os.environ.get(FACTORY_VARIABLE)
    if not spec:
        return None
    module, _, name = spec.partition(":")
    found: Any = getattr(importlib.import_module(module), name or "store_factory")
    if callable(found) and not isinstance(found, StoreFactory):
        found = found()
    factories = [found] if isinstance(found, StoreFactory) else list(found)
    if not factories or not all(isinstance(f, StoreFactory) for f in factories):
        raise TypeError(f"{FACTORY_VARIABLE}={spec} names no StoreFactory")
    return factories


_GIVEN = _given()


NOT_CONCURRENT = {
    "moto-native": "moto's in-process DynamoDB (5.x) checks a write's condition and writes the "
    "item as two Python steps, with no lock: two threads' conditional writes on one key both "
    "land now and then, where DynamoDB's never do (8 threads, plain boto3: 2 winners in 1 "
    "round of 200). The same store's code races on DynamoDB Local, in three layouts."
}
"""Built-in stores whose backend is not atomic across threads: the race tests (a module with
`RACES = True`) are not generated for them, since they would fail on the backend, not the
store. A store of your own runs them all."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_factory" in metafunc.fixturenames:
        names = list(BUILT_IN) if _GIVEN is None else [f.name for f in _GIVEN]
        if getattr(metafunc.module, "RACES", False) and _GIVEN is None:
            names = [name for name in names if name not in NOT_CONCURRENT]
        params = [
            pytest.param(name, marks=pytest.mark.valkey) if name.startswith("valkey") else name
            for name in names
        ]  # the Valkey stores carry the `valkey` mark, as the other tests on real Valkey do
        metafunc.parametrize("store_factory", params, indirect=True)


@pytest.fixture
def store_factory(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """The factory of the store under test (one parameter per store)."""
    if _GIVEN is not None:
        yield next(f for f in _GIVEN if f.name == request.param)
        return
    yield from BUILT_IN[request.param](request)


@pytest.fixture
def store(store_factory: StoreFactory) -> IdempotencyStore:
    """A fresh, empty store of the kind under test."""
    return store_factory()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
