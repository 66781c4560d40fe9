"""End-to-end latency on DynamoDB Local over loopback, both libraries interleaved call by call.

Each call is timed from the decorated handler's entry to its return (or raise), so it holds
the library, botocore, the loopback hop and DynamoDB Local's own work. Alternating the
libraries call by call (and flipping which goes first) spreads any noise over both alike.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

from .contenders import CONTENDERS, OURS, POWERTOOLS
from .report import Section, Table, duration, ratio
from .scenarios import SCENARIOS, Scenario, Subject
from .workload import dynamodb_client


def percentile(samples: list[float], share: float) -> float:
    """Nearest-rank percentile: a value that was actually observed."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass(frozen=True)
class Latency:
    p50: float
    p99: float
    calls: int
    minimum: float = 0.0
    maximum: float = 0.0


def measure_scenario(
    scenario: Scenario, endpoint_url: str, tables: dict[str, str], calls: int
) -> dict[str, Latency]:
    subjects = [
        Subject(scenario, contender, dynamodb_client(endpoint_url), tables[contender.slug])
        for contender in CONTENDERS
    ]
    samples: dict[str, list[float]] = {subject.contender.slug: [] for subject in subjects}
    with contextlib.ExitStack() as stack:
        for subject in subjects:
            stack.enter_context(subject)
            subject.check(subject())  # warms the connection pool and the code paths
        for call in range(calls):
            order = subjects if call % 2 == 0 else subjects[::-1]
            for subject in order:
                start = time.perf_counter()
                outcome = subject()
                samples[subject.contender.slug].append(time.perf_counter() - start)
                subject.check(outcome)
    return {
        slug: Latency(
            percentile(values, 0.50),
            percentile(values, 0.99),
            len(values),
            min(values),
            max(values),
        )
        for slug, values in samples.items()
    }


def measure(endpoint_url: str, tables: dict[str, str], calls: int) -> dict[str, dict[str, Latency]]:
    return {
        scenario.slug: measure_scenario(scenario, endpoint_url, tables, calls)
        for scenario in SCENARIOS
    }


def section(results: dict[str, dict[str, Latency]]) -> Section:
    rows = []
    chart: dict[str, list[dict[str, object]]] = {"scenarios": []}
    calls = 0
    for scenario in SCENARIOS:
        ours, theirs = results[scenario.slug][OURS.slug], results[scenario.slug][POWERTOOLS.slug]
        calls = ours.calls
        rows.append(
            [
                scenario.title,
                duration(ours.p50),
                duration(theirs.p50),
                ratio(ours.p50, theirs.p50),
                duration(ours.p99),
                duration(theirs.p99),
                ratio(ours.p99, theirs.p99),
            ]
        )
        chart["scenarios"].append(
            {
                "title": scenario.title,
                "ours": [ours.p50, ours.p99],
                "powertools": [theirs.p50, theirs.p99],
                "ours_spread": [ours.minimum, ours.p50, ours.maximum],
                "powertools_spread": [theirs.minimum, theirs.p50, theirs.maximum],
            }
        )
    return Section(
        title="End-to-end latency",
        method=(
            f"{calls} invocations per library and scenario against DynamoDB Local over "
            "loopback, the libraries alternating call by call (which goes first flips every "
            "call); each call timed with `time.perf_counter` around the decorated handler. "
            "First runs and handler errors use a new key per call; replays and in-flight "
            "duplicates one key (held unfinished by another invocation for the latter)."
        ),
        tables=[
            Table(
                [
                    "scenario",
                    "ours p50",
                    "Powertools p50",
                    "p50 ratio",
                    "ours p99",
                    "Powertools p99",
                    "p99 ratio",
                ],
                rows,
            )
        ],
        notes=[
            "DynamoDB Local runs on the same two cores as the client, so its own CPU time is "
            "in every number; against DynamoDB in a region the network adds a few ms per "
            "round trip and the library's share shrinks."
        ],
        chart=chart,
    )
