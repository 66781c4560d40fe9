"""A URL's options as the Valkey store reads them, before redis-py is imported: the same
reading as redis-py's own client built from it."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from lambda_idempotency import ConfigurationError, ValkeyStore
from lambda_idempotency._stores.valkey import urls

VALUES = ["true", "false", "False", "FALSE", "0", "1", "no", "N", "yes", "off", "maybe", "%20"]


@given(st.sampled_from(VALUES) | st.text(alphabet="abcdefXYZ019 %", max_size=6))
def test_a_url_is_refused_whenever_redis_pys_client_built_from_it_would_decode(
    value: str,
) -> None:
    url = f"redis://localhost:6379/0?protocol=3&decode_responses={value}"
    decodes = bool(redis.Redis.from_url(url).get_encoder().decode_responses)
    try:
        urls.checked_url(url, cluster=False)
    except ConfigurationError:
        refused = True
    else:
        refused = False
    assert refused or not decodes


@pytest.mark.parametrize("value", ["true", "false", "0", "no"])
@pytest.mark.parametrize("scheme", ["valkey", "redis", "rediss"])
def test_a_url_that_sets_decode_responses_is_refused_with_the_reason(
    value: str, scheme: str
) -> None:
    with pytest.raises(ConfigurationError, match=r"decode_responses.*'false' included"):
        ValkeyStore(f"{scheme}://localhost:6379/0?decode_responses={value}")


def test_a_url_without_decode_responses_is_taken() -> None:
    ValkeyStore("valkey://localhost:6379/0?protocol=3")
    ValkeyStore("valkey://localhost:6379/0?decode_responses=")  # no value: redis-py drops it


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("valkey://h:1/0", "redis://h:1/0"),
        ("valkeys://h:1/0", "rediss://h:1/0"),
        ("redis://h:1/0", "redis://h:1/0"),
        ("unix:///tmp/v.sock", "unix:///tmp/v.sock"),
    ],
)
def test_valkeys_schemes_are_redis_pys_with_tls_kept(url: str, meant: str) -> None:
    assert urls.redis_url(url) == meant
    if meant.startswith("rediss"):
        pool = redis.ConnectionPool.from_url(urls.redis_url(url))
        assert pool.connection_class is redis.SSLConnection


TOKENS = st.text(alphabet="QXZJ0123456789", min_size=4, max_size=8).map(lambda t: "Q" + t)
"""Pieces of a password: letters no other part of the URLs below holds, so any piece seen in
a line is the password's."""
SEPARATORS = st.sampled_from(["&", "=", "&x=", ";", "+", " ", "%26", ",", ":"])


@st.composite
def passwords(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A password of tokens joined by what a URL reads as a separator (an unencoded '&' or
    '=' included), and its tokens."""
    tokens = draw(st.lists(TOKENS, min_size=1, max_size=4))
    joins = [draw(SEPARATORS) for _ in tokens[1:]]
    password = tokens[0] + "".join(
        join + token for join, token in zip(joins, tokens[1:], strict=True)
    )
    return password, tokens


@given(passwords(), st.sampled_from(["query", "ssl_query", "userinfo"]), st.booleans())
def test_no_piece_of_a_password_is_shown_however_the_url_gives_it(
    secret: tuple[str, list[str]], where: str, more_options: bool
) -> None:
    """`masked` (every line that names a server) and the store's refusals never show a piece
    of the password: an unencoded '&' once let `?password=a&b` show `b`, masked and as an
    option's name."""
    password, tokens = secret
    after = "&protocol=3" if more_options else ""
    if where == "userinfo":
        url = f"redis://user:{password.replace('/', '%2F')}@h:6379/0?db=0{after}"
    elif where == "query":
        url = f"redis://h:6379?db=0&password={password}{after}"
    else:
        url = f"rediss://h:6379?ssl_password={password}{after}"
    shown = [urls.masked(url)]
    try:
        urls.checked_url(url, cluster=False)
    except ConfigurationError as exc:
        shown.append(str(exc))
    for line in shown:
        assert not [token for token in tokens if token in line], (url, line)
