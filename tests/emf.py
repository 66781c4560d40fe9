"""CloudWatch's rules for an Embedded Metric Format (EMF) document, written from its
specification ("Specification: Embedded metric format", CloudWatch User Guide) and the API
reference it points to for names and values (Dimension, MetricDatum, PutMetricData's
Namespace). CloudWatch drops a line that breaks any of them without a word, so a test
checks every line a function writes against all of them, not against one example.

`problems(line)` is empty for a line CloudWatch keeps; else it says what breaks which rule.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

MAX_EVENT_BYTES = 256 * 1024
"""A log event's size limit (the specification: the same limits as any CloudWatch Logs
event); the smaller, older figure, so a line that passes here passes everywhere."""
MAX_DIMENSIONS = 30
"""Dimension keys in one DimensionSet, and in one metric (Dimension, MetricDatum)."""
MAX_METRICS = 100
"""MetricDefinitions in one directive; values in one metric's array."""
MAX_NAME = 255
"""Namespace, metric name, dimension name: 1 to 255 characters."""
MAX_DIMENSION_VALUE = 1024
UNITS = frozenset(
    {
        "Seconds",
        "Microseconds",
        "Milliseconds",
        "Bytes",
        "Kilobytes",
        "Megabytes",
        "Gigabytes",
        "Terabytes",
        "Bits",
        "Kilobits",
        "Megabits",
        "Gigabits",
        "Terabits",
        "Percent",
        "Count",
        "Bytes/Second",
        "Kilobytes/Second",
        "Megabytes/Second",
        "Gigabytes/Second",
        "Terabytes/Second",
        "Bits/Second",
        "Kilobits/Second",
        "Megabits/Second",
        "Gigabits/Second",
        "Terabits/Second",
        "Count/Second",
        "None",
    }
)
NAMESPACE = re.compile(r"[0-9A-Za-z.\-_/#: ]{1,255}")
"""PutMetricData's namespace characters: alphanumerics, . - _ / # : and space."""
TIMESTAMP_SLACK_MS = 3600 * 1000
"""A timestamp must be milliseconds since the epoch: one in seconds (or in microseconds)
is decades away from now."""


def problems(line: str) -> list[str]:
    """What in `line` breaks CloudWatch's rules for an EMF document (empty: it is kept)."""
    found: list[str] = []
    if len(line.encode("utf-8", "surrogatepass")) > MAX_EVENT_BYTES:
        found.append(f"the event is over {MAX_EVENT_BYTES} bytes")
    try:
        root = json.loads(line, parse_constant=_no_constant)
    except ValueError as exc:
        return [*found, f"not one JSON value with nothing around it: {exc}"]
    if not isinstance(root, dict):
        return [*found, "the root is no JSON object"]
    metadata = root.get("_aws")
    if not isinstance(metadata, dict):
        return [*found, "no _aws object"]
    timestamp = metadata.get("Timestamp")
    if type(timestamp) is not int:
        found.append(f"_aws.Timestamp is no integer: {timestamp!r}")
    elif abs(timestamp - time.time() * 1000) > TIMESTAMP_SLACK_MS:
        found.append(f"_aws.Timestamp is not milliseconds since the epoch, now: {timestamp}")
    directives = metadata.get("CloudWatchMetrics")
    if not isinstance(directives, list) or not directives:
        return [*found, "_aws.CloudWatchMetrics is no non-empty array"]
    for directive in directives:
        found += _directive_problems(directive, root)
    return found


def _directive_problems(directive: Any, root: dict[str, Any]) -> list[str]:
    if not isinstance(directive, dict):
        return ["a MetricDirective is no object"]
    found = _unknown(directive, {"Namespace", "Dimensions", "Metrics"}, "MetricDirective")
    namespace = directive.get("Namespace")
    if not isinstance(namespace, str) or not _is_namespace(namespace):
        found.append(f"Namespace is no CloudWatch namespace: {namespace!r}")
    dimension_sets = directive.get("Dimensions")
    if not isinstance(dimension_sets, list) or not dimension_sets:
        found.append("Dimensions is no non-empty array of DimensionSets")
        dimension_sets = []
    keys: set[str] = set()
    for dimension_set in dimension_sets:
        if not isinstance(dimension_set, list) or len(dimension_set) > MAX_DIMENSIONS:
            found.append(f"a DimensionSet is no array of at most {MAX_DIMENSIONS} keys")
            continue
        if len(set(map(str, dimension_set))) != len(dimension_set):
            found.append(f"a DimensionSet names a key twice: {dimension_set!r}")
        for key in dimension_set:
            keys.add(str(key))
            found += _dimension_problems(key, root)
    if len(keys) > MAX_DIMENSIONS:
        found.append(f"{len(keys)} dimensions on one metric: more than {MAX_DIMENSIONS}")
    metrics = directive.get("Metrics")
    if not isinstance(metrics, list) or not 1 <= len(metrics) <= MAX_METRICS:
        return [*found, f"Metrics is no array of 1 to {MAX_METRICS} MetricDefinitions"]
    for definition in metrics:
        found += _metric_problems(definition, root, keys)
    return found


def _dimension_problems(key: Any, root: dict[str, Any]) -> list[str]:
    if not isinstance(key, str) or not _is_dimension_name(key):
        return [f"a dimension name breaks the rules: {key!r}"]
    if key not in root:
        return [f"dimension {key!r} has no member on the root"]
    value = root[key]
    if not isinstance(value, str):
        return [f"dimension {key!r} has no string value: {value!r}"]
    if not 1 <= len(value) <= MAX_DIMENSION_VALUE:
        return [f"dimension {key!r}: a value of {len(value)} characters (1 to 1,024)"]
    if not _ascii_without_controls(value) or value.isspace():
        return [f"dimension {key!r}: a value not of ASCII, or all whitespace: {value[:80]!r}"]
    return []


def _metric_problems(definition: Any, root: dict[str, Any], dimensions: set[str]) -> list[str]:
    if not isinstance(definition, dict):
        return ["a MetricDefinition is no object"]
    found = _unknown(definition, {"Name", "Unit", "StorageResolution"}, "MetricDefinition")
    name = definition.get("Name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or name.isspace():
        return [*found, f"a metric name breaks the rules: {name!r}"]
    if name in dimensions:
        found.append(f"{name!r} is both a metric and a dimension")
    unit = definition.get("Unit", "None")
    if unit not in UNITS:
        found.append(f"metric {name!r}: unit {unit!r} is none of CloudWatch's")
    if definition.get("StorageResolution", 60) not in (1, 60):
        found.append(f"metric {name!r}: StorageResolution is neither 1 nor 60")
    if name not in root:
        return [*found, f"metric {name!r} has no member on the root"]
    value = root[name]
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not 1 <= len(value) <= MAX_METRICS:
        found.append(f"metric {name!r}: {len(value)} values (1 to {MAX_METRICS})")
    if not all(_is_number(item) for item in values):
        found.append(f"metric {name!r}: a value that is no finite number: {value!r}")
    return found


def _unknown(member: dict[str, Any], known: set[str], what: str) -> list[str]:
    extra = set(member) - known
    return [f"{what} has members the specification does not define: {sorted(extra)}"] * bool(extra)


def _is_namespace(text: str) -> bool:
    return (
        NAMESPACE.fullmatch(text) is not None
        and not text.isspace()
        and not text.startswith((":", "AWS/"))
    )


def _is_dimension_name(text: str) -> bool:
    return (
        1 <= len(text) <= MAX_NAME
        and _ascii_without_controls(text)
        and not text.isspace()
        and not text.startswith(":")
    )


def _ascii_without_controls(text: str) -> bool:
    return all(0x20 <= ord(character) < 0x7F for character in text)


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON")
