"""The HTTP front end's pure parts: the key header, the event shapes, the fingerprint, the
response shapes, and the decorator's configuration checks. The scope: test_tenant.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lambda_idempotency import (
    ConfigurationError,
    NotAnHttpEventError,
    PayloadInvalidError,
    idempotent_http,
)
from lambda_idempotency._base import keys as _keys
from lambda_idempotency._http import (
    HttpRequest,
    InvalidKeyError,
    Shape,
    mark_replayed,
    parse_key,
    status_of,
)
from tests.http_events import SHAPES, http_event

# -- the key header -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "key"),
    [
        ("8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('  "abc"\t', "abc"),
        ("\tabc ", "abc"),
        ('"with space"', "with space"),
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        ('"a,b"', "a,b"),
        ("k:1/2;x=y", "k:1/2;x=y"),
        ("x" * 255, "x" * 255),
        ('"' + "y" * 255 + '"', "y" * 255),
    ],
)
def test_quoted_and_bare_keys_are_accepted(sent: str, key: str) -> None:
    assert parse_key([sent]) == key


def test_no_header_is_no_key() -> None:
    assert parse_key([]) is None


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        ("", "is empty"),
        ('""', "is empty"),
        ("x" * 256, "256 characters long; at most 255"),
        ('"' + "y" * 256 + '"', "256 characters long"),
        ("abc\x07", "control character (U+0007)"),
        ('"abc\x00"', "control character (U+0000)"),
        ("abc\x7f", "control character (U+007F)"),
        ('"caf\u00e9"', "non-ASCII character (U+00E9)"),
        ("a b", "contains a space"),
        ('ab"c', "outside quotes"),
        ('"abc', "no closing quote"),
        ('"a\\b"', "a backslash only escapes"),
        ('"abc"def', "after its closing quote"),
        ("a,b", "several"),
        ('"a", "b"', "several"),
    ],
)
def test_malformed_keys_are_refused_with_the_reason(sent: str, reason: str) -> None:
    with pytest.raises(InvalidKeyError) as refused:
        parse_key([sent])
    assert reason in refused.value.detail


TOKEN_CHARS = "".join(chr(code) for code in range(0x21, 0x7F) if chr(code) not in '",\\')
"""Printable ASCII but space, quote, comma and backslash: what a bare key may hold."""


@given(st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=255))
@example("~")
@example("!")
@example("!~")
def test_any_bare_key_of_token_characters_is_itself_quoted_or_not(key: str) -> None:
    """From `!` to `~`, both ends included: a client's key is never refused for a
    character the docs allow."""
    assert parse_key([key]) == key
    assert parse_key([f'"{key}"']) == key


@pytest.mark.parametrize(
    ("sent", "detail"),
    [
        ("a b", "Idempotency-Key contains a space; quote the key to send it"),
        ('ab"c', "Idempotency-Key contains '\"' outside quotes; quote the key to send it"),
        ("abc\x07", "Idempotency-Key contains a control character (U+0007)"),
        ('"caf\u00e9"', "Idempotency-Key contains a non-ASCII character (U+00E9)"),
    ],
    ids=["space", "quote", "control", "non-ascii"],
)
def test_a_key_refused_for_a_character_says_which_word_for_word(sent: str, detail: str) -> None:
    """The 400's detail is read by the person fixing the client: it names the character
    and nothing else."""
    with pytest.raises(InvalidKeyError) as refused:
        parse_key([sent])
    assert refused.value.detail == detail


def test_a_header_sent_twice_is_refused() -> None:
    with pytest.raises(InvalidKeyError, match="this request has 2"):
        parse_key(["a", "a"])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"])
def test_the_header_name_matches_in_any_case(shape: str, name: str) -> None:
    request = HttpRequest.from_event(http_event(shape, headers={name: "k-1"}))
    assert request.header("Idempotency-Key") == ["k-1"]


@pytest.mark.parametrize("shape", ["rest-api", "http-api", "function-url", "alb-multi-value"])
def test_a_repeated_header_reaches_the_parser_as_several_values(shape: str) -> None:
    request = HttpRequest.from_event(http_event(shape, headers={"Idempotency-Key": ["a", "b"]}))
    with pytest.raises(InvalidKeyError, match=r"several|has 2"):
        parse_key(request.header("idempotency-key"))


# -- event shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("rest-api", Shape.REST_API),
        ("http-api", Shape.HTTP_API),
        ("function-url", Shape.HTTP_API),
        ("alb", Shape.ALB),
        ("alb-multi-value", Shape.ALB),
    ],
)
def test_each_event_shape_is_recognised(shape: str, expected: Shape) -> None:
    request = HttpRequest.from_event(http_event(shape, method="patch", path="/payments/p-1"))
    assert (request.shape, request.method, request.path) == (expected, "PATCH", "/payments/p-1")
    assert request.answers_multi_value is (shape == "alb-multi-value")


@pytest.mark.parametrize(
    "event",
    [
        {"Records": [{"eventSource": "aws:sqs", "body": "{}"}]},
        {"detail-type": "Order Placed", "source": "shop", "detail": {}},
        {"version": "2.0", "routeKey": "$default"},
        {},
        None,
        "POST /payments",
    ],
)
def test_an_event_that_is_no_http_request_is_a_clear_error(event: Any) -> None:
    with pytest.raises(NotAnHttpEventError, match="needs an API Gateway, ALB or Function URL"):
        HttpRequest.from_event(event)


def test_the_error_names_the_event_keys_but_not_their_values() -> None:
    with pytest.raises(NotAnHttpEventError) as caught:
        HttpRequest.from_event({"card_number": "4111111111111111"})
    assert "card_number" in str(caught.value)
    assert "4111" not in str(caught.value)


# -- the fingerprint ----------------------------------------------------------------------


def fingerprint(shape: str = "http-api", **request: Any) -> str:
    return _keys.payload_hash(HttpRequest.from_event(http_event(shape, **request)).fingerprint())


def test_json_bodies_match_by_value_not_by_key_order_or_whitespace() -> None:
    compact = fingerprint(body='{"amount":100,"currency":"EUR"}')
    assert fingerprint(body='{\n  "currency": "EUR",\n  "amount": 100\n}') == compact
    assert fingerprint(body='{"amount":101,"currency":"EUR"}') != compact


def test_a_base64_body_is_decoded_before_it_is_compared() -> None:
    plain = fingerprint(body='{"amount":100}')
    assert fingerprint(body='{"amount":100}', base64_body=True) == plain


def test_the_content_type_says_when_a_body_is_json() -> None:
    as_json = {"Content-Type": "application/merchant+json; charset=utf-8"}
    as_text = {"Content-Type": "text/plain"}
    assert fingerprint(headers=as_json, body='{"a":1}') == fingerprint(
        headers=as_json, body='{ "a": 1 }'
    )
    assert fingerprint(headers=as_text, body='{"a":1}') != fingerprint(
        headers=as_text, body='{ "a": 1 }'
    )


def test_method_and_path_are_part_of_the_fingerprint() -> None:
    base = fingerprint(body="{}")
    assert fingerprint(body="{}", path="/refunds") != base
    assert fingerprint(body="{}", method="PATCH") != base


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_fingerprints_the_same_request_alike(shape: str) -> None:
    headers = {"content-type": "application/json"}
    assert fingerprint(shape, headers=headers, body='{"a": 1}', base64_body=True) == fingerprint(
        "http-api", headers=headers, body='{"a":1}'
    )


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("[" * 100_000 + "]" * 100_000, "the JSON body is nested too deep to fingerprint"),
        ('{"amount": 1e9999999999999999999}', "the JSON body holds a number out of range"),
    ],
    ids=["too-deep", "exponent-out-of-range"],
)
def test_a_body_that_cannot_be_read_by_value_is_refused_saying_why(body: str, detail: str) -> None:
    """The 400 body-unfingerprintable detail is this error's text: it tells the client
    what to send flatter."""
    request = HttpRequest.from_event(http_event("http-api", body=body))
    with pytest.raises(PayloadInvalidError) as refused:
        request.fingerprint()
    assert str(refused.value) == detail


def test_a_body_that_is_no_json_hashes_as_every_version_has_stored_it() -> None:
    """A retry after an upgrade must match the fingerprint its first attempt stored: a
    body that is no JSON counts by its sha256 under method and path, pinned here."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    request = http_event("rest-api", headers=form, body="amount=2500&currency=EUR")
    assert fingerprint("rest-api", headers=form, body="amount=2500&currency=EUR") == (
        "ea4052c1ff5ca6a5c5db9a60341117284138c2696e6f757cac7e30688f69f83a"
    )
    assert HttpRequest.from_event(request).fingerprint()[2] == {
        "sha256": "e08e4c5b216e2e3ab273ba1c2357a7cae0ef50fa68412d5f67d71d5158559fad"
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_request_without_a_path_is_the_request_to_the_root(shape: str) -> None:
    """An event that names no path (a direct invoke, a test console) fingerprints as `/`
    in every shape, as the same request sent to `/`."""
    event = http_event(shape, path="/", body="{}")
    event.pop("rawPath", None)
    event.pop("path", None)
    event["requestContext"].get("http", {}).pop("path", None)
    assert _keys.payload_hash(HttpRequest.from_event(event).fingerprint()) == fingerprint(
        "rest-api", path="/", body="{}"
    )


# -- responses ----------------------------------------------------------------------------


def test_a_replay_is_marked_in_the_field_its_shape_uses() -> None:
    stored = {"statusCode": 201, "headers": {"idempotent-replayed": "false"}, "body": "{}"}
    marked = mark_replayed(stored, HttpRequest.from_event(http_event("rest-api")))
    assert marked["headers"] == {"Idempotent-Replayed": "true"}
    assert stored["headers"] == {"idempotent-replayed": "false"}  # the stored copy untouched

    multi = {
        "statusCode": 201,
        "statusDescription": "201 Created",
        "multiValueHeaders": {"x": ["1"]},
    }
    marked = mark_replayed(multi, HttpRequest.from_event(http_event("alb-multi-value")))
    assert marked["multiValueHeaders"] == {"x": ["1"], "Idempotent-Replayed": ["true"]}
    assert marked["statusDescription"] == "201 Created"


@pytest.mark.parametrize("shape", ["http-api", "function-url", "alb"])
def test_a_replay_with_both_header_fields_is_marked_where_a_single_value_target_reads(
    shape: str,
) -> None:
    """HTTP APIs, function URLs and ALB target groups without multi-value headers read
    `headers` only: a mark in `multiValueHeaders` would never reach the client."""
    stored = {"statusCode": 201, "headers": {"x": "1"}, "multiValueHeaders": {"y": ["2"]}}
    marked = mark_replayed(stored, HttpRequest.from_event(http_event(shape)))
    assert marked["headers"] == {"x": "1", "Idempotent-Replayed": "true"}
    assert marked["multiValueHeaders"] == {"y": ["2"]}


def test_an_http_api_result_without_status_code_replays_as_api_gateway_reads_it() -> None:
    marked = mark_replayed({"id": "p-1"}, HttpRequest.from_event(http_event("http-api")))
    assert marked == {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json", "Idempotent-Replayed": "true"},
        "body": '{"id": "p-1"}',
        "isBase64Encoded": False,
    }


@pytest.mark.parametrize(
    ("response", "status"),
    [
        ({"statusCode": 201}, 201),
        ({"statusCode": "503"}, 503),
        ({"body": "x"}, 200),
        ("ok", 200),
        ({"statusCode": None}, 502),
    ],
)
def test_status_of_is_what_the_client_sees(response: Any, status: int) -> None:
    assert status_of(response) == status


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"methods": ("POST", "GET")}, "GET change nothing"),
        ({"methods": ()}, "at least one"),
        ({"header": "Idempotency Key"}, "header name"),
        ({"header": ""}, "header name"),
        ({"key_required": False}, "required="),
        ({"store_result": bool}, "store_status="),
        ({"scope": "requestContext.[invalid"}, "not valid JMESPath"),
        # a selector refused names its role, so the user knows which option to fix
        ({"scope": "requestContext.[x"}, r"^scope 'requestContext\.\[x' is not valid JMESPath"),
        ({"payload": "body.[x"}, r"^payload 'body\.\[x' is not valid JMESPath"),
        ({"payload": 42}, r"^payload must be a JMESPath expression or a callable"),
    ],
)
def test_misconfiguration_fails_at_decoration(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        idempotent_http(**options)(lambda event, context: None)


def test_disabled_runs_every_request_unchecked_with_a_warning(monkeypatch: Any) -> None:
    """IDEMPOTENCY_DISABLED is for unit-testing handlers without a table: no key needed."""
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    runs: list[int] = []

    @idempotent_http()
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": 201, "body": "{}"}

    with pytest.warns(RuntimeWarning, match="IDEMPOTENCY_DISABLED"):
        first = handler(http_event("http-api", body="{}"), None)
    second = handler(http_event("http-api", body="{}"), None)

    assert first == second == {"statusCode": 201, "body": "{}"}
    assert runs == [1, 1]
