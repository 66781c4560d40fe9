"""Any value a user may pass as a duration (a lease, an extension, a heartbeat's period):
either refused with ConfigurationError where it is given, or honoured as a finite duration
within what a lease can be. Never another exception, never later, in a call."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lambda_idempotency import ConfigurationError, idempotent
from lambda_idempotency._protocol.execution import MAX_EXTENSION_SECONDS, Execution

DURATIONS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.just(10**5000),  # past the digit limit: not even repr() can show it
    st.integers(max_value=-(10**300)),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.fractions(),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.complex_numbers(),
)


def honoured(value: Any, *, least: float = 0.0) -> bool:
    return (
        type(value) in (int, float)
        and 0 < value <= MAX_EXTENSION_SECONDS
        and math.isfinite(value)
        and value >= least
    )


@settings(max_examples=300)  # cheap: no store
@given(DURATIONS)
def test_extend_lease_refuses_or_honours_any_value(seconds: Any) -> None:
    execution = Execution("pk", "owner", 0)
    asked: list[float] = []
    execution._extender = lambda value: asked.append(value) or 1
    try:
        execution.extend_lease(seconds)
    except ConfigurationError:
        assert not asked and not honoured(seconds)
    else:
        assert asked == [seconds] and honoured(seconds)


@settings(max_examples=300)
@given(DURATIONS, DURATIONS)
def test_a_heartbeat_refuses_any_value_it_cannot_honour_before_it_beats(
    every: Any, extend_by: Any
) -> None:
    execution = Execution("pk", "owner", None)
    try:
        with execution.heartbeat(every=every, extend_by=extend_by):
            pass
    except ConfigurationError:
        assert not (honoured(every, least=0.05) and honoured(extend_by) and every < extend_by)
    else:
        assert honoured(every, least=0.05) and honoured(extend_by) and every < extend_by


@given(DURATIONS)
def test_lease_seconds_is_refused_at_decoration_or_honoured(lease_seconds: Any) -> None:
    try:

        @idempotent(key="id", lease_seconds=lease_seconds, namespace="values")
        def handler(event: Any, context: Any) -> None:
            return None

    except ConfigurationError:
        assert not honoured(lease_seconds)
    else:
        assert lease_seconds is None or honoured(lease_seconds)
        ms = handler.idempotency._lease_ms(None)  # type: ignore[attr-defined]
        assert 0 <= ms <= MAX_EXTENSION_SECONDS * 1000
