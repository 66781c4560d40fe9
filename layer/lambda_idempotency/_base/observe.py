"""What an outcome reports: its log line (`emit`), itself and the key hash on the current
trace span, and, when the decorator asks for them, a metric (`_base.metrics`).

Tracing needs no option: the X-Ray SDK (what Powertools' `Tracer` drives) or OpenTelemetry is
used only when the function has already imported it, found in `sys.modules`, so a function
without either pays two dictionary look-ups an outcome and imports nothing.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from .metrics import MetricsOption

    Observer: TypeAlias = Callable[[str, str | None, dict[str, Any]], None]

XRAY_MODULE = "aws_xray_sdk.core"
OTEL_MODULE = "opentelemetry.trace"
OTEL_CONTEXT_MODULE = "opentelemetry.context"
XRAY_OUTCOME, XRAY_KEY_HASH = "idempotency_outcome", "idempotency_key_hash"
"""X-Ray annotation keys: letters, digits and underscores only, or X-Ray drops them."""
OTEL_OUTCOME, OTEL_KEY_HASH = "idempotency.outcome", "idempotency.key_hash"

logger = logging.getLogger("lambda_idempotency")


def emit(level: int, outcome: str, key_hash: str | None, **fields: Any) -> None:
    """One structured log line: a JSON object per outcome, with the hashed key, never the
    raw one."""
    if not logger.isEnabledFor(level):
        return
    record = {"idempotency": outcome, "key_hash": key_hash, **fields}
    logger.log(level, json.dumps(record, default=str), extra={"idempotency": record})


def observer(metrics: MetricsOption, namespace: str) -> Observer:
    """The hook one decorator's engine calls with each outcome. `metrics` is the decorator's
    option; when it is off, the metrics module is not even imported."""
    if metrics is None or metrics is False:
        return annotate_trace
    from .metrics import metric_sink

    count = metric_sink(metrics, namespace)

    def observe(outcome: str, key_hash: str | None, fields: dict[str, Any]) -> None:
        annotate_trace(outcome, key_hash, fields)
        try:
            count(outcome, fields)
        except Exception as exc:  # a metric never changes what the caller gets
            emit(logging.WARNING, "metric_failed", key_hash, error=type(exc).__name__)

    return observe


def annotate_trace(outcome: str, key_hash: str | None, fields: dict[str, Any]) -> None:
    """The outcome (the last one wins: a first run ends `executed`) and the key hash, never
    the raw key, on the open X-Ray subsegment and the current OpenTelemetry span."""
    modules = sys.modules
    xray = modules.get(XRAY_MODULE)
    otel = modules.get(OTEL_MODULE)
    if xray is None and otel is None:
        return
    try:
        if xray is not None:
            _annotate_xray(xray, outcome, key_hash)
        if otel is not None:
            _annotate_otel(otel, outcome, key_hash)
    except Exception as exc:  # a trace never changes what the caller gets
        emit(logging.WARNING, "trace_failed", key_hash, error=type(exc).__name__)


_pinned_xray_entity: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "lambda_idempotency_xray_entity", default=None
)
"""The X-Ray entity open where a coroutine was called, for the steps it runs in worker threads:
the X-Ray SDK keeps its entities per thread, so a worker thread sees none of its own."""


def pin_xray_entity() -> contextvars.Token[Any] | None:
    """On the caller's thread, before its steps go to worker threads (which copy the context):
    the X-Ray entity open here, if any, for their outcomes. None when there is nothing to pin."""
    xray = sys.modules.get(XRAY_MODULE)
    if xray is None:
        return None
    try:
        entity = _open_xray_entity(xray)
    except Exception:  # a trace never changes what the caller gets
        return None
    return None if entity is None else _pinned_xray_entity.set(entity)


def unpin_xray_entity(token: contextvars.Token[Any] | None) -> None:
    if token is not None:
        _pinned_xray_entity.reset(token)


def _open_xray_entity(xray: Any) -> Any:
    """Only an entity that is open: asking the recorder with none open logs (or raises)
    "cannot find the current segment". Lambda's own segment (the facade) refuses
    annotations, so in Lambda they go on a subsegment, such as Powertools' `## handler`."""
    recorder = xray.xray_recorder
    if not getattr(getattr(recorder.context, "_local", None), "entities", None):
        return None
    entity = recorder.get_trace_entity()
    if entity is None or type(entity).__name__ == "FacadeSegment":
        return None
    return entity


def _annotate_xray(xray: Any, outcome: str, key_hash: str | None) -> None:
    entity = _pinned_xray_entity.get() or _open_xray_entity(xray)
    if entity is None:
        return
    entity.put_annotation(XRAY_OUTCOME, outcome)
    if key_hash is not None:
        entity.put_annotation(XRAY_KEY_HASH, key_hash)


def _annotate_otel(trace: Any, outcome: str, key_hash: str | None) -> None:
    context = sys.modules.get(OTEL_CONTEXT_MODULE)
    if context is not None and not context.get_current():
        return  # nothing in OpenTelemetry's context, so no span: half the calls of asking
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute(OTEL_OUTCOME, outcome)
    if key_hash is not None:
        span.set_attribute(OTEL_KEY_HASH, key_hash)
