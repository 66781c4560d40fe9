"""Attacks on the lean paths' SigV4 signer (`WireSigV4Auth`) and request (`WireRequest`).

A fresh attacker's round, told the promise only (every request byte for byte as botocore
signs and prepares it; botocore's extension points honoured). Eleven defects were found, each
first a strict xfail, all fixed: a header added to botocore's unsigned list later, or an
unsigned X-Amz-Content-SHA256, signed as before; a patched signing step (any method of
SigV4Auth, the HMAC step, the URL's normalisation after a first signature) skipped; a text
body a hook set crashing; the DEBUG lines botocore logs coming from elsewhere, after the
signature, or not at all when signing fails; one signer shared by two threads mixing their
signed headers. The other tests are attacks that held and that the property test
(`test_wire_signing.py`) does not cover."""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import botocore.auth
import botocore.awsrequest
import botocore.endpoint
import pytest
from botocore.credentials import Credentials

from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.wire.path import FastWire
from lambda_idempotency._stores.dynamodb.wire.request import wire_parts
from tests.wire_conformance import Scripted, answer, freeze_signing_clock

PARTS = wire_parts()
URL = "https://dynamodb.eu-west-1.amazonaws.com/"
BODY = b'{"TableName": "t"}'
BOTOCORE = "botocore"
FAST = "fast"
SigV4Auth: Any = botocore.auth.SigV4Auth


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    freeze_signing_clock(monkeypatch)


def parts() -> Any:
    assert PARTS is not None
    return PARTS


def credentials(token: str | None = None) -> Any:
    return Credentials("AKIDEXAMPLE", "secret", token).get_frozen_credentials()


def request(
    way: str,
    headers: Sequence[tuple[str, Any]] = (),
    *,
    url: str = URL,
    body: Any = BODY,
    context: dict[str, Any] | None = None,
) -> Any:
    """A request as each way builds it: botocore's AWSRequest, or the fast path's."""
    request_class = botocore.awsrequest.AWSRequest if way == BOTOCORE else parts().request
    made = request_class(method="POST", url=url, data=body, headers={})
    for name, value in headers:
        made.headers[name] = value
    made.context = dict(context or {})
    return made


def signer(way: str, token: str | None = None, region: Any = "eu-west-1") -> Any:
    """botocore's SigV4Auth, or the fast path's, as `RequestBuilder._sign` makes it (the
    class of botocore's instance swapped)."""
    made = SigV4Auth(credentials(token), "dynamodb", region)
    if way == FAST:
        made.__class__ = parts().sigv4
    return made


def signed(way: str, headers: Sequence[tuple[str, Any]] = (), **case: Any) -> Any:
    made = request(way, headers, **case)
    signer(way).add_auth(made)
    return made


def prepared(made: Any, way: str) -> Any:
    """Endpoint.prepare_request's result, as each way prepares it."""
    if way == BOTOCORE:
        endpoint: Any = botocore.endpoint.Endpoint
        endpoint._encode_headers(None, made.headers)
    ready = made.prepare()
    return ready.method, ready.url, list(ready.headers.items()), ready.body


# -- customisations of botocore's signing -----------------------------------------------------


def test_a_header_added_to_botocores_unsigned_list_later_is_left_unsigned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A header a user took out of signing (a proxy rewrites it) is still signed: 403."""
    blacklist = [*botocore.auth.SIGNED_HEADERS_BLACKLIST, "x-tenant"]
    monkeypatch.setattr(botocore.auth, "SIGNED_HEADERS_BLACKLIST", blacklist)
    headers = [("X-Tenant", "north")]
    assert "x-tenant" not in signed(BOTOCORE, headers).headers["Authorization"]
    assert (
        signed(FAST, headers).headers["Authorization"]
        == (signed(BOTOCORE, headers).headers["Authorization"])
    )


def test_a_content_sha256_header_left_unsigned_still_names_the_payload_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With x-amz-content-sha256 on the unsigned list, the signature covers another hash."""
    blacklist = [*botocore.auth.SIGNED_HEADERS_BLACKLIST, "x-amz-content-sha256"]
    monkeypatch.setattr(botocore.auth, "SIGNED_HEADERS_BLACKLIST", blacklist)
    fresh = wire_parts()  # built after the change: the blacklist itself is honoured
    assert fresh is not None
    headers = [("X-Amz-Content-SHA256", "UNSIGNED-PAYLOAD")]
    botocores = signed(BOTOCORE, headers)
    ours = fresh.request(method="POST", url=URL, data=BODY, headers=dict(headers))
    fast = SigV4Auth(credentials(), "dynamodb", "eu-west-1")
    fast.__class__ = fresh.sigv4
    fast.add_auth(ours)
    assert ours.headers["Authorization"] == botocores.headers["Authorization"]


def test_a_patched_modify_request_before_signing_adds_its_signed_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool's header added before signing is missing from the fast path's request."""
    own = SigV4Auth._modify_request_before_signing

    def patched(self: Any, request: Any) -> None:
        own(self, request)
        request.headers["X-Amz-Tool"] = "on"

    monkeypatch.setattr(SigV4Auth, "_modify_request_before_signing", patched)
    botocores, ours = signed(BOTOCORE), signed(FAST)
    assert botocores.headers["X-Amz-Tool"] == "on"
    assert ours.headers.items() == botocores.headers.items()


OVERRIDDEN = (
    "headers_to_sign",
    "canonical_request",
    "canonical_query_string",
    "canonical_headers",
    "_header_value",
    "signature",
    "_inject_signature_to_request",
)
"""SigV4Auth's signing steps the one-pass add_auth stands in for: a patch on botocore's
class must still be called, whether add_auth itself is botocore's or patched."""
SKIPPED = ("_modify_request_before_signing", "_set_necessary_date_headers")
"""The steps only botocore's add_auth calls (the one-pass add_auth, with no Date header,
does their work itself)."""


@pytest.mark.parametrize(
    ("method", "add_auth_patched"),
    [(m, False) for m in OVERRIDDEN + SKIPPED] + [(m, True) for m in OVERRIDDEN],
    ids=[*(OVERRIDDEN + SKIPPED), *(f"{m}, add_auth patched" for m in OVERRIDDEN)],
)
def test_a_spy_on_a_signing_step_sees_the_fast_paths_request(
    monkeypatch: pytest.MonkeyPatch, method: str, add_auth_patched: bool
) -> None:
    """`mock.patch.object(SigV4Auth, method)` sees the client's requests, not the fast path's."""
    if add_auth_patched:  # the fast path then calls botocore's add_auth: still not the spy
        own_add_auth = SigV4Auth.add_auth

        def patched(self: Any, request: Any) -> None:
            own_add_auth(self, request)

        monkeypatch.setattr(SigV4Auth, "add_auth", patched)
    seen: list[str] = []
    own = getattr(SigV4Auth, method)

    def spy(self: Any, *args: Any) -> Any:
        seen.append(way)
        return own(self, *args)

    monkeypatch.setattr(SigV4Auth, method, spy)
    for way in (BOTOCORE, FAST):
        signed(way)
    assert BOTOCORE in seen
    assert FAST in seen


def test_a_date_header_sends_the_fast_path_through_botocores_date_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a Date header the signing steps add_auth skips are botocore's, as the client's."""
    seen: list[str] = []
    for method in SKIPPED:
        own = getattr(SigV4Auth, method)

        def spy(self: Any, *args: Any, own: Any = own) -> Any:
            seen.append(way)
            return own(self, *args)

        monkeypatch.setattr(SigV4Auth, method, spy)
    headers = [("Date", "Mon, 01 Jan 2001 00:00:00 GMT"), ("X-Amz-Date", "stale")]
    results = []
    for way in (BOTOCORE, FAST):
        results.append(signed(way, headers).headers.items())
    assert seen == [BOTOCORE, BOTOCORE, FAST, FAST]
    assert results[1] == results[0]


def test_a_patched_hmac_step_derives_the_signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `_sign` replaced on SigV4Auth (a spy, another HMAC) sees one message of five."""
    seen: dict[str, list[str]] = {BOTOCORE: [], FAST: []}
    own = SigV4Auth._sign
    for way in (BOTOCORE, FAST):
        signed(way)  # a key derived and cached before the patch, as in a warm Lambda

    def spy(self: Any, key: bytes, msg: str, hex: bool = False) -> Any:
        seen[way].append(msg.split("\n", maxsplit=1)[0])
        return own(self, key, msg, hex=hex)

    monkeypatch.setattr(SigV4Auth, "_sign", spy)
    for way in (BOTOCORE, FAST):
        signed(way)
    assert seen[FAST] == seen[BOTOCORE]


def test_a_url_normalisation_patched_after_a_url_was_signed_is_used() -> None:
    """A patched `_normalize_url_path` changes the client's signature, not the fast path's."""
    url = "https://dynamodb.eu-west-1.amazonaws.com/patched/after/"
    for way in (BOTOCORE, FAST):
        signed(way, url=url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SigV4Auth, "_normalize_url_path", lambda self, path: "/")
        botocores, ours = signed(BOTOCORE, url=url), signed(FAST, url=url)
    assert ours.headers["Authorization"] == botocores.headers["Authorization"]


def test_a_functools_wraps_patch_of_add_auth_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decorator-style patch (functools.wraps copies botocore's name, not its code)."""
    seen = []
    own = SigV4Auth.add_auth

    @functools.wraps(own)
    def wrapped(self: Any, request: Any) -> None:
        seen.append(request)
        own(self, request)

    monkeypatch.setattr(SigV4Auth, "add_auth", wrapped)
    ours = signed(FAST)
    assert seen == [ours]
    assert ours.headers.items() == signed(BOTOCORE).headers.items()


# -- requests a hook changed ------------------------------------------------------------------


def test_a_body_a_request_created_hook_sets_as_text_is_signed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hook rewriting the body with json.dumps: boto3 sends it, the fast path raises TypeError."""

    def rewrite(request: Any, **_: Any) -> None:
        request.data = json.dumps({**json.loads(request.data), "ReturnConsumedCapacity": "NONE"})

    sent = []
    for through_wire in (False, True):
        client = default_client(None, "eu-west-1")
        client.meta.events.register_first("request-created.dynamodb", rewrite)  # before signing
        wire: Any = Scripted([answer()])
        client.meta.events.register("before-send.dynamodb", wire)
        caller: Any = FastWire(client) if through_wire else client
        assert not through_wire or caller.usable("get_item")
        caller.get_item(TableName="t", Key={"pk": {"S": "k"}})
        sent.append(wire.requests[0])
    assert sent[1].headers["Authorization"] == sent[0].headers["Authorization"]


@pytest.mark.parametrize(
    ("before", "after"),
    [("T1", "T2"), ("T1", None), (None, "T1"), ("T1", ""), ("", "T1")],
)
def test_a_retry_with_other_credentials_and_new_headers_signs_as_botocore(
    before: str | None, after: str | None
) -> None:
    """The same request signed again with another session token (or none), after a hook
    added headers (one spelled as a header add_auth replaces) between the attempts."""
    results = []
    for way in (BOTOCORE, FAST):
        made = request(way, [("X-Tenant", "a")], context={"payload_signing_enabled": False})
        signer(way, before).add_auth(made)
        made.headers["x-amz-date"] = "stale"
        made.headers["X-Tenant"] = "  b  "
        signer(way, after).add_auth(made)
        results.append((made.headers.items(), prepared(made, way)))
    assert results[1] == results[0]


def urls() -> Iterator[str]:
    hosts = ("h.example", "[::1]", "[fe80::1]", "H.Example.COM", "u:p@h.example", "10.0.0.1")
    ports = ("", ":443", ":80", ":8443")
    paths = ("/", "/a/../b/./c", "/%7Euser/x%2Fy", "/caf%C3%A9//x", "/a b")
    queries = ("", "?b=2&a=1", "?x=%20&x=1&y", "?=&a")
    for index, host in enumerate(hosts * 2):
        scheme = "https" if index % 2 else "http"
        yield f"{scheme}://{host}{ports[index % 4]}{paths[index % 5]}{queries[index % 4]}"
    for index in range(30):
        yield f"https://t{index}.example{ports[index % 4]}/{index}?{queries[index % 4][1:]}"


def test_more_urls_than_the_caches_hold_sign_as_botocore_twice_over() -> None:
    """Paths, queries, percent-encoding, ports, IPv6 hosts and user info, over twice the
    32 URLs the per-URL caches keep, each signed twice (evicted in between)."""
    for _ in range(2):
        for url in urls():
            botocores, ours = signed(BOTOCORE, url=url), signed(FAST, url=url)
            assert ours.headers.items() == botocores.headers.items(), url


# -- logging and threads ----------------------------------------------------------------------


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def auth_log() -> Iterator[Lines]:
    logger = botocore.auth.logger
    lines, level = Lines(), logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    yield lines
    logger.removeHandler(lines)
    logger.setLevel(level)


def test_a_signing_step_that_fails_has_logged_the_canonical_request(auth_log: Lines) -> None:
    """At DEBUG, a signing that fails (no region) logs no CanonicalRequest on the fast path."""
    lines = {}
    for way in (BOTOCORE, FAST):
        auth_log.records.clear()
        with pytest.raises(TypeError):
            signer(way, region=None).add_auth(request(way))
        lines[way] = [record.getMessage() for record in auth_log.records]
    assert lines[BOTOCORE][:1] == ["Calculating signature using v4 auth."]
    assert lines[FAST] == lines[BOTOCORE]


def test_the_debug_lines_read_as_botocores(auth_log: Lines) -> None:
    """A log format naming the module shows 'request' for the fast path, 'auth' for boto3."""
    lines = {}
    for way in (BOTOCORE, FAST):
        auth_log.records.clear()
        signed(way)
        lines[way] = [(r.module, r.funcName, r.getMessage()) for r in auth_log.records]
    assert lines[FAST] == lines[BOTOCORE]


def test_one_signer_signing_two_requests_at_once_names_each_ones_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One signer shared by two threads: a request's SignedHeaders are the other's (a 403)."""
    # botocore's SigV4Auth keeps no per-request state. The library makes an instance per
    # request today: only a caller sharing one instance across threads gets this.
    meet = threading.Barrier(2, timeout=5)
    own = SigV4Auth.string_to_sign

    def in_step(self: Any, request: Any, canonical_request: str) -> str:
        meet.wait()  # both threads past canonical_request: as a thread switch may fall
        return str(own(self, request, canonical_request))

    monkeypatch.setattr(SigV4Auth, "string_to_sign", in_step)
    names = {}
    for way in (BOTOCORE, FAST):
        shared = signer(way)
        made = {n: request(way, [(f"X-Only-{n}", "1")]) for n in ("a", "b")}
        threads = [threading.Thread(target=shared.add_auth, args=(r,)) for r in made.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        names[way] = {n: r.headers["Authorization"].split(", ")[1] for n, r in made.items()}
    assert names[BOTOCORE]["a"] == "SignedHeaders=host;x-amz-date;x-only-a"
    assert names[FAST] == names[BOTOCORE]


def test_many_threads_signing_with_one_signer_class_sign_as_botocore() -> None:
    """An instance per request, as the library makes them, from eight threads at once."""
    mismatches = []

    def work(index: int) -> None:
        for attempt in range(40):
            headers = [(f"X-T{index}", str(attempt)), ("x-amz-date", "stale")]
            ours, botocores = signed(FAST, headers), signed(BOTOCORE, headers)
            if ours.headers.items() != botocores.headers.items():
                mismatches.append((index, attempt))

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert mismatches == []
