"""Real Valkey servers for the tests, one of each topology for the whole run, started when a
test first asks for it (lambda_idempotency._dev.valkey_local installs and starts them).

Tests share them: use keys of your own (a uuid in the key) rather than FLUSHALL. A test that
fails the pair over takes `valkey_failover_pair`, which heals it afterwards for the next one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyPair, ValkeyServer


@pytest.fixture(scope="session")
def valkey_node() -> Iterator[ValkeyServer]:
    """One node: `.url` (redis://127.0.0.1:PORT), `.port`."""
    with ValkeyServer() as node:
        yield node


@pytest.fixture(scope="session")
def valkey_pair() -> Iterator[ValkeyPair]:
    """A primary and its replica in sync: `.primary.url`, `.replica.url`."""
    with ValkeyPair() as pair:
        yield pair


@pytest.fixture
def valkey_failover_pair(valkey_pair: ValkeyPair) -> Iterator[ValkeyPair]:
    """The session's pair for a test that kills its primary or promotes its replica: two live
    nodes in sync again after the test (roles and the replica's port may have changed)."""
    yield valkey_pair
    valkey_pair.heal()


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[ValkeyCluster]:
    """Three primaries in cluster mode, every slot served: `.url` (any node's, for a cluster
    client), `.startup_nodes`, `.nodes`."""
    with ValkeyCluster(size=3) as cluster:
        yield cluster
