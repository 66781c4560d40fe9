"""How much of each measurement to take: the full run for the report, a tiny one for tests."""

from __future__ import annotations

from dataclasses import dataclass

from .storage import CASES as STORAGE_CASES
from .storage import PLACEMENT_SIZES


@dataclass(frozen=True)
class Plan:
    cpu_rounds: int = 25
    cpu_chunk: int = 40
    wire_rounds: int = 15
    wire_chunk: int = 120
    production_rounds: int = 20
    production_chunk: int = 30
    latency_calls: int = 500
    import_runs: int = 15
    layer_import_runs: int = 15
    lambda_cold_runs: int = 9
    memory_calls: int = 300
    memory_runs: int = 3
    build_layer_requirements: bool = True
    storage_cases: tuple[tuple[str, int], ...] = STORAGE_CASES
    placement_sizes: tuple[int, ...] = PLACEMENT_SIZES
    placement_calls: int = 60
    contention_callers: int = 64
    contention_trials: int = 5
    contention_work_seconds: float = 0.2
    hot_key_callers: int = 64
    hot_key_few_callers: int = 16
    hot_key_trials: int = 5
    hot_key_work_seconds: tuple[float, ...] = (0.2, 1.0, 5.0)
    throughput_threads: tuple[int, ...] = (1, 4, 16)
    throughput_seconds: float = 1.5
    throughput_repeats: int = 3
    fingerprint_bytes: int = 6 * 1024 * 1024
    fingerprint_rounds: int = 3

    @classmethod
    def smoke(cls) -> Plan:
        """Every code path once, in seconds: for the test suite, numbers meaningless."""
        return cls(
            cpu_rounds=2,
            cpu_chunk=3,
            wire_rounds=1,
            wire_chunk=3,
            production_rounds=1,
            production_chunk=2,
            latency_calls=3,
            import_runs=1,
            layer_import_runs=1,
            lambda_cold_runs=1,
            memory_calls=2,
            memory_runs=1,
            build_layer_requirements=False,
            storage_cases=(("repetitive", 1024), ("random", 600 * 1024)),
            placement_sizes=(2048,),
            placement_calls=2,
            contention_callers=4,
            contention_trials=1,
            contention_work_seconds=0.05,
            hot_key_callers=4,
            hot_key_few_callers=2,
            hot_key_trials=1,
            hot_key_work_seconds=(0.05,),
            throughput_threads=(1, 2),
            throughput_seconds=0.1,
            throughput_repeats=1,
            fingerprint_bytes=64 * 1024,
            fingerprint_rounds=1,
        )
