"""botocore's request, header and SigV4 objects for the fast wire path, with cheaper headers.

botocore keeps a request's headers in an `HTTPHeaders`, an `email.message.Message`: every
read and write goes through the email package's policy layer, and SigV4 builds another one
to pick the headers it signs, twice per signature, parsing the URL each time for the host.
That is about a third of what signing and preparing a request costs. Here the same objects
behave the same (the multi-valued, case-insensitive header list of Python's default email
policy, which is HTTPHeaders'; the prepared request's `HeadersDict`), but headers are kept
in a plain list, which the lean paths' SigV4 (`wire.sigv4`) reads in one pass.

`wire_parts()` is None when the installed botocore lacks a private part relied on here: the
fast wire path then builds botocore's own objects.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator
from typing import Any, NamedTuple

from .sigv4 import SIGNING_METHODS, SIGNING_MODULE_PARTS, sigv4_class


class WireParts(NamedTuple):
    request: type
    """An AWSRequest whose headers are `WireHeaders`, whose body is the bytes it was given,
    and whose `prepare` builds the prepared request directly (headers encoded)."""
    sigv4: type
    """botocore's SigV4Auth whose `add_auth` takes one pass over `WireHeaders` (`wire.sigv4`)."""
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
        sigv4=sigv4_class(parts.auth, headers_class),
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
        for name in SIGNING_MODULE_PARTS:  # read on each signature, as botocore reads them
            getattr(auth, name)
        for name in SIGNING_METHODS:
            getattr(auth.SigV4Auth, name)
        return _Botocore(
            auth=auth,
            awsrequest=awsrequest,
            http_headers=http_headers,
            key_class=key_class,
            prepared_class=prepared_class,
            takes_context="context" in prepared_class.__init__.__code__.co_varnames,
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
            (headers included) each time the signer reads it, to return those same bytes.
            Anything else (text a hook set, nothing): botocore's property, as it reads it."""
            data = self.data
            if type(data) is bytes and data:
                return data
            body = awsrequest.AWSRequest.prepare(self).body
            return body.encode("utf-8") if isinstance(body, str) else body

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
