"""CPU per invocation, with DynamoDB answered instantly from a recording.

Each scenario runs once per library against DynamoDB Local while its requests and responses
are recorded; then the same invocations are answered from that recording in botocore's
`before-send` hook. Both libraries and a bare `PutItem` (botocore's own floor) run in one
process, in alternating chunks, and each gets the minimum CPU time per call over its chunks:
the least-disturbed estimate of what a call costs. A library's own CPU is its total less the
floor times its round trips, i.e. what it adds on top of the botocore calls it has to make.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .contenders import CONTENDERS, OURS, POWERTOOLS, Contender
from .recording import Exchange, Recorder, Replayer
from .report import Budget, Section, Table, microseconds, ratio
from .scenarios import FIRST_RUN, REPLAY, SCENARIOS, Scenario, Subject
from .workload import dynamodb_client

BUDGET_SHARE = 1 / 3
"""Our own CPU may be at most this share of Powertools' own (DESIGN.md, Budgets)."""


@dataclass
class Recorded:
    """A scenario wired to one library, with what DynamoDB answered to one invocation."""

    scenario: Scenario
    contender: Contender
    subject: Subject
    replayer: Replayer
    requests: list[str]
    """The operations sent, counted in botocore's before-send hook: the round trips."""
    script: list[Exchange]


def record(scenario: Scenario, contender: Contender, endpoint_url: str, table: str) -> Recorded:
    """Run one invocation for real, keep DynamoDB's answers, and switch the client over to
    answering from them (checking the replayed invocation ends the same way)."""
    client = dynamodb_client(endpoint_url)
    replayer = Replayer(client)
    subject = Subject(scenario, contender, client, table)
    with subject:
        recorder = Recorder(client)
        outcome = subject()
        requests, script = recorder.take()
    recorder.detach()
    subject.check(outcome)
    replayer.play(script)
    subject.check(subject())
    replayer.check()
    return Recorded(scenario, contender, subject, replayer, requests, script)


def record_all(endpoint_url: str, tables: dict[str, str]) -> list[Recorded]:
    return [
        record(scenario, contender, endpoint_url, tables[contender.slug])
        for scenario in SCENARIOS
        for contender in CONTENDERS
    ]


class BarePut:
    """botocore's floor: one unconditional PutItem of a claim-sized item, nothing around it."""

    def __init__(self, endpoint_url: str, table: str) -> None:
        self.client = dynamodb_client(endpoint_url)
        self.table = table
        self.replayer = Replayer(self.client)
        self._calls = 0
        recorder = Recorder(self.client)
        self()
        _, script = recorder.take()
        recorder.detach()
        self.replayer.play(script)

    def __call__(self) -> None:
        self._calls += 1
        self.client.put_item(
            TableName=self.table,
            Item={
                "pk": {"S": f"floor#{self._calls}"},
                "status": {"S": "IN_PROGRESS"},
                "expiration": {"N": "1767229200"},
                "lease_until": {"N": "1767225630000"},
                "owner": {"S": "5f0c9a7e3b2d4c1a8e6f7d90"},
            },
        )


def interleaved_cpu(
    subjects: dict[str, Callable[[], Any]], *, rounds: int, chunk: int
) -> dict[str, list[float]]:
    """CPU seconds per call for each subject, one sample per round. The order rotates and
    flips every round, so no subject always runs first, or always after the same one."""
    names = list(subjects)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds + 1):  # round 0 warms caches and is thrown away
        shift = round_ % len(names)
        order = names[shift:] + names[:shift]
        if round_ % 2:
            order.reverse()
        for name in order:
            call = subjects[name]
            gc.collect()
            start = time.process_time()
            for _ in range(chunk):
                call()
            elapsed = time.process_time() - start
            if round_:
                samples[name].append(elapsed / chunk)
    return samples


@dataclass(frozen=True)
class Cost:
    minimum: float
    median: float
    calls: int

    def own(self, floor: float) -> float:
        return max(0.0, self.minimum - floor * self.calls)


@dataclass
class CpuResults:
    floor: Cost
    costs: dict[tuple[str, str], Cost]
    """(scenario slug, contender slug) -> cost per invocation."""
    rounds: int
    chunk: int


def measure(
    recorded: list[Recorded], endpoint_url: str, table: str, *, rounds: int, chunk: int
) -> CpuResults:
    floor = BarePut(endpoint_url, table)
    subjects: dict[str, Callable[[], Any]] = {"floor": floor}
    for item in recorded:
        subjects[f"{item.scenario.slug}/{item.contender.slug}"] = item.subject
    samples = interleaved_cpu(subjects, rounds=rounds, chunk=chunk)
    for item in recorded:
        item.replayer.check()
    floor.replayer.check()

    def cost(name: str, calls: int) -> Cost:
        return Cost(min(samples[name]), statistics.median(samples[name]), calls)

    return CpuResults(
        floor=cost("floor", 1),
        costs={
            (item.scenario.slug, item.contender.slug): cost(
                f"{item.scenario.slug}/{item.contender.slug}", len(item.requests)
            )
            for item in recorded
        },
        rounds=rounds,
        chunk=chunk,
    )


def section(results: CpuResults) -> Section:
    floor = results.floor.minimum
    rows = []
    chart: dict[str, Any] = {"scenarios": [], "floor": floor}
    for scenario in SCENARIOS:
        ours = results.costs[scenario.slug, OURS.slug]
        theirs = results.costs[scenario.slug, POWERTOOLS.slug]
        rows.append(
            [
                scenario.title,
                f"{ours.calls} / {theirs.calls}",
                f"{microseconds(ours.minimum)} (median {microseconds(ours.median)})",
                f"{microseconds(theirs.minimum)} (median {microseconds(theirs.median)})",
                ratio(ours.minimum, theirs.minimum),
                microseconds(ours.own(floor)),
                microseconds(theirs.own(floor)),
                ratio(ours.own(floor), theirs.own(floor)),
            ]
        )
        chart["scenarios"].append(
            {
                "title": scenario.title,
                "ours": [ours.minimum, ours.own(floor)],
                "powertools": [theirs.minimum, theirs.own(floor)],
            }
        )
    table = Table(
        [
            "scenario",
            "round trips (ours / PT)",
            "ours: total CPU per call",
            "Powertools: total CPU per call",
            "total ratio",
            "ours: own CPU",
            "Powertools: own CPU",
            "own ratio",
        ],
        rows,
    )
    budgets = []
    for scenario in (FIRST_RUN, REPLAY):
        ours_own = results.costs[scenario.slug, OURS.slug].own(floor)
        theirs_own = results.costs[scenario.slug, POWERTOOLS.slug].own(floor)
        budgets.append(
            Budget(
                f"own CPU per invocation, {scenario.title.lower()}",
                "≤ 1/3 of Powertools' own (≤ 0.33x)",
                f"{microseconds(ours_own)} vs {microseconds(theirs_own)} = "
                f"{ratio(ours_own, theirs_own)}",
                ours_own <= theirs_own * BUDGET_SHARE,
            )
        )
    return Section(
        title="CPU per invocation",
        method=(
            "Each scenario ran once per library against DynamoDB Local while a botocore hook "
            "recorded DynamoDB's responses; the same invocations were then answered from that "
            "recording in botocore's `before-send` hook, which returns an `AWSResponse` in "
            "place of the network, so botocore still serializes, signs and parses every "
            "request and response. Both libraries and a bare `PutItem` ran in one process in "
            f"alternating chunks of {results.chunk} calls over {results.rounds} rounds; the "
            "table shows the minimum CPU time per call (`time.process_time`) over the chunks, "
            "with the median beside it. *Own* CPU is the total less botocore's floor (a bare "
            f"`PutItem`, {microseconds(floor)} per call here) times the round trips."
        ),
        tables=[table],
        budgets=budgets,
        notes=[
            "Warm-cache replay makes no request, so its total is all the library's own.",
            "The floor is one `PutItem`; an error response (a failed condition) costs "
            "botocore more to parse, and both libraries pay that on a replay or an in-flight "
            "duplicate, so own CPU there is an upper bound for both.",
        ],
        chart=chart,
    )
