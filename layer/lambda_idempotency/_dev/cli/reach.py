"""An endpoint that cannot be reached or refuses the credentials: the errors `invoke` and
`doctor` tell apart, and whether a `lambda-idempotency local` could answer there."""

from __future__ import annotations

CONNECTION_ERRORS = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "ReadTimeoutError",
}
CREDENTIAL_CODES = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "AccessDeniedException",
}


def is_loopback(endpoint: str) -> bool:
    from urllib.parse import urlsplit

    return urlsplit(endpoint).hostname in {"127.0.0.1", "localhost", "::1"}


def port_flag(endpoint: str | None) -> str:
    from urllib.parse import urlsplit

    port = urlsplit(endpoint).port if endpoint is not None else None
    return "" if port in (None, 8000) else f" --port {port}"
