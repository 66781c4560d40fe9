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


class BotocoreMeter:
    """A boto3 client that keeps count of the CPU time spent inside its API calls.

    Both libraries get their client through one of these, so each call's CPU splits into
    botocore's (inside the client) and the library's own code (everything else).
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self.inside = 0.0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name.startswith("_") or name in ("meta", "exceptions") or not callable(attribute):
            return attribute

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return attribute(*args, **kwargs)
            finally:
                self.inside += time.process_time() - start

        setattr(self, name, timed)  # later calls skip __getattr__
        return timed


@dataclass
class Recorded:
    """A scenario wired to one library, with what DynamoDB answered to one invocation."""

    scenario: Scenario
    contender: Contender
    subject: Subject
    replayer: Replayer
    meter: BotocoreMeter
    requests: list[str]
    """The operations sent, counted in botocore's before-send hook: the round trips."""
    script: list[Exchange]


def record(scenario: Scenario, contender: Contender, endpoint_url: str, table: str) -> Recorded:
    """Run one invocation for real, keep DynamoDB's answers, and switch the client over to
    answering from them (checking the replayed invocation ends the same way)."""
    client = dynamodb_client(endpoint_url)
    replayer = Replayer(client)
    meter = BotocoreMeter(client)
    subject = Subject(scenario, contender, meter, table)
    with subject:
        recorder = Recorder(client)
        outcome = subject()
        requests, script = recorder.take()
    recorder.detach()
    subject.check(outcome)
    replayer.play(script)
    subject.check(subject())
    replayer.check()
    return Recorded(scenario, contender, subject, replayer, meter, requests, script)


def record_all(endpoint_url: str, tables: dict[str, str]) -> list[Recorded]:
    return [
        record(scenario, contender, endpoint_url, tables[contender.slug])
        for scenario in SCENARIOS
        for contender in CONTENDERS
    ]


class BarePut:
    """botocore's floor: one unconditional PutItem of a claim-sized item, nothing around it."""

    def __init__(self, endpoint_url: str, table: str) -> None:
        client = dynamodb_client(endpoint_url)
        self.meter = BotocoreMeter(client)
        self.table = table
        self.replayer = Replayer(client)
        self._calls = 0
        recorder = Recorder(client)
        self()
        _, script = recorder.take()
        recorder.detach()
        self.replayer.play(script)

    def __call__(self) -> None:
        self._calls += 1
        self.meter.put_item(
            TableName=self.table,
            Item={
                "pk": {"S": f"floor#{self._calls}"},
                "status": {"S": "IN_PROGRESS"},
                "expiration": {"N": "1767229200"},
                "lease_until": {"N": "1767225630000"},
                "owner": {"S": "5f0c9a7e3b2d4c1a8e6f7d90"},
            },
        )


@dataclass(frozen=True)
class Sample:
    """One chunk's CPU seconds per call: in all, and inside botocore."""

    total: float
    botocore: float


def interleaved_cpu(
    subjects: dict[str, tuple[Callable[[], Any], BotocoreMeter]], *, rounds: int, chunk: int
) -> dict[str, list[Sample]]:
    """One sample per subject and round. The order rotates and flips every round, so no
    subject always runs first, or always after the same one."""
    names = list(subjects)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for round_ in range(rounds + 1):  # round 0 warms caches and is thrown away
        shift = round_ % len(names)
        order = names[shift:] + names[:shift]
        if round_ % 2:
            order.reverse()
        for name in order:
            call, meter = subjects[name]
            gc.collect()
            meter.inside = 0.0
            start = time.process_time()
            for _ in range(chunk):
                call()
            elapsed = time.process_time() - start
            if round_:
                samples[name].append(Sample(elapsed / chunk, meter.inside / chunk))
    return samples


@dataclass(frozen=True)
class Cost:
    minimum: float
    """The least CPU per call over the chunks: the least-disturbed estimate."""
    median: float
    library: float
    """The least CPU per call spent outside botocore: the library's own code."""
    calls: int

    def own(self, floor: float) -> float:
        """Total less botocore's floor for the calls made (the budget's definition)."""
        return max(0.0, self.minimum - floor * self.calls)

    def botocore_extra(self, floor: float) -> float:
        """What botocore spent beyond the floor on this library's requests and responses."""
        return self.own(floor) - self.library


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
    subjects: dict[str, tuple[Callable[[], Any], BotocoreMeter]] = {"floor": (floor, floor.meter)}
    for item in recorded:
        subjects[f"{item.scenario.slug}/{item.contender.slug}"] = (item.subject, item.meter)
    samples = interleaved_cpu(subjects, rounds=rounds, chunk=chunk)
    for item in recorded:
        item.replayer.check()
    floor.replayer.check()

    def cost(name: str, calls: int) -> Cost:
        totals = [sample.total for sample in samples[name]]
        library = [sample.total - sample.botocore for sample in samples[name]]
        return Cost(min(totals), statistics.median(totals), min(library), calls)

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
    breakdown = Table(
        [
            "scenario",
            "ours: library code",
            "ours: botocore beyond floor",
            "Powertools: library code",
            "Powertools: botocore beyond floor",
            "library code ratio",
        ],
        [
            [
                scenario.title,
                microseconds(ours.library),
                microseconds(ours.botocore_extra(floor)),
                microseconds(theirs.library),
                microseconds(theirs.botocore_extra(floor)),
                ratio(ours.library, theirs.library),
            ]
            for scenario in SCENARIOS
            for ours, theirs in [
                (
                    results.costs[scenario.slug, OURS.slug],
                    results.costs[scenario.slug, POWERTOOLS.slug],
                )
            ]
        ],
        caption=(
            "Where own CPU goes: the time outside the boto3 client's calls (the library's "
            "own code, minimum over chunks; it also holds the measuring itself, about "
            f"{microseconds(results.floor.library)} per request as the floor shows, the same "
            "for both), and what botocore spent beyond the floor on the library's requests "
            "and responses (larger requests, error responses)."
        ),
    )
    budgets = []
    explanations = []
    for scenario in (FIRST_RUN, REPLAY):
        ours = results.costs[scenario.slug, OURS.slug]
        theirs = results.costs[scenario.slug, POWERTOOLS.slug]
        ours_own, theirs_own = ours.own(floor), theirs.own(floor)
        if ours_own > theirs_own * BUDGET_SHARE:
            explanations.append(_why_missed(scenario.title, ours, theirs, floor))
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
            f"`PutItem`, {microseconds(floor)} per call here) times the round trips. Local "
            "result caches are off for both libraries except in the warm-cache scenario."
        ),
        tables=[table, breakdown],
        budgets=budgets,
        notes=[
            "Warm-cache replay makes no request, so its total is all the library's own.",
            "The floor is one `PutItem`; an error response (a failed condition) costs "
            "botocore more to parse, and both libraries pay that on a replay or an in-flight "
            "duplicate, so own CPU there is an upper bound for both.",
            *explanations,
        ],
        chart=chart,
    )


def _why_missed(title: str, ours: Cost, theirs: Cost, floor: float) -> str:
    """Where a missed CPU budget went, in the run's own numbers."""
    extra = ours.botocore_extra(floor)
    theirs_own = theirs.own(floor)
    return (
        f"{title}: botocore alone spends {microseconds(extra)} beyond the floor on our "
        f"requests (Powertools' need {microseconds(theirs.botocore_extra(floor))}: the same "
        "conditional writes with expression names and values, and the same error response "
        f"on a failed condition), which is {ratio(extra, theirs_own)} of Powertools' own CPU "
        f"before a line of ours runs; our own code adds {microseconds(ours.library)} against "
        f"Powertools' {microseconds(theirs.library)} ({ratio(ours.library, theirs.library)})."
    )
