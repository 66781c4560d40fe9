"""The benchmark suite still runs end to end (tiny counts, numbers meaningless).

Benchmarks are not tests: nothing here looks at a timing. This keeps `make bench` working as
the library changes, without matplotlib (the chart's panels are checked as data), and checks
the pieces whose numbers are exact: the emulated Lambda log line, the capacity rules, and the
layer probe (the layer's own bytecode read, none written).
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import pytest

from benchmarks import chart, storage
from benchmarks.cold_start import built_layer, measure_layer_imports
from benchmarks.lambda_logging import LambdaLogging
from benchmarks.plan import Plan
from benchmarks.suite import CHART_NAME, run
from benchmarks.workload import create_table, dynamodb_client

pytestmark = pytest.mark.dynamodb_local

SECTION_TITLES = (
    "## CPU per invocation",
    "## Production setups: tracers and hooks",
    "## Round trips",
    "## End-to-end latency",
    "## Cold start",
    "## Cold start as Lambda has it",
    "## Resident memory",
    "## Storage and cost",
    "## Fingerprinting hostile bodies",
    "## Contention",
    "## Hot key",
    "## Throughput",
)


# Every section once, each with its own DynamoDB Local tables, fresh interpreters and a layer
# build: 45 s on an idle 2-core machine, minutes on a shared one. `make bench-smoke` runs it
# (CI too), `make test` leaves it out.
@pytest.mark.benchmark_suite
@pytest.mark.timeout_scale(6)
def test_the_suite_writes_a_report_with_every_section(
    dynamodb_local_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panels: list[chart.Panel] = []
    monkeypatch.setattr(chart, "render", lambda planned, path: panels.extend(planned))

    report = run(Plan.smoke(), tmp_path, endpoint_url=dynamodb_local_endpoint, log=lambda _: None)

    text = report.read_text(encoding="utf-8")
    for title in SECTION_TITLES:
        assert title in text
    assert "root logger at INFO" in text
    # production setups, each in an interpreter of its own: the fast path serves under every
    # tracer and hook, the direct path under every tracer (a hook on a client cannot reach a
    # store without one: n/a), and each saw every request of every path (header included)
    production = text.split("## Production setups: tracers and hooks")[1].split("\n## ")[0]
    served = [
        line.split(" | ")[2:4]
        for line in production.splitlines()
        if line.startswith("| ") and (" | First run | " in line or " | Replay | " in line)
    ]
    assert len(served) == 12
    assert [fast for _, fast in served] == ["serves"] * 12
    assert sorted(direct for direct, _ in served) == ["n/a"] * 2 + ["serves"] * 10
    assert "MISSED" not in text
    assert "random text" in text and "BatchWriteItem" in text  # the chunk path was taken
    assert "computed from DynamoDB's documented rules" in text
    assert "no bytecode" in text
    # the Lambda cold start (both initialization types) and resident memory: each library's
    # default client reached DynamoDB Local, from interpreters that read bytecode, compiled none
    assert "| `provisioned-concurrency` | **set-up + first invocation** |" in text
    assert "| first call: warm-cache replay |" in text  # memory, each on its default store
    assert text.count("compiled from source (must be none): none") == 2
    assert "processes, first wait" in text and "processes, has seen a run" in text  # hot key
    assert "**met**" in text or "**missed**" in text
    assert f"![Benchmark chart]({CHART_NAME})" in text
    assert panels[0].title.startswith("Total CPU per invocation")
    for panel in panels:
        assert panel.bars, panel.title
        timed = "exact" not in panel.title
        for bar in panel.bars:
            if bar.value is None:
                assert bar.note == "failed"
            elif timed:
                assert bar.low is not None and bar.high is not None, panel.title
                assert bar.low <= bar.value <= bar.high, panel.title


def test_without_drawing_the_report_links_no_chart(
    dynamodb_local_endpoint: str, tmp_path: Path
) -> None:
    report = run(
        Plan.smoke(),
        tmp_path,
        endpoint_url=dynamodb_local_endpoint,
        only=["round_trips"],
        log=lambda _: None,
        draw=False,
    )

    assert "![Benchmark chart]" not in report.read_text(encoding="utf-8")
    assert not (tmp_path / CHART_NAME).exists()


def test_the_report_names_no_path_or_endpoint_of_this_machine(
    dynamodb_local_endpoint: str, tmp_path: Path
) -> None:
    report = run(
        Plan.smoke(),
        tmp_path,
        endpoint_url=dynamodb_local_endpoint,
        only=["round_trips", "storage"],
        log=lambda _: None,
        draw=False,
    )

    text = report.read_text(encoding="utf-8")
    assert os.getcwd() not in text
    assert str(tmp_path) not in text
    assert dynamodb_local_endpoint not in text
    assert "http" not in text


def test_the_emulated_runtime_handler_writes_lambdas_line_at_info_only() -> None:
    logs = LambdaLogging()
    captured = io.StringIO()
    logs.sink.log = captured.write  # type: ignore[method-assign]
    logs.install()
    try:
        logging.getLogger("lambda_idempotency").info("claimed")
        assert captured.getvalue() == ""  # root at WARNING: a function that configures nothing
        logs.level(logging.INFO)
        logging.getLogger("lambda_idempotency").info("released")
        logging.getLogger("lambda_idempotency").debug("replayed")
    finally:
        logs.uninstall()

    level, stamp, request_id, message = captured.getvalue().split("\t")
    assert level == "[INFO]"
    assert stamp.endswith("Z") and "T" in stamp
    assert request_id == "00000000-0000-0000-0000-000000000000"
    assert message == "released\n"


def test_capacity_is_priced_as_reported_or_by_the_rules(dynamodb_local_endpoint: str) -> None:
    client = dynamodb_client(dynamodb_local_endpoint)
    table = create_table(client, "bench-rules-smoke", "pk")
    meter = storage.RulesMeter(client, dynamodb_local_endpoint)
    big = {"pk": {"S": "a"}, "v": {"S": "x" * 3000}}  # 3,004 B: 3 WCU, 1 RCU

    client.put_item(TableName=table, Item=big)
    put = meter.take()
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):
        client.put_item(
            TableName=table,
            Item={"pk": {"S": "a"}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    refused = meter.take()
    client.transact_write_items(
        TransactItems=[{"Put": {"TableName": table, "Item": {"pk": {"S": "b"}}}}]
    )
    transaction = meter.take()
    client.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True)
    client.get_item(TableName=table, Key={"pk": {"S": "a"}})
    client.get_item(TableName=table, Key={"pk": {"S": "missing"}}, ConsistentRead=True)
    reads = meter.take()

    assert (put.write_units, put.requests) == (3, ["PutItem"])
    assert refused.write_units == 3  # billed on the larger item: the one that refused it
    assert transaction.write_units == 2
    assert reads.read_units == 1 + 0.5 + 1
    # DynamoDB Local reports what succeeded; a refused condition reports nothing: rules.
    assert (put.priced_by, refused.priced_by, reads.priced_by) == ("reported", "rules", "reported")
    assert refused.dollars_per_million == pytest.approx(3 * 0.625)


def test_the_layer_probe_imports_the_layers_own_bytecode_and_writes_none() -> None:
    with built_layer(install_requirements=False) as (layer, method):
        imports = measure_layer_imports(layer, method, runs=1)

    assert imports.bytecode_files > 0
    assert imports.unchecked_bytecode_files == imports.bytecode_files
    assert imports.bytecode_written == 0
    assert imports.without_bytecode == []
    assert "lambda_idempotency" in imports.from_layer["ours"]
    assert set(imports.samples) == {"ours", "ours_http", "powertools", "ours_without_bytecode"}
    assert all(len(values) == 1 for values in imports.samples.values())


@pytest.mark.benchmark_suite  # 20 full collections of the heap: a minute late in a whole suite
def test_the_awscrt_comparison_measures_both_paths_where_awscrt_is_blocked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`python -m benchmarks.awscrt`'s worker, in this environment (no awscrt, as on Lambda):
    both paths measured, botocore's own SigV4 signer chosen."""
    from benchmarks import awscrt

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "benchmark")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "benchmark")
    result = awscrt.measure_calls("blocked", rounds=1, chunk=2)
    assert result["signer"] == "botocore.auth.SigV4Auth"
    assert set(result["per_call"]) == {"claim, boto3", "claim, fast", "get, boto3", "get, fast"}
    assert all(seconds > 0 for seconds in result["per_call"].values())


def test_the_observability_benchmark_runs_the_library_over_its_memory_store() -> None:
    """`python -m benchmarks.observability` fakes only the requests: its store must keep up
    with the store's interface (it fell behind once, unnoticed: nothing ran it)."""
    from benchmarks import observability
    from lambda_idempotency.testing import FakeLambdaContext

    handler = observability.handler_with(metrics=True)
    event = {"order_id": "o-1", "amount": 5}

    results = [handler(event, FakeLambdaContext()) for _ in range(2)]

    assert results == [{"charged": 5}] * 2
    stats = handler.idempotency.stats  # type: ignore[attr-defined]
    assert (stats["executed"], stats["replayed"]) == (1, 1)
