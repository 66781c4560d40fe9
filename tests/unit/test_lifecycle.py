"""`_base.lifecycle`: the process's life as the stores need to know it (Lambda's INIT, a fork,
a SnapStart restore), on its own.

The in-process tests give the module a fresh state of its own (no tracked stores, no hooks
installed, `os.register_at_fork` and `snapshot_restore_py` recorded), so nothing they do
reaches the stores other tests hold. What only a real process shows (the runtime's module, a
real fork) runs in a subprocess: the test process has threads, and forking it is unsafe.
The restored environments themselves are `tests/integration/test_snapshot_restore.py`'s.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import subprocess
import sys
import types
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lambda_idempotency
from lambda_idempotency import DynamoDBStore, ValkeyStore
from lambda_idempotency._base import lifecycle
from lambda_idempotency._stores.dynamodb.direct.transport import DirectWire

SOURCE = Path(lambda_idempotency.__file__).resolve().parents[1]
INITIALIZATION_TYPES = [
    "on-demand",
    "provisioned-concurrency",
    "snap-start",
    "lambda-managed-instances",
]
"""What Lambda's runtime sets AWS_LAMBDA_INITIALIZATION_TYPE to."""
NOWHERE = "http://127.0.0.1:9"
"""An endpoint nothing answers on: preparing a store sends nothing."""


class Counting:
    """A store as lifecycle sees one: counts its prepares and renewals."""

    def __init__(self, fails: bool = False) -> None:
        self.prepared = self.renewed = 0
        self.fails = fails

    def prepare(self) -> None:
        self.prepared += 1

    def renew(self) -> None:
        self.renewed += 1
        if self.fails:
            raise RuntimeError("cannot renew")


class Runtime:
    """Lambda's `snapshot_restore_py` and `os.register_at_fork`, recording what lifecycle
    registers (other modules' at-fork hooks, registered while a test imports them, go to
    the real `os.register_at_fork`)."""

    def __init__(self) -> None:
        self._register_at_fork = os.register_at_fork
        self.before_snapshot: list[Any] = []
        self.after_restore: list[Any] = []
        self.at_fork: list[dict[str, Any]] = []
        self.module = types.ModuleType("snapshot_restore_py")
        self.module.register_before_snapshot = self.before_snapshot.append  # type: ignore[attr-defined]
        self.module.register_after_restore = self.after_restore.append  # type: ignore[attr-defined]

    def register_at_fork(self, **hooks: Any) -> None:
        if lifecycle._after_fork in hooks.values():
            self.at_fork.append(hooks)
        else:
            self._register_at_fork(**hooks)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """The module as in a new process: nothing tracked, no hook installed; the hooks it
    installs recorded instead. `random`'s state is put back afterwards."""
    recorded = Runtime()
    monkeypatch.setattr(lifecycle, "_tracked", type(lifecycle._tracked)())  # empty, same kind
    monkeypatch.setattr(lifecycle, "_hooks", [])
    monkeypatch.setattr(os, "register_at_fork", recorded.register_at_fork)
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", recorded.module)
    for name in ("AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_FUNCTION_NAME"):
        monkeypatch.delenv(name, raising=False)
    state = random.getstate()
    yield recorded
    random.setstate(state)


@pytest.fixture
def in_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lambda's environment for a store that builds its own client (the direct path)."""
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "lifecycle")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", NOWHERE)
    for name in ("IDEMPOTENCY_FAST_WIRE", "IDEMPOTENCY_DIRECT_WIRE", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def test_hooks_are_installed_once_however_many_stores(
    runtime: Runtime, in_lambda: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    stores: list[Any] = [DynamoDBStore(f"table-{n}") for n in range(3)]
    stores += [ValkeyStore("redis://127.0.0.1:9") for _ in range(3)]
    counting = Counting()
    for _ in range(3):
        lifecycle.track(counting)
    assert runtime.at_fork == [{"after_in_child": lifecycle._after_fork}]
    assert runtime.before_snapshot == [lifecycle.before_snapshot]
    assert runtime.after_restore == [lifecycle.after_restore]
    assert set(lifecycle._tracked) == {*stores, counting}

    lifecycle.after_restore()
    assert counting.renewed == 1  # tracked three times, renewed once


@pytest.mark.parametrize("initialization", ["on-demand", "lambda-managed-instances"])
def test_only_snapstart_registers_with_the_runtimes_module(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, initialization: str
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", initialization)
    lifecycle.track(Counting())
    assert len(runtime.at_fork) == 1
    assert (runtime.before_snapshot, runtime.after_restore) == ([], [])


def test_snapstart_without_the_runtimes_module_says_so(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # its import fails
    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        lifecycle.track(Counting())
    assert "no snapshot_restore_py" in caplog.text
    assert len(runtime.at_fork) == 1  # a fork still renews


@pytest.mark.parametrize("initialization", [None, *INITIALIZATION_TYPES])
def test_a_store_prepares_in_lambdas_init_and_only_there(
    runtime: Runtime, in_lambda: None, monkeypatch: pytest.MonkeyPatch, initialization: str | None
) -> None:
    if initialization is not None:
        monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", initialization)
    assert lifecycle.prepares_now() is (initialization is not None)
    store = DynamoDBStore("table")
    # in INIT its direct path is built (and warmed: nothing sent, nothing answers there);
    # elsewhere nothing is built before the first call
    if initialization is None:
        assert store._direct is None
    else:
        assert isinstance(store._direct, DirectWire)


def test_a_store_that_cannot_renew_does_not_stop_the_others(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    stores = [Counting(), Counting(fails=True), Counting(), Counting(fails=True), Counting()]
    for store in stores:
        lifecycle.track(store)
    with caplog.at_level(logging.ERROR, logger="lambda_idempotency"):
        lifecycle.after_restore()
        lifecycle._after_fork()  # what the child of a fork runs
    assert [store.renewed for store in stores] == [2] * len(stores)
    failures = [record for record in caplog.records if "could not renew" in record.message]
    assert len(failures) == 4
    assert all(record.exc_info is not None for record in failures)


def test_before_snapshot_prepares_every_store(runtime: Runtime) -> None:
    stores = [Counting() for _ in range(3)]
    for store in stores:
        lifecycle.track(store)
    lifecycle.before_snapshot()
    assert [store.prepared for store in stores] == [1, 1, 1]
    assert [store.renewed for store in stores] == [0, 0, 0]


def test_after_restore_reseeds_random(runtime: Runtime) -> None:
    """Two environments restored from one snapshot hold one `random` state: without the
    hook they draw the same retry and wait jitter; with it, each its own."""
    snapshot = random.getstate()

    def restored(hook: bool) -> list[float]:
        random.setstate(snapshot)
        if hook:
            lifecycle.after_restore()
        return [random.random() for _ in range(3)]

    assert restored(hook=False) == restored(hook=False)
    assert restored(hook=True) != restored(hook=True)
    assert restored(hook=True) != restored(hook=False)


@pytest.mark.parametrize("initialization", [None, "snap-start"], ids=["first-use", "init"])
@pytest.mark.parametrize(
    "build",
    [
        Counting,
        lambda: DynamoDBStore("table"),
        lambda: ValkeyStore("redis://127.0.0.1:9"),
    ],
    ids=["tracked", "dynamodb", "valkey"],
)
def test_stores_are_held_weakly(
    runtime: Runtime,
    in_lambda: None,
    monkeypatch: pytest.MonkeyPatch,
    build: Any,
    initialization: str | None,
) -> None:
    """A store dropped is not kept alive by lifecycle (nor, built in INIT, by what it
    prepared: the direct path's handlers refer back to it)."""
    if initialization is not None:
        monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", initialization)
    store = build()
    lifecycle.track(store)
    lifecycle.before_snapshot()
    assert list(lifecycle._tracked) == [store]
    dropped = weakref.ref(store)
    del store
    gc.collect()
    assert dropped() is None
    assert list(lifecycle._tracked) == []


PROBE = """
import json, os
import snapshot_restore_py as runtime
from lambda_idempotency import DynamoDBStore, ValkeyStore
from lambda_idempotency._base import lifecycle

class Counting:
    prepared = renewed = 0
    def prepare(self): self.prepared += 1
    def renew(self): self.renewed += 1

dynamodb = [DynamoDBStore(f"table-{n}") for n in range(3)]
valkey = [ValkeyStore("redis://127.0.0.1:9") for _ in range(3)]
counting = [Counting() for _ in range(3)]
for store in counting:
    lifecycle.track(store)
for hook, args, kwargs in reversed(runtime._before_snapshot_registry):
    hook(*args, **kwargs)
report = {
    "registered": [len(runtime._before_snapshot_registry), len(runtime._after_restore_registry)],
    "prepared": [store.prepared for store in counting],
    "waiters": [store._waiters.waiter for store in valkey],
}
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    waiters = [s._waiters.waiter for s in valkey]
    child = {"renewed": [s.renewed for s in counting], "waiters": waiters}
    os.write(write, json.dumps(child).encode())
    os._exit(0)
os.waitpid(pid, 0)
report["child"] = json.loads(os.read(read, 1 << 16))
report["renewed"] = [store.renewed for store in counting]
print(json.dumps(report))
"""


def test_in_a_snapstart_process_hooks_register_once_and_a_fork_renews_each_store_once(
    tmp_path: Path,
) -> None:
    """A real process: Lambda's `snapshot_restore_py` holds one hook of each kind whatever
    the number of stores, and a real fork runs the renewal once per store, in the child
    only (Valkey waiter ids drawn anew there)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "IDEMPOTENCY_", "PYTHON"))
    }
    env.update(
        PYTHONPATH=str(SOURCE),
        AWS_LAMBDA_INITIALIZATION_TYPE="snap-start",
        AWS_LAMBDA_FUNCTION_NAME="lifecycle",
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="local",
        AWS_SECRET_ACCESS_KEY="local",
        AWS_ENDPOINT_URL_DYNAMODB=NOWHERE,
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["registered"] == [1, 1]
    assert report["prepared"] == [1, 1, 1]
    assert report["child"]["renewed"] == [1, 1, 1]
    assert report["renewed"] == [0, 0, 0]
    parent, child = report["waiters"], report["child"]["waiters"]
    assert len(set(parent + child)) == 6
