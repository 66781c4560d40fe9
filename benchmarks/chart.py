"""The report's chart: one PNG, one panel per measured section, both libraries side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import Section

OURS_COLOR = "#1f77b4"
POWERTOOLS_COLOR = "#ff7f0e"
FLOOR_COLOR = "#c7c7c7"
RAW_COLOR = "#7f7f7f"


def render(sections: dict[str, Section], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(16, 9), dpi=100)
    panels = [
        ("cpu", _cpu),
        ("round_trips", _round_trips),
        ("latency", _latency),
        ("storage", _storage),
        ("contention", _contention),
        ("throughput", _throughput),
    ]
    for axis, (name, draw) in zip(axes.flat, panels, strict=True):
        section = sections.get(name)
        if section is None or not section.chart:
            axis.set_axis_off()
            axis.set_title(f"{name}: not run")
            continue
        draw(axis, section.chart)
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle("lambda-idempotency (blue) beside Powertools idempotency (orange)")
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def _pairs(axis: Any, labels: list[str], ours: list[float], theirs: list[float]) -> None:
    positions = range(len(labels))
    axis.bar([p - 0.2 for p in positions], ours, 0.4, color=OURS_COLOR, label="lambda-idempotency")
    axis.bar([p + 0.2 for p in positions], theirs, 0.4, color=POWERTOOLS_COLOR, label="Powertools")
    axis.set_xticks(list(positions), labels, rotation=15, ha="right", fontsize=8)


def _cpu(axis: Any, chart: dict[str, Any]) -> None:
    scenarios = chart["scenarios"]
    theirs = [s["powertools"][1] * 1e6 for s in scenarios]
    _pairs(axis, [s["title"] for s in scenarios], [s["ours"][1] * 1e6 for s in scenarios], theirs)
    for index, scenario in enumerate(scenarios):
        if scenario["title"] in ("First run", "Replay"):
            budget = theirs[index] / 3
            axis.hlines(budget, index - 0.4, index, colors="black", linestyles="dashed")
    axis.set_ylabel("own CPU µs per invocation (dashed: budget)")
    axis.set_title(f"Own CPU (total minus botocore floor of {chart['floor'] * 1e6:.0f} µs/call)")


def _round_trips(axis: Any, chart: dict[str, Any]) -> None:
    scenarios = chart["scenarios"]
    _pairs(
        axis,
        [s["title"] for s in scenarios],
        [s["ours"] for s in scenarios],
        [s["powertools"] for s in scenarios],
    )
    axis.set_ylabel("requests per invocation")
    axis.set_title("Round trips")
    axis.legend(fontsize=8)


def _latency(axis: Any, chart: dict[str, Any]) -> None:
    scenarios = chart["scenarios"]
    labels = [s["title"] for s in scenarios]
    _pairs(
        axis,
        labels,
        [s["ours"][0] * 1e3 for s in scenarios],
        [s["powertools"][0] * 1e3 for s in scenarios],
    )
    positions = range(len(labels))
    axis.scatter(
        [p - 0.2 for p in positions],
        [s["ours"][1] * 1e3 for s in scenarios],
        marker="_",
        s=200,
        color="black",
    )
    axis.scatter(
        [p + 0.2 for p in positions],
        [s["powertools"][1] * 1e3 for s in scenarios],
        marker="_",
        s=200,
        color="black",
        label="p99",
    )
    axis.set_ylabel("ms (bars p50, ticks p99)")
    axis.set_title("End-to-end latency, DynamoDB Local")
    axis.legend(fontsize=8)


def _storage(axis: Any, chart: dict[str, Any]) -> None:
    labels = chart["sizes"]
    ours = [(value or 0) / 1024 for value in chart["ours"]]
    theirs = [(value or 0) / 1024 for value in chart["powertools"]]
    _pairs(axis, labels, ours, theirs)
    for index, value in enumerate(chart["powertools"]):
        if value is None:
            axis.annotate("failed", (index + 0.2, 1), ha="center", color=POWERTOOLS_COLOR)
    for index, value in enumerate(chart["ours"]):
        if value is None:
            axis.annotate("failed", (index - 0.2, 1), ha="center", color=OURS_COLOR)
    axis.set_yscale("log")
    axis.set_ylabel("stored KB (log)")
    axis.set_title("Stored size per result")


def _contention(axis: Any, chart: dict[str, Any]) -> None:
    variants = chart["variants"]
    labels = [v["label"].replace("lambda-idempotency, on_in_progress=", "ours, ") for v in variants]
    colors = [POWERTOOLS_COLOR if v["label"] == "Powertools" else OURS_COLOR for v in variants]
    bars = axis.bar(labels, [v["answered"] * 1e3 for v in variants], color=colors)
    for bar, variant in zip(bars, variants, strict=True):
        axis.annotate(
            f"{variant['results']:.0f} got the result",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axis.tick_params(axis="x", labelsize=8)
    axis.set_ylabel("ms until every caller answered")
    axis.set_title("Contention: duplicates of one key")


def _throughput(axis: Any, chart: dict[str, Any]) -> None:
    threads = chart["threads"]
    raw = chart["raw PutItem"]
    for name, color in (("lambda-idempotency", OURS_COLOR), ("Powertools", POWERTOOLS_COLOR)):
        ratios = [value / reference for value, reference in zip(chart[name], raw, strict=True)]
        axis.plot(threads, ratios, marker="o", color=color, label=name)
    axis.axhline(0.5, color=RAW_COLOR, linestyle="dashed", label="ceiling: two writes per run")
    axis.set_xscale("log", base=2)
    axis.set_xticks(threads, [str(t) for t in threads])
    axis.set_ylim(0, 0.6)
    axis.set_xlabel("threads")
    axis.set_ylabel("invocations/s ÷ raw PutItem/s")
    axis.set_title("Throughput, distinct keys, against raw PutItem")
    axis.legend(fontsize=8)
