"""The lean paths' SigV4 signer: botocore's, whose `add_auth` takes one pass over the
request's headers (`wire.request`'s `WireHeaders`), and signs as botocore's own does, or
hands over to it."""

from __future__ import annotations

import functools
import logging
import operator
from typing import Any

SIGNING_MODULE_PARTS = (
    "SIGNED_HEADERS_BLACKLIST",
    "SIGV4_TIMESTAMP",
    "UNSIGNED_PAYLOAD",
    "datetime",
    "ensure_unicode",
    "urlsplit",
    "quote",
    "normalize_url_path",
    "is_valid_ipv6_endpoint_url",
    "_host_from_url",
)
"""What `WireSigV4Auth` reads of `botocore.auth` (through botocore's methods, or itself), and
its clock: `get_current_datetime` (botocore 1.35 and later) or `datetime.datetime.utcnow`."""
SIGNING_METHODS = (
    "add_auth",
    "signed_headers",
    "string_to_sign",
    "payload",
    "scope",
    "_sign",
    "_normalize_url_path",
    "_canonical_query_string_url",
    "canonical_query_string",
)
"""botocore's SigV4Auth methods the one-pass `add_auth` calls or stands in for."""


def sigv4_class(auth: Any, headers_class: Any) -> type:
    """`WireSigV4Auth`: botocore's SigV4 whose `add_auth` takes one pass over `WireHeaders`.

    botocore's asks `in` and `del` for each header it replaces (Authorization, X-Amz-Date, the
    session token, an unsigned payload's checksum), each a scan of every header, then builds
    an `email.message.Message` to pick the headers it signs, twice, and parses the URL each
    time: about half of what signing cost. Here the headers are replaced and picked in one
    pass, the URL's canonical path, query and host made once per URL, and the signing key
    derived once a day, with botocore's own methods for the rest.

    That way is taken only while it gives what botocore's would: every method of botocore's
    SigV4Auth is its own (a spy, a patched step, a `functools.wraps` patch: not), botocore.auth
    logs no DEBUG lines (they would come from here, in another order), the request has no
    `Date` header and its headers are `WireHeaders`. Otherwise botocore's `add_auth` signs,
    with botocore's methods (or the patches on them): this class overrides no other."""
    sigv4: Any = auth.SigV4Auth
    own = _OwnMethods(auth)
    logger = auth.logger

    class WireSigV4Auth(sigv4):  # type: ignore[misc]
        def add_auth(self, request: Any) -> None:
            headers = request.headers
            if (
                type(headers) is not headers_class
                or self.credentials is None
                or not own.unchanged()
                or logger.isEnabledFor(logging.DEBUG)
            ):
                return self._as_botocore(request)
            pairs = headers._headers
            present = {name.lower() for name, _ in pairs}
            if "date" in present:
                return self._as_botocore(request)
            timestamp = _now(auth).strftime(auth.SIGV4_TIMESTAMP)
            request.context["timestamp"] = timestamp
            headers._headers = pairs = _replaced(auth, pairs, present, self, request, timestamp)
            signed, checksum = _headers_to_sign(auth, headers_class, pairs, request.url)
            names = self.signed_headers(signed)
            path, query = _url_parts(
                sigv4, request.url, auth.normalize_url_path, auth.quote, auth.urlsplit
            )
            canonical_request = "\n".join(
                (
                    request.method.upper(),
                    path,
                    self.canonical_query_string(request) if request.params else query,
                    _canonical_headers(auth.ensure_unicode, signed) + "\n",
                    names,
                    self.payload(request) if checksum is None else checksum,
                )
            )
            string_to_sign = self.string_to_sign(request, canonical_request)
            key = _signing_key(
                sigv4,
                self.credentials.secret_key,
                timestamp[0:8],
                self._region_name,
                self._service_name,
            )
            signature = self._sign(key, string_to_sign, hex=True)
            headers["Authorization"] = (
                f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, "
                f"SignedHeaders={names}, Signature={signature}"
            )
            return None

        def _as_botocore(self, request: Any) -> None:
            """botocore's `add_auth` (or the patch on it), every other method its own (or the
            patch): this class overrides no other."""
            sigv4.add_auth(self, request)

    return WireSigV4Auth


class _OwnMethods:
    """Whether every method of botocore's SigV4Auth is still botocore's own code: read by
    identity on each signature, judged (by the code's name and module) when one changed."""

    def __init__(self, auth: Any) -> None:
        self._auth = auth
        self._sigv4 = auth.SigV4Auth
        self._names = tuple(name for name, value in vars(self._sigv4).items() if callable(value))
        self._read = operator.itemgetter(*self._names)
        self._last: tuple[Any, ...] = ()
        self._own = False

    def unchanged(self) -> bool:
        try:
            current = self._read(self._sigv4.__dict__)
        except KeyError:  # one deleted: botocore's add_auth finds what it finds
            return False
        if len(current) != len(self._last) or not all(map(operator.is_, current, self._last)):
            self._own = all(map(self._is_botocores, self._names, current))
            self._last = current
        return self._own

    def _is_botocores(self, name: str, function: Any) -> bool:
        code = getattr(function, "__code__", None)
        return (
            code is not None
            and code.co_qualname == f"SigV4Auth.{name}"
            and getattr(function, "__globals__", None) is vars(self._auth)
        )


def _now(auth: Any) -> Any:
    """botocore's SigV4 clock, read as its `add_auth` reads it (a test's frozen clock too)."""
    clock = getattr(auth, "get_current_datetime", None)
    if clock is not None:
        return clock()
    return auth.datetime.datetime.utcnow()  # botocore before 1.35 (Lambda's 1.34)


def _replaced(
    auth: Any,
    pairs: list[tuple[str, Any]],
    present: set[str],
    signer: Any,
    request: Any,
    timestamp: str,
) -> list[tuple[str, Any]]:
    """The headers botocore's `_modify_request_before_signing` leaves: the previous
    attempt's Authorization, X-Amz-Date, session token and unsigned payload's checksum gone,
    this attempt's put at the end, in botocore's order."""
    replaced = {"authorization", "x-amz-date"}
    added = [("X-Amz-Date", timestamp)]
    token = signer.credentials.token
    if token:
        replaced.add("x-amz-security-token")
        added.append(("X-Amz-Security-Token", token))
    if not request.context.get("payload_signing_enabled", True):
        replaced.add("x-amz-content-sha256")
        added.append(("X-Amz-Content-SHA256", auth.UNSIGNED_PAYLOAD))
    if present & replaced:  # a retry: the previous attempt's
        pairs = [(name, value) for name, value in pairs if name.lower() not in replaced]
    return pairs + added


def _headers_to_sign(
    auth: Any, headers_class: Any, pairs: list[tuple[str, Any]], url: str
) -> tuple[dict[str, list[Any]], Any]:
    """The headers SigV4 signs, lower-cased, each with its values in order (what botocore's
    `headers_to_sign` gives), and the first X-Amz-Content-SHA256, signed or not (what its
    `canonical_request` reads)."""
    blacklist = auth.SIGNED_HEADERS_BLACKLIST
    signed: dict[str, list[Any]] = {}
    checksum = None
    for name, stored in pairs:
        lower = name.lower()
        value = stored
        if isinstance(stored, str) and not stored.isascii():
            value = headers_class.fetched(name, stored)
        if lower == "x-amz-content-sha256" and checksum is None:
            checksum = value
        if lower in blacklist:
            continue
        if lower in signed:
            signed[lower].append(value)
        else:
            signed[lower] = [value]
    if "host" not in signed:
        host_from_url = auth._host_from_url
        signed["host"] = [_host(url, host_from_url, auth.urlsplit, auth.is_valid_ipv6_endpoint_url)]
    return signed, checksum


def _canonical_headers(ensure_unicode: Any, signed: dict[str, list[Any]]) -> str:
    """botocore's `canonical_headers` (its `_header_value` on each value)."""
    lines = []
    for name in sorted(signed):
        values = signed[name]
        if len(values) == 1:
            value = " ".join(values[0].split())
        else:
            value = ",".join([" ".join(v.split()) for v in values])
        lines.append(f"{name}:{ensure_unicode(value)}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=32)
def _url_parts(sigv4: Any, url: str, *module_parts: Any) -> tuple[str, str]:
    """The canonical path and the URL's own canonical query, as botocore's methods make them:
    functions of the URL and of the module's parts they call (in the cache's key)."""
    botocores = sigv4.__new__(sigv4)  # its methods read no state
    split = module_parts[-1](url)  # the module's urlsplit
    return botocores._normalize_url_path(split.path), botocores._canonical_query_string_url(split)


@functools.lru_cache(maxsize=32)
def _host(url: str, host_from_url: Any, *module_parts: Any) -> str:
    """botocore's host header for `url` (keyed on the functions it calls)."""
    return host_from_url(url)  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=8)
def _signing_key(sigv4: Any, secret: str, day: str, region: str, service: str) -> bytes:
    """Four of the five HMACs a signature takes, as SigV4 derives the key, once a day per
    secret, region and service (with botocore's own `_sign`, checked with the rest)."""
    key = sigv4._sign(None, f"AWS4{secret}".encode(), day)
    for part in (region, service, "aws4_request"):
        key = sigv4._sign(None, key, part)
    return key  # type: ignore[no-any-return]
