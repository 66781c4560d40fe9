"""botocore's request, header and SigV4 objects for the fast wire path, with cheaper headers.

botocore keeps a request's headers in an `HTTPHeaders`, an `email.message.Message`: every
read and write goes through the email package's policy layer, and SigV4 builds another one
to pick the headers it signs, twice per signature, parsing the URL each time for the host.
That is about a third of what signing and preparing a request costs. Here the same objects
behave the same (the multi-valued, case-insensitive header list of Python's default email
policy, which is HTTPHeaders'; the prepared request's `HeadersDict`; botocore's SigV4 with
its own canonical request, string to sign and signature), but headers are kept in a plain
list, the signed headers in a dict of lists, and the host is computed once per URL.

`wire_parts()` is None when the installed botocore lacks a private part relied on here: the
fast wire path then builds botocore's own objects.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, ItemsView, Iterator
from typing import Any, NamedTuple


class WireParts(NamedTuple):
    request: type
    """An AWSRequest whose headers are `WireHeaders`, whose body is the bytes it was given,
    and whose `prepare` builds the prepared request directly (headers encoded)."""
    sigv4: type
    """botocore's SigV4Auth, picking the headers it signs into a `SigningHeaders`."""
    headers: type
    """botocore's HeadersDict, cheaper to copy, iterate and look up (a response's headers
    are read a dozen times: retry checks, the parser's metadata)."""


def wire_parts() -> WireParts | None:
    """The request and signer classes; None on a botocore without the parts they rely on."""
    parts = _botocore_parts()
    if parts is None or not _keeps_compat32_policy(parts.policy):
        return None
    headers_dict = _headers_dict_class(parts)
    headers_class = _headers_class(parts)
    return WireParts(
        request=_request_class(parts, headers_class, headers_dict),
        sigv4=_sigv4_class(parts, headers_class),
        headers=headers_dict,
    )


class _Botocore(NamedTuple):
    """The private parts of botocore the classes below rely on, each read once."""

    auth: Any
    awsrequest: Any
    http_headers: Any
    key_class: Any
    """`_HeaderKey`: how a HeadersDict matches its keys."""
    prepared_class: Any
    takes_context: bool
    """Whether AWSPreparedRequest takes the request's context (botocore 1.35 and later)."""
    blacklist: frozenset[str]
    host_of: Callable[[str], str]
    ensure_unicode: Callable[[Any], str]
    urlsplit: Any
    policy: Any
    """HTTPHeaders' email policy."""


def _botocore_parts() -> _Botocore | None:
    """botocore's private parts, or None when one of them is missing."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.compat

    auth: Any = botocore.auth  # private parts, untyped in botocore's stubs
    awsrequest: Any = botocore.awsrequest
    http_headers: Any = botocore.compat.HTTPHeaders

    try:
        key_class = awsrequest._HeaderKey
        key_class("Host")._key  # noqa: B018
        awsrequest.HeadersDict()._dict  # noqa: B018  (what `prepare` fills)
        prepared_class = awsrequest.AWSPreparedRequest
        auth.SigV4Auth.headers_to_sign  # noqa: B018
        return _Botocore(
            auth=auth,
            awsrequest=awsrequest,
            http_headers=http_headers,
            key_class=key_class,
            prepared_class=prepared_class,
            takes_context="context" in prepared_class.__init__.__code__.co_varnames,
            blacklist=frozenset(auth.SIGNED_HEADERS_BLACKLIST),
            host_of=functools.lru_cache(maxsize=32)(auth._host_from_url),
            ensure_unicode=auth.ensure_unicode,
            urlsplit=auth.urlsplit,
            policy=http_headers().policy,
        )
    except AttributeError:
        return None


def _keeps_compat32_policy(policy: Any) -> bool:
    """Whether HTTPHeaders' policy stores values as given and counts no header: the
    compat32 behaviour `WireHeaders` keeps without going through it."""
    return policy.header_store_parse("a", "b") == ("a", "b") and not policy.header_max_count("a")


def _headers_class(parts: _Botocore) -> type:
    """`WireHeaders`: the request's headers as HTTPHeaders keeps them, in a plain list."""
    policy = parts.policy
    http_headers: Any = parts.http_headers

    class WireHeaders(http_headers):  # type: ignore[misc]
        """HTTPHeaders without the policy layer: values stored as given, read back as given
        (non-ASCII text still goes through the policy, as email would return it)."""

        _headers: list[tuple[str, Any]]

        def __setitem__(self, name: str, value: Any) -> None:
            self._headers.append((name, value))

        def __getitem__(self, name: str) -> Any:
            return self.get(name)

        def __delitem__(self, name: str) -> None:
            name = name.lower()
            self._headers = [(k, v) for k, v in self._headers if k.lower() != name]

        def __contains__(self, name: object) -> bool:
            lower = str(name).lower()
            return any(k.lower() == lower for k, _ in self._headers)

        def __iter__(self) -> Iterator[str]:
            return iter([k for k, _ in self._headers])

        def __len__(self) -> int:
            return len(self._headers)

        def keys(self) -> list[str]:
            return [k for k, _ in self._headers]

        def values(self) -> list[Any]:
            return [_fetched(k, v) for k, v in self._headers]

        def items(self) -> list[tuple[str, Any]]:
            return [(k, _fetched(k, v)) for k, v in self._headers]

        def get(self, name: str, failobj: Any = None) -> Any:
            name = name.lower()
            for k, v in self._headers:
                if k.lower() == name:
                    return _fetched(k, v)
            return failobj

        def get_all(self, name: str, failobj: Any = None) -> Any:
            name = name.lower()
            values = [_fetched(k, v) for k, v in self._headers if k.lower() == name]
            return values or failobj

    def _fetched(name: str, value: Any) -> Any:
        if not isinstance(value, str) or value.isascii():
            return value
        return policy.header_fetch_parse(name, value)

    WireHeaders.fetched = staticmethod(_fetched)
    return WireHeaders


def _headers_dict_class(parts: _Botocore) -> type:
    """`WireHeadersDict`: the prepared request's and a response's headers."""
    key_class = parts.key_class
    headers_dict: Any = parts.awsrequest.HeadersDict

    class WireHeadersDict(headers_dict):  # type: ignore[misc]
        """The prepared request's HeadersDict (the same keys, matched the same way), copied,
        iterated and looked up without a detour through `Mapping`'s generic methods: urllib3
        copies the headers, iterates them twice and looks some up for every request."""

        def __iter__(self) -> Iterator[str]:
            return iter([key._key for key in self._dict])

        def __contains__(self, name: object) -> bool:
            return key_class(name) in self._dict

        def get(self, name: str, default: Any = None) -> Any:
            return self._dict.get(key_class(name), default)

        def items(self) -> Any:
            return WireItems(self)

        def copy(self) -> Any:
            copied = WireHeadersDict()
            copied._dict = dict(self._dict)
            return copied

    class WireItems(ItemsView[str, Any]):
        _mapping: Any

        def __iter__(self) -> Iterator[tuple[str, Any]]:
            return iter([(key._key, value) for key, value in self._mapping._dict.items()])

    return WireHeadersDict


def _request_class(parts: _Botocore, headers_class: Any, headers_dict_class: Any) -> type:
    """`WireRequest`: an AWSRequest with `WireHeaders`, prepared without a copy."""
    awsrequest: Any = parts.awsrequest
    key_class, prepared_class = parts.key_class, parts.prepared_class
    takes_context = parts.takes_context

    class WireRequest(awsrequest.AWSRequest):  # type: ignore[misc]
        def __init__(self, *, method: str, url: str, data: bytes, headers: dict[str, str]):
            super().__init__(method=method, url=url, data=data)
            self.headers = headers_class()
            self.headers._headers = list(headers.items())

        @property
        def body(self) -> Any:
            """The bytes we built: botocore's property prepares a whole copy of the request
            (headers included) each time the signer reads it, to return those same bytes."""
            return self.data

        def prepare(self) -> Any:
            """Endpoint.prepare_request: header values encoded to UTF-8 (a later header of
            the same name wins, the first one's spelling kept), Content-Length added. A value
            that is not text (bytes from a hook, a Header the email policy made of a
            surrogate) takes botocore's way, whose encoded copies outrank it."""
            items = self.headers.items()
            if self.params or not self.data or not isinstance(self.data, bytes):
                return self._prepared_as_botocore_does(items)
            headers = headers_dict_class()
            pairs = headers._dict
            for name, value in items:
                if not isinstance(value, str):
                    return self._prepared_as_botocore_does(items)
                pairs[key_class(name)] = value.encode("utf-8")
            if (
                "Transfer-Encoding" not in headers
                and "Content-Length" not in headers
                and self.method not in ("GET", "HEAD", "OPTIONS")
            ):
                headers["Content-Length"] = str(len(self.data))
            fields = (self.method, self.url, headers, self.data, self.stream_output)
            if takes_context:
                return prepared_class(*fields, self.context)
            return prepared_class(*fields)  # botocore before 1.35: no context there

        def _prepared_as_botocore_does(self, items: list[tuple[str, Any]]) -> Any:
            for name, value in items:  # as Endpoint._encode_headers
                if isinstance(value, str):
                    self.headers[name] = value.encode("utf-8")
            return awsrequest.AWSRequest.prepare(self)

    return WireRequest


def _sigv4_class(parts: _Botocore, headers_class: Any) -> type:
    """`WireSigV4Auth`: botocore's SigV4, replacing its headers in one pass over `WireHeaders`,
    picking the headers it signs once per request and deriving the signing key once a day."""
    auth: Any = parts.auth
    logger = auth.logger
    add_auth_seen: list[Any] = [None, False]
    """The `SigV4Auth.add_auth` last seen, and whether it is botocore's own code."""

    def botocores_add_auth() -> bool:
        current = auth.SigV4Auth.add_auth
        if current is not add_auth_seen[0]:
            code = getattr(current, "__code__", None)
            own = (
                hasattr(auth, "get_current_datetime")  # botocore before 1.35: utcnow, its own
                and code is not None
                and code.co_qualname == "SigV4Auth.add_auth"
                and getattr(current, "__globals__", None) is vars(auth)
            )
            add_auth_seen[:] = [current, own]
        return add_auth_seen[1]  # type: ignore[no-any-return]

    blacklist, host_of = parts.blacklist, parts.host_of
    ensure_unicode, urlsplit = parts.ensure_unicode, parts.urlsplit

    class SigningHeaders(dict[str, list[Any]]):
        """The headers SigV4 signs, lower-cased, each with its values in order: what
        `canonical_headers` and `signed_headers` read (`in`, iteration, `get_all`)."""

        def get_all(self, name: str, failobj: Any = None) -> Any:
            return self.get(name, failobj)

    class WireSigV4Auth(auth.SigV4Auth):  # type: ignore[misc]
        _signed_names: str

        def add_auth(self, request: Any) -> None:
            """botocore's, with the headers it replaces (Authorization, X-Amz-Date, the
            session token, an unsigned payload's) taken out in one pass: botocore asks `in`
            and `del` for each, a scan of every header each time, half of what signing cost.
            A request with a `Date` header, headers of another kind, or an `add_auth` patched
            since (a spy, a custom signing step): botocore's own, or the patch."""
            headers = request.headers
            if (
                type(headers) is not headers_class
                or self.credentials is None
                or not botocores_add_auth()
            ):
                return super().add_auth(request)  # type: ignore[no-any-return]
            pairs = headers._headers
            present = {name.lower() for name, _ in pairs}
            if "date" in present:
                return super().add_auth(request)  # type: ignore[no-any-return]
            timestamp = auth.get_current_datetime().strftime(auth.SIGV4_TIMESTAMP)
            request.context["timestamp"] = timestamp
            replaced = {"authorization", "x-amz-date"}
            added = [("X-Amz-Date", timestamp)]
            token = self.credentials.token
            if token:
                replaced.add("x-amz-security-token")
                added.append(("X-Amz-Security-Token", token))
            if not request.context.get("payload_signing_enabled", True):
                replaced.add("x-amz-content-sha256")
                added.append(("X-Amz-Content-SHA256", auth.UNSIGNED_PAYLOAD))
            if present & replaced:  # a retry: the previous attempt's
                pairs = [(name, value) for name, value in pairs if name.lower() not in replaced]
            headers._headers = pairs + added
            canonical_request = self.canonical_request(request)
            string_to_sign = self.string_to_sign(request, canonical_request)
            signature = self.signature(string_to_sign, request)
            if logger.isEnabledFor(logging.DEBUG):  # what botocore's add_auth logs
                logger.debug("Calculating signature using v4 auth.")
                logger.debug("CanonicalRequest:\n%s", canonical_request)
                logger.debug("StringToSign:\n%s", string_to_sign)
                logger.debug("Signature:\n%s", signature)
            self._inject_signature_to_request(request, signature)
            return None

        def canonical_request(self, request: Any) -> str:
            """botocore's, with the signed headers picked once for this and for the
            Authorization header (nothing changes the headers in between), and the URL's
            path and query made canonical once per URL."""
            signed = self.headers_to_sign(request)
            names = self._signed_names = self.signed_headers(signed)
            checksum = signed.get("x-amz-content-sha256")  # not a header SigV4 leaves out
            path, query = url_parts(request.url)
            return "\n".join(
                (
                    request.method.upper(),
                    path,
                    self.canonical_query_string(request) if request.params else query,
                    self.canonical_headers(signed) + "\n",
                    names,
                    self.payload(request) if checksum is None else checksum[0],
                )
            )

        def canonical_headers(self, headers_to_sign: Any) -> str:
            """botocore's, for the `SigningHeaders` this class picks (names lower-cased)."""
            lines = []
            for name in sorted(headers_to_sign):
                values = headers_to_sign[name]
                if len(values) == 1:
                    value = " ".join(values[0].split())
                else:
                    value = ",".join([" ".join(v.split()) for v in values])
                lines.append(f"{name}:{ensure_unicode(value)}")
            return "\n".join(lines)

        def _inject_signature_to_request(self, request: Any, signature: str) -> Any:
            """botocore's, with the signed headers `canonical_request` picked (`add_auth`
            always asks for the canonical request first)."""
            request.headers["Authorization"] = (
                f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, "
                f"SignedHeaders={self._signed_names}, Signature={signature}"
            )
            return request

        def headers_to_sign(self, request: Any) -> Any:
            signed = SigningHeaders()
            headers = request.headers
            raw = type(headers) is headers_class  # values as stored: read as `items()` would
            for name, stored in headers._headers if raw else headers.items():
                lower = name.lower()
                if lower in blacklist:
                    continue
                value = stored
                if raw and isinstance(stored, str) and not stored.isascii():
                    value = headers_class.fetched(name, stored)
                if lower in signed:
                    signed[lower].append(value)
                else:
                    signed[lower] = [value]
            if "host" not in signed:
                signed["host"] = [host_of(request.url)]
            return signed

        def signature(self, string_to_sign: str, request: Any) -> str:
            """The signing key derived once a day per secret, region and service (four of
            the five HMACs a signature takes), as SigV4 derives it."""
            key = signing_key(
                self.credentials.secret_key,
                request.context["timestamp"][0:8],
                self._region_name,
                self._service_name,
            )
            signed: str = self._sign(key, string_to_sign, hex=True)
            return signed

    @functools.lru_cache(maxsize=32)
    def url_parts(url: str) -> tuple[str, str]:
        """The canonical path and the URL's own canonical query, as botocore makes them
        (functions of the URL alone)."""
        split = urlsplit(url)
        plain = auth.SigV4Auth.__new__(auth.SigV4Auth)
        return plain._normalize_url_path(split.path), plain._canonical_query_string_url(split)

    @functools.lru_cache(maxsize=8)
    def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
        sign = auth.SigV4Auth._sign
        key = sign(None, f"AWS4{secret}".encode(), day)
        for part in (region, service, "aws4_request"):
            key = sign(None, key, part)
        return key  # type: ignore[no-any-return]

    return WireSigV4Auth
