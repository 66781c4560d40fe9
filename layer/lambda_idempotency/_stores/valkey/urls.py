"""A Valkey URL read as redis-py reads it, and checked when the store is built, without
importing redis-py.

redis-py passes every query option of a URL on to its connections, unchecked, and a URL's
options win over the ones the store gives. So an option the store sets itself (its timeouts,
its pool, its retries, bytes answers), one no connection takes, or a value none can use was
found only at the first call: as a raw error, a hang (a pool of 10**12 slots), a wait the
store's `timeout=` no longer bounded, or keys written under another encoding than they are
read. Each is refused here with its reason instead. A client you build yourself can have any
option: give it as `client=`. No message here carries the URL or its password.
"""

from __future__ import annotations

import codecs
from urllib.parse import parse_qs, parse_qsl, unquote, unquote_plus, urlsplit

from ..._base.errors import ConfigurationError

SCHEMES = ("valkey://", "valkeys://", "redis://", "rediss://", "unix://")
TLS_SCHEMES = ("valkeys://", "rediss://")

TAKEN = frozenset(
    [
        "db",
        "protocol",
        "client_name",
        "health_check_interval",
        "encoding",
        "socket_keepalive",
        "username",
        "password",
    ]
)
"""Query options the store takes as redis-py reads them (a value checked where it can be)."""
TAKEN_WITH_TLS = frozenset(
    [
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
    ]
)
"""TLS options: taken with `valkeys://` or `rediss://` (a plain connection refuses them)."""
SET_BY_THE_STORE = {
    "socket_timeout": "the store's timeout= sets it",
    "socket_connect_timeout": "the store's timeout= sets it",
    "timeout": "the store's timeout= sets it (the wait for a free connection)",
    "max_connections": "the store's pool holds 100 connections and blocks when all are busy",
    "single_connection_client": "the store shares one pool between threads",
    "decode_responses": "redis-py reads any value of it, 'false' included, as decoding, "
    "and the store needs bytes (results are binary)",
    "encoding_errors": "a key that cannot be encoded must fail, never become another key",
    "retry": "the store retries what is safe to send again itself",
    "retry_on_timeout": "the store retries what is safe to send again itself (a script "
    "sent again after a timeout may run twice)",
    "retry_on_error": "the store retries what is safe to send again itself",
}
SECRETS = frozenset(("password", "ssl_password"))


def checked_url(url: str, *, cluster: bool) -> None:
    """Refuse (ConfigurationError) a URL the store cannot use as it says: see the module
    docstring."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # its text names the netloc, password and all: not chained
        raise ConfigurationError(
            "ValkeyStore's url cannot be read as a URL (an unclosed '[', a port that is no "
            "number, or characters no host name has): a password with '#', '/', '?' or '@' "
            "in it must be percent-encoded"
        ) from None
    unix = url.startswith("unix://")
    if port == 0:
        raise ConfigurationError("ValkeyStore's url names port 0 (redis-py would use 6379)")
    if cluster and unix:
        raise ConfigurationError("a cluster (cluster=True) is reached over TCP, not unix://")
    path = "" if unix else unquote(parts.path).strip("/")
    if path and not path.strip().isdigit():
        raise ConfigurationError(
            "ValkeyStore's url path names a database: a number (redis://host:6379/0), not "
            "what redis-py would read as 0 or as digits run together"
        )
    options = parse_qs(parts.query)
    secret_seen = False
    for name, value in parse_qsl(parts.query):
        _check_option(name, value, tls=url.startswith(TLS_SCHEMES), after_secret=secret_seen)
        secret_seen = secret_seen or name in SECRETS
    db = options["db"][0] if "db" in options else path
    if cluster and db and int(db) != 0:
        raise ConfigurationError("a cluster (cluster=True) has one database, 0")


def _check_option(name: str, value: str, *, tls: bool, after_secret: bool) -> None:
    if name in SET_BY_THE_STORE:
        raise ConfigurationError(
            f"ValkeyStore's url must not set {name}: {SET_BY_THE_STORE[name]} "
            "(a client of your own, given as client=, may set anything)"
        )
    if name in TAKEN_WITH_TLS and not tls:
        raise ConfigurationError(
            f"ValkeyStore's url sets {name}, a TLS option, on a plain connection: "
            "TLS is valkeys:// or rediss://"
        )
    if name not in TAKEN and name not in TAKEN_WITH_TLS and after_secret:
        raise ConfigurationError(  # the "option" may be a password's tail: never shown
            "ValkeyStore's url sets an option after its password that the store does not "
            "take: a password with '&' (or '#', '/', '?', '@') in it must be percent-encoded"
        )
    if name not in TAKEN and name not in TAKEN_WITH_TLS:
        raise ConfigurationError(
            f"ValkeyStore's url sets {name[:40]!r}, which the store does not take: it takes "
            f"{', '.join(sorted(TAKEN))} and, with TLS, the ssl_ options "
            "(a client of your own, given as client=, may set anything)"
        )
    if name == "protocol" and value not in ("2", "3"):
        raise ConfigurationError("ValkeyStore's url sets protocol: RESP 2 or 3")
    if name in ("db", "health_check_interval") and not value.strip().isdigit():
        raise ConfigurationError(f"ValkeyStore's url sets {name}: a whole number, 0 or more")
    if name == "encoding" and not _text_encoding(value):
        raise ConfigurationError("ValkeyStore's url sets encoding to no text encoding Python knows")


def _text_encoding(name: str) -> bool:
    try:
        return bool(codecs.lookup(name)._is_text_encoding)  # rot13, base64: not text
    except LookupError:
        return False


def redis_url(url: str) -> str:
    """A `valkey://`/`valkeys://` URL as redis-py reads it."""
    for scheme, meant in (("valkey://", "redis://"), ("valkeys://", "rediss://")):
        if url.startswith(scheme):
            return meant + url[len(scheme) :]
    return url


def masked(url: str) -> str:
    """The URL without its password, in its credentials or its query (`?password=`)."""
    scheme, sep, rest = url.partition("://")
    credentials, at, after = rest.rpartition("@")  # the last '@': a password may hold one
    if at:
        rest = f"{credentials.partition(':')[0]}:***@{after}"
    head, mark, query = rest.partition("?")
    if mark:
        shown = []
        for piece in query.split("&"):
            name, equals, _ = piece.partition("=")
            if equals and unquote_plus(name) in SECRETS:
                # all that follows too: a password with an '&' left unencoded goes on
                # into what reads as further options
                shown.append(f"{name}=***")
                break
            shown.append(piece)
        query = "&".join(shown)
    return f"{scheme}{sep}{head}{mark}{query}"
