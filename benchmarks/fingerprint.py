"""CPU to fingerprint a request body: a realistic API Gateway event, and Lambda's largest
body (6 MB) in the shapes that cost the most, each also at an eighth of the size, so the
report shows the cost grows in proportion to the size (DESIGN.md, Failure promises)."""

from __future__ import annotations

import json
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lambda_idempotency import PayloadInvalidError
from lambda_idempotency._base.keys import payload_hash
from lambda_idempotency._http import HttpRequest

from .report import Budget, Section, Table, duration, kilobytes

EVENTS = Path(__file__).resolve().parents[1] / "tests" / "events"
MEGABYTE = 1024 * 1024
LINEAR_WITHIN = 4.0
"""The per-byte cost at full size may be at most this multiple of the cost at an eighth: a
cost quadratic in the size would show 8x; a linear one shows 1x plus what a 6 MB working
set costs in cache misses (json.loads of one object with 270,000 keys alone shows ~2x)."""
TIMER_FLOOR = 0.02
"""Bodies answered in less CPU than this at full size are too quick to judge growth by."""


def _repeat(item: str, size: int, open_: str = "[", close: str = "]") -> str:
    return open_ + ",".join([item] * max(1, (size - 2) // (len(item) + 1))) + close


def _nested_objects(size: int) -> str:
    depth = 900  # as deep as the parser reads on Lambda's stack, repeated to fill the body
    return _repeat('{"a":' * depth + "1" + "}" * depth, size)


SHAPES: dict[str, Callable[[int], str]] = {
    "deep: one array nested to the whole size": lambda size: "[" * (size // 2) + "]" * (size // 2),
    "deep: objects nested 900 levels, repeated": _nested_objects,
    "wide: small integers": lambda size: _repeat("1234567", size),
    "many keys: one object": lambda size: (
        "{" + ",".join(f'"k{index:09d}":{index}' for index in range(size // 22)) + "}"
    ),
    "long number: one of the whole size": lambda size: "[" + "7" * (size - 2) + "]",
    "huge exponents: 1e999999": lambda size: _repeat("1e999999", size),
    "decimals beyond a float": lambda size: _repeat("0.1000000000000000000001", size),
    "strings: one of the whole size": lambda size: json.dumps("x" * (size - 2)),
}


@dataclass(frozen=True)
class Measured:
    shape: str
    size: int
    seconds: float
    outcome: str


def _fingerprint(event: dict[str, Any]) -> str:
    try:
        payload_hash(HttpRequest.from_event(event).fingerprint())
    except PayloadInvalidError:
        return "400 problem"
    return "fingerprinted"


def _event(body: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "apigateway-http-api-proxy.json").read_text())
    event["headers"] = {"content-type": "application/json", "idempotency-key": "k-1"}
    event["body"] = body
    event["isBase64Encoded"] = False
    return event


def measure(size: int, rounds: int) -> list[Measured]:
    """Each shape at `size` and at an eighth of it: the least CPU of `rounds` runs."""
    results = []
    for shape, build in SHAPES.items():
        for each in (size // 8, size):
            event = _event(build(each))
            best, outcome = float("inf"), ""
            for _ in range(rounds):
                started = time.process_time()
                outcome = _fingerprint(event)
                best = min(best, time.process_time() - started)
            results.append(Measured(shape, len(event["body"]), best, outcome))
    return results


def realistic(rounds: int) -> tuple[int, float]:
    """`payload_hash` of a whole REST API event (the default `payload="@"` of `idempotent`):
    its size and the least CPU per call."""
    event = json.loads((EVENTS / "apigateway-aws-proxy.json").read_text())
    timer = timeit.Timer(lambda: payload_hash(event))
    number, _ = timer.autorange()
    best = min(timer.repeat(repeat=max(3, rounds), number=number)) / number
    return len(json.dumps(event)), best


def section(results: list[Measured], event: tuple[int, float]) -> Section:
    rows = []
    worst_ratio, worst_full = 0.0, 0.0
    by_shape: dict[str, list[Measured]] = {}
    for item in results:
        by_shape.setdefault(item.shape, []).append(item)
    for shape, (small, full) in by_shape.items():
        per_byte_small = small.seconds / small.size
        per_byte_full = full.seconds / full.size
        growth = per_byte_full / per_byte_small if per_byte_small > 0 else 1.0
        if full.seconds >= TIMER_FLOOR:
            worst_ratio = max(worst_ratio, growth)
        worst_full = max(worst_full, full.seconds)
        rows.append(
            [
                shape,
                kilobytes(full.size),
                duration(full.seconds),
                duration(full.seconds / full.size * MEGABYTE),
                duration(small.seconds),
                f"{growth:.2f}x",
                full.outcome,
            ]
        )
    size, seconds = event
    return Section(
        title="Fingerprinting hostile bodies",
        method=(
            "CPU (`time.process_time`, least of the rounds) to fingerprint the body of an "
            "`idempotent_http` request, parsing included, for the shapes that cost the most, "
            "each at Lambda's 6 MB payload limit and at an eighth of it; growth is the "
            "per-byte cost at full size over that at an eighth (1.00x: exactly linear). "
            f"The first line is the everyday case: `payload_hash` of a {kilobytes(size)} "
            "API Gateway REST event, the default `payload` of `idempotent`."
        ),
        tables=[
            Table(
                ["body", "size", "CPU", "per MB", "CPU at 1/8 size", "growth", "outcome"],
                [
                    [
                        "API Gateway REST event (`payload_hash`)",
                        kilobytes(size),
                        duration(seconds),
                        "",
                        "",
                        "",
                        "fingerprinted",
                    ],
                    *rows,
                ],
            )
        ],
        budgets=[
            Budget(
                "hostile bodies cost CPU linear in their size",
                f"per-byte cost at 6 MB within {LINEAR_WITHIN:.0f}x of that at 1/8 "
                f"(quadratic: 8x), every shape taking {duration(TIMER_FLOOR)} or more",
                f"worst growth {worst_ratio:.2f}x; slowest 6 MB body {duration(worst_full)}",
                worst_ratio <= LINEAR_WITHIN,
            )
        ],
    )
