"""The benchmark suite still runs end to end (tiny counts, numbers meaningless).

Benchmarks are not tests: nothing here looks at a timing. This only keeps `make bench`
working as the library changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.plan import Plan
from benchmarks.suite import CHART_NAME, run

pytestmark = pytest.mark.dynamodb_local

SECTION_TITLES = (
    "## CPU per invocation",
    "## Round trips",
    "## End-to-end latency",
    "## Cold start",
    "## Storage and cost",
    "## Fingerprinting hostile bodies",
    "## Contention",
    "## Throughput",
)


def test_the_suite_writes_a_report_and_a_chart(
    dynamodb_local_endpoint: str, tmp_path: Path
) -> None:
    report = run(Plan.smoke(), tmp_path, endpoint_url=dynamodb_local_endpoint, log=lambda _: None)

    text = report.read_text(encoding="utf-8")
    for title in SECTION_TITLES:
        assert title in text
    assert "**met**" in text or "**missed**" in text
    assert (tmp_path / CHART_NAME).read_bytes().startswith(b"\x89PNG")
    assert f"![Benchmark chart]({CHART_NAME})" in text


def test_the_report_names_no_path_or_endpoint_of_this_machine(
    dynamodb_local_endpoint: str, tmp_path: Path
) -> None:
    report = run(
        Plan.smoke(),
        tmp_path,
        endpoint_url=dynamodb_local_endpoint,
        only=["round_trips", "storage"],
        log=lambda _: None,
    )

    text = report.read_text(encoding="utf-8")
    assert os.getcwd() not in text
    assert str(tmp_path) not in text
    assert dynamodb_local_endpoint not in text
    assert "http" not in text
