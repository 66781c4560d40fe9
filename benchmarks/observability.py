"""What `metrics=` and an active trace cost an invocation in CPU, with DynamoDB taken out:
an in-memory store answers, so the numbers are the library's own work and nothing else.

    python -m benchmarks.observability

Each row is the median of several repeats of the process's CPU time (not wall time, which
other work on the machine inflates), interleaved across configurations so that a slow patch
hits all of them alike.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import timeit
from collections.abc import Callable, Iterator
from typing import Any

import boto3

from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._stores.record import Record, Status, StoredForm
from lambda_idempotency.testing import FakeLambdaContext


class MemoryStore(DynamoDBStore):
    """A DynamoDBStore whose claim and completion are answered from memory: the record and
    the completion are built by the store's own code, only the requests are not sent."""

    def __init__(self) -> None:
        client = boto3.client(
            "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        super().__init__("observability-bench", client=client, fast_wire=False)
        self.records: dict[str, Record] = {}

    def claim(self, pk: str, **claim: Any) -> tuple[bool, Record | None]:
        held = self.records.get(pk)
        if held is not None:
            return False, held
        self.records[pk] = Record(
            pk,
            Status.IN_PROGRESS,
            claim["expiration_s"],
            claim["lease_until_ms"],
            claim["owner"],
            claim["payload_hash"],
        )
        return True, None

    def write_completion(self, form: StoredForm, writes: Any = ()) -> bool:
        self.records[form.pk] = self._record(form.item, "get")
        return True


def handler_with(*, hook: bool = True, **options: Any) -> Callable[[dict[str, Any], Any], Any]:
    """hook=False: as before observability, with no hook on the outcomes at all."""
    store: Any = MemoryStore()

    @idempotent(key="order_id", store=store, cache_size=0, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"charged": event["amount"]}

    if not hook:
        engine = handler.idempotency  # type: ignore[attr-defined]
        engine.settings = engine.settings._replace(observe=None)
    return handler


@contextlib.contextmanager
def opentelemetry_span() -> Iterator[None]:
    from opentelemetry.sdk.trace import TracerProvider

    with TracerProvider().get_tracer("bench").start_as_current_span("handler"):
        yield


def measure(
    configurations: dict[str, tuple[dict[str, Any], Callable[[], Any]]],
    number: int = 2000,
    repeats: int = 15,
) -> dict[str, tuple[float, float]]:
    """Microseconds of CPU per first run and per replay, by configuration."""
    context = FakeLambdaContext()
    first: dict[str, list[float]] = {name: [] for name in configurations}
    replay: dict[str, list[float]] = {name: [] for name in configurations}
    for _ in range(repeats):
        for name, (options, around) in configurations.items():
            handler = handler_with(**options)
            events = [{"order_id": f"order-{n}", "amount": 5} for n in range(number)]
            with around(), open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                first[name].append(_cpu_per_call(handler, events, context))
                replay[name].append(_cpu_per_call(handler, events, context))
    return {
        name: (statistics.median(first[name]) * 1e6, statistics.median(replay[name]) * 1e6)
        for name in configurations
    }


def _cpu_per_call(handler: Callable[..., Any], events: list[Any], context: Any) -> float:
    """Seconds of this process's CPU per call, one call per event."""
    started = time.process_time()
    for event in events:
        handler(event, context)
    return (time.process_time() - started) / len(events)


def _table(results: dict[str, tuple[float, float]]) -> None:
    base_first, base_replay = next(iter(results.values()))
    for name, (first, replay) in results.items():
        print(
            f"| {name} | {first:.1f} | {replay:.1f} | "
            f"{first - base_first:+.1f} / {replay - base_replay:+.1f} |"
        )


def per_outcome(number: int = 100_000, repeats: int = 5) -> dict[str, float]:
    """Microseconds of CPU per outcome of each piece alone: finer than a whole invocation,
    whose spread on a busy machine is several microseconds."""
    from aws_lambda_powertools import Metrics

    from lambda_idempotency._base.metrics import EmfLines, ThroughMetrics
    from lambda_idempotency._base.observe import annotate_trace

    emf = EmfLines("LambdaIdempotency", "bench.handler")
    powertools = Metrics(namespace="Bench", service="bench")
    through = ThroughMetrics(powertools.add_metric)
    pieces: dict[str, Callable[[], Any]] = {
        "trace check, no tracing SDK imported": lambda: annotate_trace("executed", "k", {}),
        "EMF line, written and flushed": lambda: emf("executed", {}),
        "Powertools add_metric (its flush every 100 values included)": lambda: through(
            "executed", {}
        ),
    }
    costs = {}
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        for name, piece in pieces.items():
            runs = timeit.repeat(piece, number=number, repeat=repeats, timer=time.process_time)
            costs[name] = min(runs) / number * 1e6
    powertools.clear_metrics()
    return costs


def main() -> None:
    """Pieces first, then invocations; metrics before any tracing SDK is loaded (loading
    one changes every later row)."""
    from aws_lambda_powertools import Metrics

    print("| per outcome | µs of CPU |")
    print("|---|---|")
    for name, cost in per_outcome().items():
        print(f"| {name} | {cost:.2f} |")
    print()
    powertools = Metrics(namespace="Bench", service="bench")
    none = contextlib.nullcontext
    print("| configuration | first run (µs) | replay (µs) | added (first / replay) |")
    print("|---|---|---|---|")
    _table(
        measure(
            {
                "no hook at all (before this change)": ({"hook": False}, none),
                "metrics off, no tracing SDK": ({}, none),
                "metrics=True (EMF lines)": ({"metrics": True}, none),
                "metrics=Powertools Metrics": ({"metrics": powertools}, none),
            }
        )
    )
    powertools.clear_metrics()
    import opentelemetry.trace  # noqa: F401  (imported, as an instrumented function has it)

    _table(
        measure(
            {
                "no hook at all, OpenTelemetry imported": ({"hook": False}, none),
                "metrics off, OpenTelemetry imported, no span": ({}, none),
                "metrics off, OpenTelemetry span recording": ({}, opentelemetry_span),
            }
        )
    )


if __name__ == "__main__":
    main()
