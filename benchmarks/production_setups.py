"""CPU per invocation under setups users run in production: tracers and hooks on botocore.

    python -m benchmarks.production_setups [--endpoint URL] [--rounds N] [--chunk N]

Both lean paths serve under the tracers users run: X-Ray (and Powertools' Tracer, which
patches with it) and OpenTelemetry wrap `_make_api_call` and `Endpoint.prepare_request`, and
the paths call those wrappers themselves; a user's `before-call` hook on a client the fast wire
path emits as the client does. This measures what each setup costs, beside Powertools under the
same setup: the first-run and replay scenarios of benchmarks/cpu.py, answered from a recording,
for Powertools, ours without a client (the direct path, Lambda's default), ours given a client
with the fast path on and with it off, interleaved in one process per setup (a tracer's patch
is process-wide and for good), with Lambda's environment and its log handler at INFO.

Whether a path served is observed, not assumed: after the timing, a few invocations per path
count the requests sent (botocore's `before-send`, which every path emits) and those that went
through a client's own request serializer, which only the client's `_make_api_call` calls.
The same pass checks the setup saw every request (X-Ray subsegments, OpenTelemetry spans, the
hook's calls) and that the header it adds was sent. Prints the figures.
"""

from __future__ import annotations

from .environment import block_awscrt

block_awscrt()  # before anything imports botocore: Lambda's runtime has no awscrt

import argparse  # noqa: E402
import contextlib  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

from .report import Section, Table  # noqa: E402
from .scenarios import FIRST_RUN, REPLAY  # noqa: E402
from .wire import PerInvocation, paired_ratios  # noqa: E402

EVIDENCE_CALLS = 3
"""Invocations per scenario and path in the pass that observes who sent the requests."""
HOOK_HEADER = "x-tenant"


@dataclass(frozen=True)
class Setup:
    title: str
    how: str
    """What the worker installs, for the report."""
    sampled: bool = False
    """The invocation's X-Ray sampling decision (`Sampled=` in `_X_AMZN_TRACE_ID`)."""


SETUPS = {
    "plain": Setup("none (reference)", "no tracer, no hook: the CPU section's setup"),
    "powertools-tracer": Setup(
        "Powertools Tracer",
        "`Tracer()` (it patches every module X-Ray supports, botocore included) and "
        "`@tracer.capture_lambda_handler` around the handler; the invocation sampled",
        sampled=True,
    ),
    "xray": Setup(
        "X-Ray SDK `patch_all()`",
        "`aws_xray_sdk.core.patch_all()`, no handler subsegment; the invocation sampled",
        sampled=True,
    ),
    "xray-unsampled": Setup(
        "X-Ray SDK `patch(('botocore',))`, not sampled",
        "`aws_xray_sdk.core.patch(('botocore',))`; the invocation not sampled (`Sampled=0`, "
        "what most invocations of a busy function get from Lambda's default sampling)",
    ),
    "opentelemetry": Setup(
        "OpenTelemetry botocore instrumentation",
        "`BotocoreInstrumentor().instrument()` with an SDK `TracerProvider`, a "
        "`SimpleSpanProcessor` and an exporter that drops the spans (counting them), and a "
        "server span per invocation as the Lambda instrumentation opens one",
    ),
    "before-call-hook": Setup(
        "a user's `before-call` hook",
        f"`client.meta.events.register('before-call.dynamodb', hook)` on the client each "
        f"library uses, the hook adding an `{HOOK_HEADER}` header to every request",
    ),
}
PATHS = {
    "powertools": "Powertools",
    "ours-direct": "ours, direct path",
    "ours-fast": "ours, fast path on",
    "ours-off": "ours, fast path off",
}
LEAN_PATHS = ("ours-direct", "ours-fast")
"""Ours with a lean path: a store without a client (the direct path, Lambda's default), and a
store given a client (the fast wire path over it)."""
SCENARIOS = (FIRST_RUN, REPLAY)


# -- the worker: one setup, one fresh interpreter ------------------------------------------


class LambdaEnvironment:
    """The variables Lambda's runtime sets, and a fresh trace header per invocation.

    With LAMBDA_TASK_ROOT set, the X-Ray SDK records as it does in Lambda: a facade segment
    made from `_X_AMZN_TRACE_ID` (Lambda's, with its sampling decision), each subsegment sent
    as a UDP datagram to AWS_XRAY_DAEMON_ADDRESS when it ends. The daemon here is a loopback
    socket nobody reads: what the SDK does per request is what it does in Lambda, and the
    kernel drops what overflows. Powertools Tracer is on only where LAMBDA_TASK_ROOT is set.
    (The SDK also touches its "initialized" file in the temporary directory, as in Lambda.)"""

    def __init__(self, *, sampled: bool) -> None:
        self.sampled = sampled
        self.daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.daemon.bind(("127.0.0.1", 0))
        self._invocations = itertools.count(1)
        # The path is on or off per subject (`fast_wire=`), not by the environment this
        # interpreter inherited (the suite runs again with IDEMPOTENCY_FAST_WIRE=0 in CI).
        os.environ.pop("IDEMPOTENCY_FAST_WIRE", None)
        os.environ.update(
            {
                "LAMBDA_TASK_ROOT": "/var/task",
                "AWS_LAMBDA_FUNCTION_NAME": "bench-production-setups",
                "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{self.daemon.getsockname()[1]}",
                "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "benchmark"),
                "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "benchmark"),
            }
        )
        self.parent = ""
        self.next_invocation()

    def next_invocation(self) -> None:
        """What the runtime does before each invocation: a new trace header."""
        number = next(self._invocations)
        self.parent = f"{number:016x}"
        os.environ["_X_AMZN_TRACE_ID"] = (
            f"Root=1-{int(time.time()):08x}-{number:024x};Parent={self.parent};"
            f"Sampled={int(self.sampled)}"
        )

    def datagrams(self) -> list[bytes]:
        """What reached the daemon since the last call."""
        received = []
        self.daemon.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                received.append(self.daemon.recv(65536))
        return received


class Tracing:
    """A setup, installed: what it adds to a client and a handler, and what it saw."""

    on_a_client = False
    """Whether the setup lives on a client (a hook): a store without one has nothing for it."""

    def on_client(self, client: Any) -> None:
        """Called for each library's client before the library is built over it."""

    def wrap(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        return handler

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """While open, count what the setup records (`seen`, `header`)."""
        yield

    seen: int | None = None
    """Requests the setup recorded (subsegments, spans, hook calls); None: nothing to see."""

    def header(self, headers: Any) -> bool | None:
        """Whether a sent request carries what the setup adds; None: it adds nothing."""
        return None


class XRay(Tracing):
    def __init__(self, environment: LambdaEnvironment, *, powertools: bool, all_modules: bool):
        self.environment = environment
        self.tracer: Any = None
        if powertools:
            from aws_lambda_powertools import Tracer

            self.tracer = Tracer(service="bench")
        else:
            from aws_xray_sdk.core import patch, patch_all

            if all_modules:
                patch_all()
            else:
                patch(("botocore",))
        from aws_xray_sdk.core import xray_recorder

        self.recorder = xray_recorder
        self.ids: set[str] = set()

    def wrap(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        if self.tracer is None:
            return handler
        wrapped: Callable[..., Any] = self.tracer.capture_lambda_handler(handler)
        return wrapped

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        self.seen, self.ids = 0, set()
        begin = self.recorder.begin_subsegment

        def counted(name: str, *args: Any, **kwargs: Any) -> Any:
            subsegment = begin(name, *args, **kwargs)
            if name == "dynamodb" and subsegment is not None:
                assert self.seen is not None
                self.seen += 1
                self.ids.add(subsegment.id)
            return subsegment

        self.environment.datagrams()
        self.recorder.begin_subsegment = counted  # on the one recorder: botocore untouched
        try:
            yield
        finally:
            del self.recorder.begin_subsegment
        self.sent = sum(_dynamodb_subsegments(d) for d in self.environment.datagrams())

    def header(self, headers: Any) -> bool | None:
        """X-Ray's header names the request's own subsegment as its parent."""
        value = headers.get("X-Amzn-Trace-Id", b"")
        value = value.decode() if isinstance(value, bytes) else value
        fields = dict(part.split("=", 1) for part in value.split(";") if "=" in part)
        return fields.get("Parent") in self.ids


def _dynamodb_subsegments(datagram: bytes) -> int:
    """DynamoDB subsegments in one datagram to the daemon (a header line, then the entity)."""
    _, _, body = datagram.partition(b"\n")

    def count(entity: dict[str, Any]) -> int:
        own = entity.get("name") == "dynamodb" and entity.get("namespace") == "aws"
        return own + sum(count(child) for child in entity.get("subsegments", ()))

    return count(json.loads(body))


class OpenTelemetry(Tracing):
    def __init__(self) -> None:
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
        from opentelemetry.trace import SpanKind

        tracing = self

        class Dropping(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                if tracing.seen is not None:
                    tracing.seen += sum(
                        span.kind is SpanKind.CLIENT
                        and (span.attributes or {}).get("rpc.service") == "DynamoDB"
                        for span in spans
                    )
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Dropping()))
        BotocoreInstrumentor().instrument(tracer_provider=provider)
        self.tracer = provider.get_tracer("bench-lambda")
        self.server = SpanKind.SERVER

    def wrap(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        def traced(event: Any, context: Any) -> Any:
            with self.tracer.start_as_current_span("handler", kind=self.server):
                return handler(event, context)

        return traced

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        self.seen = 0
        try:
            yield
        finally:
            pass


class BeforeCallHook(Tracing):
    on_a_client = True

    def __init__(self) -> None:
        self.calls = 0

    def hook(self, params: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        params["headers"][HOOK_HEADER] = "tenant-42"

    def on_client(self, client: Any) -> None:
        client.meta.events.register("before-call.dynamodb", self.hook)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        before = self.calls
        self.seen = 0
        yield
        self.seen = self.calls - before

    def header(self, headers: Any) -> bool | None:
        return HOOK_HEADER in headers


def install(slug: str, environment: LambdaEnvironment) -> Tracing:
    if slug == "powertools-tracer":
        return XRay(environment, powertools=True, all_modules=True)
    if slug == "xray":
        return XRay(environment, powertools=False, all_modules=True)
    if slug == "xray-unsampled":
        return XRay(environment, powertools=False, all_modules=False)
    if slug == "opentelemetry":
        return OpenTelemetry()
    if slug == "before-call-hook":
        return BeforeCallHook()
    if slug == "plain":
        return Tracing()
    raise ValueError(f"unknown setup {slug}")


@dataclass
class _Subject:
    scenario: str
    path: str
    client: Any
    call: Callable[[], Any]
    calls: int
    events: Any
    """Where the path emits `before-send` (a client's events; the direct path's own)."""
    store: Any = None
    """The direct path's store (its fallback client, if it built one, is `store._client`)."""


def measure_setup(slug: str, endpoint_url: str, *, rounds: int, chunk: int) -> dict[str, Any]:
    """One setup, in this process (which it changes for good): CPU per invocation by scenario
    and path, and what the observing pass saw. JSON-ready."""
    environment = LambdaEnvironment(sampled=SETUPS[slug].sampled)
    tracing = install(slug, environment)
    from .cpu import INFO, BotocoreMeter, Timed, interleaved_cpu
    from .lambda_logging import LambdaLogging

    subjects = _subjects(tracing, environment, endpoint_url)
    logs = LambdaLogging()
    logs.install()
    try:
        # the meter only counts what goes through it: nothing here (no split of the CPU)
        meters = {name: BotocoreMeter(subject.client) for name, subject in subjects.items()}
        samples = interleaved_cpu(
            {name: Timed(s.call, meters[name], INFO) for name, s in subjects.items()},
            rounds=rounds,
            chunk=chunk,
            logs=logs,
        )
        evidence = {name: observe(subject, tracing) for name, subject in subjects.items()}
    finally:
        logs.uninstall()
    import botocore

    return {
        "botocore": botocore.__version__,
        "rows": {
            name: {
                "calls": subject.calls,
                "by_round": [sample.total for sample in samples[name]],
                "evidence": evidence[name],
            }
            for name, subject in subjects.items()
        },
    }


def _subjects(
    tracing: Tracing, environment: LambdaEnvironment, endpoint_url: str
) -> dict[str, _Subject]:
    """Each scenario and path on its own client, recorded once against DynamoDB Local and
    answered from the recording from then on."""
    from .contenders import OURS, POWERTOOLS, _wrap_powertools
    from .recording import Recorder, Replayer
    from .scenarios import Subject
    from .wire import _ours, contender
    from .workload import create_table, dynamodb_client, our_default_client

    setup = dynamodb_client(endpoint_url)
    run = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    tables = {
        "ours": create_table(setup, f"production-ours-{run}", OURS.key_attribute),
        "powertools": create_table(setup, f"production-pt-{run}", POWERTOOLS.key_attribute),
    }
    subjects = {}
    direct_stores: list[Any] = []
    for scenario in SCENARIOS:
        for path, make_client, wrap in (
            ("powertools", dynamodb_client, _wrap_powertools),
            ("ours-direct", our_default_client, _ours_direct(endpoint_url, direct_stores)),
            ("ours-fast", our_default_client, _ours(fast_wire=True)),
            ("ours-off", our_default_client, _ours(fast_wire=False)),
        ):
            if path == "ours-direct" and tracing.on_a_client:
                continue  # a hook on a client: a store without one has nothing to honour
            client = make_client(endpoint_url)
            tracing.on_client(client)
            who = POWERTOOLS if path == "powertools" else contender(path, path, wrap, "pk")
            table = tables["powertools" if path == "powertools" else "ours"]
            subject = Subject(scenario, who, client, table)
            subject.handler = tracing.wrap(subject.handler)
            store, events, answers = None, client.meta.events, "response-received"
            if path == "ours-direct":
                store = direct_stores[-1]
                store.prepare()  # as at INIT: the direct path built (its tracer's model loaded)
                direct = store._caller()
                if type(direct).__name__ != "DirectWire":
                    raise RuntimeError(f"the direct path does not serve here: {direct!r}")
                events, answers = direct.events, "after-call"
            replayer = Replayer(events)

            def invoke(subject: Subject = subject) -> str:
                environment.next_invocation()
                return subject()

            with subject:
                recorder = Recorder(events, answers)
                subject.check(invoke())
                requests, script = recorder.take()
            recorder.detach()
            replayer.play(script)
            subject.check(invoke())
            replayer.check()
            subjects[f"{scenario.slug}/{path}"] = _Subject(
                scenario.slug, path, client, invoke, len(requests), events, store
            )
    return subjects


def _ours_direct(endpoint_url: str, stores: list[Any]) -> Callable[..., Any]:
    """Ours as a Lambda function builds it by default: a store with no client, which takes
    the direct path in Lambda (the endpoint given, as AWS_ENDPOINT_URL_DYNAMODB would); each
    store built is appended to `stores`."""

    def wrap(client: Any, table: str, handler: Any, *, cache: bool, **options: Any) -> Any:
        from lambda_idempotency import DynamoDBStore

        from .wire import decorated
        from .workload import REGION

        store = DynamoDBStore(table, endpoint_url=endpoint_url, region_name=REGION)
        stores.append(store)
        return decorated(store, handler, cache=cache, **options)

    return wrap


def observe(subject: _Subject, tracing: Tracing) -> dict[str, int | None]:
    """A few invocations, counting the requests sent (before-send: every path emits it), those
    a client's own request serializer built (only its `_make_api_call` calls it: the lean
    paths build their own), what the setup recorded, and the requests carrying its header."""
    sent: list[Any] = []

    def keep(request: Any, **_: Any) -> None:
        sent.append(request.headers)

    through_client = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal through_client
        through_client += 1
        return serialize(*args, **kwargs)

    # the direct path's store sends through a client only once it has built one (its
    # fallback); one built during the pass is counted as every request gone through it
    client = subject.client if subject.store is None else subject.store._client
    serializer = None if client is None else client._serializer
    serialize = None if serializer is None else serializer.serialize_to_request
    subject.events.register_first("before-send.dynamodb", keep)
    if serializer is not None:
        serializer.serialize_to_request = counted  # on the one serializer: nothing checked
    try:
        with tracing.watching():
            for _ in range(EVIDENCE_CALLS):
                subject.call()
    finally:
        if serializer is not None:
            del serializer.serialize_to_request
        subject.events.unregister("before-send.dynamodb", keep)
    if subject.store is not None and client is None and subject.store._client is not None:
        through_client = max(len(sent), 1)
    marked = [tracing.header(headers) for headers in sent]
    return {
        "requests": len(sent),
        "through_client": through_client,
        "seen": tracing.seen,
        "emitted": getattr(tracing, "sent", None),
        "header": None if None in marked else sum(bool(mark) for mark in marked),
    }


# -- the parent: one worker per setup --------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    requests: int
    through_client: int
    seen: int | None
    emitted: int | None
    header: int | None

    @property
    def missed(self) -> bool:
        """The setup did not see, or did not mark, every request."""
        return any(n is not None and n != self.requests for n in (self.seen, self.header))


@dataclass(frozen=True)
class SetupResult:
    slug: str
    by_path: dict[tuple[str, str], PerInvocation]
    """(scenario slug, path) -> CPU per invocation."""
    evidence: dict[tuple[str, str], Evidence]

    def served(self, scenario: str, path: str) -> str:
        """Whether ours on a lean path sent its requests itself, as observed."""
        seen = self.evidence.get((scenario, path))
        if seen is None:
            return "n/a"
        if seen.requests and seen.through_client == 0:
            return "serves"
        if seen.through_client == seen.requests:
            return "steps aside"
        return f"{seen.through_client} of {seen.requests} requests through the client"


@dataclass(frozen=True)
class ProductionResults:
    botocore_version: str
    setups: dict[str, SetupResult]
    rounds: int
    chunk: int
    versions: dict[str, str] = field(default_factory=dict)


def measure(
    endpoint_url: str, *, rounds: int, chunk: int, setups: tuple[str, ...] = tuple(SETUPS)
) -> ProductionResults:
    """Each setup in a fresh interpreter of its own, one after the other."""
    from .environment import version_of

    results = {}
    botocore_version = ""
    options = ["--endpoint", endpoint_url, "--rounds", str(rounds), "--chunk", str(chunk)]
    for slug in setups:
        completed = subprocess.run(
            [sys.executable, "-m", "benchmarks.production_setups", "--worker", slug, *options],
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode:
            raise RuntimeError(f"{slug}: {completed.stderr.strip()[-2000:]}")
        answer = json.loads(completed.stdout)
        botocore_version = answer["botocore"]
        by_path, evidence = {}, {}
        for name, row in answer["rows"].items():
            scenario, path = name.split("/")
            by_path[(scenario, path)] = PerInvocation(
                min(row["by_round"]), row["calls"], row["by_round"]
            )
            evidence[(scenario, path)] = Evidence(**row["evidence"])
        results[slug] = SetupResult(slug, by_path, evidence)
    versions = {
        name: version_of(name)
        for name in (
            "aws-lambda-powertools",
            "aws-xray-sdk",
            "opentelemetry-sdk",
            "opentelemetry-instrumentation-botocore",
        )
    }
    return ProductionResults(botocore_version, results, rounds, chunk, versions)


def _median(path: PerInvocation) -> float:
    return statistics.median(path.by_round)


def _ratio(ours: PerInvocation, theirs: PerInvocation) -> str:
    low, median, high = paired_ratios(ours, theirs)
    return f"{median:.2f}x ({low:.2f} to {high:.2f})"


def _saw(result: SetupResult, scenario: str) -> str:
    """What the setup saw of the requests, over the three paths."""
    paths = [path for path in PATHS if (scenario, path) in result.evidence]
    rows = [result.evidence[(scenario, path)] for path in paths]
    if all(row.seen is None and row.header is None for row in rows):
        return "n/a"
    missed = [PATHS[path] for path, row in zip(paths, rows, strict=True) if row.missed]
    if missed:
        return "**MISSED** on " + ", ".join(missed)
    requests = sum(row.requests for row in rows)
    parts = [f"all {requests} requests"]
    if any(row.header is not None for row in rows):
        parts.append("header sent on each")
    return ", ".join(parts)


def rows(results: ProductionResults) -> list[list[str]]:
    table = []
    for slug, result in results.setups.items():
        for scenario in SCENARIOS:
            theirs = result.by_path[(scenario.slug, "powertools")]
            direct = result.by_path.get((scenario.slug, "ours-direct"))
            fast = result.by_path[(scenario.slug, "ours-fast")]
            off = result.by_path[(scenario.slug, "ours-off")]
            table.append(
                [
                    SETUPS[slug].title,
                    scenario.title,
                    result.served(scenario.slug, "ours-direct"),
                    result.served(scenario.slug, "ours-fast"),
                    f"{_median(theirs) * 1e6:.0f} µs",
                    "—" if direct is None else f"{_median(direct) * 1e6:.0f} µs",
                    f"{_median(fast) * 1e6:.0f} µs",
                    f"{_median(off) * 1e6:.0f} µs",
                    "—" if direct is None else _ratio(direct, theirs),
                    _ratio(fast, theirs),
                    _ratio(off, theirs),
                    _saw(result, scenario.slug),
                ]
            )
    return table


def section(results: ProductionResults) -> Section:
    versions = ", ".join(f"{name} {version}" for name, version in results.versions.items())
    return Section(
        title="Production setups: tracers and hooks",
        method=(
            "What the lean paths do, and what CPU each library spends per invocation, "
            "with the tracing and hooks users run in production. Each setup runs in a fresh "
            "interpreter of its own (a tracer patches botocore for the whole process), made "
            "like Lambda's: LAMBDA_TASK_ROOT and the function's name set, a new "
            "`_X_AMZN_TRACE_ID` before each invocation as the runtime sets it (with X-Ray's "
            "sampling decision), the runtime's log handler with the root logger at INFO. "
            "X-Ray records as it does in Lambda, with no daemon needed: the SDK's Lambda "
            "context builds a facade segment from that header and sends each subsegment as a "
            "UDP datagram, here to a loopback socket nobody reads. Powertools, ours without a "
            "client (the direct path, what a function gets by default in Lambda; its store "
            "built at INIT), ours given a client with the fast path on and ours with it off "
            "(`fast_wire=False`, as IDEMPOTENCY_FAST_WIRE=0) "
            "ran the first-run and replay scenarios of the CPU section, each on its default "
            "client with the setup on it, answered from a recording, interleaved in chunks of "
            f"{results.chunk} over {results.rounds} rounds; CPU is the median per invocation "
            "over the chunks, ratios the median (with quartiles) of the round-by-round ratios "
            "to Powertools. Whether a lean path served was observed after the timing: of "
            f"{EVIDENCE_CALLS} invocations per path, the requests sent (botocore's "
            "`before-send`, which every path emits) against those a client's own request "
            "serializer built (only the client's `_make_api_call` uses it). The same pass "
            "checked that the setup saw every request (X-Ray: a DynamoDB subsegment begun, its "
            "id the parent in the request's trace header; OpenTelemetry: a DynamoDB client "
            "span exported; the hook: called, its header sent). "
            f"botocore {results.botocore_version}, {versions}."
        ),
        tables=[
            Table(
                [
                    "setup",
                    "scenario",
                    "direct path",
                    "fast path",
                    "Powertools",
                    "ours, direct",
                    "ours, fast path on",
                    "ours, path off",
                    "direct / Powertools",
                    "fast on / Powertools",
                    "off / Powertools",
                    "the setup saw",
                ],
                rows(results),
                caption=(
                    "CPU per invocation, median over the chunks; direct path: what ours "
                    "without a client did (the default in Lambda), fast path: ours given a "
                    "client with the path on, each as observed."
                ),
            )
        ],
        notes=[
            "X-Ray and OpenTelemetry wrap botocore's `BaseClient._make_api_call` (to open a "
            "subsegment or span around the call) and `Endpoint.prepare_request` (to put the "
            "trace header on the request); a `before-call` hook is called by "
            "`_make_api_call`. The fast path calls those wrappers itself, with what botocore "
            "would give them, and emits `before-call` when a hook of yours is on it, so it "
            "serves under each setup; tests/integration/test_traced_paths.py compares what "
            "each setup records on both paths field by field.",
            "A setup's own work per request (a subsegment, a span, its exception's stack "
            "trace on a refused condition) is the same for both libraries and counts in both "
            "totals: it brings every ratio nearer 1, most on the replay, whose one request is "
            "an error answer.",
            "Under OpenTelemetry in Lambda the trace header is botocore's own (Lambda's "
            "trace id, added for recursion detection before OpenTelemetry's wrapper runs, "
            "which then leaves it), whichever path sends the request.",
            "A store built without a client takes the direct path in Lambda (the default a "
            "function gets, docs/lambda-modes.md): no botocore client at all, its requests "
            "built, signed and read by the library, the tracers' wrappers called as around a "
            "client's. A hook on a client cannot reach a store without one: no direct row "
            "for the hook.",
        ],
    )


def print_results(results: ProductionResults) -> None:
    headers = [
        "setup",
        "scenario",
        "direct",
        "fast path",
        "PT",
        "ours direct",
        "ours on",
        "ours off",
        "direct/PT",
        "on/PT",
        "off/PT",
        "saw",
    ]
    print(f"botocore {results.botocore_version}; rounds {results.rounds}, chunk {results.chunk}")
    print(" | ".join(headers))
    for row in rows(results):
        print(" | ".join(row))
    for slug, result in results.setups.items():
        for (scenario, path), seen in result.evidence.items():
            print(f"  {slug:18} {scenario:9} {path:10} {seen}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.production_setups", description=__doc__
    )
    parser.add_argument("--worker", choices=SETUPS, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help="use this DynamoDB Local instead of starting one")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=30)
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated subset")
    args = parser.parse_args()
    if args.worker:
        answer = measure_setup(args.worker, args.endpoint, rounds=args.rounds, chunk=args.chunk)
        print(json.dumps(answer))
        return
    chosen = tuple(name for name in args.setups.split(",") if name)
    if args.endpoint:
        print_results(measure(args.endpoint, rounds=args.rounds, chunk=args.chunk, setups=chosen))
        return
    from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

    with DynamoDBLocal() as local:
        print_results(
            measure(local.endpoint_url, rounds=args.rounds, chunk=args.chunk, setups=chosen)
        )


if __name__ == "__main__":
    main()
