"""Wake-up lag: how long after the holder's answer a waiting duplicate answers.

One run, on this machine: a holder claims a key and works 50-250 ms; a duplicate arrives
during that (`on_in_progress="wait"`) and waits. The lag is the waiter's answer less the
holder's (negative when the waiter answers while the holder's own reply is in flight).
Three stores side by side, one warm decorated function each, no result cache:

- Valkey, waking: the holder's completion wakes the waiter (`WakingStore`);
- Valkey, polling: the same with wake-ups turned off (the schedule alone), for the commands;
- DynamoDB Local: the polling schedule (`_protocol.waiting`), as a warm container runs it.

Server commands per wait (Valkey): `INFO commandstats` before and after, less a holder-only
control run's per-trial count, so what is left is what the waiter cost (its claim, its arms,
blocks and reads, its replay; commands run inside a script counted too, as the server does).

    python -m benchmarks.wake_lag [--waits 200]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from lambda_idempotency import DynamoDBStore, ValkeyStore, idempotent
from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal
from lambda_idempotency._dev.local_tables import local_client
from lambda_idempotency._dev.testing import create_idempotency_table
from lambda_idempotency._dev.valkey_local import ValkeyServer
from lambda_idempotency._protocol import waiting

WORK_SECONDS = (0.05, 0.25)


def trial(handler: Callable[[dict[str, Any], Any], Any], *, with_waiter: bool) -> float | None:
    """One key: the holder's answer to the waiter's, in ms (None without a waiter)."""
    event = {"id": uuid.uuid4().hex}
    holding = threading.Event()
    answered: dict[str, float] = {}

    def holder() -> None:
        handler({**event, "holding": holding}, None)
        answered["holder"] = time.perf_counter()

    first = threading.Thread(target=holder)
    first.start()
    if with_waiter:
        holding.wait()
        time.sleep(random.uniform(0, 0.02))
        handler({**event, "holding": None}, None)
        answered["waiter"] = time.perf_counter()
    first.join()
    if not with_waiter:
        return None
    return (answered["waiter"] - answered["holder"]) * 1000


def protected(store: Any) -> Callable[[dict[str, Any], Any], Any]:
    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", cache_size=0, payload=None
    )
    def work(event: dict[str, Any], context: Any) -> str:
        holding = event.get("holding")
        if holding is not None:
            holding.set()
        time.sleep(random.uniform(*WORK_SECONDS))
        return "done"

    def handler(event: dict[str, Any], context: Any) -> Any:
        return work(event, context)

    return handler


@contextmanager
def no_wake_ups() -> Iterator[None]:
    kept = waiting.wake_ups
    waiting.wake_ups = lambda store, clock: None  # type: ignore[assignment]
    try:
        yield
    finally:
        waiting.wake_ups = kept  # type: ignore[assignment]


def commands(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0) > 0}


def valkey_run(
    url: str, waits: int, *, wake: bool
) -> tuple[list[float], dict[str, float], dict[str, float]]:
    """Lags (ms), and commands per trial with and without a waiter."""
    client = redis.Redis.from_url(url)
    store = ValkeyStore(url, prefix=f"bench-{uuid.uuid4().hex[:6]}:")
    handler = protected(store)
    with no_wake_ups() if not wake else _nothing():
        for _ in range(5):  # warm: scripts loaded, connections open, runs seen
            trial(handler, with_waiter=True)
        control = 50
        before = commands(client)
        for _ in range(control):
            trial(handler, with_waiter=False)
        alone = delta(commands(client), before)
        before = commands(client)
        lags = [lag for _ in range(waits) if (lag := trial(handler, with_waiter=True)) is not None]
        paired = delta(commands(client), before)
    store.close()
    client.close()
    info = {k: alone.get(k, 0) / control for k in set(alone) | set(paired)}
    per = {k: paired.get(k, 0) / waits for k in set(alone) | set(paired)}
    return lags, per, info


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def dynamodb_run(endpoint: str, waits: int) -> list[float]:
    client = local_client(endpoint)
    store = DynamoDBStore(create_idempotency_table(client, "wake-lag"), client=client)
    handler = protected(store)
    for _ in range(5):
        trial(handler, with_waiter=True)
    return [lag for _ in range(waits) if (lag := trial(handler, with_waiter=True)) is not None]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def show(name: str, lags: list[float]) -> None:
    print(
        f"{name:<24} n={len(lags):<4} p50 {percentile(lags, 0.5):7.1f} ms  "
        f"p99 {percentile(lags, 0.99):7.1f} ms  max {max(lags):7.1f} ms  "
        f"mean {statistics.fmean(lags):7.1f} ms"
    )


def show_commands(name: str, per: dict[str, float], alone: dict[str, float]) -> None:
    """The waiter's commands: what it sends (its claim, arms and reads as EVALSHA, each
    running one HGETALL inside, the claim and the reads a TIME too; its blocks as BLPOP),
    and all the server ran."""
    waiter = {k: per[k] - alone.get(k, 0) for k in per if k not in NOISE}
    scripts, blocks = waiter.get("evalsha", 0.0), waiter.get("blpop", 0.0)
    shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(waiter.items()) if abs(v) >= 0.005)
    print(
        f"{name:<24} per wait: {scripts + blocks:.2f} sent (scripts {scripts:.2f}: claim, "
        f"arms, reads; BLPOP {blocks:.2f}); {sum(waiter.values()):.2f} run: {shown}"
    )


NOISE = frozenset({"info", "hello", "client|setinfo"})
"""This script's own INFO, and a connection's handshake."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", type=int, default=200)
    waits = parser.parse_args().waits
    home = os.environ.get("DYNAMODB_LOCAL_HOME")
    with ValkeyServer() as node, DynamoDBLocal(home=None if home is None else Path(home)) as ddb:
        woke, woke_per, woke_alone = valkey_run(node.url, waits, wake=True)
        polled, polled_per, polled_alone = valkey_run(node.url, waits, wake=False)
        dynamo = dynamodb_run(ddb.endpoint_url, waits)
    print(f"waiter's lag after the holder's answer, {waits} waits each, work {WORK_SECONDS} s")
    show("Valkey, waking", woke)
    show("Valkey, polling", polled)
    show("DynamoDB Local, polling", dynamo)
    show_commands("Valkey, waking", woke_per, woke_alone)
    show_commands("Valkey, polling", polled_per, polled_alone)


if __name__ == "__main__":
    main()
