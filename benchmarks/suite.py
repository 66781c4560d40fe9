"""Runs the sections in order against one DynamoDB Local and writes the report and chart."""

from __future__ import annotations

import contextlib
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from . import (
    chart,
    cold_start,
    contention,
    cpu,
    fingerprint,
    hot_key,
    lambda_cold_start,
    latency,
    placement,
    production_setups,
    report,
    round_trips,
    rss,
    storage,
    throughput,
    wire,
)
from .contenders import CONTENDERS
from .environment import describe_machine
from .plan import Plan
from .report import Section
from .workload import create_table, dynamodb_client

SECTIONS = (
    "cpu",
    "wire",
    "production",
    "round_trips",
    "latency",
    "cold_start",
    "lambda_cold_start",
    "memory",
    "storage",
    "placement",
    "fingerprint",
    "contention",
    "hot_key",
    "throughput",
)
REPORT_NAME = "benchmarks.md"
CHART_NAME = "benchmarks.png"


_START = time.perf_counter()


def _log(message: str) -> None:
    print(f"[bench {time.perf_counter() - _START:5.0f} s] {message}", file=sys.stderr, flush=True)


def _check_sections(only: Iterable[str]) -> set[str]:
    wanted = set(only)
    unknown = wanted - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown sections: {', '.join(sorted(unknown))}")
    return wanted


def _cpu_sections(
    plan: Plan,
    endpoint_url: str,
    tables: dict[str, str],
    wanted: set[str],
    log: Callable[[str], None],
) -> dict[str, Section]:
    """CPU and round trips per invocation, the fast wire path against boto3, and both
    libraries under the tracers and hooks users run in production."""
    sections = {}
    if wanted & {"cpu", "round_trips"}:
        log("recording the scenarios on DynamoDB Local")
        recorded = cpu.record_all(endpoint_url, tables)
        sections["round_trips"] = round_trips.section(recorded)
        if "cpu" in wanted:
            log("CPU per invocation, answered from the recordings")
            sections["cpu"] = cpu.section(
                cpu.measure(
                    recorded,
                    endpoint_url,
                    tables["ours"],
                    rounds=plan.cpu_rounds,
                    chunk=plan.cpu_chunk,
                    recorded_async=cpu.record_async(endpoint_url, tables["ours"]),
                )
            )
    if "wire" in wanted:
        log("the fast wire path against boto3, per call and per invocation")
        sections["wire"] = wire.section(
            wire.measure(endpoint_url, plan.wire_rounds, plan.wire_chunk)
        )
    if "production" in wanted:
        log("tracers and hooks of production setups, one fresh interpreter each")
        sections["production"] = production_setups.section(
            production_setups.measure(
                endpoint_url, rounds=plan.production_rounds, chunk=plan.production_chunk
            )
        )
    return sections


def _storage_sections(
    plan: Plan, endpoint_url: str, wanted: set[str], log: Callable[[str], None]
) -> dict[str, Section]:
    """What results weigh and cost, and where a result is cheapest to keep."""
    sections = {}
    if "storage" in wanted:
        log("storage and cost")
        sections["storage"] = storage.section(storage.measure(endpoint_url, plan.storage_cases))
    if "placement" in wanted:
        log("where a result lives: in the record or in an item of its own")
        sections["placement"] = placement.section(
            placement.measure(endpoint_url, plan.placement_sizes, plan.placement_calls)
        )
    return sections


def run(
    plan: Plan,
    out_dir: Path,
    *,
    endpoint_url: str | None = None,
    only: Iterable[str] = SECTIONS,
    command: str = "make bench",
    log: Callable[[str], None] = _log,
    draw: bool = True,
) -> Path:
    """Measure, then write `benchmarks.md` and (with `draw`, which needs matplotlib)
    `benchmarks.png` into `out_dir`. Starts its own DynamoDB Local unless given an endpoint.
    Returns the report's path."""
    wanted = _check_sections(only)
    started = time.perf_counter()
    sections: dict[str, Section] = {}
    with contextlib.ExitStack() as stack:
        if endpoint_url is None:
            from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

            log("starting DynamoDB Local")
            endpoint_url = stack.enter_context(DynamoDBLocal()).endpoint_url
        setup = dynamodb_client(endpoint_url)
        run_id = uuid.uuid4().hex[:8]
        tables = {
            contender.slug: create_table(
                setup, f"bench-{contender.slug}-{run_id}", contender.key_attribute
            )
            for contender in CONTENDERS
        }
        sections.update(_cpu_sections(plan, endpoint_url, tables, wanted, log))
        if "latency" in wanted:
            log("end-to-end latency")
            sections["latency"] = latency.section(
                latency.measure(endpoint_url, tables, plan.latency_calls)
            )
        if "cold_start" in wanted:
            log("cold start: imports in fresh interpreters, then the layer build")
            sections["cold_start"] = cold_start.section(
                cold_start.measure_imports(plan.import_runs),
                *cold_start.measure_layer(
                    runs=plan.layer_import_runs,
                    install_requirements=plan.build_layer_requirements,
                ),
                cold_start.measure_self_check(plan.import_runs),
            )
        if "lambda_cold_start" in wanted:
            log("cold start as Lambda has it: INIT and a first invocation, fresh interpreters")
            sections["lambda_cold_start"] = lambda_cold_start.section(
                lambda_cold_start.measure(endpoint_url, runs=plan.lambda_cold_runs)
            )
        if "memory" in wanted:
            log("resident memory in fresh interpreters, each library on its default store")
            sections["memory"] = rss.section(
                rss.measure(endpoint_url, calls=plan.memory_calls, runs=plan.memory_runs)
            )
        sections.update(_storage_sections(plan, endpoint_url, wanted, log))
        if "fingerprint" in wanted:
            log("fingerprinting hostile bodies")
            sections["fingerprint"] = fingerprint.section(
                fingerprint.measure(plan.fingerprint_bytes, plan.fingerprint_rounds),
                fingerprint.realistic(plan.fingerprint_rounds),
            )
        if "contention" in wanted:
            log("contention")
            sections["contention"] = contention.section(
                contention.measure(
                    endpoint_url,
                    tables,
                    callers=plan.contention_callers,
                    trials=plan.contention_trials,
                    work_seconds=plan.contention_work_seconds,
                ),
                callers=plan.contention_callers,
                work_seconds=plan.contention_work_seconds,
            )
        if "hot_key" in wanted:
            sections["hot_key"] = _hot_key(plan, endpoint_url, tables, log)
        if "throughput" in wanted:
            log("throughput")
            sections["throughput"] = throughput.section(
                throughput.measure(
                    endpoint_url,
                    tables,
                    thread_counts=plan.throughput_threads,
                    seconds=plan.throughput_seconds,
                    repeats=plan.throughput_repeats,
                ),
                thread_counts=plan.throughput_threads,
                seconds=plan.throughput_seconds,
                repeats=plan.throughput_repeats,
            )
        log("describing the machine")
        machine = describe_machine()
    out_dir.mkdir(parents=True, exist_ok=True)
    log("writing the chart and the report")
    figure = chart.plan(sections)
    if draw:
        chart.render(figure, out_dir / CHART_NAME)
    text = report.render(
        machine=machine,
        sections=[sections[name] for name in SECTIONS if name in sections],
        chart_file=CHART_NAME if draw else None,
        command=command,
        wall_seconds=time.perf_counter() - started,
    )
    path = out_dir / REPORT_NAME
    path.write_text(text + _kept_sections(path, text), encoding="utf-8")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return path


KEPT_SECTIONS = ("## Valkey",)
"""Sections other programs write into the report (`benchmarks.valkey_compare --write`, the
failover figures): the suite carries them over as they are, never drops them."""


def _kept_sections(path: Path, text: str) -> str:
    """The sections of the report at `path` that start with a KEPT_SECTIONS title and that
    `text` lacks, each whole (to the next `## ` heading), in their order."""
    if not path.exists():
        return ""
    old = path.read_text(encoding="utf-8")
    kept = re.findall(r"^## .*?(?=^## |\Z)", old, flags=re.M | re.S)
    wanted = [part for part in kept if part.startswith(KEPT_SECTIONS)]
    titles = set(re.findall(r"^## .*$", text, flags=re.M))
    extra = [part.rstrip("\n") + "\n" for part in wanted if part.splitlines()[0] not in titles]
    return "".join("\n" + part for part in extra)


def _hot_key(
    plan: Plan, endpoint_url: str, tables: dict[str, str], log: Callable[[str], None]
) -> Section:
    log("hot key")
    return hot_key.section(
        hot_key.measure(
            endpoint_url,
            tables,
            callers=plan.hot_key_callers,
            trials=plan.hot_key_trials,
            work_seconds=plan.hot_key_work_seconds,
            few_callers=plan.hot_key_few_callers,
        ),
        callers=plan.hot_key_callers,
    )
