"""Metrics CloudWatch keeps: every EMF line the library writes, in every environment (on
Lambda or off it, with any namespace a decorator can have), passes CloudWatch's rules as
`tests.emf` writes them from the specification; so does every line a Powertools `Metrics`
flushes with our counts in it."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import pathlib
import re
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from aws_lambda_powertools import Metrics
from hypothesis import example, given
from hypothesis import strategies as st

import lambda_idempotency
from lambda_idempotency import DynamoDBStore, PayloadMismatchError, idempotent
from lambda_idempotency._base.metrics import dimension_value, metric_name, metric_sink
from tests import emf
from tests.conftest import FakeContext

PACKAGE = pathlib.Path(lambda_idempotency.__file__).parent
LAMBDA_NAME = "AWS_LAMBDA_FUNCTION_NAME"


def counted_outcomes() -> set[str]:
    """Every outcome the library counts: the first argument of each `_count(...)` call in
    its modules, a literal or a choice between literals (the test fails on anything else,
    so the set is complete)."""
    outcomes: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "_count":
                outcomes |= _literals(node.args[0], f"{path.name}:{node.lineno}")
    return outcomes


def _literals(node: ast.expr, where: str) -> set[str]:
    if isinstance(node, ast.IfExp):
        return _literals(node.body, where) | _literals(node.orelse, where)
    assert isinstance(node, ast.Constant), f"{where}: an outcome that is no literal"
    assert isinstance(node.value, str), where
    return {node.value}


OUTCOMES = sorted(counted_outcomes())


def test_the_outcomes_are_found_and_every_metric_name_is_valid() -> None:
    assert {"executed", "replayed", "released", "store_error", "key_invalid"} <= set(OUTCOMES)
    names = {metric_name(outcome, {}) for outcome in OUTCOMES}
    names.add(metric_name("replayed", {"source": "cache"}))
    for name in names - {None}:
        assert name is not None
        assert 1 <= len(name) <= emf.MAX_NAME
        assert re.fullmatch(r"[a-z_]+", name), name  # ASCII, no space, no control


# -- the validator itself: it refuses what CloudWatch refuses --------------------------------

SPEC_EXAMPLE = {
    "_aws": {
        "Timestamp": 0,
        "CloudWatchMetrics": [
            {
                "Namespace": "lambda-function-metrics",
                "Dimensions": [["functionVersion"]],
                "Metrics": [{"Name": "time", "Unit": "Milliseconds"}],
            }
        ],
    },
    "functionVersion": "$LATEST",
    "time": 100,
    "requestId": "989ffbf8-9ace-4817-a57c-e4dd734019ee",
}


def _spec_example(**changes: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(SPEC_EXAMPLE))
    document["_aws"]["Timestamp"] = int(emf.time.time() * 1000)
    directive = document["_aws"]["CloudWatchMetrics"][0]
    for where, value in changes.items():
        target = document["_aws"] if where == "Timestamp" else document
        if where in directive:
            target = directive
        target[where] = value
    return document


BROKEN = {
    "empty dimension value": _spec_example(functionVersion=""),
    "blank dimension value": _spec_example(functionVersion="   "),
    "dimension value of 1,025 characters": _spec_example(functionVersion="v" * 1025),
    "non-ASCII dimension value": _spec_example(functionVersion="café"),
    "control character in a dimension value": _spec_example(functionVersion="a\tb"),
    "dimension value no string": _spec_example(functionVersion=7),
    "dimension without its member": _spec_example(Dimensions=[["region"]]),
    "31 dimensions": {
        **_spec_example(Dimensions=[[f"d{i}" for i in range(31)]]),
        **{f"d{i}": "x" for i in range(31)},
    },
    "no dimension set": _spec_example(Dimensions=[]),
    "empty metric name": {**_spec_example(Metrics=[{"Name": ""}]), "": 1},
    "metric name of 256 characters": {**_spec_example(Metrics=[{"Name": "m" * 256}]), "m" * 256: 1},
    "unit none of CloudWatch's": _spec_example(Metrics=[{"Name": "time", "Unit": "Calls"}]),
    "metric value a string": _spec_example(time="100"),
    "metric value a boolean": _spec_example(time=True),
    "101 metric values": _spec_example(time=[1] * 101),
    "namespace under AWS/": _spec_example(Namespace="AWS/Lambda"),
    "namespace starting with a colon": _spec_example(Namespace=":x"),
    "namespace of 256 characters": _spec_example(Namespace="n" * 256),
    "namespace with a character CloudWatch refuses": _spec_example(Namespace="Zahlungen€"),
    "empty namespace": _spec_example(Namespace=""),
    "timestamp in seconds": _spec_example(Timestamp=int(emf.time.time())),
    "timestamp a float": _spec_example(Timestamp=emf.time.time() * 1000),
}


def test_the_validator_keeps_the_specifications_example() -> None:
    assert emf.problems(json.dumps(_spec_example())) == []


@pytest.mark.parametrize("broken", BROKEN)
def test_the_validator_refuses_each_broken_rule(broken: str) -> None:
    assert emf.problems(json.dumps(BROKEN[broken], ensure_ascii=False)) != []


@pytest.mark.parametrize(
    "line",
    [
        '{"_aws":{}} trailing',
        '{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]}}',
        '{"_aws": NaN}',
        "[]",
        json.dumps({**_spec_example(), "pad": "x" * emf.MAX_EVENT_BYTES}),
    ],
)
def test_the_validator_refuses_lines_that_are_no_emf_document(line: str) -> None:
    assert emf.problems(line) != []


# -- every line we write, in every environment --------------------------------------------

surrogate_escapes = st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF)
"""What an environment variable holds for bytes that are no UTF-8."""
texts = st.one_of(
    st.text(),
    st.text(st.characters(codec="ascii")),
    st.builds(lambda unit, times: unit * times, st.text(min_size=1), st.integers(200, 1500)),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
)
"""Namespaces a decorator can have: empty, blank, unicode, lone surrogates (a `__qualname__`
set by hand), longer than 1,024 characters."""
function_names = st.one_of(
    st.none(),  # off Lambda
    st.just(""),
    st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),  # Lambda's own names
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"])),
    st.text(surrogate_escapes, min_size=1),
    st.builds(lambda times: "f" * times, st.integers(1000, 3000)),
)
cloudwatch_namespaces = st.one_of(
    st.just(True),
    st.from_regex(r"[0-9A-Za-z.\-_/#: ]{0,254}[0-9A-Za-z]", fullmatch=True).filter(
        lambda text: not text.startswith((":", "AWS/"))
    ),
)


@contextlib.contextmanager
def lambda_environment(function_name: str | None) -> Iterator[None]:
    with mock.patch.dict(os.environ):
        os.environ.pop(LAMBDA_NAME, None)
        if function_name is not None:
            os.environ[LAMBDA_NAME] = function_name
        yield


def written(sink: Any, outcomes: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for outcome, fields in outcomes:
            sink(outcome, fields)
    return out.getvalue().splitlines()


EVERY_OUTCOME = [(outcome, {}) for outcome in OUTCOMES] + [("replayed", {"source": "cache"})]


@given(namespace=texts, function_name=function_names, metrics=cloudwatch_namespaces)
@example(namespace="", function_name=None, metrics=True)  # the defect: an empty dimension
@example(namespace="n" * 1025, function_name=None, metrics=True)  # one past 1,024
@example(namespace="Bestellungen.versand", function_name="", metrics=True)  # unset on Lambda
@example(namespace="注文", function_name=None, metrics="Payments")
@example(namespace=" ", function_name="\udcff", metrics=True)
@example(namespace="x", function_name="f" * 1025, metrics=True)
def test_every_line_passes_cloudwatchs_rules_in_every_environment(
    namespace: str, function_name: str | None, metrics: bool | str
) -> None:
    with lambda_environment(function_name):
        lines = written(metric_sink(metrics, namespace), EVERY_OUTCOME)

    counted = [outcome for outcome, _ in EVERY_OUTCOME if metric_name(outcome, {}) is not None]
    assert len(lines) == len(counted)  # one line per counted outcome, none dropped
    for line in lines:
        assert emf.problems(line) == [], line[:300]
        document = json.loads(line)
        assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == (
            "LambdaIdempotency" if metrics is True else metrics
        )
    if function_name is not None and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", function_name):
        assert json.loads(lines[0])["function_name"] == function_name  # Lambda's, as it is


keepable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1).filter(
    lambda text: not text.isspace() and "\\" not in text
)


@given(keepable)
def test_a_value_cloudwatch_takes_is_kept_as_it_is(text: str) -> None:
    assert dimension_value(text) == text


@given(st.one_of(texts, keepable), st.one_of(texts, keepable))
@example("", "\\")
@example(" ", "\\ ")
@example("café", "\\caf\\xe9")  # the escaped form of one text, given as another
@example("caf\\xe9", "café")
@example("a" * 1100, "a" * 1101)  # both cut to fit: told apart by the hash
@example("\x00", "\\x00")
def test_dimension_values_are_stable_and_tell_texts_apart(first: str, second: str) -> None:
    value = dimension_value(first)
    assert value == dimension_value(first)  # the same every time, in every container
    assert emf.problems(_with_dimension(value)) == []
    if first != second:
        assert value != dimension_value(second)


def _with_dimension(value: str) -> str:
    return json.dumps(_spec_example(functionVersion=value))


# -- end to end: decorators off Lambda, where the defect was ---------------------------------


def _named(name: str) -> Any:
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"charged": event["amount"]}

    handler.__qualname__ = name
    return handler


@pytest.mark.parametrize(
    "qualname", ["注文.charge", "charge_" + "x" * 1100], ids=["unicode", "long"]
)
def test_off_lambda_a_decorators_lines_pass_with_its_default_namespace(
    moto_store: DynamoDBStore,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    qualname: str,
) -> None:
    monkeypatch.delenv(LAMBDA_NAME, raising=False)
    handler = idempotent(key="order_id", store=moto_store, metrics=True)(_named(qualname))

    handler({"order_id": "o-1", "amount": 5}, FakeContext())
    handler({"order_id": "o-1", "amount": 5}, FakeContext())
    with pytest.raises(PayloadMismatchError):
        handler({"order_id": "o-1", "amount": 6}, FakeContext())

    lines = capsys.readouterr().out.splitlines()
    assert [
        json.loads(line)["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"] for line in lines
    ] == [
        "executed",
        "replayed_from_cache",
        "payload_mismatch",
    ]
    for line in lines:
        assert emf.problems(line) == []
    assert handler.idempotency.settings.namespace.endswith(qualname)  # the key is unchanged


# -- through the user's Powertools Metrics ---------------------------------------------------


@given(
    namespace=texts,
    function_name=function_names,
    outcomes=st.lists(st.sampled_from(EVERY_OUTCOME), min_size=1, max_size=250),
)
@example(namespace="", function_name=None, outcomes=[("executed", {})] * 250)
def test_through_powertools_metrics_every_flushed_line_passes(
    namespace: str, function_name: str | None, outcomes: list[tuple[str, dict[str, Any]]]
) -> None:
    """Our counts join the user's `Metrics`; Powertools flushes every 100 values of a metric
    and at the end: every line it prints with them passes, whatever our namespace is."""
    metrics = Metrics(namespace="Orders", service="checkout")
    try:
        with lambda_environment(function_name):
            sink = metric_sink(metrics, namespace)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                for outcome, fields in outcomes:
                    sink(outcome, fields)
                if metrics.metric_set:
                    metrics.flush_metrics()
    finally:
        metrics.clear_metrics()

    lines = out.getvalue().splitlines()
    total = 0
    for line in lines:
        assert emf.problems(line) == [], line[:300]
        document = json.loads(line)
        for definition in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
            value = document[definition["Name"]]
            total += len(value) if isinstance(value, list) else 1
    assert total == sum(metric_name(o, f) is not None for o, f in outcomes)
