"""Every fault in tests/planted_faults.py still finds the source lines it replaces: a fault
whose lines were rewritten plants nothing, and its row in docs/contributing/testing.md would
claim a catch that no run can repeat (four had gone stale this way after the code moved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.planted_faults import PLANTS, L

LAYER = Path(__file__).resolve().parents[2] / "layer"


@pytest.mark.parametrize("plant", PLANTS, ids=[plant[0] for plant in PLANTS])
def test_the_planted_fault_finds_the_lines_it_replaces(plant: tuple) -> None:  # type: ignore[type-arg]
    _name, module, old, new, _tests, *more = plant
    for path, lines, replacement in [(module, old, new), *more]:
        source = (LAYER / L / path).read_text(encoding="utf-8")
        assert source.count(lines) == 1, f"{path}: the lines to replace are gone or repeated"
        assert replacement != lines
