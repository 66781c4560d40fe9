"""`python -m benchmarks.valkey_failover`: what a Valkey failover loses, with and without
`ValkeyStore(replicas=...)`.

A primary and its replica on this machine's loopback (`ValkeyPair`). One trial: a caller
claims a fresh key on the primary (`ValkeyStore.claim`, as the decorator does before running
the body); the moment the claim is acknowledged the primary is killed (SIGKILL), the replica
is promoted (`REPLICAOF NO ONE`), and a second caller claims the same key there. The trial ran
the effect twice when both claims were granted. Natural timing: nothing stops the replica,
so what it received before the kill is whatever replication delivered in time. A new replica
follows the promoted node before the next trial.

Four modes: no waiting, `replicas=1` (WAIT 1), `replicas=1, aof=True` (WAITAOF 1 1) under
`appendfsync everysec` (Valkey's default) and under `appendfsync always`. Then
the extra latency per claim: claims of fresh keys on the healthy pair, each mode in turn,
median and 99th percentile of the claim call. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from lambda_idempotency import StoreError, ValkeyStore
from lambda_idempotency._dev.valkey_local import ValkeyPair, call

MODES: dict[str, tuple[dict[str, Any], str]] = {
    "no waiting": ({}, "everysec"),
    "replicas=1 (WAIT)": ({"replicas": 1}, "everysec"),
    "replicas=1, aof=True (WAITAOF), appendfsync everysec": (
        {"replicas": 1, "aof": True},
        "everysec",
    ),
    "replicas=1, aof=True (WAITAOF), appendfsync always": (
        {"replicas": 1, "aof": True},
        "always",
    ),
}
"""Each mode: the store's options, and the servers' `appendfsync` (Valkey's default:
everysec)."""
SLOW_CLAIMS = 20
"""Claims timed under WAITAOF, each about a second (the replica reports what it fsynced in its
once-a-second acknowledgement, whatever its appendfsync): fewer suffice."""
LEASE_MS = 30_000


@dataclass
class Outcome:
    """One mode's trials: how each ended, and each first claim's time."""

    twice: int = 0
    once: int = 0
    refused_first: int = 0
    errors: int = 0
    healthy_refused: int = 0
    """Claims on the healthy pair (the latency run) refused as not acknowledged."""
    claim_ms: list[float] = field(default_factory=list)


def claim(store: ValkeyStore, pk: str) -> bool:
    now = time.time_ns() // 1_000_000
    won, _ = store.claim(
        pk,
        owner=uuid.uuid4().hex,
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + LEASE_MS,
        expiration_s=now // 1000 + 3600,
    )
    return won


def fsync(pair: ValkeyPair, appendfsync: str) -> None:
    for node in (pair.primary, pair.replica):
        call(node.port, "CONFIG", "SET", "appendfsync", appendfsync)


def trial(pair: ValkeyPair, options: dict[str, Any], outcome: Outcome) -> None:
    """One failover right after an acknowledged claim; the pair healed afterwards."""
    prefix = f"failover-{uuid.uuid4().hex[:8]}:"
    first = ValkeyStore(pair.primary.url, prefix=prefix, **options)
    pk = first.layout.record_key("bench", None, uuid.uuid4().hex)
    try:
        first.ready("claim")
        first.client.ping()  # connected before the clock starts
        started = time.perf_counter()
        try:
            ran_first = claim(first, pk)
        except StoreError:
            ran_first = False
            outcome.refused_first += 1
        outcome.claim_ms.append((time.perf_counter() - started) * 1000)
        pair.kill_primary()
    finally:
        first.close()
    pair.promote_replica()
    second = ValkeyStore(pair.primary.url, prefix=prefix)
    try:
        ran_second = claim(second, pk)
    except StoreError:
        outcome.errors += 1
        ran_second = False
    finally:
        second.close()
    if ran_first and ran_second:
        outcome.twice += 1
    elif ran_first or ran_second:
        outcome.once += 1
    pair.heal()


def latency(pair: ValkeyPair, options: dict[str, Any], claims: int) -> tuple[list[float], int]:
    """Each claim's time on the healthy pair, and how many were refused (not acknowledged)."""
    store = ValkeyStore(pair.primary.url, prefix=f"latency-{uuid.uuid4().hex[:8]}:", **options)
    try:
        claim(store, store.layout.record_key("bench", None, "warm-up"))
        times, refused = [], 0
        for n in range(claims):
            pk = store.layout.record_key("bench", None, f"k{n}")
            started = time.perf_counter()
            try:
                claim(store, pk)
            except StoreError:
                refused += 1
            times.append((time.perf_counter() - started) * 1000)
        return times, refused
    finally:
        store.close()


def run(
    trials: int, claims: int, aof_trials: int | None = None
) -> tuple[dict[str, Outcome], dict[str, list[float]]]:
    outcomes = {mode: Outcome() for mode in MODES}
    times: dict[str, list[float]] = {}
    with ValkeyPair() as pair:
        for n in range(trials):  # the modes interleaved: drift hits each alike
            for mode, (options, appendfsync) in MODES.items():
                if options.get("aof") and aof_trials is not None and n >= aof_trials:
                    continue
                fsync(pair, appendfsync)
                trial(pair, options, outcomes[mode])
        for mode, (options, appendfsync) in MODES.items():
            fsync(pair, appendfsync)
            count = min(claims, SLOW_CLAIMS) if options.get("aof") else claims
            times[mode], outcomes[mode].healthy_refused = latency(pair, options, count)
    return outcomes, times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def markdown(outcomes: dict[str, Outcome], times: dict[str, list[float]]) -> str:
    base = statistics.median(times["no waiting"])
    lines = [
        "| mode | trials | effect ran twice | ran once | first claim refused | "
        "second claim failed | claim median (ms) | p99 (ms) | extra per claim (ms) | "
        "refused on the healthy pair |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, outcome in outcomes.items():
        median = statistics.median(times[mode])
        lines.append(
            f"| {mode} | {len(outcome.claim_ms)} | {outcome.twice} | {outcome.once} | "
            f"{outcome.refused_first} | {outcome.errors} | {median:.2f} | "
            f"{percentile(times[mode], 0.99):.2f} | {median - base:+.2f} | "
            f"{outcome.healthy_refused} of {len(times[mode])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.valkey_failover", description=__doc__
    )
    parser.add_argument("--trials", type=int, default=5, help="failovers per mode")
    parser.add_argument(
        "--aof-trials", type=int, help="failovers per WAITAOF mode (default: --trials)"
    )
    parser.add_argument("--claims", type=int, default=200, help="claims timed per mode")
    args = parser.parse_args(argv)
    started = time.monotonic()
    outcomes, times = run(args.trials, args.claims, args.aof_trials)
    table = markdown(outcomes, times)
    print(table)
    print(f"\n({time.monotonic() - started:.0f} s)")
    return table


if __name__ == "__main__":
    main()
