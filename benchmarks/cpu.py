"""CPU per invocation, with DynamoDB answered instantly from a recording.

Each scenario runs once per library against DynamoDB Local while its requests and responses
are recorded; then the same invocations are answered from that recording in botocore's
`before-send` hook. Each library runs on the client it makes for itself when a user passes
none (Powertools: boto3's default client; ours: the store's client and its fast wire path).
Both libraries and a bare `PutItem` (for scale) run in one process, in alternating chunks, and
each gets the minimum CPU time per call over its chunks: the least-disturbed estimate of what
a call costs. Each total splits into the CPU inside the library's DynamoDB calls and the rest
(the library's own code).

Every scenario is timed twice in the same rounds: with the Lambda runtime's log handler on the
root logger and the root at WARNING (a function that never configures logging), and with the
root at INFO, as AWS's logging guide has functions do. After the timing, one pass under
`tracemalloc` takes each invocation path's peak Python heap.

Ours also runs on an `async def` handler (the async path: store calls in a worker thread),
each invocation awaited on one event loop, in the same rounds as the sync path.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .contenders import CONTENDERS, OURS, POWERTOOLS, Contender
from .lambda_logging import LambdaLogging
from .recording import Exchange, Recorder, Replayer
from .report import Budget, Section, Table, kilobytes, microseconds, ratio
from .scenarios import (
    FIRST_RUN,
    REPLAY,
    SCENARIOS,
    AsyncSubject,
    Scenario,
    Subject,
    loop_floor,
)
from .workload import dynamodb_client

BUDGET_SHARE = 0.5
"""Our total CPU may be at most this share of Powertools' total (DESIGN.md, Budgets)."""
UNCONFIGURED = "unconfigured"
INFO = "info"
MODES = {UNCONFIGURED: logging.WARNING, INFO: logging.INFO}
"""Root logger level per logging mode, the runtime's handler installed in both."""
MODE_TITLES = {UNCONFIGURED: "logging unconfigured", INFO: "root logger at INFO"}
HEAP_CALLS = 5
ASYNC_SCENARIOS = (FIRST_RUN, REPLAY)
"""The scenarios ours also runs on an `async def` handler."""
ASYNC = "ours-async"


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


def record(
    scenario: Scenario,
    contender: Contender,
    endpoint_url: str,
    table: str,
    kind: type[Subject] = Subject,
) -> Recorded:
    """Run one invocation for real, keep DynamoDB's answers, and switch the client over to
    answering from them (checking the replayed invocation ends the same way)."""
    client = contender.default_client(endpoint_url)
    replayer = Replayer(client.meta.events)
    subject, meter = metered_subject(scenario, contender, client, table, kind)
    with subject:
        recorder = Recorder(client.meta.events)
        outcome = subject()
        requests, script = recorder.take()
    recorder.detach()
    subject.check(outcome)
    replayer.play(script)
    subject.check(subject())
    replayer.check()
    return Recorded(scenario, contender, subject, replayer, meter, requests, script)


def metered_subject(
    scenario: Scenario,
    contender: Contender,
    client: Any,
    table: str,
    kind: type[Subject] = Subject,
) -> tuple[Subject, BotocoreMeter]:
    """The library on `client` as it runs in production, with a meter on its DynamoDB calls.
    Powertools calls the boto3 client; our store calls its fast wire path over the client
    (or the client, where the path steps aside), which a proxy client would turn off: so the
    meter goes on what the store calls, not on the client."""
    if contender is not OURS:
        meter = BotocoreMeter(client)
        return Subject(scenario, contender, meter, table), meter
    subject = kind(scenario, contender, client, table)
    engine = subject.handler.idempotency if kind is Subject else subject.engine  # type: ignore[attr-defined]
    store = engine.settings.store()
    meter = BotocoreMeter(store._caller())
    store._caller = lambda: meter
    return subject, meter


def record_async(endpoint_url: str, table: str) -> list[Recorded]:
    """Ours on an `async def` handler, in the scenarios of ASYNC_SCENARIOS."""
    return [
        record(scenario, OURS, endpoint_url, table, kind=AsyncSubject)
        for scenario in ASYNC_SCENARIOS
    ]


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
        self.replayer = Replayer(client.meta.events)
        self._calls = 0
        recorder = Recorder(client.meta.events)
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


@dataclass(frozen=True)
class Timed:
    """One thing to time: the call, the meter of its client, and the logging it runs under."""

    call: Callable[[], Any]
    meter: BotocoreMeter
    mode: str = UNCONFIGURED


def interleaved_cpu(
    subjects: dict[str, Timed],
    *,
    rounds: int,
    chunk: int,
    logs: LambdaLogging | None = None,
) -> dict[str, list[Sample]]:
    """One sample per subject and round. The order rotates and flips every round, so no
    subject always runs first, or always after the same one. With `logs`, each chunk runs with
    the root logger at its subject's mode's level."""
    names = list(subjects)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for round_ in range(rounds + 1):  # round 0 warms caches and is thrown away
        shift = round_ % len(names)
        order = names[shift:] + names[:shift]
        if round_ % 2:
            order.reverse()
        for name in order:
            subject = subjects[name]
            if logs is not None:
                logs.level(MODES[subject.mode])
            gc.collect()
            subject.meter.inside = 0.0
            start = time.process_time()
            for _ in range(chunk):
                subject.call()
            elapsed = time.process_time() - start
            if round_:
                samples[name].append(Sample(elapsed / chunk, subject.meter.inside / chunk))
    return samples


@dataclass(frozen=True)
class Cost:
    minimum: float
    """The least CPU per call over the chunks: the least-disturbed estimate."""
    median: float
    library: float
    """The least CPU per call spent outside its DynamoDB calls: the library's own code."""
    calls: int
    maximum: float = 0.0
    requests: float = 0.0
    """The least CPU per call spent inside its DynamoDB calls (botocore, and for ours the
    fast wire path around botocore's signer, session and parser)."""

    @property
    def spread(self) -> list[float]:
        """[min, median, max] seconds per call over the chunks."""
        return [self.minimum, self.median, self.maximum]


@dataclass(frozen=True)
class Footprint:
    """What one invocation path leaves behind besides CPU: heap and log lines."""

    heap_peaks: list[int]
    """Peak Python heap above the start, one per call (tracemalloc)."""

    @property
    def heap_peak(self) -> int:
        return int(statistics.median(self.heap_peaks))

    log_lines: dict[str, float]
    """Log lines the runtime's handler wrote per invocation, by logging mode."""


@dataclass
class CpuResults:
    floor: Cost
    costs: dict[tuple[str, str, str], Cost]
    """(scenario slug, contender slug, logging mode) -> cost per invocation."""
    paths: dict[tuple[str, str], Footprint]
    rounds: int
    chunk: int
    async_costs: dict[str, Cost] = field(default_factory=dict)
    """Scenario slug -> ours on an `async def` handler (logging unconfigured)."""
    loop_floor: Cost | None = None
    """An empty coroutine through `run_until_complete`: the driving, not the library."""


def _heap_peaks(call: Callable[[], Any]) -> list[int]:
    """The most Python heap one call holds at once above what was live when it started."""
    peaks = []
    tracemalloc.start()
    try:
        for _ in range(HEAP_CALLS):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            call()
            _, peak = tracemalloc.get_traced_memory()
            peaks.append(peak - before)
    finally:
        tracemalloc.stop()
    return peaks


def _log_lines(call: Callable[[], Any], logs: LambdaLogging, level: int) -> float:
    logs.level(level)
    before = logs.sink.lines
    for _ in range(HEAP_CALLS):
        call()
    return (logs.sink.lines - before) / HEAP_CALLS


def measure(
    recorded: list[Recorded],
    endpoint_url: str,
    table: str,
    *,
    rounds: int,
    chunk: int,
    recorded_async: list[Recorded] = (),  # type: ignore[assignment]
) -> CpuResults:
    floor = BarePut(endpoint_url, table)
    subjects: dict[str, Timed] = {"floor": Timed(floor, floor.meter)}
    for item in recorded:
        for mode in MODES:
            subjects[f"{item.scenario.slug}/{item.contender.slug}/{mode}"] = Timed(
                item.subject, item.meter, mode
            )
    for item in recorded_async:
        subjects[f"{item.scenario.slug}/{ASYNC}"] = Timed(item.subject, item.meter)
    if recorded_async:
        loop = recorded_async[0].subject.loop  # type: ignore[attr-defined]
        subjects["loop floor"] = Timed(loop_floor(loop), BotocoreMeter(None))
    logs = LambdaLogging()
    logs.install()
    try:
        samples = interleaved_cpu(subjects, rounds=rounds, chunk=chunk, logs=logs)
        paths = {
            (item.scenario.slug, item.contender.slug): Footprint(
                heap_peaks=_heap_peaks(item.subject),
                log_lines={
                    mode: _log_lines(item.subject, logs, level) for mode, level in MODES.items()
                },
            )
            for item in recorded
        }
    finally:
        logs.uninstall()
    for item in [*recorded, *recorded_async]:
        item.replayer.check()
    floor.replayer.check()
    for item in recorded_async:
        item.subject.close()  # type: ignore[attr-defined]

    def cost(name: str, calls: int) -> Cost:
        totals = [sample.total for sample in samples[name]]
        library = [sample.total - sample.botocore for sample in samples[name]]
        inside = [sample.botocore for sample in samples[name]]
        return Cost(
            min(totals), statistics.median(totals), min(library), calls, max(totals), min(inside)
        )

    return CpuResults(
        floor=cost("floor", 1),
        costs={
            (item.scenario.slug, item.contender.slug, mode): cost(
                f"{item.scenario.slug}/{item.contender.slug}/{mode}", len(item.requests)
            )
            for item in recorded
            for mode in MODES
        },
        paths=paths,
        rounds=rounds,
        chunk=chunk,
        async_costs={
            item.scenario.slug: cost(f"{item.scenario.slug}/{ASYNC}", len(item.requests))
            for item in recorded_async
        },
        loop_floor=cost("loop floor", 0) if recorded_async else None,
    )


def _spread_text(cost: Cost) -> str:
    return (
        f"{microseconds(cost.minimum)} ({microseconds(cost.median)}; {microseconds(cost.maximum)})"
    )


def _heap_spread(path: Footprint) -> list[float]:
    return [min(path.heap_peaks), path.heap_peak, max(path.heap_peaks)]


def _lines(value: float) -> str:
    return f"{value:g}"


def section(results: CpuResults) -> Section:
    floor = results.floor.minimum
    costs = results.costs

    def pair(scenario: Scenario, mode: str = UNCONFIGURED) -> tuple[Cost, Cost]:
        return costs[scenario.slug, OURS.slug, mode], costs[scenario.slug, POWERTOOLS.slug, mode]

    rows = []
    chart: dict[str, Any] = {
        "floor": floor,
        "rounds": results.rounds,
        "modes": [MODE_TITLES[mode] for mode in MODES],
        "scenarios": [],
    }
    for scenario in SCENARIOS:
        ours, theirs = pair(scenario)
        rows.append(
            [
                scenario.title,
                f"{ours.calls} / {theirs.calls}",
                _spread_text(ours),
                _spread_text(theirs),
                ratio(ours.minimum, theirs.minimum),
            ]
        )
        chart["scenarios"].append(
            {
                "title": scenario.title,
                "ours": [pair(scenario, mode)[0].spread for mode in MODES],
                "powertools": [pair(scenario, mode)[1].spread for mode in MODES],
                "ours_heap": _heap_spread(results.paths[scenario.slug, OURS.slug]),
                "powertools_heap": _heap_spread(results.paths[scenario.slug, POWERTOOLS.slug]),
            }
        )
    table = Table(
        [
            "scenario",
            "round trips (ours / PT)",
            "ours: total CPU per call, min (median; max)",
            "Powertools: total CPU per call, min (median; max)",
            "total ratio",
        ],
        rows,
        caption="Logging unconfigured (root logger at WARNING, the runtime's handler on it).",
    )
    logging_rows = []
    for scenario in SCENARIOS:
        ours, theirs = pair(scenario, INFO)
        ours_plain, theirs_plain = pair(scenario)
        ours_path = results.paths[scenario.slug, OURS.slug]
        theirs_path = results.paths[scenario.slug, POWERTOOLS.slug]
        logging_rows.append(
            [
                scenario.title,
                f"{_lines(ours_path.log_lines[INFO])} / {_lines(theirs_path.log_lines[INFO])}",
                _spread_text(ours),
                _spread_text(theirs),
                ratio(ours.minimum, theirs.minimum),
                ratio(ours_plain.minimum, theirs_plain.minimum),
                f"{(ours.minimum - ours_plain.minimum) * 1e6:+,.0f} µs",
                f"{(theirs.minimum - theirs_plain.minimum) * 1e6:+,.0f} µs",
            ]
        )
    logging_table = Table(
        [
            "scenario",
            "log lines per call (ours / PT)",
            "ours: total CPU, min (median; max)",
            "Powertools: total CPU, min (median; max)",
            "total ratio at INFO",
            "total ratio unconfigured",
            "ours: INFO costs",
            "Powertools: INFO costs",
        ],
        logging_rows,
        caption=(
            "With logging as AWS's Lambda logging guide configures it: root logger at INFO, the "
            "Python runtime's handler and text format (`[%(levelname)s]\\t%(asctime)s."
            "%(msecs)03dZ\\t%(aws_request_id)s\\t%(message)s\\n`, UTC), one framed, unbuffered "
            "write per line. Timed in the same rounds as the table above."
        ),
    )
    heap_table = Table(
        ["scenario", "ours: peak heap per call", "Powertools: peak heap per call", "ratio"],
        [
            [
                scenario.title,
                kilobytes(ours_path.heap_peak),
                kilobytes(theirs_path.heap_peak),
                ratio(ours_path.heap_peak, theirs_path.heap_peak),
            ]
            for scenario in SCENARIOS
            for ours_path, theirs_path in [
                (
                    results.paths[scenario.slug, OURS.slug],
                    results.paths[scenario.slug, POWERTOOLS.slug],
                )
            ]
        ],
        caption=(
            f"Memory per invocation path: the peak Python heap one call holds above what was "
            f"live when it started (`tracemalloc`, median of {HEAP_CALLS} calls after the "
            "timing; botocore's request and response objects included)."
        ),
    )
    breakdown = Table(
        [
            "scenario",
            "ours: DynamoDB calls",
            "ours: library code",
            "Powertools: DynamoDB calls",
            "Powertools: library code",
            "calls ratio",
            "library code ratio",
        ],
        [
            [
                scenario.title,
                microseconds(ours.requests),
                microseconds(ours.library),
                microseconds(theirs.requests),
                microseconds(theirs.library),
                ratio(ours.requests, theirs.requests),
                ratio(ours.library, theirs.library),
            ]
            for scenario in SCENARIOS
            for ours, theirs in [pair(scenario)]
        ],
        caption=(
            "Where the CPU goes (logging unconfigured): inside the library's DynamoDB calls "
            "(Powertools: the boto3 client's; ours: the store's fast wire path, botocore's "
            "signer, HTTP session and parser included) and outside them (the library's own "
            "code; it also holds the measuring itself, about "
            f"{microseconds(results.floor.library)} per request as the floor shows, the same "
            "for both). Each column is its own minimum over the chunks."
        ),
    )
    tables = [table, logging_table, breakdown, heap_table]
    if results.async_costs and results.loop_floor is not None:
        tables.append(async_table(results, pair))
    budgets = []
    explanations = []
    for mode in MODES:
        for scenario in (FIRST_RUN, REPLAY):
            ours, theirs = pair(scenario, mode)
            met = ours.minimum <= theirs.minimum * BUDGET_SHARE
            if not met and mode == UNCONFIGURED:
                explanations.append(_why_missed(scenario.title, ours, theirs))
            budgets.append(
                Budget(
                    f"total CPU per invocation, {scenario.title.lower()}, {MODE_TITLES[mode]}",
                    "≤ 0.5x Powertools' total",
                    f"{microseconds(ours.minimum)} vs {microseconds(theirs.minimum)} = "
                    f"{ratio(ours.minimum, theirs.minimum)}",
                    met,
                )
            )
    return Section(
        title="CPU per invocation",
        method=(
            "Each library runs as a user who passes no client gets it: Powertools on boto3's "
            "default client, ours on the client its store makes (a fixed user agent, no "
            "client-side validation) with the fast wire path on. "
            "Each scenario ran once per library against DynamoDB Local while a botocore hook "
            "recorded DynamoDB's responses; the same invocations were then answered from that "
            "recording in botocore's `before-send` hook, which returns an `AWSResponse` in "
            "place of the network, so botocore still signs and parses every "
            "request and response. Both libraries and a bare `PutItem` ran in one process in "
            f"alternating chunks of {results.chunk} calls over {results.rounds} rounds, each "
            "scenario once with logging unconfigured and once with the root logger at INFO; "
            "the tables show the minimum CPU time per call (`time.process_time`) over the "
            "chunks, with the median and maximum beside it, and ratios of minimums. For scale, "
            "a bare `PutItem` of a claim-sized item through boto3's default client costs "
            f"{microseconds(floor)} per call here. Local "
            "result caches are off for both libraries except in the warm-cache scenario."
        ),
        tables=tables,
        budgets=budgets,
        notes=[
            "Warm-cache replay makes no request, so its total is all the library's own.",
            "Log lines at INFO: ours logs routine outcomes (claimed, executed, replayed, "
            "waiting) at DEBUG and writes a line at INFO only for an outcome a caller or "
            "operator acts on (a duplicate refused while in flight) and at WARNING/ERROR for "
            "anomalies; Powertools' idempotency logs "
            "at DEBUG only. See docs/operations.md.",
            *explanations,
        ],
        chart=chart,
    )


def async_table(results: CpuResults, pair: Callable[[Scenario], tuple[Cost, Cost]]) -> Table:
    """Ours on an `async def` handler beside ours on a plain one, in the same rounds."""
    loop = results.loop_floor.minimum if results.loop_floor is not None else 0.0
    rows = []
    for scenario in ASYNC_SCENARIOS:
        sync, _ = pair(scenario)
        awaited = results.async_costs[scenario.slug]
        rows.append(
            [
                scenario.title,
                _spread_text(sync),
                _spread_text(awaited),
                f"{(awaited.minimum - loop - sync.minimum) * 1e6:+,.0f} µs",
                microseconds(awaited.requests),
            ]
        )
    return Table(
        [
            "scenario",
            "ours, plain def: total CPU, min (median; max)",
            "ours, async def: total CPU, min (median; max)",
            "async path adds (less the loop's own cost)",
            "async: DynamoDB calls",
        ],
        rows,
        caption=(
            "The async path (logging unconfigured): the same handler as an `async def`, each "
            "invocation awaited on one event loop with `run_until_complete` (an empty coroutine "
            f"through it costs {microseconds(loop)} here, taken out of the third column). Its "
            "store calls run in the loop's worker threads, so each invocation pays one thread "
            "hand-off per step (claim, completion): the CPU of both threads is counted."
        ),
    )


def _why_missed(title: str, ours: Cost, theirs: Cost) -> str:
    """Where a missed CPU budget went, in the run's own numbers."""
    return (
        f"{title}: of our {microseconds(ours.minimum)} total, about "
        f"{microseconds(ours.requests)} is inside {ours.calls} DynamoDB call(s) (Powertools': "
        f"{microseconds(theirs.requests)}) and {microseconds(ours.library)} our own code "
        f"(Powertools': {microseconds(theirs.library)}, {ratio(ours.library, theirs.library)})."
    )
