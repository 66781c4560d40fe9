"""A count per outcome, in CloudWatch Embedded Metric Format (EMF). Imported only by a
decorator given `metrics=`: a function without metrics never loads this module.

Two sinks: the user's Powertools `Metrics` (our counts join its namespace, its dimensions
and its flush by `log_metrics`), or EMF lines of our own, one per outcome on stdout, where
Lambda hands them to CloudWatch. One line per outcome rather than one per invocation: there
is no state to carry or flush, and the line is out before a timeout or a crash can lose it
(the anomalies an alarm watches often come just before one). A first run, a replay or a
refusal is one outcome, so one line; a batch writes one per record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:  # types only: defining a Protocol class would cost ~0.1 ms at import
    from typing import Protocol, TypeAlias

    class AddsMetrics(Protocol):
        """What `metrics=` needs of a Powertools `Metrics` (or anything alike)."""

        def add_metric(self, name: str, unit: str, value: float) -> Any: ...

    MetricsOption: TypeAlias = bool | str | AddsMetrics | None
    """`metrics=`: off (None, False), our EMF lines (True, or their CloudWatch namespace),
    or through the user's Powertools `Metrics`."""

DEFAULT_NAMESPACE = "LambdaIdempotency"
FUNCTION_DIMENSION = "function_name"
UNIT = "Count"
DIMENSION_VALUE_MAX = 1024
"""CloudWatch's longest dimension value; see `dimension_value`."""
HASHED_TAIL = 32
"""Hex digits of sha256 that end a value cut to fit (128 bits: distinct texts, distinct values)."""
NOT_COUNTED = frozenset({"claimed"})
"""A claim always ends as another outcome (`executed`, `released`, a failure), counted."""

MetricSink = Callable[[str, dict[str, Any]], None]


def metric_name(outcome: str, fields: dict[str, Any]) -> str | None:
    """The metric an outcome counts in: its log name, except that a replay from the warm
    container's cache is `replayed_from_cache` (no DynamoDB call) beside `replayed`."""
    if outcome in NOT_COUNTED:
        return None
    if outcome == "replayed" and fields.get("source") == "cache":
        return "replayed_from_cache"
    return outcome


def metric_sink(metrics: MetricsOption, namespace: str) -> MetricSink:
    """The sink for a decorator's `metrics=`: True (our EMF lines, namespace
    "LambdaIdempotency"), a CloudWatch namespace, or a Powertools `Metrics`."""
    if metrics is True:
        return EmfLines(DEFAULT_NAMESPACE, namespace)
    if isinstance(metrics, str):
        if not _is_namespace(metrics):
            raise ConfigurationError(
                f"metrics= is no CloudWatch namespace: {metrics!r} (up to 255 of A-Z a-z 0-9 "
                "and . - _ / # : space, not starting with ':' or 'AWS/')"
            )
        return EmfLines(metrics, namespace)
    add_metric = getattr(metrics, "add_metric", None)
    if callable(add_metric):
        return ThroughMetrics(add_metric)
    raise ConfigurationError(
        "metrics= takes True, a CloudWatch namespace, or a Powertools Metrics instance, "
        f"not {metrics!r}"
    )


def _is_namespace(text: str) -> bool:
    """CloudWatch's rule: CloudWatch drops EMF lines whose namespace breaks it, silently,
    so it is checked at decoration."""
    return (
        re.fullmatch(r"[0-9A-Za-z.\-_/#: ]{1,255}", text) is not None
        and not text.isspace()
        and not text.startswith((":", "AWS/"))
    )


class ThroughMetrics:
    """Counts added to the user's Powertools `Metrics` (anything with its `add_metric`):
    they leave with the user's own metrics when its `log_metrics` flushes."""

    def __init__(self, add_metric: Callable[..., Any]) -> None:
        self._add_metric = add_metric

    def __call__(self, outcome: str, fields: dict[str, Any]) -> None:
        name = metric_name(outcome, fields)
        if name is not None:
            self._add_metric(name=name, unit=UNIT, value=1)


class EmfLines:
    """One EMF line per outcome on stdout. Everything but the timestamp is the same for
    every line of one metric, so it is serialized once per metric name and reused."""

    def __init__(self, cloudwatch_namespace: str, idempotency_namespace: str) -> None:
        self.cloudwatch_namespace = cloudwatch_namespace
        self.idempotency_namespace = idempotency_namespace
        # Lambda sets it before the function's module is imported, so before any decorator.
        function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or idempotency_namespace
        self.function_name = dimension_value(function_name)
        self.namespace_value = dimension_value(idempotency_namespace)
        self._tails: dict[str, str] = {}

    def __call__(self, outcome: str, fields: dict[str, Any]) -> None:
        name = metric_name(outcome, fields)
        if name is None:
            return
        tail = self._tails.get(name) or self._tail(name)
        stdout = sys.stdout
        stdout.write(f'{{"_aws":{{"Timestamp":{time.time_ns() // 1_000_000},{tail}\n')
        stdout.flush()  # out now: a timeout or a crash after it must not lose the line

    def _tail(self, name: str) -> str:
        directive = {
            "Namespace": self.cloudwatch_namespace,
            "Dimensions": [[FUNCTION_DIMENSION]],
            "Metrics": [{"Name": name, "Unit": UNIT}],
        }
        members = {
            FUNCTION_DIMENSION: self.function_name,
            "idempotency_namespace": self.namespace_value,
            name: 1,
        }
        compact = (",", ":")
        tail = (
            f'"CloudWatchMetrics":[{json.dumps(directive, separators=compact)}]}},'
            + json.dumps(members, separators=compact)[1:]
        )
        self._tails[name] = tail
        return tail


def dimension_value(text: str) -> str:
    """`text` as a CloudWatch dimension value, which must be 1 to 1,024 ASCII characters, no
    control character, not all whitespace: CloudWatch drops a line that breaks this without
    a word. A text that is one already, with no backslash, is kept as it is (a Lambda
    function name always is). Any other gets the same value every time, told apart from
    every kept text and every other text: a backslash, then the text with its backslashes,
    control and non-ASCII characters written as Python escapes (`\\caf\\xe9` for café,
    `\\` for an empty text); cut to fit and ended with `\\#` and 32 hex digits of the
    sha256 of the whole text when that passes 1,024 characters."""
    if (
        len(text) <= DIMENSION_VALUE_MAX
        and text.isascii()
        and text.isprintable()
        and not text.isspace()
        and text != ""
        and "\\" not in text
    ):
        return text
    escaped = "\\" + text.encode("unicode_escape").decode("ascii")
    if len(escaped) <= DIMENSION_VALUE_MAX:
        return escaped
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASHED_TAIL]
    return f"{escaped[: DIMENSION_VALUE_MAX - HASHED_TAIL - 2]}\\#{digest}"
