"""Hypothesis budgets: small and repeatable in CI, large for a nightly-style run.

    HYPOTHESIS_PROFILE=nightly .venv/bin/python -m pytest tests/integration/test_protocol_model.py

CI draws the same examples every run (derandomized), so a red build is a real regression and
not a newly found example; the nightly profile explores at random. No example database: it
would be a directory in the working tree.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=500,
    stateful_step_count=40,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
