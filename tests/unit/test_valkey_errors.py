"""What each redis-py failure tells a Valkey store's caller: its code, whether retrying may
help, whether a write may have landed, and the key it concerns (never anything else of it).
The servers that answer so are in the integration tests; this is the table itself, each row
for a writing step and a reading one."""

from __future__ import annotations

from typing import Any

import pytest
from redis import exceptions

from lambda_idempotency import StoreError
from lambda_idempotency._stores.valkey import connection

PK = "ns.fn#" + "ab" * 32

# (redis-py's exception, code, retryable, maybe_applied for a write, ... for a read)
ROWS = [
    (exceptions.ReadOnlyError("READONLY replica"), "ReadOnlyError", True, False, False),
    (exceptions.NoScriptError("NOSCRIPT"), "NoScriptError", True, False, False),
    (exceptions.AuthenticationError("bad"), "AuthenticationError", False, False, False),
    (exceptions.TimeoutError("Timeout reading"), "TimeoutError", True, True, False),
    (exceptions.ConnectionError("Connection reset"), "ConnectionError", True, True, False),
    (exceptions.InvalidResponse("Protocol Error"), "InvalidResponse", True, True, False),
    (exceptions.OutOfMemoryError("command not allowed"), "OOM", True, False, False),
    (exceptions.ResponseError("BUSY Redis is busy running a script"), "BUSY", True, False, False),
    (
        exceptions.ResponseError("NOREPLICAS Not enough good replicas"),
        "NOREPLICAS",
        True,
        False,
        False,
    ),
    (
        exceptions.ResponseError("ERR user_script:1: boom script"),
        "ResponseError",
        False,
        True,
        False,
    ),
    (exceptions.ResponseError("ERR unknown command"), "ResponseError", False, False, False),
]


@pytest.mark.parametrize(("exc", "code", "retryable", "wrote", "read"), ROWS)
def test_each_failure_says_what_it_is_whether_to_retry_and_whether_a_write_may_have_landed(
    exc: Exception, code: str, retryable: bool, wrote: bool, read: bool
) -> None:
    for step, applied in (("complete", wrote), ("get", read)):
        error = connection.store_error(exceptions, exc, step, PK, knows_unsent=False)
        assert (error.code, error.retryable, error.maybe_applied) == (code, retryable, applied)
        assert (error.key_hash, error.step) == (PK, step)


def test_a_failure_to_connect_on_a_client_that_retries_nothing_sent_nothing() -> None:
    exc = exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    sent = connection.store_error(exceptions, exc, "claim", PK, knows_unsent=False)
    unsent = connection.store_error(exceptions, exc, "claim", PK, knows_unsent=True)
    assert (sent.maybe_applied, unsent.maybe_applied) == (True, False)


class Standalone:
    """A client whose pool is always full (redis-py raises before anything is sent)."""


class Cluster(Standalone):
    def get_node_from_key(self, key: str) -> Any:  # what marks a cluster client
        raise AssertionError("not asked")


def full(client: Any) -> Any:
    raise exceptions.MaxConnectionsError("Too many connections")


@pytest.mark.parametrize(
    ("client", "step", "applied"),
    [
        (Standalone(), "complete", False),  # the connection is taken before any attempt
        (Cluster(), "complete", True),  # a cluster client's retries may have sent one
        (Cluster(), "get", False),
    ],
)
def test_a_full_pool_past_the_timeout_says_whether_anything_may_have_gone_out(
    client: Any, step: str, applied: bool
) -> None:
    with pytest.raises(StoreError) as caught:
        connection.call(client, full, step, PK, timeout=0.01, knows_unsent=True)
    assert (caught.value.code, caught.value.retryable) == (connection.POOL_EXHAUSTED, True)
    assert (caught.value.maybe_applied, caught.value.key_hash) == (applied, PK)


@pytest.mark.parametrize("raised", [ValueError("could not convert"), TypeError("unhashable")])
def test_an_answer_its_parser_cannot_type_is_unreadable_retryable_and_may_have_applied(
    raised: Exception,
) -> None:
    def send(client: Any) -> Any:
        raise raised

    for step, applied in (("claim", True), ("get", False)):
        with pytest.raises(StoreError) as caught:
            connection.call(object(), send, step, PK, timeout=1, knows_unsent=True)
        error = caught.value
        assert (error.code, error.retryable, error.maybe_applied) == (
            "InvalidResponse",
            True,
            applied,
        )
        assert error.key_hash == PK


def test_a_server_that_does_not_answer_is_named_with_the_fix_and_never_the_password() -> None:
    """A newcomer who forgot to start a server (or to export its URL) read only "Valkey claim
    failed (ConnectionError)": the message names the address redis-py tried and the fix."""
    from lambda_idempotency import ValkeyStore, idempotent

    for url, where in (
        ("redis://:s3cret@127.0.0.1:1", "127.0.0.1:1"),
        ("unix:///nonexistent/valkey.sock?password=s3cret", "/nonexistent/valkey.sock"),
    ):
        store = ValkeyStore(url)

        @idempotent(key="k", store=store)
        def handler(event: Any, context: Any) -> int:
            raise AssertionError("ran without a claim")

        with pytest.raises(StoreError) as caught:
            handler({"k": "a"}, None)
        store.close()
        said = str(caught.value)
        assert said.startswith("Valkey claim failed (ConnectionError): Error "), said
        assert f"connecting to {where}" in said and "lambda-idempotency local --valkey" in said
        assert "s3cret" not in said
        assert not caught.value.maybe_applied and caught.value.retryable
