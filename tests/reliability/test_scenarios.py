"""A few trials of every reliability scenario (`RELIABILITY_TRIALS`, default 3); each trial
counts the handler's effect and the time its key stayed locked with nothing running."""

from __future__ import annotations

import os

import pytest

from tests.reliability.scenarios import SCENARIOS, run_trial

TRIALS = int(os.environ.get("RELIABILITY_TRIALS", "3"))
"""`make reliability` runs 100 of each and publishes them (benchmarks/reliability.py)."""


@pytest.mark.dynamodb_local
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str, dynamodb_local_endpoint: str) -> None:
    scenario = SCENARIOS[name]
    # A hostile body is the same input every time, and each trial spawns a process: one will do.
    trials = 1 if scenario.isolated and "RELIABILITY_TRIALS" not in os.environ else TRIALS
    for number in range(1, trials + 1):
        _, problems = run_trial(scenario, dynamodb_local_endpoint)
        assert problems == [], f"{scenario.what}, trial {number}: {problems}"
