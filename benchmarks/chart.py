"""The report's chart: one PNG, one panel per measured quantity, both libraries side by side.

`plan` turns the sections' numbers into panels of grouped bars (plain data, no matplotlib, so
the smoke test can check every bar); `render` draws them with matplotlib (the `bench` extra).
Timed bars are medians with a whisker from the minimum to the maximum over repeats; bars of
exact quantities (counts, bytes, units) say so in their panel's title.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .report import Section

OURS_COLOR = "#1f77b4"
POWERTOOLS_COLOR = "#ff7f0e"
INFO_HATCH = "//"


@dataclass(frozen=True)
class Series:
    name: str
    """As shown in the legend."""
    color: str
    hatch: str = ""


@dataclass(frozen=True)
class Bar:
    group: int
    series: Series
    value: float | None
    """None: nothing to draw (the run failed); `note` says why."""
    low: float | None = None
    high: float | None = None
    """The spread (minimum and maximum over repeats); None for an exact quantity."""
    note: str = ""


@dataclass
class Panel:
    title: str
    ylabel: str
    groups: list[str]
    bars: list[Bar] = field(default_factory=list)
    log: bool = False
    marks: list[tuple[int, float, str]] = field(default_factory=list)
    """(group, y, legend label): a short dashed line over a group, e.g. a budget."""


OURS = Series("lambda-idempotency", OURS_COLOR)
OURS_INFO = Series("lambda-idempotency, root logger at INFO", OURS_COLOR, INFO_HATCH)
POWERTOOLS = Series("Powertools", POWERTOOLS_COLOR)
POWERTOOLS_INFO = Series("Powertools, root logger at INFO", POWERTOOLS_COLOR, INFO_HATCH)


def _timed(group: int, series: Series, spread: list[float], scale: float) -> Bar:
    low, median, high = (value * scale for value in spread)
    return Bar(group, series, median, low, high)


def _cpu(chart: dict[str, Any]) -> Panel:
    scenarios = chart["scenarios"]
    panel = Panel(
        f"Total CPU per invocation, recorded responses (median, whiskers min to max over "
        f"{chart['rounds']} rounds)",
        "CPU µs per invocation",
        [s["title"] for s in scenarios],
    )
    for index, scenario in enumerate(scenarios):
        for series, spread in (
            (OURS, scenario["ours"][0]),
            (OURS_INFO, scenario["ours"][1]),
            (POWERTOOLS, scenario["powertools"][0]),
            (POWERTOOLS_INFO, scenario["powertools"][1]),
        ):
            panel.bars.append(_timed(index, series, spread, 1e6))
        if scenario["title"] in ("First run", "Replay"):
            budget = scenario["powertools"][0][1] * 1e6 / 2
            panel.marks.append((index, budget, "budget: 0.5x Powertools"))
    return panel


def _layer(chart: dict[str, Any]) -> Panel:
    layer = chart["layer"]
    panel = Panel(
        "Cold import from the SAM-built layer, read-only (median, whiskers min to max)",
        "ms over `import boto3`",
        [
            "import lambda_idempotency",
            "import idempotent_http",
            "Powertools idempotency",
            "ours, bytecode removed",
        ],
    )
    probes = (
        ("ours", OURS),
        ("ours_http", OURS),
        ("powertools", POWERTOOLS),
        ("ours_without_bytecode", OURS),
    )
    for index, (probe, series) in enumerate(probes):
        if probe in layer:
            panel.bars.append(_timed(index, series, layer[probe], 1e3))
    panel.marks.append((0, 5.0, "budget: 5 ms"))
    panel.marks.append((1, 5.0, "budget: 5 ms"))
    return panel


def _latency(chart: dict[str, Any]) -> Panel:
    scenarios = chart["scenarios"]
    panel = Panel(
        "End-to-end latency, DynamoDB Local (median, whiskers min to max)",
        "ms per invocation (log)",
        [s["title"] for s in scenarios],
        log=True,
    )
    for index, scenario in enumerate(scenarios):
        panel.bars.append(_timed(index, OURS, scenario["ours_spread"], 1e3))
        panel.bars.append(_timed(index, POWERTOOLS, scenario["powertools_spread"], 1e3))
    return panel


def _round_trips(chart: dict[str, Any]) -> Panel:
    scenarios = chart["scenarios"]
    panel = Panel("Round trips (exact)", "requests per invocation", [s["title"] for s in scenarios])
    for index, scenario in enumerate(scenarios):
        panel.bars.append(Bar(index, OURS, scenario["ours"]))
        panel.bars.append(Bar(index, POWERTOOLS, scenario["powertools"]))
    return panel


def _by_result(chart: dict[str, Any], key: str, title: str, ylabel: str, scale: float) -> Panel:
    panel = Panel(title, ylabel, chart["cases"], log=True)
    for slug, series in (("ours", OURS), ("powertools", POWERTOOLS)):
        for index, value in enumerate(chart[f"{slug}{key}"]):
            if value is None:
                panel.bars.append(Bar(index, series, None, note="failed"))
            else:
                panel.bars.append(Bar(index, series, value * scale))
    return panel


def _storage(chart: dict[str, Any]) -> Panel:
    return _by_result(chart, "", "Stored size per result (exact)", "stored KB (log)", 1 / 1024)


def _capacity(chart: dict[str, Any]) -> Panel:
    return _by_result(
        chart,
        "_replay_units",
        "Capacity per replay, DynamoDB's rules (exact)",
        "WCU + RCU per replay (log)",
        1.0,
    )


def _heap(chart: dict[str, Any]) -> Panel:
    scenarios = chart["scenarios"]
    panel = Panel(
        "Peak Python heap per invocation (tracemalloc; median, whiskers min to max of 5)",
        "KB",
        [s["title"] for s in scenarios],
    )
    for index, scenario in enumerate(scenarios):
        panel.bars.append(_timed(index, OURS, scenario["ours_heap"], 1 / 1024))
        panel.bars.append(_timed(index, POWERTOOLS, scenario["powertools_heap"], 1 / 1024))
    return panel


def _contention(chart: dict[str, Any]) -> Panel:
    variants = chart["variants"]
    labels = [v["label"].replace("lambda-idempotency, on_in_progress=", "ours, ") for v in variants]
    panel = Panel(
        "Contention: 64 duplicates of one key (median, whiskers min to max over trials)",
        "ms until every caller answered",
        labels,
    )
    for index, variant in enumerate(variants):
        series = POWERTOOLS if variant["label"] == "Powertools" else OURS
        panel.bars.append(
            Bar(
                index,
                series,
                variant["answered"] * 1e3,
                variant["answered_min"] * 1e3,
                variant["answered_max"] * 1e3,
                note=f"{variant['results']:.0f} got the result",
            )
        )
    return panel


def _throughput(chart: dict[str, Any]) -> Panel:
    threads = chart["threads"]
    raw = chart["raw PutItem"]
    panel = Panel(
        "Throughput, distinct keys (median, whiskers min to max over repeats)",
        "invocations/s ÷ raw PutItem/s",
        [f"{t} thread{'s' if t > 1 else ''}" for t in threads],
    )
    for name, series in (("lambda-idempotency", OURS), ("Powertools", POWERTOOLS)):
        for index, (value, reference) in enumerate(zip(chart[name], raw, strict=True)):
            low, high = chart["spread"][name][index]
            panel.bars.append(Bar(index, series, value / reference, low, high))
    panel.marks += [(index, 0.5, "ceiling: two writes per run") for index in range(len(threads))]
    return panel


def plan(sections: dict[str, Section]) -> list[Panel]:
    """The panels for the sections that ran, total CPU first."""
    panels: list[Panel] = []

    def chart(name: str) -> dict[str, Any] | None:
        section = sections.get(name)
        return section.chart if section is not None and section.chart else None

    if (cpu := chart("cpu")) is not None:
        panels.append(_cpu(cpu))
    if (cold := chart("cold_start")) is not None:
        panels.append(_layer(cold))
    if (latency := chart("latency")) is not None:
        panels.append(_latency(latency))
    if (trips := chart("round_trips")) is not None:
        panels.append(_round_trips(trips))
    if (storage := chart("storage")) is not None:
        panels += [_storage(storage), _capacity(storage)]
    if cpu is not None:
        panels.append(_heap(cpu))
    if (contention := chart("contention")) is not None:
        panels.append(_contention(contention))
    if (throughput := chart("throughput")) is not None:
        panels.append(_throughput(throughput))
    return panels


def render(panels: list[Panel], path: Path) -> None:
    """Draw the panels on a grid, the first (total CPU) across the top, with one legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 3
    cells = len(panels) + (columns - 1 if panels else 0)  # the first panel takes a whole row
    rows = max(1, -(-cells // columns))
    figure = plt.figure(figsize=(19, 5.2 * rows), dpi=90)
    grid = figure.add_gridspec(rows, columns)
    handles: dict[str, Any] = {}
    for number, panel in enumerate(panels):
        if number == 0:
            axis = figure.add_subplot(grid[0, :])
        else:
            cell = number + columns - 1
            axis = figure.add_subplot(grid[cell // columns, cell % columns])
        _draw(axis, panel, handles)
    if handles:
        figure.legend(
            list(handles.values()),
            list(handles),
            loc="upper center",
            ncol=min(5, len(handles)),
            fontsize=10,
            frameon=False,
            bbox_to_anchor=(0.5, 1.0),
        )
    figure.suptitle(
        "lambda-idempotency beside Powertools idempotency (docs/benchmarks.md)", y=1.025
    )
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    figure.savefig(path, metadata={"Software": None}, bbox_inches="tight")
    plt.close(figure)


def _draw(axis: Any, panel: Panel, handles: dict[str, Any]) -> None:
    series_per_group: dict[int, list[Series]] = {}
    for bar in panel.bars:
        series_per_group.setdefault(bar.group, [])
        if bar.series not in series_per_group[bar.group]:
            series_per_group[bar.group].append(bar.series)
    width = 0.8 / max((len(s) for s in series_per_group.values()), default=1)
    tallest = max((bar.high or bar.value or 0) for bar in panel.bars) if panel.bars else 1
    for bar in panel.bars:
        members = series_per_group[bar.group]
        x = bar.group - 0.4 + width * (members.index(bar.series) + 0.5)
        if bar.value is None:
            y = 1 if panel.log else tallest * 0.02
            axis.annotate(bar.note, (x, y), ha="center", va="bottom", color=bar.series.color)
            continue
        drawn = axis.bar(
            x,
            bar.value,
            width * 0.95,
            color=bar.series.color if not bar.series.hatch else "white",
            edgecolor=bar.series.color,
            hatch=bar.series.hatch,
            linewidth=1,
        )
        handles.setdefault(bar.series.name, drawn)
        if bar.low is not None and bar.high is not None:
            axis.errorbar(
                x,
                bar.value,
                yerr=[[bar.value - bar.low], [bar.high - bar.value]],
                fmt="none",
                ecolor="black",
                elinewidth=1,
                capsize=3,
            )
        if bar.note:
            axis.annotate(
                bar.note,
                (x, bar.high or bar.value),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    for group, y, label in panel.marks:
        budget = label.startswith("budget")
        line = axis.hlines(
            y,
            group - 0.45,
            group + 0.45,
            colors="#d62728" if budget else "#555555",
            linestyles="dashed" if budget else "dotted",
            linewidth=1.5,
        )
        handles.setdefault(label, line)
    axis.set_xticks(range(len(panel.groups)), panel.groups, rotation=15, ha="right", fontsize=8)
    axis.set_xlim(-0.6, len(panel.groups) - 0.4)
    if panel.log:
        axis.set_yscale("log")
    axis.set_ylabel(panel.ylabel)
    axis.set_title(panel.title, fontsize=10)
    axis.grid(axis="y", alpha=0.3)
