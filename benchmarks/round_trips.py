"""Round trips per scenario: the requests each library sent to DynamoDB Local, as counted in
botocore's `before-send` hook while the CPU section recorded its scenarios."""

from __future__ import annotations

from .contenders import OURS, POWERTOOLS
from .cpu import Recorded
from .report import Budget, Section, Table
from .scenarios import SCENARIOS

DESIGNED = {"first_run": 2, "replay": 1, "in_flight": 1, "handler_error": 2, "warm_cache": 0}
"""Round trips the design promises per scenario (DESIGN.md, The protocol)."""


def _operations(requests: list[str]) -> str:
    return ", ".join(requests) if requests else "none"


def section(recorded: list[Recorded]) -> Section:
    requests = {(item.scenario.slug, item.contender.slug): item.requests for item in recorded}
    rows = []
    as_designed = True
    chart = {"scenarios": []}
    for scenario in SCENARIOS:
        ours = requests[scenario.slug, OURS.slug]
        theirs = requests[scenario.slug, POWERTOOLS.slug]
        designed = DESIGNED[scenario.slug]
        ok = len(ours) == designed and len(ours) <= len(theirs)
        as_designed &= ok
        rows.append(
            [
                scenario.title,
                f"{len(ours)} ({_operations(ours)})",
                f"{len(theirs)} ({_operations(theirs)})",
                str(designed),
                "yes" if ok else "no",
            ]
        )
        chart["scenarios"].append(
            {"title": scenario.title, "ours": len(ours), "powertools": len(theirs)}
        )
    ours_counts = "/".join(str(len(requests[s.slug, OURS.slug])) for s in SCENARIOS)
    theirs_counts = "/".join(str(len(requests[s.slug, POWERTOOLS.slug])) for s in SCENARIOS)
    designed_counts = "/".join(str(DESIGNED[s.slug]) for s in SCENARIOS)
    return Section(
        title="Round trips",
        method=(
            "Requests sent per invocation, counted in botocore's `before-send` hook while each "
            "scenario ran against DynamoDB Local (retries would count too; there were none)."
        ),
        tables=[
            Table(
                ["scenario", "lambda-idempotency", "Powertools", "designed", "as designed, ≤ PT"],
                rows,
            )
        ],
        budgets=[
            Budget(
                "round trips per scenario (first run / replay / in flight / error / warm cache)",
                f"as designed ({designed_counts}) and never more than Powertools",
                f"{ours_counts} vs Powertools {theirs_counts}",
                as_designed,
            )
        ],
        chart=chart,
    )
