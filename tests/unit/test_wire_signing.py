"""The fast wire path's SigV4 signs as botocore's does, header for header.

`WireSigV4Auth.add_auth` replaces the headers botocore's `add_auth` replaces in one pass over
the request's header list, rather than by a scan per name. For any headers a request may
carry when it is signed (a retry's Authorization and X-Amz-Date, a session token, a Date
header, names in any case, repeated names, non-ASCII values, runs of whitespace), the signed
request must carry the same headers, in the same order, with the same values, as botocore's
own signer gives a botocore request: signed once, and signed again as a retry is."""

from __future__ import annotations

from typing import Any
from unittest import mock

import botocore.auth
import botocore.awsrequest
import botocore.endpoint
import pytest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from lambda_idempotency._stores.dynamodb.wire.request import wire_parts
from tests.wire_conformance import freeze_signing_clock

PARTS = wire_parts()
URLS = (
    "https://dynamodb.eu-west-1.amazonaws.com/",
    "http://localhost:8000/",
    "https://a.b/x/../y?b=2&a=1",
)
NAMES = (
    "Authorization",
    "authorization",
    "X-Amz-Date",
    "x-amz-date",
    "X-Amz-Security-Token",
    "X-Amz-Content-SHA256",
    "Date",
    "User-Agent",
    "X-Amzn-Trace-Id",
    "Content-Type",
    "X-Amz-Target",
    "amz-sdk-request",
    "X-Tenant",
    "x-tenant",
    "Host",
)
VALUES = st.one_of(
    st.sampled_from(["a", "  spaced   out  ", "Root=1-5759e988;Sampled=1", "caf\u00e9", ""]),
    st.just("caf\udce9"),  # a surrogate: the email policy reads it back as a Header
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x24F), max_size=12),
)


def sign(request_class: Any, signer_class: Any, headers: list[tuple[str, str]], **case: Any) -> Any:
    request = request_class(method="POST", url=case["url"], data=case["body"], headers={})
    for name, value in headers:
        request.headers[name] = value
    request.params = dict(case["params"])
    request.context = {"payload_signing_enabled": case["payload_signed"]}
    credentials = Credentials("AKIDEXAMPLE", "secret", case["token"]).get_frozen_credentials()
    for _ in range(case["signings"]):
        signer = botocore.auth.SigV4Auth(credentials, "dynamodb", "eu-west-1")
        signer.__class__ = signer_class
        signer.add_auth(request)
    return request


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    freeze_signing_clock(monkeypatch)


@settings(max_examples=300, deadline=None)
@given(
    headers=st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=8),
    url=st.sampled_from(URLS),
    body=st.sampled_from([b"", b'{"TableName": "t"}']),
    token=st.sampled_from([None, "", "FwoGZXIvYXdzE//token=="]),
    payload_signed=st.booleans(),
    signings=st.integers(min_value=1, max_value=3),
    params=st.sampled_from([{}, {"b": "2", "a": "1 x"}]),
)
def test_the_fast_path_signs_a_request_as_botocore_signs_it(
    headers: list[tuple[str, str]], **case: Any
) -> None:
    assert PARTS is not None
    try:
        botocores = sign(botocore.awsrequest.AWSRequest, botocore.auth.SigV4Auth, headers, **case)
    except Exception as exc:  # botocore cannot sign it: neither can the fast path
        with pytest.raises(type(exc)):
            sign(PARTS.request, PARTS.sigv4, headers, **case)
        return
    ours = sign(PARTS.request, PARTS.sigv4, headers, **case)
    assert ours.headers.items() == botocores.headers.items()
    assert ours.context["timestamp"] == botocores.context["timestamp"]
    endpoint: Any = botocore.endpoint.Endpoint
    endpoint._encode_headers(None, botocores.headers)  # as prepare_request encodes them
    assert dict(ours.prepare().headers.items()) == dict(botocores.prepare().headers.items())


def test_a_patched_add_auth_is_called_in_place_of_the_fast_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spy or a custom signing step patched onto botocore's SigV4Auth sees every request
    the fast path signs, as it sees the client's."""
    assert PARTS is not None
    seen = []
    own = botocore.auth.SigV4Auth.add_auth

    def patched(self: Any, request: Any) -> None:
        seen.append(request)
        own(self, request)
        request.headers["X-Signed-By"] = "patch"

    monkeypatch.setattr(botocore.auth.SigV4Auth, "add_auth", patched)
    case: dict[str, Any] = {"url": URLS[0], "body": b"{}", "token": None, "params": {}}
    case.update(payload_signed=True, signings=1)
    request = sign(PARTS.request, PARTS.sigv4, [], **case)
    assert seen == [request]
    assert request.headers["X-Signed-By"] == "patch"
    monkeypatch.undo()
    freeze_signing_clock(monkeypatch)
    again = sign(PARTS.request, PARTS.sigv4, [], **case)
    assert "X-Signed-By" not in again.headers and seen == [request]


def test_a_mock_on_a_signing_step_from_before_the_signer_was_built_is_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`mock.patch.object(SigV4Auth, "canonical_request")` in place when the lean paths build
    their signer (the first store of a test) still sees every request they sign."""
    own = botocore.auth.SigV4Auth.canonical_request
    seen = mock.Mock(side_effect=lambda request: own(signer, request))
    monkeypatch.setattr(botocore.auth.SigV4Auth, "canonical_request", seen)
    parts = wire_parts()  # built with the mock in place
    assert parts is not None
    request = parts.request(method="POST", url=URLS[0], data=b"{}", headers={})
    request.context = {}
    signer = botocore.auth.SigV4Auth(Credentials("AKIDEXAMPLE", "secret"), "dynamodb", "eu-west-1")
    signer.__class__ = parts.sigv4
    signer.add_auth(request)
    assert seen.call_count == 1
    monkeypatch.undo()
    assert "Authorization" in request.headers
