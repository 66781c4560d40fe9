"""Processes as Lambda's runtimes (and a pre-forking server) make them, for the lifecycle tests
(`test_snapshot_restore.py`, `test_fork_after_use.py`, `test_managed_instances.py`).

Each scenario runs in a subprocess of its own, `python -m tests.integration.lifecycle_driver
SCENARIO CONFIG`, with the environment a test gives it (`environment`), imports the function's
module (`lifecycle_function`: the store built at module scope, as in INIT), and prints one
JSON report on its last line:

- `snapstart`: SnapStart simulated. INIT, then the runtime's before-snapshot hooks (from
  `snapshot_restore_py`'s registry, last registered first, as the runtime calls them), then N
  restores: each a copy of that process made by libc's `fork()` called directly, so that no
  Python at-fork handler runs in the copy (a restored snapshot runs none: the library's own
  at-fork renewal and `random`'s reseed would hide what only the after-restore hooks do).
  Each copy runs the after-restore hooks in order, as the runtime does, then serves M
  concurrent calls on one key. `runtime_hooks: false` is a runtime without
  `snapshot_restore_py`: the import fails, nothing is registered, nothing runs.
- `fork`: a plain `os.fork()` after the store was used (gunicorn `--preload`, a
  multiprocessing pool): children and the parent calling at once, on keys of their own and
  shared ones.
- `fork_in_flight`: a fork while another thread of the parent holds the lock of the HTTP
  pool the store uses; the child only has to start and end.
- `managed`: one process of Lambda Managed Instances (many per environment, each with its own
  INIT): ready, then on the go line from stdin, M concurrent calls on one key.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import lambda_idempotency

SOURCE = Path(lambda_idempotency.__file__).resolve().parents[1]
ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.integration.lifecycle_driver"

LAMBDA_ENVIRONMENT = {
    "AWS_LAMBDA_FUNCTION_NAME": "lifecycle",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
}
"""What Lambda's runtime sets that a store reads."""

REMAINING_MS = 60_000
"""Each invocation's remaining time: the claims' lease. Every wait in these tests must end
far sooner."""
SYNC_S = 30.0
"""How long a process waits for the others to be ready, or for its go."""


class Context:
    """The parts of Lambda's context the library reads."""

    function_name = "lifecycle"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return REMAINING_MS


def event(key: str, work_s: float = 0.0) -> dict[str, Any]:
    """The event for `key`: the same for every caller of that key (its payload must match),
    its input derived from the key (so an answer read from another call shows)."""
    return {"key": key, "input": f"input-of-{key}", "work_s": work_s}


# -- what a test runs -------------------------------------------------------------------------


def environment(tmp: Path, store: str, **values: str) -> dict[str, str]:
    """This process's environment without its AWS and idempotency settings, plus Lambda's, the
    function's store (`store`: a `lifecycle_function.KIND`) and `values`; the effects' file
    in `tmp`; no AWS configuration file (Lambda has none, and one turns the direct path off).
    The function's name is new each time: the records' namespace, so runs never meet."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "IDEMPOTENCY_", "LIFECYCLE_", "PYTHON"))
    }
    env.update(LAMBDA_ENVIRONMENT)
    env["AWS_LAMBDA_FUNCTION_NAME"] = f"lifecycle-{uuid.uuid4().hex[:8]}"
    env.update(
        PYTHONPATH=os.pathsep.join([str(SOURCE), str(ROOT)]),
        AWS_CONFIG_FILE=str(tmp / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp / "no-aws-credentials"),
        LIFECYCLE_STORE=store,
        LIFECYCLE_EFFECTS=str(tmp / "effects.jsonl"),
    )
    env.update(values)
    return env


def command(scenario: str, config: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", MODULE, scenario, json.dumps(config)]


def run(scenario: str, config: dict[str, Any], env: dict[str, str], timeout: float) -> Any:
    """Run a scenario to its report; every process it started is gone when this returns."""
    process = subprocess.Popen(
        command(scenario, config),
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its forked children share its group: ended with it
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        end_group(process)
    assert process.returncode == 0, f"{scenario} exited {process.returncode}:\n{err.decode()}"
    return json.loads(out.decode().strip().splitlines()[-1])


def end_group(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the process group `process` leads (its forks), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def effects(tmp: Path) -> list[dict[str, Any]]:
    """Every run of the handler's effect, by any process: one line each."""
    path = tmp / "effects.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- in the scenario's process ----------------------------------------------------------------


def _function() -> ModuleType:
    """INIT: the runtime imports the function's module."""
    from tests.integration import lifecycle_function

    return lifecycle_function


def _path(store: Any) -> str:
    """What sends a DynamoDB store's requests (`DirectWire`: no botocore client)."""
    caller = getattr(store, "_caller", None)
    return "" if caller is None else type(caller()).__name__


def _calls(
    handler: Callable[..., Any], events: list[dict[str, Any]], threads: int
) -> list[dict[str, Any]]:
    """Each event, `threads` at a time from one barrier: what each call answered or raised,
    and when (epoch seconds)."""
    barrier = threading.Barrier(threads)
    calls: list[dict[str, Any]] = []
    lock = threading.Lock()

    def serve(share: list[dict[str, Any]]) -> None:
        barrier.wait(SYNC_S)
        for each in share:
            call: dict[str, Any] = {"key": each["key"], "started": time.time()}
            try:
                call["result"] = handler(each, Context())
            except Exception as exc:
                call["error"] = f"{type(exc).__name__}: {exc}"
            call["ended"] = time.time()
            with lock:
                calls.append(call)

    workers = [
        threading.Thread(target=serve, args=(events[index::threads],)) for index in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return calls


class _Warnings(logging.Handler):
    """The library's warnings, kept for the report."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _watch_library_warnings() -> _Warnings:
    handler = _Warnings()
    logging.getLogger("lambda_idempotency").addHandler(handler)
    return handler


_blocks: list[dict[str, Any]] = []
"""Each BLPOP a Valkey waiter sent in this process: its token (from the key it blocked on,
`...:wake:<waiter id>.<thread id>`) and whether a wake-up answered it."""


def _record_blocks() -> None:
    """Keep what each waiter's BLPOP blocked on, and whether it was woken (redis-py's method
    wrapped on its class: what the store sends is unchanged)."""
    import redis

    blpop = redis.Redis.blpop

    def recorded(self: Any, keys: Any, timeout: Any = 0) -> Any:
        answer = blpop(self, keys, timeout)
        name = keys[0] if isinstance(keys, list) else keys
        name = name.decode() if isinstance(name, bytes) else str(name)
        _blocks.append({"token": name.rpartition(":wake:")[2], "woken": answer is not None})
        return answer

    redis.Redis.blpop = recorded  # type: ignore[method-assign]


def _stretch_waiting_schedule() -> None:
    """Polls a minute apart, as tests/integration/test_valkey_wake.py stretches them: a
    Valkey waiter answers soon only if woken (else when its block, 0.8 of the store's 5 s
    timeout, ends)."""
    from lambda_idempotency._protocol import waiting

    waiting.WAIT_MIN_POLL_SECONDS = 60.0
    waiting.WAIT_MAX_POLL_SECONDS = 60.0


def _restore_fork() -> int:
    """A copy of this process as a snapshot's restore makes one: libc's fork() called
    directly (with the GIL held: ctypes.PyDLL), so no Python at-fork handler runs in either
    process (the library's renewal, `random`'s reseed). Only safe with one thread."""
    assert threading.active_count() == 1, threading.enumerate()
    libc_fork = ctypes.PyDLL(None, use_errno=True).fork
    libc_fork.restype = ctypes.c_int
    pid = int(libc_fork())
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork")
    return pid


def _await_ready(ready: int, count: int) -> None:
    got = b""
    deadline = time.monotonic() + SYNC_S
    while len(got) < count:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([ready], [], [], max(0.0, left))
        assert readable, f"{len(got)} of {count} processes ready after {SYNC_S} s"
        chunk = os.read(ready, count)
        assert chunk, "a child ended before it was ready"
        got += chunk


def _child_report(reports: Path, index: int, body: Callable[[], dict[str, Any]]) -> None:
    """Run a forked child's `body`, write its report (or its traceback), and end the child
    without running anything of the parent's (atexit, buffered output)."""
    code = 1
    try:
        report = body()
        code = 0
    except BaseException:
        report = {"failed": traceback.format_exc()}
    finally:
        try:
            (reports / f"{index}.json").write_text(json.dumps(report))
        finally:
            os._exit(code)


def _reap(pids: list[int], reports: Path, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    waiting = set(pids)
    while waiting:
        for pid in list(waiting):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                waiting.discard(pid)
        assert time.monotonic() < deadline, f"{len(waiting)} children still running"
        time.sleep(0.02)
    return [json.loads((reports / f"{index}.json").read_text()) for index in range(len(pids))]


def snapstart(config: dict[str, Any]) -> dict[str, Any]:
    children, threads, work_s = config["children"], config["threads"], config["work_s"]
    reports = Path(config["reports"])
    if not config["runtime_hooks"]:
        sys.modules["snapshot_restore_py"] = None  # type: ignore[assignment]  # import fails
    warnings = _watch_library_warnings()
    if os.environ["LIFECYCLE_STORE"] == "valkey":
        _stretch_waiting_schedule()
        _record_blocks()
    function = _function()  # INIT: the store built (and prepared) at module scope
    primed = function.handler(event("prime"), Context())  # SnapStart's priming advice
    before: list[Any] = []
    after: list[Any] = []
    if config["runtime_hooks"]:
        import snapshot_restore_py as hooks  # type: ignore[import-untyped, import-not-found, unused-ignore]

        before, after = list(hooks._before_snapshot_registry), list(hooks._after_restore_registry)
    for hook, args, kwargs in reversed(before):  # the runtime: last registered first
        hook(*args, **kwargs)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    shared = [event("shared", work_s)] * threads

    def restored(index: int) -> dict[str, Any]:
        os.close(ready_r)
        os.close(go_w)
        for hook, args, kwargs in after:  # the runtime: in registration order
            hook(*args, **kwargs)
        drawn = random.random()
        _blocks.clear()
        os.write(ready_w, b"r")
        assert os.read(go_r, 1) == b"g", "the parent ended before the go"
        calls = _calls(function.handler, shared, threads)
        own = _calls(function.handler, [event(f"own-{index}")], 1)
        return {
            "pid": os.getpid(),
            "random": drawn,
            "waiter": getattr(getattr(function.store, "_waiters", None), "waiter", None),
            "calls": calls,
            "own": own[0],
            "blocks": list(_blocks),
        }

    pids = []
    for index in range(children):
        pid = _restore_fork()
        if pid == 0:
            _child_report(reports, index, functools.partial(restored, index))
        pids.append(pid)
    os.close(ready_w)
    os.close(go_r)
    _await_ready(ready_r, children)
    os.write(go_w, b"g" * children)
    return {
        "registered": {"before_snapshot": len(before), "after_restore": len(after)},
        "warnings": warnings.messages,
        "path": _path(function.store),
        "primed": primed,
        "parent": {
            "pid": os.getpid(),
            "waiter": getattr(getattr(function.store, "_waiters", None), "waiter", None),
        },
        "children": _reap(pids, reports, 60),
    }


def fork(config: dict[str, Any]) -> dict[str, Any]:
    """A parent that used its store (from `threads` threads at once: as many pooled
    connections) forks children; they and it call at once, each from `threads` threads."""
    children, calls, parent_calls = config["children"], config["calls"], config["parent_calls"]
    shared_keys, threads, reports = config["shared_keys"], config["threads"], config["reports"]
    function = _function()
    path = _path(function.store)
    used = _calls(function.handler, [event(f"parent-before-{n}") for n in range(threads)], threads)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def keys(index: int) -> list[str]:
        return [
            f"shared-{(n // 3) % shared_keys}" if n % 3 == 0 else f"child-{index}-{n}"
            for n in range(calls)
        ]

    def child(index: int) -> dict[str, Any]:
        os.close(ready_r)
        os.close(go_w)
        os.write(ready_w, b"r")
        assert os.read(go_r, 1) == b"g", "the parent ended before the go"
        served = _calls(function.handler, [event(key) for key in keys(index)], threads)
        return {"pid": os.getpid(), "path": _path(function.store), "calls": served}

    pids = []
    for index in range(children):
        pid = os.fork()
        if pid == 0:
            _child_report(Path(reports), index, functools.partial(child, index))
        pids.append(pid)
    os.close(ready_w)
    os.close(go_r)
    _await_ready(ready_r, children)
    os.write(go_w, b"g" * children)
    mine = [
        f"shared-{n % shared_keys}" if n % 4 == 0 else f"parent-after-{n}"
        for n in range(parent_calls)
    ]
    served = _calls(function.handler, [event(key) for key in mine], threads)
    return {
        "path": path,
        "parent": {"pid": os.getpid(), "used": used, "calls": served},
        "children": _reap(pids, Path(reports), 60),
    }


def fork_in_flight(config: dict[str, Any]) -> dict[str, Any]:
    """A fork at the instant another thread of the parent is inside the HTTP pool the store's
    calls use (urllib3's pool manager, whose lock it holds while it looks a pool up): the
    thread holds that lock across the fork, as such a thread would. The child never touches
    the store: it only has to start, and end."""
    function = _function()
    function.handler(event("parent-before"), Context())
    store = function.store
    direct = getattr(store, "_direct", None)
    session = store._client._endpoint.http_session if direct is None else direct._http
    lock = session._manager.pools.lock
    held, release = threading.Event(), threading.Event()

    def inside_the_pool() -> None:
        with lock:
            held.set()
            release.wait(SYNC_S)

    thread = threading.Thread(target=inside_the_pool)
    thread.start()
    assert held.wait(SYNC_S)
    pid = os.fork()
    if pid == 0:
        os._exit(0)  # whatever the child was for, it never reaches it if the fork hangs
    release.set()
    thread.join()
    deadline = time.monotonic() + config["wait_s"]
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"path": _path(store), "child": "ended", "status": status}
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return {"path": _path(store), "child": "hung"}


def managed(config: dict[str, Any]) -> dict[str, Any]:
    """One of a Managed Instances environment's processes: its own INIT, then its calls."""
    function = _function()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    go = sys.stdin.readline()
    assert go.strip() == "go", go
    threads = config["threads"]
    calls = _calls(function.handler, [event("shared", config["work_s"])] * threads, threads)
    return {
        "pid": os.getpid(),
        "path": _path(function.store),
        "tempdir": tempfile.gettempdir(),
        "calls": calls,
    }


SCENARIOS = {
    "snapstart": snapstart,
    "fork": fork,
    "fork_in_flight": fork_in_flight,
    "managed": managed,
}


if __name__ == "__main__":
    scenario, config = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(SCENARIOS[scenario](config)), flush=True)
