"""Fixtures the integration tests share beyond tests/conftest.py."""

from tests.long_work import runner_for

__all__ = ["runner_for"]
