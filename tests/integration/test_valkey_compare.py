"""`python -m benchmarks.valkey_compare` at a tiny size, so the comparison cannot rot: both
libraries run every scenario and race on a real Valkey server, and the section renders.
No timing is asserted; the counts asserted are what each library's protocol sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import valkey_compare
from lambda_idempotency._dev.valkey_local import ValkeyServer

pytestmark = [pytest.mark.valkey, pytest.mark.benchmark_suite]
# In `make bench-smoke` (its own process), not `make test`: inside the whole suite its takeover
# race hung past the time limit twice (Powertools' side, a caller held in the body), while
# alone it ran in 8 s every time; the cause is not found yet.


def test_the_comparison_runs_both_libraries_and_counts_their_effects(
    valkey_node: ValkeyServer, tmp_path: Path
) -> None:
    results = valkey_compare.run(valkey_node.url, calls=2, rounds=1, chunk=1, callers=3, trials=1)

    for slug in valkey_compare.SCENARIOS:
        for contender in valkey_compare.CPU_CONTENDERS:
            for mode in valkey_compare.MODES:
                assert results.cpu[slug, contender, mode] > 0
    trips = {key: sum(sent.values()) / results.calls for key, sent in results.trips.items()}
    assert trips["replay", "ours"] == 1  # one claim script answers with the record
    assert trips["replay", "powertools"] >= 2  # SET NX refused, then GET
    assert trips["warm_cache", "ours"] == trips["warm_cache", "powertools"] == 0
    for contender in valkey_compare.CONTENDERS:
        late = results.late[contender]
        assert late.effects == 2  # the stalled holder's body and its taker's both ran
        assert late.effects_after == 0  # the third call replays
        race = results.races[contender]
        assert len(race.effects) == 1
        assert sum(race.outcomes.values()) == 3
        assert results.second[contender].effects >= 2  # both stalled holders ran
    # ours fences the late completion; Powertools' unconditional SET overwrites the taker's
    assert results.late["ours"].afterwards == "result of taker"
    assert results.late["powertools"].afterwards == "result of holder"

    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\n## Throughput\n\nkept\n", encoding="utf-8")
    section = valkey_compare.markdown(results, [("CPU", "test")], "Valkey test")
    valkey_compare.write_section(report, section)
    valkey_compare.write_section(report, section)  # replaced, not appended twice
    text = report.read_text(encoding="utf-8")
    assert text.count(f"## {valkey_compare.TITLE}") == 1
    assert "## Throughput\n\nkept\n" in text
